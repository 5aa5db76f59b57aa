// gemm (gemm.h) on emulated devices: device memory is host memory, each batch entry the CPU reference
// (cpu/matmul.h matmul_reference: a sum in double, rounded once), 16-bit inputs widened to fp32 and a
// 16-bit c rounded to nearest even (amp/half.h); synchronous, the stream ignored.
#include <vector>

#include "amp/half.h"
#include "cpu/matmul.h"
#include "cuda/gemm.h"
#include "cuda/gemm_shape.h"

namespace ds::cuda {
namespace {

float load(const void* p, GemmType type, int64_t i) {
  if (type == GemmType::F32) return static_cast<const float*>(p)[i];
  return amp::half_to_float(half_type(type), static_cast<const uint16_t*>(p)[i]);
}

void store(void* p, GemmType type, int64_t i, float x) {
  if (type == GemmType::F32) static_cast<float*>(p)[i] = x;
  else static_cast<uint16_t*>(p)[i] = amp::half_from_float(half_type(type), x);
}

void widen(const void* p, GemmType type, int64_t offset, std::vector<float>& out) {
  for (size_t i = 0; i < out.size(); ++i) out[i] = load(p, type, offset + static_cast<int64_t>(i));
}

}  // namespace

void gemm(const void* a, const void* b, void* c, int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b,
          GemmType ab_type, GemmType c_type, float alpha, float beta, int64_t batch, int64_t stride_a,
          int64_t stride_b, int64_t stride_c, void*) {
  GemmShape{m, n, k, trans_a, trans_b, ab_type, c_type, batch, stride_a, stride_b, stride_c}.check();
  std::vector<float> a32(static_cast<size_t>(m * k)), b32(static_cast<size_t>(k * n)),
      product(static_cast<size_t>(m * n));
  const double scale = k == 0 ? 0.0 : alpha;  // k = 0: c = beta·c, whatever alpha
  for (int64_t entry = 0; entry < batch; ++entry) {
    widen(a, ab_type, entry * stride_a, a32);
    widen(b, ab_type, entry * stride_b, b32);
    cpu::matmul_reference(a32.data(), b32.data(), product.data(), m, n, k, trans_a, trans_b, false);
    for (int64_t i = 0; i < m * n; ++i) {
      const int64_t at = entry * stride_c + i;
      const double old = beta == 0.0f ? 0.0 : static_cast<double>(beta) * load(c, c_type, at);  // beta 0: c unread
      store(c, c_type, at, static_cast<float>(scale * product[static_cast<size_t>(i)] + old));
    }
  }
}

}  // namespace ds::cuda
