// matmul_half: 16-bit products on oneDNN's bf16 kernels, or sgemm on rounded operands (matmul_half.h).
#include "cpu/matmul_half.h"

#include <omp.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "cpu/convert.h"
#include "cpu/matmul.h"
#include "cpu/parallel.h"

namespace ds::cpu {
namespace {

using dnnl::memory;

// oneDNN's calls run on the calling thread alone (it reads the OpenMP thread count when a kernel is made
// and when it runs): the threads are ours, one block each.
class OneThread {
 public:
  OneThread() : saved_(omp_get_max_threads()) { omp_set_num_threads(1); }
  ~OneThread() { omp_set_num_threads(saved_); }
  OneThread(const OneThread&) = delete;
  OneThread& operator=(const OneThread&) = delete;

 private:
  int saved_;
};

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// A dense bf16 operand [rows, cols] as stored: row-major, or transposed (column-major).
memory::desc operand(memory::data_type type, int64_t rows, int64_t cols, bool transposed) {
  return memory::desc({rows, cols}, type, transposed ? memory::dims{1, rows} : memory::dims{cols, 1});
}

// One oneDNN matmul, C[m,n] (=, or += with `sum`) A[m,k]·B[k,n], bf16 operands, fp32 C (dense rows).
struct Kernel {
  dnnl::matmul op;
  memory::desc a, b, c, scratch;
  std::string name;
};

// The kernels made so far, by shape. Bounded: sampling with a growing context asks for a new shape per length,
// and each kernel holds its JIT code, so when full the cache starts again (callers keep theirs alive).
std::mutex kernels_mutex;
std::map<std::tuple<int64_t, int64_t, int64_t, bool, bool, bool>, std::shared_ptr<const Kernel>> kernels_made;

std::shared_ptr<const Kernel> kernel(int64_t m, int64_t n, int64_t k, bool ta, bool tb, bool sum) {
  const std::lock_guard<std::mutex> lock(kernels_mutex);
  const auto key = std::make_tuple(m, n, k, ta, tb, sum);
  if (kernels_made.size() >= kMatmulHalfKernelsKept && kernels_made.count(key) == 0) kernels_made.clear();
  std::shared_ptr<const Kernel>& slot = kernels_made[key];
  if (!slot) {
    const OneThread one;
    const memory::desc a = operand(memory::data_type::bf16, m, k, ta), b = operand(memory::data_type::bf16, k, n, tb),
                       c = operand(memory::data_type::f32, m, n, false);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (sum) {
      dnnl::post_ops post;
      post.append_sum(1.0f);
      attr.set_post_ops(post);
    }
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, cpu_engine());
    slot = std::make_shared<const Kernel>(Kernel{dnnl::matmul(pd), a, b, c, pd.scratchpad_desc(), pd.impl_info_str()});
  }
  return slot;
}

// `k` from kernel(): its shared_ptr, a temporary of the caller's full expression, keeps it alive until run returns.
void run(const Kernel& k, const uint16_t* a, const uint16_t* b, float* c) {
  const OneThread one;
  thread_local std::vector<char> scratch;
  thread_local dnnl::stream stream(cpu_engine());
  scratch.resize(std::max<size_t>(scratch.size(), k.scratch.get_size()));
  memory ma(k.a, cpu_engine(), const_cast<uint16_t*>(a)), mb(k.b, cpu_engine(), const_cast<uint16_t*>(b)),
      mc(k.c, cpu_engine(), c), ms(k.scratch, cpu_engine(), scratch.data());
  k.op.execute(stream, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}, {DNNL_ARG_SCRATCHPAD, ms}});
  stream.wait();
}

// What oneDNN runs bf16 products with here, "" unless it is a kernel for bf16 units (AMX, AVX-512-BF16): on other
// CPUs oneDNN emulates bf16 arithmetic or runs its reference loops, slower than sgemm on the rounded values.
const std::string& onednn_bf16() {
  static const std::string name = [] {
    try {
      const std::string impl = kernel(64, 64, 64, false, false, false)->name;
      return impl.find("amx") != std::string::npos || impl.find("_bf16") != std::string::npos ? impl : std::string();
    } catch (const dnnl::error&) {
      return std::string();
    }
  }();
  return name;
}

// Columns [c0, c1) of a row-major [rows, cols] fp32 matrix, rounded into dense 16 bits [rows, c1 - c0].
void round_columns(amp::Half type, const float* x, int64_t rows, int64_t cols, int64_t c0, int64_t c1,
                   uint16_t* out) {
  for (int64_t r = 0; r < rows; ++r)
    from_float(type, x + r * cols + c0, out + r * (c1 - c0), static_cast<size_t>(c1 - c0));
}

