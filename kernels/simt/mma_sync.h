// The tensor cores' warp-wide product in the CUDA subset: PTX's mma.sync.aligned.m16n8k16.row.col with
// bf16 or fp16 inputs and fp32 accumulators, D[16, 8] += A[16, 16]·B[16, 8], its operands in the lanes'
// registers in the layout the PTX ISA documents ("Matrix Fragments for mma.m16n8k16 with floating point
// type"). A kernel may therefore work on its own elements: a softmax on the accumulators, and their reuse
// as the next product's A operand (flash attention's P·V). With g = lane / 4 and c = 2·(lane % 4):
//   a[0] = A[g][c, c+1]   a[1] = A[g+8][c, c+1]   a[2] = A[g][c+8, c+9]   a[3] = A[g+8][c+8, c+9]
//   b[0] = B[c, c+1][g]   b[1] = B[c+8, c+9][g]
//   d[0], d[1] = D[g][c, c+1]   d[2], d[3] = D[g+8][c, c+1]
// Each 32-bit register holds two 16-bit values, the first (lower column or row) in its low half.
// Under nvcc this is the PTX instruction (sm_80 and later). In a C++ build the SIMT emulator gathers the
// warp's registers (every lane must take part, as mma.sync.aligned requires) and forms each sum in fp32
// in k's order, the products exact (16-bit × 16-bit fits fp32's significand).
#pragma once
#include <cstdint>

#include "amp/half.h"
#include "simt/cuda_subset.h"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#else
#include <cstring>
#endif

namespace ds::cuda {

// The two 16-bit values as one register: lo in the low half, both rounded to nearest even.
DS_HD inline uint32_t pack_half2(amp::Half type, float lo, float hi) {
#if defined(__CUDA_ARCH__)
  if (type == amp::Half::BF16) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
#else
  return amp::half_from_float(type, lo) | static_cast<uint32_t>(amp::half_from_float(type, hi)) << 16;
#endif
}

// The 32-bit word at p (two 16-bit values; p 4-byte aligned), as a register load.
DS_HD inline uint32_t load_half2(const uint16_t* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const uint32_t*>(p);
#else
  uint32_t w;
  std::memcpy(&w, p, sizeof w);
  return w;
#endif
}

// Stores w as the two 16-bit values at p (p 4-byte aligned), w's low half first: load_half2's inverse.
DS_HD inline void store_half2(uint16_t* p, uint32_t w) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<uint32_t*>(p) = w;
#else
  std::memcpy(p, &w, sizeof w);
#endif
}

// d += a·b over the warp (the layout above); `type` the inputs' 16-bit type.
template <amp::Half type>
DS_DEVICE inline void mma_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__)
  if constexpr (type == amp::Half::BF16)
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#elif !defined(__CUDACC__)
  constexpr int kWords = 6;  // a[0..3], b[0..1]
  const uint32_t mine[kWords] = {a[0], a[1], a[2], a[3], b[0], b[1]};
  uint32_t all[::ds::simt::kWarpSize * kWords];
  ::ds::simt::warp_gather(0xffffffffu, mine, kWords, all);
  // The 16-bit value `half` (0 low, 1 high) of register `reg` in lane `lane`, as a float.
  const auto value = [&](int lane, int reg, int half) {
    return amp::half_to_float(type, static_cast<uint16_t>(all[lane * kWords + reg] >> (16 * half)));
  };
  const auto A = [&](int r, int k) { return value(r % 8 * 4 + k % 8 / 2, r / 8 + 2 * (k / 8), k % 2); };
  const auto B = [&](int k, int n) { return value(n * 4 + k % 8 / 2, 4 + k / 8, k % 2); };
  const int lane = ::ds::simt::lane_id(), g = lane / 4, c = 2 * (lane % 4);
  for (int i = 0; i < 4; ++i) {
    const int r = g + 8 * (i / 2), n = c + i % 2;
    float sum = d[i];
    for (int k = 0; k < 16; ++k) sum += A(r, k) * B(k, n);
    d[i] = sum;
  }
#endif
}

}  // namespace ds::cuda
