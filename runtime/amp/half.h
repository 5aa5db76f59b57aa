// 16-bit floating-point storage: IEEE binary16 (fp16) and bfloat16 (bf16), as raw uint16_t bit
// patterns, with conversions to and from fp32. float → 16-bit rounds to nearest, ties to even;
// overflow gives ±inf (fp16: |x| ≥ 65520); NaN stays NaN (quiet, sign kept); fp16 denormals are
// exact both ways. 16-bit → float is exact. Math is always done in fp32.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

// Bulk loops over 16-bit data are compiled twice, for x86-64-v3 (F16C converts fp16 in hardware,
// AVX2) and for the baseline, and the loader picks one for the CPU it runs on (GCC's
// target_clones); without F16C every fp16 conversion is a libgcc call, about 15x slower.
// Not under ThreadSanitizer: the clones' ifunc resolvers run while the loader relocates, before its
// runtime is up, and crash there (SIGSEGV in the resolver of the first clone).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define DS_AMP_BULK __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define DS_AMP_BULK
#endif

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

// Bulk conversions of n elements (fp16 with F16C where the CPU has it, the same results either way).
// Loops that work on 16-bit data in place go through fp32 blocks of this many elements.
constexpr size_t kHalfBlock = 256;
void to_float(Half type, const uint16_t* in, float* out, size_t n);
void from_float(Half type, const float* in, uint16_t* out, size_t n);
// out[i] = half(float(out[i]) + in[i]): accumulation into 16-bit storage.
void accumulate(Half type, const float* in, uint16_t* out, size_t n);

}  // namespace ds::amp
