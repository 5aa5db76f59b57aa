// Four consecutive floats, for one 128-bit access (the width at which a GPU's memory system runs
// fastest), and the test that a pointer allows it. In the CUDA subset: nvcc and the SIMT emulator.
#pragma once
#include <cstdint>

#include "simt/cuda_subset.h"

namespace ds::cuda {

struct alignas(16) Float4 {
  float x[4];
};

DS_HD inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace ds::cuda
