// The real CublasLtApi: cuBLASLt from libcublasLt.so.13, opened on first use (dsworker must start on
// machines without cuBLAS; only GEMMs on a GPU need it), and the statically linked CUDA runtime.
#include "cuda/cublaslt_api.h"

#include <dlfcn.h>

#include <stdexcept>

#include <fmt/format.h>

namespace ds::cuda {
namespace {

template <typename F>
void bind(void* library, const std::string& path, F*& slot, const char* name) {
  slot = reinterpret_cast<F*>(::dlsym(library, name));
  if (!slot) throw std::runtime_error(fmt::format("cuda: gemm: {} has no {} (cuBLAS older than 13?)", path, name));
}

}  // namespace

CublasLtApi load_cublaslt_api(const std::vector<std::string>& paths) {
  void* library = nullptr;
  std::string path, tried;
  for (const std::string& candidate : paths) {
    library = ::dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library) {
      path = candidate;
      break;
    }
    tried += fmt::format("; {}: {}", candidate, ::dlerror());
  }
  if (!library)
    throw std::runtime_error(fmt::format("cuda: gemm: cannot load cuBLASLt (tried {}); install the CUDA 13 toolkit's "
                                         "cuBLAS or add its directory to LD_LIBRARY_PATH",
                                         tried.empty() ? "nothing" : tried.substr(2)));
  CublasLtApi api{};
  api.get_device = cudaGetDevice;
  api.malloc = cudaMalloc;
  api.free = cudaFree;
  api.memset = cudaMemset;
  api.device_synchronize = cudaDeviceSynchronize;
  api.cuda_error_name = cudaGetErrorName;
  api.cuda_error_string = cudaGetErrorString;
  bind(library, path, api.create, "cublasLtCreate");
  bind(library, path, api.destroy, "cublasLtDestroy");
  bind(library, path, api.matmul_desc_create, "cublasLtMatmulDescCreate");
  bind(library, path, api.matmul_desc_destroy, "cublasLtMatmulDescDestroy");
  bind(library, path, api.matmul_desc_set_attribute, "cublasLtMatmulDescSetAttribute");
  bind(library, path, api.matrix_layout_create, "cublasLtMatrixLayoutCreate");
  bind(library, path, api.matrix_layout_destroy, "cublasLtMatrixLayoutDestroy");
  bind(library, path, api.matrix_layout_set_attribute, "cublasLtMatrixLayoutSetAttribute");
  bind(library, path, api.preference_create, "cublasLtMatmulPreferenceCreate");
  bind(library, path, api.preference_destroy, "cublasLtMatmulPreferenceDestroy");
  bind(library, path, api.preference_set_attribute, "cublasLtMatmulPreferenceSetAttribute");
  bind(library, path, api.algo_get_heuristic, "cublasLtMatmulAlgoGetHeuristic");
  bind(library, path, api.matmul, "cublasLtMatmul");
  bind(library, path, api.status_name, "cublasLtGetStatusName");
  bind(library, path, api.status_string, "cublasLtGetStatusString");
  return api;
}

const CublasLtApi& real_cublaslt_api() {
  static const CublasLtApi api = load_cublaslt_api({"libcublasLt.so.13", "/usr/local/cuda/lib64/libcublasLt.so.13",
                                                    "/usr/local/cuda/targets/x86_64-linux/lib/libcublasLt.so.13"});
  return api;
}

}  // namespace ds::cuda
