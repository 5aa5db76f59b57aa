// The CUDA runtime and cuBLASLt entry points gemm's cuBLASLt path uses (cublaslt_gemm.h), as a table of
// functions: the real one (cublaslt_api.cpp: libcublasLt.so.13 opened at run time, so dsworker starts
// where cuBLAS is not installed; the CUDA runtime linked statically) or a test's fake
// (tests/unit/gemm/fake_cublaslt: device memory is host memory, cublasLtMatmul a loop in double).
#pragma once
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <string>
#include <vector>

namespace ds::cuda {

struct CublasLtApi {
  // CUDA runtime: the current device, the workspace and the zeros that k = 0 multiplies
  cudaError_t (*get_device)(int* device);
  cudaError_t (*malloc)(void** pointer, size_t bytes);
  cudaError_t (*free)(void* pointer);
  cudaError_t (*memset)(void* pointer, int value, size_t bytes);
  cudaError_t (*device_synchronize)();
  const char* (*cuda_error_name)(cudaError_t error);
  const char* (*cuda_error_string)(cudaError_t error);
  // cuBLASLt
  cublasStatus_t (*create)(cublasLtHandle_t* handle);
  cublasStatus_t (*destroy)(cublasLtHandle_t handle);
  cublasStatus_t (*matmul_desc_create)(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType_t scale);
  cublasStatus_t (*matmul_desc_destroy)(cublasLtMatmulDesc_t desc);
  cublasStatus_t (*matmul_desc_set_attribute)(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute,
                                              const void* value, size_t bytes);
  cublasStatus_t (*matrix_layout_create)(cublasLtMatrixLayout_t* layout, cudaDataType_t type, uint64_t rows,
                                         uint64_t cols, int64_t ld);
  cublasStatus_t (*matrix_layout_destroy)(cublasLtMatrixLayout_t layout);
  cublasStatus_t (*matrix_layout_set_attribute)(cublasLtMatrixLayout_t layout,
                                                cublasLtMatrixLayoutAttribute_t attribute, const void* value,
                                                size_t bytes);
  cublasStatus_t (*preference_create)(cublasLtMatmulPreference_t* preference);
  cublasStatus_t (*preference_destroy)(cublasLtMatmulPreference_t preference);
  cublasStatus_t (*preference_set_attribute)(cublasLtMatmulPreference_t preference,
                                             cublasLtMatmulPreferenceAttributes_t attribute, const void* value,
                                             size_t bytes);
  cublasStatus_t (*algo_get_heuristic)(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                                       cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                       cublasLtMatmulPreference_t preference, int requested,
                                       cublasLtMatmulHeuristicResult_t results[], int* returned);
  cublasStatus_t (*matmul)(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* a,
                           cublasLtMatrixLayout_t a_layout, const void* b, cublasLtMatrixLayout_t b_layout,
                           const void* beta, const void* c, cublasLtMatrixLayout_t c_layout, void* d,
                           cublasLtMatrixLayout_t d_layout, const cublasLtMatmulAlgo_t* algo, void* workspace,
                           size_t workspace_bytes, cudaStream_t stream);
  const char* (*status_name)(cublasStatus_t status);
  const char* (*status_string)(cublasStatus_t status);
};

// The first of `paths` that dlopen loads, with every entry point bound, and the statically linked CUDA
// runtime. Throws std::runtime_error naming each path and dlerror(), or the missing function.
CublasLtApi load_cublaslt_api(const std::vector<std::string>& paths);

// load_cublaslt_api of libcublasLt.so.13 (the loader's search path, then the CUDA toolkit's folders),
// once per process; a failed load throws again at the next call.
const CublasLtApi& real_cublaslt_api();

}  // namespace ds::cuda
