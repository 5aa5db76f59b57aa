// Reading and writing safetensors files: an 8-byte little-endian header length, a JSON header mapping each
// tensor name to dtype, shape and [begin, end) byte offsets into the data that follows (plus
// "__metadata__", string values only), padded with spaces to a multiple of 8 bytes, then the data.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ds {

struct SafetensorsTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;  // fp32, row-major, product(shape) elements
};

// Writes `tensors` (in this order) to `path` atomically (temporary file + rename).
void write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       const std::map<std::string, std::string>& metadata);

// Reads every tensor of `path` (F32 only), by name. Errors are ConfigErrors naming the file.
std::map<std::string, SafetensorsTensor> read_safetensors(const std::string& path);

}  // namespace ds
