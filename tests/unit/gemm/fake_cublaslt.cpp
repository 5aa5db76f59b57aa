// The fake CUDA runtime and cuBLASLt of fake_cublaslt.h.
#include "fake_cublaslt.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>

#include <fmt/format.h>

#include "amp/half.h"

namespace ds::test {
namespace {

constexpr uint64_t kAlgoMagic = 0xfa4ec0b1a5;

struct Handle {
  int device;
};
struct Desc {
  int32_t compute, scale;
  int32_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
};
struct Layout {
  uint32_t type;
  int32_t order = CUBLASLT_ORDER_COL;
  uint64_t rows, cols;
  int64_t ld;
  int32_t batch = 1;
  int64_t stride = 0;
  bool operator==(const Layout&) const = default;
};
struct Preference {
  uint64_t max_workspace = 0;
  uint32_t alignment[4] = {256, 256, 256, 256};  // A, B, C, D
};

std::mutex mutex;
FakeCublasLt state;
std::set<Handle*> handles;
std::set<Desc*> descs;
std::set<Layout*> layouts;
std::set<Preference*> preferences;
std::map<void*, size_t> allocations;

void violation(std::string what) { state.violations.push_back(std::move(what)); }

void count_live() {
  state.live_handles = handles.size();
  state.live_descs = descs.size();
  state.live_layouts = layouts.size();
  state.live_preferences = preferences.size();
  state.live_allocations = allocations.size();
}

template <typename T, typename Opaque>
T* live(const std::set<T*>& objects, Opaque* opaque, const char* what) {
  T* object = reinterpret_cast<T*>(opaque);
  if (!objects.count(object)) {
    violation(fmt::format("{} {} is not alive", what, static_cast<const void*>(opaque)));
    return nullptr;
  }
  return object;
}

// Copies an attribute of the documented type; a size that differs is the real library's INVALID_VALUE.
template <typename T>
cublasStatus_t set(T& field, const void* value, size_t bytes, const char* name) {
  if (!value || bytes != sizeof(T)) {
    violation(fmt::format("{}: {} bytes, the attribute has {}", name, bytes, sizeof(T)));
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  std::memcpy(&field, value, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t unmodeled(const char* object, int attribute) {
  violation(fmt::format("{} attribute {} is not modelled by the fake", object, attribute));
  return CUBLAS_STATUS_NOT_SUPPORTED;
}

// CUDA runtime
cudaError_t get_device(int* device) {
  std::lock_guard lock(mutex);
  *device = state.device;
  return cudaSuccess;
}

cudaError_t fake_malloc(void** pointer, size_t bytes) {
  std::lock_guard lock(mutex);
  *pointer = std::aligned_alloc(256, (bytes + 255) / 256 * 256);  // cudaMalloc's alignment
  if (!*pointer) return cudaErrorMemoryAllocation;
  allocations[*pointer] = bytes;
  ++state.mallocs;
  count_live();
  return cudaSuccess;
}

cudaError_t fake_free(void* pointer) {
  std::lock_guard lock(mutex);
  if (!allocations.erase(pointer)) {
    violation(fmt::format("cudaFree of {}, which was not allocated", pointer));
    return cudaErrorInvalidValue;
  }
  std::free(pointer);
  count_live();
  return cudaSuccess;
}

cudaError_t fake_memset(void* pointer, int value, size_t bytes) {
  std::lock_guard lock(mutex);
  const auto it = allocations.find(pointer);
  if (it == allocations.end() || it->second < bytes) {
    violation(fmt::format("cudaMemset of {} bytes at {}, not an allocation that large", bytes, pointer));
    return cudaErrorInvalidValue;
  }
  std::memset(pointer, value, bytes);
  return cudaSuccess;
}

cudaError_t device_synchronize() { return cudaSuccess; }

// cuBLASLt: objects
cublasStatus_t create(cublasLtHandle_t* handle) {
  std::lock_guard lock(mutex);
  Handle* h = new Handle{state.device};
  handles.insert(h);
  ++state.handles_created;
  count_live();
  *handle = reinterpret_cast<cublasLtHandle_t>(h);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t destroy(cublasLtHandle_t handle) {
  std::lock_guard lock(mutex);
  Handle* h = live(handles, handle, "handle");
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  handles.erase(h);
  delete h;
  count_live();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t desc_create(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType_t scale) {
  std::lock_guard lock(mutex);
  Desc* d = new Desc{compute, scale};
  descs.insert(d);
  ++state.descs_created;
  count_live();
  *desc = reinterpret_cast<cublasLtMatmulDesc_t>(d);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t desc_destroy(cublasLtMatmulDesc_t desc) {
  std::lock_guard lock(mutex);
  Desc* d = live(descs, desc, "matmul descriptor");
  if (!d) return CUBLAS_STATUS_INVALID_VALUE;
  descs.erase(d);
  delete d;
  count_live();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t desc_set(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, const void* value,
                        size_t bytes) {
  std::lock_guard lock(mutex);
  Desc* d = live(descs, desc, "matmul descriptor");
  if (!d) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attribute) {
    case CUBLASLT_MATMUL_DESC_TRANSA: return set(d->trans_a, value, bytes, "TRANSA");
    case CUBLASLT_MATMUL_DESC_TRANSB: return set(d->trans_b, value, bytes, "TRANSB");
    default: return unmodeled("matmul descriptor", attribute);
  }
}

cublasStatus_t layout_create(cublasLtMatrixLayout_t* layout, cudaDataType_t type, uint64_t rows, uint64_t cols,
                             int64_t ld) {
  std::lock_guard lock(mutex);
  Layout* l = new Layout{static_cast<uint32_t>(type), CUBLASLT_ORDER_COL, rows, cols, ld};
  layouts.insert(l);
  ++state.layouts_created;
  count_live();
  *layout = reinterpret_cast<cublasLtMatrixLayout_t>(l);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t layout_destroy(cublasLtMatrixLayout_t layout) {
  std::lock_guard lock(mutex);
  Layout* l = live(layouts, layout, "matrix layout");
  if (!l) return CUBLAS_STATUS_INVALID_VALUE;
  layouts.erase(l);
  delete l;
  count_live();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t layout_set(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attribute, const void* value,
                          size_t bytes) {
  std::lock_guard lock(mutex);
  Layout* l = live(layouts, layout, "matrix layout");
  if (!l) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attribute) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: return set(l->type, value, bytes, "TYPE");
    case CUBLASLT_MATRIX_LAYOUT_ORDER: return set(l->order, value, bytes, "ORDER");
    case CUBLASLT_MATRIX_LAYOUT_ROWS: return set(l->rows, value, bytes, "ROWS");
    case CUBLASLT_MATRIX_LAYOUT_COLS: return set(l->cols, value, bytes, "COLS");
    case CUBLASLT_MATRIX_LAYOUT_LD: return set(l->ld, value, bytes, "LD");
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return set(l->batch, value, bytes, "BATCH_COUNT");
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return set(l->stride, value, bytes, "STRIDED_BATCH_OFFSET");
    default: return unmodeled("matrix layout", attribute);
  }
}

cublasStatus_t preference_create(cublasLtMatmulPreference_t* preference) {
  std::lock_guard lock(mutex);
  Preference* p = new Preference;
  preferences.insert(p);
  ++state.preferences_created;
  count_live();
  *preference = reinterpret_cast<cublasLtMatmulPreference_t>(p);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t preference_destroy(cublasLtMatmulPreference_t preference) {
  std::lock_guard lock(mutex);
  Preference* p = live(preferences, preference, "preference");
  if (!p) return CUBLAS_STATUS_INVALID_VALUE;
  preferences.erase(p);
  delete p;
  count_live();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t preference_set(cublasLtMatmulPreference_t preference, cublasLtMatmulPreferenceAttributes_t attribute,
                              const void* value, size_t bytes) {
  std::lock_guard lock(mutex);
  Preference* p = live(preferences, preference, "preference");
  if (!p) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attribute) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return set(p->max_workspace, value, bytes, "MAX_WORKSPACE_BYTES");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return set(p->alignment[0], value, bytes, "MIN_ALIGNMENT_A");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return set(p->alignment[1], value, bytes, "MIN_ALIGNMENT_B");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return set(p->alignment[2], value, bytes, "MIN_ALIGNMENT_C");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return set(p->alignment[3], value, bytes, "MIN_ALIGNMENT_D");
    default: return unmodeled("preference", attribute);
  }
}

// cuBLASLt: the product
struct Problem {
  const Desc* desc;
  const Layout *a, *b, *c, *d;
  uint64_t m, n, k;  // op(A) is m x k, op(B) k x n, C and D m x n
};

// The operation's objects, alive and consistent as cuBLASLt requires; false (recorded) if not.
bool resolve(cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
             cublasLtMatrixLayout_t d, Problem& out) {
  out = {live(descs, desc, "matmul descriptor"), live(layouts, a, "layout A"), live(layouts, b, "layout B"),
         live(layouts, c, "layout C"), live(layouts, d, "layout D"), 0, 0, 0};
  if (!out.desc || !out.a || !out.b || !out.c || !out.d) return false;
  const Desc& op = *out.desc;
  auto reject = [](std::string what) {
    violation(std::move(what));
    return false;
  };
  if (op.compute != CUBLAS_COMPUTE_32F || op.scale != CUDA_R_32F)
    return reject(fmt::format("compute type {} with scale type {}: the fake models only CUBLAS_COMPUTE_32F with "
                              "CUDA_R_32F", op.compute, op.scale));
  for (int32_t trans : {op.trans_a, op.trans_b})
    if (trans != CUBLAS_OP_N && trans != CUBLAS_OP_T) return reject(fmt::format("operation {} is not N or T", trans));
  const Layout &la = *out.a, &lb = *out.b, &lc = *out.c, &ld = *out.d;
  for (const Layout* l : {&la, &lb, &lc, &ld}) {
    if (l->order != CUBLASLT_ORDER_COL && l->order != CUBLASLT_ORDER_ROW)
      return reject(fmt::format("order {} is not modelled", l->order));
    if (l->rows == 0 || l->cols == 0) return reject("a matrix with no rows or no columns");
    const uint64_t leading = l->order == CUBLASLT_ORDER_COL ? l->rows : l->cols;
    if (l->ld < static_cast<int64_t>(leading))
      return reject(fmt::format("ld {} is less than the {} it must cover", l->ld, leading));
    if (l->batch != lc.batch) return reject(fmt::format("batch counts {} and {} differ", l->batch, lc.batch));
    if (l->batch < 1 || l->stride < 0) return reject(fmt::format("batch {} stride {}", l->batch, l->stride));
  }
  out.m = op.trans_a == CUBLAS_OP_N ? la.rows : la.cols;
  out.k = op.trans_a == CUBLAS_OP_N ? la.cols : la.rows;
  const uint64_t kb = op.trans_b == CUBLAS_OP_N ? lb.rows : lb.cols;
  out.n = op.trans_b == CUBLAS_OP_N ? lb.cols : lb.rows;
  if (kb != out.k || lc.rows != out.m || lc.cols != out.n || !(lc == ld))
    return reject(fmt::format("shapes do not fit: op(A) {}x{}, op(B) {}x{}, C {}x{}, D {}x{}", out.m, out.k, kb, out.n,
                              lc.rows, lc.cols, ld.rows, ld.cols));
  const bool f32 = la.type == CUDA_R_32F && lb.type == CUDA_R_32F && lc.type == CUDA_R_32F;
  bool half = false;  // bf16 or fp16 inputs, with an fp32 c or one of theirs
  for (uint32_t type : {CUDA_R_16BF, CUDA_R_16F})
    half = half || (la.type == type && lb.type == type && (lc.type == CUDA_R_32F || lc.type == type));
  if (!f32 && !half)
    return reject(fmt::format("types A {} B {} C {}: not a combination cuBLASLt has with CUBLAS_COMPUTE_32F", la.type,
                              lb.type, lc.type));
  return true;
}

size_t bytes_of(uint32_t type) { return type == CUDA_R_32F ? 4 : 2; }

// Where element (row, col) of batch entry `entry` of a matrix of layout l lies, in elements.
int64_t offset(const Layout& l, int64_t entry, uint64_t row, uint64_t col) {
  const auto r = static_cast<int64_t>(row), c = static_cast<int64_t>(col);
  return entry * l.stride + (l.order == CUBLASLT_ORDER_COL ? r + c * l.ld : r * l.ld + c);
}

double load(const void* base, const Layout& l, int64_t at) {
  if (l.type == CUDA_R_32F) return static_cast<const float*>(base)[at];
  const uint16_t bits = static_cast<const uint16_t*>(base)[at];
  return l.type == CUDA_R_16BF ? amp::bf16_to_float(bits) : amp::fp16_to_float(bits);
}

void store(void* base, const Layout& l, int64_t at, double x) {
  if (l.type == CUDA_R_32F) static_cast<float*>(base)[at] = static_cast<float>(x);
  else if (l.type == CUDA_R_16BF) static_cast<uint16_t*>(base)[at] = amp::bf16_from_float(static_cast<float>(x));
  else static_cast<uint16_t*>(base)[at] = amp::fp16_from_float(static_cast<float>(x));
}

cublasStatus_t heuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                         cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                         cublasLtMatmulPreference_t preference, int requested,
                         cublasLtMatmulHeuristicResult_t results[], int* returned) {
  std::lock_guard lock(mutex);
  ++state.heuristics;
  Problem problem;
  const Preference* p = live(preferences, preference, "preference");
  if (!live(handles, handle, "handle") || !p || !resolve(desc, a, b, c, d, problem)) return CUBLAS_STATUS_INVALID_VALUE;
  if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
  *returned = 0;
  if (state.no_algorithm) return CUBLAS_STATUS_SUCCESS;
  // The "algorithm" remembers what it was chosen for: matmul holds the call to it.
  cublasLtMatmulHeuristicResult_t& r = results[0];
  r = {};
  r.algo.data[0] = kAlgoMagic;
  for (int i = 0; i < 4; ++i) r.algo.data[1 + i] = p->alignment[i];
  r.algo.data[5] = p->max_workspace;
  r.workspaceSize = 0;
  r.state = CUBLAS_STATUS_SUCCESS;
  r.wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t matmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* a,
                      cublasLtMatrixLayout_t a_layout, const void* b, cublasLtMatrixLayout_t b_layout, const void* beta,
                      const void* c, cublasLtMatrixLayout_t c_layout, void* d, cublasLtMatrixLayout_t d_layout,
                      const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes, cudaStream_t) {
  std::lock_guard lock(mutex);
  ++state.matmuls;
  const Handle* h = live(handles, handle, "handle");
  Problem pr;
  if (!h || !resolve(desc, a_layout, b_layout, c_layout, d_layout, pr)) return CUBLAS_STATUS_INVALID_VALUE;
  if (h->device != state.device)
    violation(fmt::format("a handle of device {} used on device {}", h->device, state.device));
  if (!algo || algo->data[0] != kAlgoMagic) {
    violation("an algorithm the heuristic did not return");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const auto ws = allocations.find(workspace);
  if (workspace_bytes != algo->data[5] || ws == allocations.end() || ws->second < workspace_bytes)
    violation(fmt::format("workspace {} of {} bytes: the heuristic was told {} bytes, and it must be an allocation "
                          "that large", workspace, workspace_bytes, algo->data[5]));
  const std::pair<const void*, const Layout*> operands[] = {{a, pr.a}, {b, pr.b}, {c, pr.c}, {d, pr.d}};
  for (int i = 0; i < 4; ++i)
    for (int64_t entry = 0; entry < pr.c->batch; ++entry) {
      const auto& [pointer, layout] = operands[i];
      const auto address = reinterpret_cast<uintptr_t>(pointer) +
                           static_cast<uintptr_t>(entry * layout->stride) * bytes_of(layout->type);
      if (address % algo->data[1 + i])
        violation(fmt::format("operand {} of batch entry {} at {:#x} is not aligned to the {} bytes the heuristic "
                              "was told", "ABCD"[i], entry, address, algo->data[1 + i]));
    }
  if (c != d) violation("C and D differ: the fake models only the in-place product");
  if (state.matmul_status != CUBLAS_STATUS_SUCCESS) return state.matmul_status;
  const double al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  const bool ta = pr.desc->trans_a == CUBLAS_OP_T, tb = pr.desc->trans_b == CUBLAS_OP_T;
  for (int64_t entry = 0; entry < pr.c->batch; ++entry)
    for (uint64_t i = 0; i < pr.m; ++i)
      for (uint64_t j = 0; j < pr.n; ++j) {
        double sum = 0;
        for (uint64_t l = 0; l < pr.k; ++l)
          sum += load(a, *pr.a, ta ? offset(*pr.a, entry, l, i) : offset(*pr.a, entry, i, l)) *
                 load(b, *pr.b, tb ? offset(*pr.b, entry, j, l) : offset(*pr.b, entry, l, j));
        const double old = be == 0 ? 0.0 : be * load(c, *pr.c, offset(*pr.c, entry, i, j));  // beta 0: C unread
        store(d, *pr.d, offset(*pr.d, entry, i, j), al * sum + old);
      }
  return CUBLAS_STATUS_SUCCESS;
}

const char* status_name(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    default: return "CUBLAS_STATUS_<other>";
  }
}

const char* status_string(cublasStatus_t status) {
  return status == CUBLAS_STATUS_EXECUTION_FAILED ? "the fake was told to fail" : "the fake's status";
}

}  // namespace

const cuda::CublasLtApi& fake_cublaslt_api() {
  static const cuda::CublasLtApi api = [] {
    cuda::CublasLtApi a{};
    a.get_device = get_device;
    a.malloc = fake_malloc;
    a.free = fake_free;
    a.memset = fake_memset;
    a.device_synchronize = device_synchronize;
    a.cuda_error_name = cudaGetErrorName;  // the static runtime's tables: no GPU needed
    a.cuda_error_string = cudaGetErrorString;
    a.create = create;
    a.destroy = destroy;
    a.matmul_desc_create = desc_create;
    a.matmul_desc_destroy = desc_destroy;
    a.matmul_desc_set_attribute = desc_set;
    a.matrix_layout_create = layout_create;
    a.matrix_layout_destroy = layout_destroy;
    a.matrix_layout_set_attribute = layout_set;
    a.preference_create = preference_create;
    a.preference_destroy = preference_destroy;
    a.preference_set_attribute = preference_set;
    a.algo_get_heuristic = heuristic;
    a.matmul = matmul;
    a.status_name = status_name;
    a.status_string = status_string;
    return a;
  }();
  return api;
}

FakeCublasLt& fake_cublaslt() { return state; }

void fake_cublaslt_reset() {
  std::lock_guard lock(mutex);
  for (Handle* h : handles) delete h;
  for (Desc* d : descs) delete d;
  for (Layout* l : layouts) delete l;
  for (Preference* p : preferences) delete p;
  for (const auto& [pointer, bytes] : allocations) std::free(pointer);
  handles.clear();
  descs.clear();
  layouts.clear();
  preferences.clear();
  allocations.clear();
  state = FakeCublasLt{};
}

}  // namespace ds::test