// fp16, and bf16 where oneDNN has no bf16 kernels: the rounded values multiplied by sgemm.
void matmul_rounded(amp::Half type, const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K,
                    bool trans_a, bool trans_b, bool accumulate) {
  const amp::Storage storage = type == amp::Half::BF16 ? amp::Storage::BF16 : amp::Storage::F16;
  // Kept, and only grown (resizing down and up again would zero-fill the difference): a fresh buffer per
  // product would fault its pages in each time.
  thread_local std::vector<float> a, b;
  const auto na = static_cast<size_t>(M * K), nb = static_cast<size_t>(K * N);
  if (a.size() < na) a.resize(na);
  if (b.size() < nb) b.resize(nb);
  round_to(storage, A, a.data(), na);  // rounded as copied: one pass over each operand
  round_to(storage, B, b.data(), nb);
  matmul(a.data(), b.data(), C, M, N, K, trans_a, trans_b, accumulate);
}

}  // namespace

size_t matmul_half_kernels_cached() {
  const std::lock_guard<std::mutex> lock(kernels_mutex);
  return kernels_made.size();
}

std::string matmul_bf16_kernel() {
  const std::string& name = onednn_bf16();
  return name.empty() ? "sgemm on rounded operands" : name;
}

bool bf16_units() { return !onednn_bf16().empty(); }

std::string onednn_version() {
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) + " (" +
         (v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "not OpenMP") + ")";
}

void matmul_half(amp::Half type, const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K,
                 bool trans_a, bool trans_b, bool accumulate) {
  check_matmul_sizes("matmul_half", M, N, K);
  if (M == 0 || N == 0 || K == 0 || type == amp::Half::F16 || !bf16_units()) {
    matmul_rounded(type, A, B, C, M, N, K, trans_a, trans_b, accumulate);
    return;
  }
  const MatmulSplit split = matmul_split(M, N, K);  // matmul's blocks, each one single-threaded oneDNN call
  const bool by_rows = split.by_rows;
  // The operand every block reads, rounded whole in its stored layout.
  thread_local std::vector<uint16_t> shared;
  shared.resize(static_cast<size_t>(by_rows ? K * N : M * K));
  from_float(type, by_rows ? B : A, shared.data(), shared.size());
  const uint16_t* whole = shared.data();  // the blocks' threads have thread_locals of their own
  if (!split.split) {
    thread_local std::vector<uint16_t> a;
    a.resize(static_cast<size_t>(M * K));
    from_float(type, A, a.data(), a.size());
    run(*kernel(M, N, K, trans_a, trans_b, accumulate), a.data(), whole, C);
    return;
  }
  const int64_t side = by_rows ? M : N, block = split.block;
  // Each block rounds its own rows of A (or columns of B) into a dense operand of the stored orientation.
  parallel_for(split.blocks, 1, [&](int64_t b0, int64_t b1) {
    thread_local std::vector<uint16_t> part;
    thread_local std::vector<float> product;
    for (int64_t i = b0; i < b1; ++i) {
      const int64_t lo = i * block, hi = std::min(side, lo + block), width = hi - lo;
      part.resize(static_cast<size_t>(width * K));
      if (by_rows) {  // C's rows [lo, hi): A's rows, stored [width, K] or transposed [K, width]
        if (trans_a) round_columns(type, A, K, M, lo, hi, part.data());
        else from_float(type, A + lo * K, part.data(), part.size());
        run(*kernel(width, N, K, trans_a, trans_b, accumulate), part.data(), whole, C + lo * N);
        continue;
      }
      // C's columns [lo, hi): B's columns, stored [K, width] or transposed [width, K], into a dense product.
      if (trans_b) from_float(type, B + lo * K, part.data(), part.size());
      else round_columns(type, B, K, N, lo, hi, part.data());
      product.resize(static_cast<size_t>(M * width));
      run(*kernel(M, width, K, trans_a, trans_b, false), whole, part.data(), product.data());
      for (int64_t r = 0; r < M; ++r) {
        float* row = C + r * N + lo;
        const float* from = product.data() + r * width;
        for (int64_t j = 0; j < width; ++j) row[j] = accumulate ? row[j] + from[j] : from[j];
      }
    }
  });
}

void matmul_half_reference(amp::Half type, const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K,
                           bool trans_a, bool trans_b, bool accumulate) {
  check_matmul_sizes("matmul_half", M, N, K);
  std::vector<float> a(A, A + M * K), b(B, B + K * N);
  for (float& x : a) x = amp::half_to_float(type, amp::half_from_float(type, x));
  for (float& x : b) x = amp::half_to_float(type, amp::half_from_float(type, x));
  matmul_reference(a.data(), b.data(), C, M, N, K, trans_a, trans_b, accumulate);
}

}  // namespace ds::cpu
