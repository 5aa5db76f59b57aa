// gemm's argument checks and shape text (gemm_shape.h).
#include "cuda/gemm_shape.h"

#include <climits>
#include <stdexcept>

#include <fmt/format.h>

namespace ds::cuda {
namespace {

const char* type_name(GemmType type) { return type == GemmType::F32 ? "f32" : type == GemmType::BF16 ? "bf16" : "f16"; }

}  // namespace

size_t element_bytes(GemmType type) { return type == GemmType::F32 ? 4 : 2; }

void GemmShape::check() const {
  auto fail = [this](const std::string& what) {
    throw std::invalid_argument(fmt::format("cuda: gemm: {} ({})", what, describe()));
  };
  // cuBLASLt takes rows, columns and batch counts as 32-bit integers.
  for (int64_t size : {m, n, k, batch})
    if (size < 0 || size > INT_MAX) fail(fmt::format("size {} is outside [0, 2^31)", size));
  for (int64_t stride : {stride_a, stride_b, stride_c})
    if (stride < 0) fail(fmt::format("stride {} is negative", stride));
  if (c_type != GemmType::F32 && c_type != ab_type)
    fail(fmt::format("a {} c needs {} inputs", type_name(c_type), type_name(c_type)));
  if (batch > 1 && stride_c < m * n)
    fail(fmt::format("batch entries of c overlap (stride_c {} < m*n {})", stride_c, m * n));
}

std::string GemmShape::describe() const {
  return fmt::format("m={} n={} k={} trans_a={:d} trans_b={:d} {}->{} batch={} strides={},{},{}", m, n, k, trans_a,
                     trans_b, type_name(ab_type), type_name(c_type), batch, stride_a, stride_b, stride_c);
}

}  // namespace ds::cuda
