// gemm (gemm.h) on the GPU through cuBLASLt: CublasLtGemm (cublaslt_gemm.h), and gemm itself on one
// process-wide CublasLtGemm over the real library (cublaslt_api.h).
#include "cuda/cublaslt_gemm.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

namespace ds::cuda {
namespace {

cudaDataType_t data_type(GemmType type) {
  return type == GemmType::F32 ? CUDA_R_32F : type == GemmType::BF16 ? CUDA_R_16BF : CUDA_R_16F;
}

// The alignment in bytes that every batch entry of an operand at p has: a power of two, at most 256
// (cuBLASLt's default assumption, which heuristics would otherwise make for pointers they never see).
uint32_t alignment(const void* p, int64_t batch, int64_t stride, GemmType type) {
  uint64_t bits = reinterpret_cast<uintptr_t>(p) | 256u;
  if (batch > 1) bits |= static_cast<uint64_t>(stride) * element_bytes(type);
  return static_cast<uint32_t>(bits & (~bits + 1));
}

void check(const CublasLtApi& api, cublasStatus_t status, const char* call, const GemmShape& shape) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(fmt::format("cuda: gemm: {}: {} ({}) for {}", call, api.status_name(status),
                                         api.status_string(status), shape.describe()));
}

void check(const CublasLtApi& api, cudaError_t error, const char* call, const GemmShape& shape) {
  if (error != cudaSuccess)
    throw std::runtime_error(fmt::format("cuda: gemm: {}: {} ({}) for {}", call, api.cuda_error_name(error),
                                         api.cuda_error_string(error), shape.describe()));
}

}  // namespace

CublasLtGemm::~CublasLtGemm() {
  for (const auto& [key, plan] : plans_) release(plan);
  for (const auto& [id, device] : devices_) {
    if (device.handle) api_.destroy(device.handle);
    if (device.workspace) api_.free(device.workspace);
    if (device.zeros) api_.free(device.zeros);
  }
}

size_t CublasLtGemm::plan_count() const {
  std::lock_guard lock(mutex_);
  return plans_.size();
}

void CublasLtGemm::run(const void* a, const void* b, void* c, const GemmShape& shape, float alpha, float beta,
                       void* stream) {
  shape.check();
  if (shape.m == 0 || shape.n == 0 || shape.batch == 0) return;
  std::lock_guard lock(mutex_);
  int id = 0;
  check(api_, api_.get_device(&id), "cudaGetDevice", shape);
  if (shape.k > 0) {
    enqueue(a, b, c, shape, shape, alpha, beta, id, stream);
    return;
  }
  // k = 0: c = beta·c as BLAS defines it (cuBLASLt does not document k = 0), run as a product with
  // k = 1 of zeros broadcast to every batch entry, alpha 0 so that an infinite alpha adds no NaN.
  GemmShape zero_product = shape;
  zero_product.k = 1;
  zero_product.trans_a = zero_product.trans_b = false;
  zero_product.stride_a = zero_product.stride_b = 0;
  const size_t bytes = static_cast<size_t>(std::max(shape.m, shape.n)) * element_bytes(shape.ab_type);
  const void* z = zeros(device(id, shape), bytes, shape);
  enqueue(z, z, c, zero_product, shape, 0.0f, beta, id, stream);
}

CublasLtGemm::Device& CublasLtGemm::device(int id, const GemmShape& shape) {
  Device& device = devices_[id];
  if (!device.handle) {
    cublasLtHandle_t handle = nullptr;
    check(api_, api_.create(&handle), "cublasLtCreate", shape);
    device.handle = handle;
  }
  if (!device.workspace) {
    void* workspace = nullptr;
    check(api_, api_.malloc(&workspace, kWorkspaceBytes), "cudaMalloc of the 32 MiB workspace", shape);
    device.workspace = workspace;
  }
  return device;
}

void* CublasLtGemm::zeros(Device& device, size_t bytes, const GemmShape& shape) {
  if (device.zeros_bytes >= bytes) return device.zeros;
  if (device.zeros) {
    check(api_, api_.device_synchronize(), "cudaDeviceSynchronize", shape);  // products in flight read them
    check(api_, api_.free(device.zeros), "cudaFree of k = 0's zeros", shape);
    device.zeros = nullptr;
    device.zeros_bytes = 0;
  }
  void* zeros = nullptr;
  check(api_, api_.malloc(&zeros, bytes), "cudaMalloc of k = 0's zeros", shape);
  device.zeros = zeros;
  check(api_, api_.memset(zeros, 0, bytes), "cudaMemset of k = 0's zeros", shape);
  // cudaMemset runs on the legacy default stream, which a non-blocking stream does not wait for.
  check(api_, api_.device_synchronize(), "cudaDeviceSynchronize", shape);
  device.zeros_bytes = bytes;
  return zeros;
}

void CublasLtGemm::enqueue(const void* a, const void* b, void* c, const GemmShape& shape, const GemmShape& asked,
                           float alpha, float beta, int device_id, void* stream) {
  const Device& device = this->device(device_id, asked);
  const bool batched = shape.batch > 1;
  const PlanKey key{device_id, shape.m, shape.n, shape.k, shape.trans_a, shape.trans_b, shape.ab_type, shape.c_type,
                    shape.batch, batched ? shape.stride_a : 0, batched ? shape.stride_b : 0,
                    batched ? shape.stride_c : 0, alignment(a, shape.batch, shape.stride_a, shape.ab_type),
                    alignment(b, shape.batch, shape.stride_b, shape.ab_type),
                    alignment(c, shape.batch, shape.stride_c, shape.c_type)};
  const Plan& p = plan(key, device.handle, asked);
  // cuBLASLt's A is our b and its B our a (cublaslt_gemm.h); C and D are both c, one layout.
  check(api_,
        api_.matmul(device.handle, p.desc, &alpha, b, p.layout_b, a, p.layout_a, &beta, c, p.layout_c, c, p.layout_c,
                    &p.algo, device.workspace, kWorkspaceBytes, static_cast<cudaStream_t>(stream)),
        "cublasLtMatmul", asked);
}

