// The first NULL entry of a plugin's function table, for the loader (plugin.cpp, plugin_v2.cpp): the
// entries every ABI version has, then the version's own (`extra`).
#pragma once
#include <initializer_list>
#include <string>
#include <utility>

namespace ds::plugin_table {

// "" when every entry is there.
template <class Api>
std::string first_missing(const Api& a, std::initializer_list<std::pair<const char*, bool>> extra) {
  const std::pair<const char*, bool> common[] = {
      {"name", a.name != nullptr},
      {"create", a.create != nullptr},
      {"destroy", a.destroy != nullptr},
      {"last_error", a.last_error != nullptr},
      {"num_layers", a.num_layers != nullptr},
      {"describe_layer", a.describe_layer != nullptr},
      {"output_shape", a.output_shape != nullptr},
      {"workspace_bytes", a.workspace_bytes != nullptr},
      {"forward", a.forward != nullptr},
      {"backward", a.backward != nullptr},
      {"dataset_info", a.dataset_info != nullptr},
  };
  for (const auto& [field, present] : common)
    if (!present) return field;
  for (const auto& [field, present] : extra)
    if (!present) return field;
  return "";
}

}  // namespace ds::plugin_table
