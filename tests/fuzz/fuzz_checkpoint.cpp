// Fuzz target: the checkpoint file reader (runtime/checkpoint/format.h): preamble, JSON header and
// tensors. Byte 0: when odd, the target writes the right header CRC-32 into bytes 13-16 of the rest
// first, so inputs get past the checksum into the header and tensor checks. Only CheckpointError
// may come out; a file that reads has tensors within the file.
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "checkpoint/format.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if ((data[0] & 1) && bytes.size() >= 24) {
    uint64_t header = 0;
    std::memcpy(&header, bytes.data() + 16, sizeof header);
    if (header <= bytes.size() - 24) {
      const auto crc = static_cast<uint32_t>(
          crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(bytes.data() + 24), static_cast<uInt>(header)));
      std::memcpy(bytes.data() + 12, &crc, sizeof crc);
    }
  }
  try {
    const ds::ckpt::CheckpointFile file = ds::ckpt::parse_checkpoint_file(bytes, "fuzz.dsckpt");
    size_t elements = 0;
    for (const auto& t : file.tensors) elements += t.second.size();
    FUZZ_CHECK(elements <= bytes.size() / sizeof(float) * file.tensors.size());
    FUZZ_CHECK(!file.header.contains("tensors"));
  } catch (const ds::ckpt::CheckpointError&) {
  }
  return 0;
}
