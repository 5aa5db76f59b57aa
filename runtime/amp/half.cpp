// Bulk 16-bit conversions (see half.h). bf16 is plain integer arithmetic the compiler vectorizes;
// fp16 uses the CPU's F16C instructions 8 values at a time where it has them (x86-64 since 2012),
// else the compiler's scalar conversion. Both round to nearest even, so results never depend on
// which path ran.
#include "amp/half.h"

#include <algorithm>

#if defined(__x86_64__) && defined(__GNUC__) && (!defined(__clang__) || __clang_major__ >= 15)  // clang 14: no "f16c" check
#include <immintrin.h>
#define DS_HAVE_F16C_PATH 1
#endif

namespace ds::amp {
namespace {

#ifdef DS_HAVE_F16C_PATH
const bool kF16c = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");

__attribute__((target("f16c,avx"))) void fp16_to_float_f16c(const uint16_t* in, float* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  for (; i < n; ++i) out[i] = _cvtsh_ss(in[i]);
}

__attribute__((target("f16c,avx"))) void fp16_from_float_f16c(const float* in, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) out[i] = _cvtss_sh(in[i], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
#endif

}  // namespace

DS_AMP_BULK void to_float(Half type, const uint16_t* in, float* out, size_t n) {
#ifdef DS_HAVE_F16C_PATH
  if (type == Half::F16 && kF16c) return fp16_to_float_f16c(in, out, n);
#endif
  if (type == Half::F16)
    for (size_t i = 0; i < n; ++i) out[i] = fp16_to_float(in[i]);
  else
    for (size_t i = 0; i < n; ++i) out[i] = bf16_to_float(in[i]);
}

DS_AMP_BULK void from_float(Half type, const float* in, uint16_t* out, size_t n) {
#ifdef DS_HAVE_F16C_PATH
  if (type == Half::F16 && kF16c) return fp16_from_float_f16c(in, out, n);
#endif
  if (type == Half::F16)
    for (size_t i = 0; i < n; ++i) out[i] = fp16_from_float(in[i]);
  else
    for (size_t i = 0; i < n; ++i) out[i] = bf16_from_float(in[i]);
}

DS_AMP_BULK void accumulate(Half type, const float* in, uint16_t* out, size_t n) {
  if (type == Half::BF16) {
    for (size_t i = 0; i < n; ++i) out[i] = bf16_from_float(bf16_to_float(out[i]) + in[i]);
    return;
  }
  float sum[kHalfBlock];
  for (size_t i = 0; i < n; i += kHalfBlock) {
    const size_t m = std::min(kHalfBlock, n - i);
    to_float(type, out + i, sum, m);
    for (size_t k = 0; k < m; ++k) sum[k] += in[i + k];
    from_float(type, sum, out + i, m);
  }
}

}  // namespace ds::amp
