// safetensors reading and writing (see safetensors.h).
#include "safetensors.h"

#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "checkpoint/format.h"
#include "core/errors.h"

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

std::map<std::string, SafetensorsTensor> read_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(fmt::format("{}: cannot read", path));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  const std::string data = buffer.str();
  uint64_t length = 0;
  if (data.size() < sizeof(length)) throw ConfigError(fmt::format("{}: not a safetensors file (too short)", path));
  std::memcpy(&length, data.data(), sizeof(length));
  if (length > data.size() - sizeof(length))
    throw ConfigError(fmt::format("{}: header length {} runs past the end of the file", path, length));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(data.substr(sizeof(length), length));
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(fmt::format("{}: bad header: {}", path, e.what()));
  }
  const size_t base = sizeof(length) + length;
  std::map<std::string, SafetensorsTensor> out;
  for (const auto& [name, t] : header.items()) {
    if (name == "__metadata__") continue;
    if (t.value("dtype", "") != "F32")
      throw ConfigError(fmt::format("{}: {} is {}; only F32 tensors are read", path, name, t.value("dtype", "?")));
    SafetensorsTensor tensor{name, t.at("shape").get<std::vector<int64_t>>(), {}};
    const auto range = t.at("data_offsets").get<std::vector<uint64_t>>();
    int64_t n = 1;
    for (int64_t d : tensor.shape) n *= d;
    if (range.size() != 2 || range[1] < range[0] || range[1] - range[0] != static_cast<uint64_t>(n) * sizeof(float) ||
        range[1] > data.size() - base)
      throw ConfigError(fmt::format("{}: {}: data_offsets {} do not hold its shape {}", path, name,
                                    t.at("data_offsets").dump(), t.at("shape").dump()));
    tensor.values.resize(static_cast<size_t>(n));
    std::memcpy(tensor.values.data(), data.data() + base + range[0], range[1] - range[0]);
    out.emplace(name, std::move(tensor));
  }
  return out;
}

}  // namespace ds
