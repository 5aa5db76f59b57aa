// One gemm call's shape (gemm.h) as gemm's implementations share it: the argument checks and the text
// that errors carry.
#pragma once
#include <cstdint>
#include <string>

#include "cuda/gemm.h"

namespace ds::cuda {

struct GemmShape {
  int64_t m, n, k;
  bool trans_a, trans_b;
  GemmType ab_type, c_type;
  int64_t batch, stride_a, stride_b, stride_c;  // elements between batch entries

  // Throws std::invalid_argument ("cuda: gemm: <what> (<describe()>)") for the arguments gemm.h rejects.
  void check() const;
  // "m=17 n=33 k=65 trans_a=0 trans_b=1 bf16->f32 batch=3 strides=2145,0,561"
  std::string describe() const;
};

size_t element_bytes(GemmType type);  // 4 or 2

}  // namespace ds::cuda
