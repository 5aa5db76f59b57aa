// The storage types of mixed precision's flat buffers (parameters, gradients, optimizer state): fp32,
// fp16 or bf16. The bulk operations on such buffers are CPU kernels (kernels/cpu/convert.h).
#pragma once
#include <cstddef>

namespace ds::amp {

enum class Storage { F32, F16, BF16 };

inline size_t storage_bytes(Storage s) { return s == Storage::F32 ? 4 : 2; }

}  // namespace ds::amp
