// Bulk storage operations (see storage.h): the switch on the type is outside every loop, so each
// loop is plain and vectorizes.
#include "amp/storage.h"

#include <algorithm>
#include <cstdint>

#include "amp/half.h"

namespace ds::amp {
namespace {

Half half_of(Storage s) { return s == Storage::F16 ? Half::F16 : Half::BF16; }

}  // namespace

size_t storage_bytes(Storage s) { return s == Storage::F32 ? 4 : 2; }

DS_AMP_BULK void to_float(Storage s, const void* in, float* out, size_t n) {
  if (s == Storage::F32) {
    const auto* x = static_cast<const float*>(in);
    for (size_t i = 0; i < n; ++i) out[i] = x[i];
    return;
  }
  to_float(half_of(s), static_cast<const uint16_t*>(in), out, n);
}

DS_AMP_BULK void from_float(Storage s, const float* in, void* out, size_t n) {
  if (s == Storage::F32) {
    auto* y = static_cast<float*>(out);
    for (size_t i = 0; i < n; ++i) y[i] = in[i];
    return;
  }
  from_float(half_of(s), in, static_cast<uint16_t*>(out), n);
}

DS_AMP_BULK void add_float(Storage s, const float* in, void* out, size_t n) {
  if (s == Storage::F32) {
    auto* y = static_cast<float*>(out);
    for (size_t i = 0; i < n; ++i) y[i] += in[i];
    return;
  }
  accumulate(half_of(s), in, static_cast<uint16_t*>(out), n);
}

DS_AMP_BULK void add(Storage s, const void* in, void* out, size_t n) {
  if (s == Storage::F32) {
    add_float(s, static_cast<const float*>(in), out, n);
    return;
  }
  const Half h = half_of(s);
  const auto* x = static_cast<const uint16_t*>(in);
  auto* y = static_cast<uint16_t*>(out);
  float a[kHalfBlock], b[kHalfBlock];
  for (size_t i = 0; i < n; i += kHalfBlock) {
    const size_t m = std::min(kHalfBlock, n - i);
    to_float(h, x + i, a, m);
    to_float(h, y + i, b, m);
    for (size_t k = 0; k < m; ++k) b[k] += a[k];
    from_float(h, b, y + i, m);
  }
}

DS_AMP_BULK void scale(Storage s, void* data, size_t n, double factor) {
  if (factor == 1.0) return;
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
    to_float(h, x + i, a, m);
    for (size_t k = 0; k < m; ++k) a[k] = static_cast<float>(a[k] * factor);
    from_float(h, a, x + i, m);
  }
}

DS_AMP_BULK double sum_squares(Storage s, const void* data, size_t n, double start) {
  double sum = start;
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
    to_float(h, x + i, a, m);
    for (size_t k = 0; k < m; ++k) sum += static_cast<double>(a[k]) * a[k];
  }
  return sum;
}

DS_AMP_BULK void round_to(Storage s, float* data, size_t n) {
  if (s == Storage::F32) return;
  const Half h = half_of(s);
  uint16_t a[kHalfBlock];
  for (size_t i = 0; i < n; i += kHalfBlock) {
    const size_t m = std::min(kHalfBlock, n - i);
    from_float(h, data + i, a, m);
    to_float(h, a, data + i, m);
  }
}

}  // namespace ds::amp
