// fp32 ⇄ fp16/bf16 on the GPU, with the CPU's bits (runtime/amp/half.h): bf16 through the CPU's own
// integer rounding (amp::bf16_from_float_bits: to nearest even, NaN kept quiet), fp16 through the
// hardware's IEEE conversion (to nearest even, as the CPU's F16C and _Float16). A NaN stays a NaN, but
// its payload may differ: the GPU's conversion, and its arithmetic on a NaN (the accumulation), give
// the canonical NaN where x86 keeps the operand's. Also the gradient unscale x ·= factor in double, as amp::scale does.
// Element kernels in the CUDA subset: nvcc compiles them, the SIMT emulator runs them in the unit tests
// (there the fp16 conversion is the CPU's).
#pragma once
#include <cstdint>
#include <cstring>

#include "amp/half.h"
#include "cuda/segments.h"
#include "simt/cuda_subset.h"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#endif

namespace ds::cuda {

DS_HD inline uint16_t to_half_bits(amp::Half type, float x) {
#if defined(__CUDA_ARCH__)
  if (type == amp::Half::F16) return __half_as_ushort(__float2half_rn(x));
  return amp::bf16_from_float_bits(__float_as_uint(x));
#else
  return amp::half_from_float(type, x);
#endif
}

DS_HD inline float from_half_bits(amp::Half type, uint16_t bits) {
#if defined(__CUDA_ARCH__)
  if (type == amp::Half::F16) return __half2float(__ushort_as_half(bits));
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
#else
  return amp::half_to_float(type, bits);
#endif
}

// out[i] = float(in[i]) for i < n; any grid and block.
DS_KERNEL void half_to_float_kernel(amp::Half type, const uint16_t* in, float* out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = from_half_bits(type, in[i]);
}

// out[i] = half(in[i]) for i < n; any grid and block.
DS_KERNEL void float_to_half_kernel(amp::Half type, const float* in, uint16_t* out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = to_half_bits(type, in[i]);
}

// in[rows, cols] into out[out_rows, out_cols] (out_rows >= rows, out_cols >= cols) as half(in), the margin
// zeros: an operand padded to aligned rows for a 16-bit GEMM; any grid and block.
DS_KERNEL void float_to_half_padded_kernel(amp::Half type, const float* in, int64_t rows, int64_t cols, uint16_t* out,
                                           int64_t out_rows, int64_t out_cols) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x, n = out_rows * out_cols;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t r = i / out_cols, c = i % out_cols;
    out[i] = r < rows && c < cols ? to_half_bits(type, in[r * cols + c]) : uint16_t{0};
  }
}

// out[i] = half(float(out[i]) + in[i]): accumulation into 16-bit storage; any grid and block.
DS_KERNEL void half_accumulate_kernel(amp::Half type, const float* in, uint16_t* out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = to_half_bits(type, from_half_bits(type, out[i]) + in[i]);
}

// x[i] = float(half(x[i])): values rounded to 16-bit storage and kept in fp32 (cpu::round_to's bits),
// as the engine rounds each layer's output and input gradient in 16-bit training; any grid and block.
DS_KERNEL void round_to_half_kernel(amp::Half type, float* x, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    x[i] = from_half_bits(type, to_half_bits(type, x[i]));
}

// Many tensors in one launch (segments.h): block b sets dst[i] = float(half(src[i])) over blocks[b]'s part
// of its segment, round_to_half_kernel's bits (in place where dst is src). Grid: the blocks' count; any
// block size.
DS_KERNEL void round_multi_kernel(amp::Half type, const RoundSegment* segments, const SegmentBlock* blocks) {
  const SegmentBlock b = blocks[blockIdx.x];
  const RoundSegment s = segments[b.segment];
  const int64_t end = s.n - b.begin < kSegmentBlockElements ? s.n : b.begin + kSegmentBlockElements;
  for (int64_t i = b.begin + threadIdx.x; i < end; i += blockDim.x)
    s.dst[i] = from_half_bits(type, to_half_bits(type, s.src[i]));
}

// Many moves in one launch (segments.h): blocks[b]'s part of its segment moved as kKind says, with
// float_to_half_kernel's and half_to_float_kernel's bits. Grid: the blocks' count; any block size.
template <MoveKind kKind>
DS_KERNEL void move_multi_kernel(amp::Half type, const MoveSegment* segments, const SegmentBlock* blocks) {
  const SegmentBlock b = blocks[blockIdx.x];
  const MoveSegment s = segments[b.segment];
  const int64_t end = s.n - b.begin < kSegmentBlockElements ? s.n : b.begin + kSegmentBlockElements;
  for (int64_t i = b.begin + threadIdx.x; i < end; i += blockDim.x) {
    if constexpr (kKind == MoveKind::copy) static_cast<float*>(s.dst)[i] = static_cast<const float*>(s.src)[i];
    if constexpr (kKind == MoveKind::narrow)
      static_cast<uint16_t*>(s.dst)[i] = to_half_bits(type, static_cast<const float*>(s.src)[i]);
    if constexpr (kKind == MoveKind::widen)
      static_cast<float*>(s.dst)[i] = from_half_bits(type, static_cast<const uint16_t*>(s.src)[i]);
  }
}

// x[i] = float(x[i] · factor), the product in double (amp::scale's fp32 rule); any grid and block.
DS_KERNEL void scale_kernel(float* x, int64_t n, double factor) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    x[i] = static_cast<float>(x[i] * factor);
}

// Many tensors in one launch (segments.h): scale_kernel's bits over blocks[b]'s part of its segment. Grid:
// the blocks' count; any block size.
DS_KERNEL void scale_multi_kernel(const ScaleSegment* segments, const SegmentBlock* blocks, double factor) {
  const SegmentBlock b = blocks[blockIdx.x];
  const ScaleSegment s = segments[b.segment];
  const int64_t end = s.n - b.begin < kSegmentBlockElements ? s.n : b.begin + kSegmentBlockElements;
  for (int64_t i = b.begin + threadIdx.x; i < end; i += blockDim.x) s.x[i] = static_cast<float>(s.x[i] * factor);
}

}  // namespace ds::cuda
