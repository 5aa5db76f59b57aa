// safetensors writing (see safetensors.h).
#include "safetensors.h"

#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "checkpoint/format.h"

namespace ds {

void write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header;
  header["__metadata__"] = metadata;
  size_t offset = 0;
  for (const auto& t : tensors) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    if (static_cast<size_t>(n) != t.values.size())
      throw std::logic_error(fmt::format("safetensors: {} has shape {} but {} values", t.name,
                                         nlohmann::json(t.shape).dump(), t.values.size()));
    const size_t bytes = t.values.size() * sizeof(float);
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t length = text.size();
  std::string bytes(reinterpret_cast<const char*>(&length), sizeof(length));  // little-endian hosts only
  bytes += text;
  for (const auto& t : tensors)
    bytes.append(reinterpret_cast<const char*>(t.values.data()), t.values.size() * sizeof(float));
  ckpt::write_text_atomically(path, bytes);
}

}  // namespace ds
