// A test-only CublasLtApi: "device" memory is host memory (the workspace and zeros too, from
// aligned_alloc), descriptors and layouts are small structs holding the attributes set on them, and
// cublasLtMatmul computes exactly what cuBLASLt documents for them (column-major or row-major order,
// op(A)/op(B), rows, columns, leading dimensions, strided batches, alpha and beta, fp32/bf16 types) with
// a plain loop in double, rounded once to D's type. It checks what the real library would reject
// (shapes that do not fit, a workspace or alignment other than the heuristic was told, a handle of
// another device, objects used after release) and that no attribute it does not model is set; each
// such use is recorded in violations. So gemm's cuBLASLt path runs end to end in ctest without a GPU.
#pragma once
#include <string>
#include <vector>

#include "cuda/cublaslt_api.h"

namespace ds::test {

const cuda::CublasLtApi& fake_cublaslt_api();

// The fake's knobs, counts and live objects; fake_cublaslt_reset() restores the defaults and releases
// what is still alive (call it when no CublasLtGemm is).
struct FakeCublasLt {
  // knobs
  int device = 0;                                         // what cudaGetDevice answers
  cublasStatus_t matmul_status = CUBLAS_STATUS_SUCCESS;  // anything else: cublasLtMatmul computes nothing
  bool no_algorithm = false;                              // the heuristic finds none (0 results)
  // calls so far
  int handles_created = 0, descs_created = 0, layouts_created = 0, preferences_created = 0, heuristics = 0,
      matmuls = 0, mallocs = 0;
  // objects alive now
  size_t live_handles = 0, live_descs = 0, live_layouts = 0, live_preferences = 0, live_allocations = 0;
  std::vector<std::string> violations;  // what the real library would reject, or the fake does not model
};

FakeCublasLt& fake_cublaslt();  // not thread-safe: read and set it while no gemm runs
void fake_cublaslt_reset();

}  // namespace ds::test
