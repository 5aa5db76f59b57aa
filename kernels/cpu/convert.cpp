// The bulk storage operations of convert.h. The serial loops keep the switch on the type outside every
// loop, so each loop is plain and vectorizes: bf16 is integer arithmetic, fp16 uses the CPU's F16C
// instructions 8 values at a time where it has them (x86-64 since 2012), else the compiler's scalar
// conversion; both round to nearest even, so results never depend on which path ran. 16-bit data is
// worked on in place through fp32 blocks of kHalfBlock elements. The public functions split the
// serial loops over the threads.
#include "cpu/convert.h"

#include <algorithm>
#include <vector>

#include "cpu/parallel.h"
#include "cpu/simd.h"

#if defined(__x86_64__) && defined(__GNUC__) && (!defined(__clang__) || __clang_major__ >= 15)  // clang 14: no "f16c" check
#include <immintrin.h>
#define DS_HAVE_F16C_PATH 1
#endif

namespace ds::cpu {
namespace {

using amp::Half;
using amp::Storage;

constexpr size_t kHalfBlock = 256;

Half half_of(Storage s) { return s == Storage::F16 ? Half::F16 : Half::BF16; }

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

// ---- serial loops over one range ----

DS_KERNEL_CLONES void half_to_float(Half type, const uint16_t* in, float* out, size_t n) {
#ifdef DS_HAVE_F16C_PATH
  if (type == Half::F16 && kF16c) return fp16_to_float_f16c(in, out, n);
#endif
  if (type == Half::F16)
    for (size_t i = 0; i < n; ++i) out[i] = amp::fp16_to_float(in[i]);
  else
    for (size_t i = 0; i < n; ++i) out[i] = amp::bf16_to_float(in[i]);
}

DS_KERNEL_CLONES void half_from_float(Half type, const float* in, uint16_t* out, size_t n) {
#ifdef DS_HAVE_F16C_PATH
  if (type == Half::F16 && kF16c) return fp16_from_float_f16c(in, out, n);
#endif
  if (type == Half::F16)
    for (size_t i = 0; i < n; ++i) out[i] = amp::fp16_from_float(in[i]);
  else
    for (size_t i = 0; i < n; ++i) out[i] = amp::bf16_from_float(in[i]);
}

DS_KERNEL_CLONES void half_accumulate(Half type, const float* in, uint16_t* out, size_t n) {
  if (type == Half::BF16) {
    for (size_t i = 0; i < n; ++i) out[i] = amp::bf16_from_float(amp::bf16_to_float(out[i]) + in[i]);
    return;
  }
  float sum[kHalfBlock];
  for (size_t i = 0; i < n; i += kHalfBlock) {
    const size_t m = std::min(kHalfBlock, n - i);
    half_to_float(type, out + i, sum, m);
    for (size_t k = 0; k < m; ++k) sum[k] += in[i + k];
    half_from_float(type, sum, out + i, m);
  }
}

DS_KERNEL_CLONES void serial_to_float(Storage s, const void* in, float* out, size_t n) {
  if (s != Storage::F32) return half_to_float(half_of(s), static_cast<const uint16_t*>(in), out, n);
  const auto* x = static_cast<const float*>(in);
  for (size_t i = 0; i < n; ++i) out[i] = x[i];
}

DS_KERNEL_CLONES void serial_from_float(Storage s, const float* in, void* out, size_t n) {
  if (s != Storage::F32) return half_from_float(half_of(s), in, static_cast<uint16_t*>(out), n);
  auto* y = static_cast<float*>(out);
  for (size_t i = 0; i < n; ++i) y[i] = in[i];
}

DS_KERNEL_CLONES void serial_add_float(Storage s, const float* in, void* out, size_t n) {
  if (s != Storage::F32) return half_accumulate(half_of(s), in, static_cast<uint16_t*>(out), n);
  auto* y = static_cast<float*>(out);
  for (size_t i = 0; i < n; ++i) y[i] += in[i];
}

DS_KERNEL_CLONES void serial_add(Storage s, const void* in, void* out, size_t n) {
  if (s == Storage::F32) return serial_add_float(s, static_cast<const float*>(in), out, n);
  const Half h = half_of(s);
  const auto* x = static_cast<const uint16_t*>(in);
  auto* y = static_cast<uint16_t*>(out);
  float a[kHalfBlock], b[kHalfBlock];
  for (size_t i = 0; i < n; i += kHalfBlock) {
    const size_t m = std::min(kHalfBlock, n - i);
    half_to_float(h, x + i, a, m);
    half_to_float(h, y + i, b, m);
    for (size_t k = 0; k < m; ++k) b[k] += a[k];
    half_from_float(h, b, y + i, m);
  }
}

DS_KERNEL_CLONES void serial_scale(Storage s, void* data, size_t n, double factor) {
  if (s == Storage::F32) {
    auto* x = static_cast<float*>(data);
    for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>(x[i] * factor);
    return;
  }
  const Half h = half_of(s);
  auto* x = static_cast<uint16_t*>(data);
  float a[kHalfBlock];
  for (size_t i = 0; i < n; i += kHalfBlock) {
    const size_t m = std::min(kHalfBlock, n - i);
    half_to_float(h, x + i, a, m);
    for (size_t k = 0; k < m; ++k) a[k] = static_cast<float>(a[k] * factor);
    half_from_float(h, a, x + i, m);
  }
}

DS_KERNEL_CLONES double serial_sum_squares(Storage s, const void* data, size_t n, double sum) {
  if (s == Storage::F32) {
    const auto* x = static_cast<const float*>(data);
    for (size_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
    return sum;
  }
  const Half h = half_of(s);
  const auto* x = static_cast<const uint16_t*>(data);
  float a[kHalfBlock];
  for (size_t i = 0; i < n; i += kHalfBlock) {
    const size_t m = std::min(kHalfBlock, n - i);
    half_to_float(h, x + i, a, m);
    for (size_t k = 0; k < m; ++k) sum += static_cast<double>(a[k]) * a[k];
  }
  return sum;
}

DS_KERNEL_CLONES void serial_round_to(Storage s, const float* in, float* out, size_t n) {
  if (s == Storage::F32) {
    if (in != out) std::copy_n(in, n, out);
    return;
  }
  if (s == Storage::BF16) {  // one loop, vectorised (the NaN test a blend): no 16-bit buffer between
    for (size_t i = 0; i < n; ++i) out[i] = amp::bf16_to_float(amp::bf16_from_float(in[i]));
    return;
  }
  uint16_t a[kHalfBlock];
  for (size_t i = 0; i < n; i += kHalfBlock) {
    const size_t m = std::min(kHalfBlock, n - i);
    half_from_float(Half::F16, in + i, a, m);
    half_to_float(Half::F16, a, out + i, m);
  }
}

// Pointer to element i of a buffer of storage s.
template <class T>
T* at(T* p, Storage s, size_t i) {
  using Byte = std::conditional_t<std::is_const_v<T>, const std::byte, std::byte>;
  return reinterpret_cast<T*>(reinterpret_cast<Byte*>(p) + i * amp::storage_bytes(s));
}

// body(begin, count) over [0, n) split over the threads.
template <class Body>
void split(size_t n, Body&& body) {
  parallel_for(static_cast<int64_t>(n), kMinElementsPerThread, [&](int64_t begin, int64_t end) {
    body(static_cast<size_t>(begin), static_cast<size_t>(end - begin));
  });
}

float load(Storage s, const void* p, size_t i) {
  if (s == Storage::F32) return static_cast<const float*>(p)[i];
  return amp::half_to_float(half_of(s), static_cast<const uint16_t*>(p)[i]);
}

void store(Storage s, void* p, size_t i, float x) {
  if (s == Storage::F32) static_cast<float*>(p)[i] = x;
  else static_cast<uint16_t*>(p)[i] = amp::half_from_float(half_of(s), x);
}

}  // namespace

void to_float(Storage s, const void* in, float* out, size_t n) {
  split(n, [&](size_t i, size_t m) { serial_to_float(s, at(in, s, i), out + i, m); });
}

void from_float(Storage s, const float* in, void* out, size_t n) {
  split(n, [&](size_t i, size_t m) { serial_from_float(s, in + i, at(out, s, i), m); });
}

void add_float(Storage s, const float* in, void* out, size_t n) {
  split(n, [&](size_t i, size_t m) { serial_add_float(s, in + i, at(out, s, i), m); });
}

void add(Storage s, const void* in, void* out, size_t n) {
  split(n, [&](size_t i, size_t m) { serial_add(s, at(in, s, i), at(out, s, i), m); });
}

void scale(Storage s, void* data, size_t n, double factor) {
  if (factor == 1.0) return;
  split(n, [&](size_t i, size_t m) { serial_scale(s, at(data, s, i), m, factor); });
}

double sum_squares(Storage s, const void* data, size_t n, double start) {
  const size_t blocks = (n + kSumBlock - 1) / kSumBlock;
  if (blocks <= 1) return serial_sum_squares(s, data, n, start);
  std::vector<double> partial(blocks);
  parallel_for(static_cast<int64_t>(blocks), 1, [&](int64_t begin, int64_t end) {
    for (auto b = static_cast<size_t>(begin); b < static_cast<size_t>(end); ++b)
      partial[b] = serial_sum_squares(s, at(data, s, b * kSumBlock), std::min(kSumBlock, n - b * kSumBlock),
                                      b == 0 ? start : 0.0);
  });
  double sum = 0.0;
  for (double p : partial) sum += p;
  return sum;
}

void round_to(Storage s, float* data, size_t n) {
  if (s == Storage::F32) return;
  round_to(s, data, data, n);
}

void round_to(Storage s, const float* in, float* out, size_t n) {
  split(n, [&](size_t i, size_t m) { serial_round_to(s, in + i, out + i, m); });
}

void to_float(Half type, const uint16_t* in, float* out, size_t n) {
  split(n, [&](size_t i, size_t m) { half_to_float(type, in + i, out + i, m); });
}

void from_float(Half type, const float* in, uint16_t* out, size_t n) {
  split(n, [&](size_t i, size_t m) { half_from_float(type, in + i, out + i, m); });
}

void accumulate(Half type, const float* in, uint16_t* out, size_t n) {
  split(n, [&](size_t i, size_t m) { half_accumulate(type, in + i, out + i, m); });
}

// ---- references: one element at a time ----

void to_float_reference(Storage s, const void* in, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = load(s, in, i);
}

void from_float_reference(Storage s, const float* in, void* out, size_t n) {
  for (size_t i = 0; i < n; ++i) store(s, out, i, in[i]);
}

void add_float_reference(Storage s, const float* in, void* out, size_t n) {
  for (size_t i = 0; i < n; ++i) store(s, out, i, load(s, out, i) + in[i]);
}

void add_reference(Storage s, const void* in, void* out, size_t n) {
  for (size_t i = 0; i < n; ++i) store(s, out, i, load(s, out, i) + load(s, in, i));
}

void scale_reference(Storage s, void* data, size_t n, double factor) {
  for (size_t i = 0; i < n; ++i) store(s, data, i, static_cast<float>(load(s, data, i) * factor));
}

double sum_squares_reference(Storage s, const void* data, size_t n, double start) {
  double sum = start;
  for (size_t i = 0; i < n; ++i) {
    const double x = load(s, data, i);
    sum += x * x;
  }
  return sum;
}

void round_to_reference(Storage s, float* data, size_t n) {
  if (s == Storage::F32) return;
  for (size_t i = 0; i < n; ++i) data[i] = amp::half_to_float(half_of(s), amp::half_from_float(half_of(s), data[i]));
}

}  // namespace ds::cpu
