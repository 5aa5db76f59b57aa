// gemm (gemm.h) through cuBLASLt, over a CublasLtApi (the real library or a test's fake). Row-major
// c[m, n] = op(a)·op(b) is run as cuBLASLt's column-major cᵀ[n, m] = op(b)ᵀ·op(a)ᵀ: the same bytes,
// with a and b swapped. Per device (the caller's current one): a cuBLASLt handle, a 32 MiB workspace
// and, once k = 0 has been asked for, a buffer of zeros. Plans (descriptors and the heuristic's
// algorithm) are cached by the whole shape, the device and the operands' alignments; at most kMaxPlans,
// past which the cache starts over. Thread-safe: one mutex, held while a product is enqueued.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>

#include "cuda/cublaslt_api.h"
#include "cuda/gemm_shape.h"

namespace ds::cuda {

class CublasLtGemm {
 public:
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;
  static constexpr size_t kMaxPlans = 256;

  explicit CublasLtGemm(const CublasLtApi& api) : api_(api) {}
  // Releases every plan, handle and buffer (the process-wide instance of gemm_cublaslt.cpp is never
  // destroyed: at exit the CUDA runtime may already be gone).
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  // gemm.h's gemm.
  void run(const void* a, const void* b, void* c, const GemmShape& shape, float alpha, float beta, void* stream);

  size_t plan_count() const;

 private:
  struct Device {
    cublasLtHandle_t handle = nullptr;
    void* workspace = nullptr;  // kWorkspaceBytes
    void* zeros = nullptr;      // zeros_bytes of zeros: k = 0's operands
    size_t zeros_bytes = 0;
  };
  struct PlanKey {
    int device;
    int64_t m, n, k;
    bool trans_a, trans_b;
    GemmType ab_type, c_type;
    int64_t batch, stride_a, stride_b, stride_c;  // strides 0 when batch is 1
    uint32_t align_a, align_b, align_c;           // bytes, powers of two up to 256
    auto operator<=>(const PlanKey&) const = default;
  };
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t layout_a = nullptr, layout_b = nullptr, layout_c = nullptr;  // our a, b, c (= d)
    cublasLtMatmulAlgo_t algo{};
  };

  Device& device(int id, const GemmShape& shape);
  void* zeros(Device& device, size_t bytes, const GemmShape& shape);
  const Plan& plan(const PlanKey& key, cublasLtHandle_t handle, const GemmShape& asked);
  Plan make_plan(const PlanKey& key, cublasLtHandle_t handle, const GemmShape& asked);
  void release(const Plan& plan);
  // One product on device_id's handle; errors name `asked`, the shape gemm was called with.
  void enqueue(const void* a, const void* b, void* c, const GemmShape& shape, const GemmShape& asked, float alpha,
               float beta, int device_id, void* stream);

  const CublasLtApi& api_;
  mutable std::mutex mutex_;
  std::map<int, Device> devices_;
  std::map<PlanKey, Plan> plans_;
};

}  // namespace ds::cuda