const CublasLtGemm::Plan& CublasLtGemm::plan(const PlanKey& key, cublasLtHandle_t handle, const GemmShape& asked) {
  if (auto it = plans_.find(key); it != plans_.end()) return it->second;
  if (plans_.size() >= kMaxPlans) {  // shapes that never repeat: start over rather than grow without bound
    for (const auto& [old_key, old_plan] : plans_) release(old_plan);
    plans_.clear();
  }
  return plans_.emplace(key, make_plan(key, handle, asked)).first->second;
}

CublasLtGemm::Plan CublasLtGemm::make_plan(const PlanKey& key, cublasLtHandle_t handle, const GemmShape& asked) {
  Plan p;
  cublasLtMatmulPreference_t preference = nullptr;
  auto call = [&](cublasStatus_t status, const char* what) { check(api_, status, what, asked); };
  // A column-major view of a row-major operand: rows x cols, leading dimension rows, strided batches.
  auto layout = [&](cublasLtMatrixLayout_t& out, GemmType type, int64_t rows, int64_t cols, int64_t stride) {
    cublasLtMatrixLayout_t created = nullptr;
    call(api_.matrix_layout_create(&created, data_type(type), static_cast<uint64_t>(rows),
                                   static_cast<uint64_t>(cols), rows),
         "cublasLtMatrixLayoutCreate");
    out = created;
    if (key.batch == 1) return;
    const int32_t count = static_cast<int32_t>(key.batch);
    call(api_.matrix_layout_set_attribute(out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count),
         "cublasLtMatrixLayoutSetAttribute(BATCH_COUNT)");
    call(api_.matrix_layout_set_attribute(out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride),
         "cublasLtMatrixLayoutSetAttribute(STRIDED_BATCH_OFFSET)");
  };
  try {
    // fp32 accumulation and fp32 alpha/beta for every type; CUBLAS_COMPUTE_32F never uses TF32.
    cublasLtMatmulDesc_t desc = nullptr;
    call(api_.matmul_desc_create(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
    p.desc = desc;
    const int32_t op_b = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    call(api_.matmul_desc_set_attribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_b, sizeof op_b),
         "cublasLtMatmulDescSetAttribute(TRANSA)");
    call(api_.matmul_desc_set_attribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_a, sizeof op_a),
         "cublasLtMatmulDescSetAttribute(TRANSB)");
    // b: [k, n] is n x k; stored [n, k] it is k x n, transposed. a: [m, k] is k x m; stored [k, m] it
    // is m x k, transposed. c: [m, n] is n x m.
    layout(p.layout_b, key.ab_type, key.trans_b ? key.k : key.n, key.trans_b ? key.n : key.k, key.stride_b);
    layout(p.layout_a, key.ab_type, key.trans_a ? key.m : key.k, key.trans_a ? key.k : key.m, key.stride_a);
    layout(p.layout_c, key.c_type, key.n, key.m, key.stride_c);

    cublasLtMatmulPreference_t created = nullptr;
    call(api_.preference_create(&created), "cublasLtMatmulPreferenceCreate");
    preference = created;
    const uint64_t workspace = kWorkspaceBytes;
    call(api_.preference_set_attribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                       sizeof workspace),
         "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)");
    const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> alignments[] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_b},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_a},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_c}};
    for (const auto& [attribute, bytes] : alignments)
      call(api_.preference_set_attribute(preference, attribute, &bytes, sizeof bytes),
           "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT)");

    cublasLtMatmulHeuristicResult_t result{};
    int returned = 0;
    call(api_.algo_get_heuristic(handle, p.desc, p.layout_b, p.layout_a, p.layout_c, p.layout_c, preference, 1,
                                 &result, &returned),
         "cublasLtMatmulAlgoGetHeuristic");
    if (returned == 0 || result.state != CUBLAS_STATUS_SUCCESS)
      throw std::runtime_error(fmt::format("cuda: gemm: cublasLtMatmulAlgoGetHeuristic: no algorithm for {}",
                                           asked.describe()));
    p.algo = result.algo;
    api_.preference_destroy(preference);
    return p;
  } catch (...) {
    if (preference) api_.preference_destroy(preference);
    release(p);
    throw;
  }
}

void CublasLtGemm::release(const Plan& plan) {
  for (cublasLtMatrixLayout_t layout : {plan.layout_a, plan.layout_b, plan.layout_c})
    if (layout) api_.matrix_layout_destroy(layout);
  if (plan.desc) api_.matmul_desc_destroy(plan.desc);
}

void gemm(const void* a, const void* b, void* c, int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b,
          GemmType ab_type, GemmType c_type, float alpha, float beta, int64_t batch, int64_t stride_a,
          int64_t stride_b, int64_t stride_c, void* stream) {
  const GemmShape shape{m, n, k, trans_a, trans_b, ab_type, c_type, batch, stride_a, stride_b, stride_c};
  shape.check();  // before cuBLASLt is loaded: a bad argument is reported as one on any machine
  // Never destroyed (see ~CublasLtGemm); a failed load throws again at the next call.
  static CublasLtGemm* const instance = new CublasLtGemm(real_cublaslt_api());
  instance->run(a, b, c, shape, alpha, beta, stream);
}

}  // namespace ds::cuda
