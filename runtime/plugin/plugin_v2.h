// Plugins built for ABI version 2 (ds_plugin_v2.h), adapted to version 3: create() makes a handle
// around the plugin's own model, and table() is a version-3 function table whose every entry
// converts version-3 tensors to version 2 and calls the plugin through that handle. Such a plugin
// runs on the CPU backend only. Used by the loader (plugin.cpp) alone.
#pragma once
#include <string>

#include "plugin/ds_plugin_v2.h"

namespace ds::plugin_v2 {

// The first NULL entry of `api`'s table ("" when there is none).
std::string missing_entry(const ds_plugin_api_v2& api);
// Creates the plugin's model (on `backend`, which must be the CPU's: else DS_UNSUPPORTED) and
// returns in *model a handle that table()'s entries take. Same contract as ds_plugin_api.create.
ds_status create(const ds_plugin_api_v2& api, const char* config_json, const ds_backend* backend, void** model,
                 char* err, size_t err_len);
// The version-3 table for handles made by create() (its name and create entries are unused).
const ds_plugin_api& table();

}  // namespace ds::plugin_v2
