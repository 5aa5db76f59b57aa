// 16-bit floating-point storage: IEEE binary16 (fp16) and bfloat16 (bf16), as raw uint16_t bit
// patterns, with conversions to and from fp32. float → 16-bit rounds to nearest, ties to even;
// overflow gives ±inf (fp16: |x| ≥ 65520); NaN stays NaN (quiet, sign kept); fp16 denormals are
// exact both ways. 16-bit → float is exact. Math is always done in fp32. Bulk conversions over
// buffers: kernels/cpu/convert.h.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

// Marks the few functions the CUDA kernels share (`__host__ __device__` under nvcc).
#if defined(__CUDACC__)
#define DS_AMP_HD __host__ __device__
#else
#define DS_AMP_HD
#endif

namespace ds::amp {

// The compiler's IEEE binary16 type. Clang before 15 has no _Float16 on x86 but has __fp16, the
// same format for storage and conversion (scripts/fuzz.sh builds with Debian 12's clang 14).
#if defined(__clang__) && __clang_major__ < 15
using NativeFp16 = __fp16;
#else
using NativeFp16 = _Float16;
#endif

enum class Half { F16, BF16 };

inline uint16_t fp16_from_float(float x) {
  const NativeFp16 h = static_cast<NativeFp16>(x);  // the compiler's IEEE conversion (F16C or libgcc)
  uint16_t bits;
  std::memcpy(&bits, &h, sizeof bits);
  return bits;
}

inline float fp16_to_float(uint16_t bits) {
  NativeFp16 h;
  std::memcpy(&h, &bits, sizeof bits);
  return static_cast<float>(h);
}

// bf16 from a float's bits: an integer function, so the GPU's conversion (kernels/cuda/convert.cuh)
// runs this same code.
DS_AMP_HD inline uint16_t bf16_from_float_bits(uint32_t u) {
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN: keep it quiet
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even (carries into the exponent)
  return static_cast<uint16_t>(u >> 16);
}

inline uint16_t bf16_from_float(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return bf16_from_float_bits(u);
}

inline float bf16_to_float(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

inline uint16_t half_from_float(Half type, float x) { return type == Half::F16 ? fp16_from_float(x) : bf16_from_float(x); }
inline float half_to_float(Half type, uint16_t bits) { return type == Half::F16 ? fp16_to_float(bits) : bf16_to_float(bits); }

}  // namespace ds::amp
