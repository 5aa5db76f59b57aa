// The shared-memory row of the attention kernels (attention.cuh) and their launchers (launch_shape.h):
// T floats padded to whole 16-byte groups. nvcc reads shared arrays 16 bytes at a time in unrolled
// loops, also in a loop's last 1-3 iterations, past the row's end (the extra values go unused);
// the padding keeps every such read inside the allocation. compute-sanitizer's memcheck found the
// 12-byte overread at T = 1 on an H200 before the padding.
#pragma once
#include <cstdint>

#include "simt/hd.h"

namespace ds::cuda {

DS_HD inline int64_t attention_row_floats(int64_t T) { return (T + 3) / 4 * 4; }

}  // namespace ds::cuda
