// gemm's cuBLASLt path (cublaslt_gemm.h) on the fake cuBLASLt (fake_cublaslt.h) against the CPU
// reference (cpu/matmul.h matmul_reference): odd shapes, every transpose, f32, bf16 and f16, batches with
// broadcast operands, alpha and beta; beta 0 and k 0; the plan cache; per-device handles; errors naming
// cuBLASLt's status and the shape; the loader of libcublasLt.so.13.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "amp/half.h"
#include "cpu/matmul.h"
#include "cuda/cublaslt_gemm.h"
#include "cuda/gemm.h"
#include "fake_cublaslt.h"

using ds::cuda::CublasLtGemm;
using ds::cuda::GemmShape;
using ds::cuda::GemmType;
using ds::test::fake_cublaslt;

namespace {

// "Device" memory of the fake: values of `type` as bytes, and the same values as floats.
struct Buffer {
  GemmType type;
  std::vector<unsigned char> bytes;

  Buffer(GemmType t, const std::vector<float>& values) : type(t), bytes(values.size() * ds::cuda::element_bytes(t)) {
    for (size_t i = 0; i < values.size(); ++i) {
      if (type == GemmType::F32) std::memcpy(&bytes[4 * i], &values[i], 4);
      else {
        const uint16_t bits = type == GemmType::BF16 ? ds::amp::bf16_from_float(values[i])
                                                     : ds::amp::fp16_from_float(values[i]);
        std::memcpy(&bytes[2 * i], &bits, 2);
      }
    }
  }
  void* data() { return bytes.data(); }
  std::vector<float> values() const {
    std::vector<float> out(bytes.size() / ds::cuda::element_bytes(type));
    for (size_t i = 0; i < out.size(); ++i) {
      if (type == GemmType::F32) std::memcpy(&out[i], &bytes[4 * i], 4);
      else {
        uint16_t bits;
        std::memcpy(&bits, &bytes[2 * i], 2);
        out[i] = type == GemmType::BF16 ? ds::amp::bf16_to_float(bits) : ds::amp::fp16_to_float(bits);
      }
    }
    return out;
  }
};

std::vector<float> random_values(std::mt19937& rng, int64_t n) {
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = uniform(rng);
  return v;
}

// The elements an operand needs: `rows_cols` per entry, the last entry at (batch - 1)·stride.
int64_t extent(int64_t batch, int64_t stride, int64_t rows_cols) { return (batch - 1) * stride + rows_cols; }

// c (after gemm) against alpha·matmul_reference(a, b) + beta·c0 for every batch entry. Bound: 4·2^-24
// of |alpha|·Σ|a||b| + |beta·c0| (the fake sums in double and rounds once, the reference rounds its sum
// to fp32 first), plus one 16-bit ulp, 2^-7·|expected| in bf16 and 2^-10·|expected| in fp16, for a
// 16-bit c (both round nearly the same value to 16 bits). Elements of c between batch entries are untouched. Returns the worst share of the bound.
double check_against_reference(const GemmShape& s, const Buffer& a, const Buffer& b, const Buffer& c0, const Buffer& c,
                               float alpha, float beta) {
  const std::vector<float> av = a.values(), bv = b.values(), before = c0.values(), after = c.values();
  const int64_t mn = s.m * s.n;
  std::vector<float> product(static_cast<size_t>(mn)), scale(static_cast<size_t>(mn)), abs_a, abs_b;
  const double out_rtol = s.c_type == GemmType::BF16 ? 0x1p-7 : s.c_type == GemmType::F16 ? 0x1p-10 : 0.0;
  const double scaled = s.k == 0 ? 0.0 : alpha;  // k = 0: beta·c, whatever alpha
  double worst = 0;
  for (int64_t entry = 0; entry < s.batch; ++entry) {
    const float* ae = av.data() + entry * s.stride_a;
    const float* be = bv.data() + entry * s.stride_b;
    ds::cpu::matmul_reference(ae, be, product.data(), s.m, s.n, s.k, s.trans_a, s.trans_b, false);
    abs_a.assign(ae, ae + s.m * s.k);
    abs_b.assign(be, be + s.k * s.n);
    for (float& x : abs_a) x = std::fabs(x);
    for (float& x : abs_b) x = std::fabs(x);
    ds::cpu::matmul_reference(abs_a.data(), abs_b.data(), scale.data(), s.m, s.n, s.k, s.trans_a, s.trans_b, false);
    for (int64_t i = 0; i < mn; ++i) {
      const size_t at = static_cast<size_t>(entry * s.stride_c + i);
      const double old = beta == 0.0f ? 0.0 : static_cast<double>(beta) * before[at];
      const double expected = scaled * product[static_cast<size_t>(i)] + old;
      const double bound = 0x1p-22 * (std::fabs(scaled) * scale[static_cast<size_t>(i)] + std::fabs(old)) +
                           out_rtol * std::fabs(expected) + 1e-30;
      const double share = std::fabs(after[at] - expected) / bound;
      worst = std::max(worst, std::isnan(share) ? INFINITY : share);
    }
    if (entry + 1 < s.batch)
      for (int64_t i = mn; i < s.stride_c; ++i) {
        const size_t at = static_cast<size_t>(entry * s.stride_c + i);
        CHECK(after[at] == before[at]);
      }
  }
  return worst;
}

// One gemm on the fake with random operands; returns the worst share of the bound (at most 1 passes).
double run_case(CublasLtGemm& gemm, GemmShape s, float alpha, float beta, std::mt19937& rng) {
  const Buffer a(s.ab_type, random_values(rng, extent(s.batch, s.stride_a, s.m * s.k)));
  const Buffer b(s.ab_type, random_values(rng, extent(s.batch, s.stride_b, s.k * s.n)));
  const Buffer c0(s.c_type, random_values(rng, extent(s.batch, s.stride_c, s.m * s.n)));
  Buffer a_dev = a, b_dev = b, c = c0;
  gemm.run(a_dev.data(), b_dev.data(), c.data(), s, alpha, beta, nullptr);
  return check_against_reference(s, a, b, c0, c, alpha, beta);
}

void check_no_violations() {
  for (const std::string& v : fake_cublaslt().violations) {
    INFO(v);
    CHECK(false);
  }
}

void check_all_released() {
  CHECK(fake_cublaslt().live_handles == 0);
  CHECK(fake_cublaslt().live_descs == 0);
  CHECK(fake_cublaslt().live_layouts == 0);
  CHECK(fake_cublaslt().live_preferences == 0);
  CHECK(fake_cublaslt().live_allocations == 0);
}

struct Types {
  GemmType ab, c;
  const char* name;
};
constexpr Types kTypes[] = {
    {GemmType::F32, GemmType::F32, "f32"}, {GemmType::BF16, GemmType::F32, "bf16->f32"},
    {GemmType::BF16, GemmType::BF16, "bf16"}, {GemmType::F16, GemmType::F32, "f16->f32"},
    {GemmType::F16, GemmType::F16, "f16"}};

}  // namespace

TEST_CASE("gemm (fake cuBLASLt): odd shapes x every transpose x f32/bf16/f16 x batches and broadcasts match the CPU") {
  ds::test::fake_cublaslt_reset();
  std::mt19937 rng(7);
  {
    CublasLtGemm gemm(ds::test::fake_cublaslt_api());
    for (const Types& types : kTypes)
      for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {3, 17, 64}, {17, 65, 3}, {64, 3, 65},
                             {65, 64, 17}})
        for (bool trans_a : {false, true})
          for (bool trans_b : {false, true})
            for (int layout = 0; layout < 4; ++layout) {
              // batch 1; batch 3 with padding between entries; a broadcast; b broadcast
              const int64_t batch = layout == 0 ? 1 : 3, pad = layout == 1 ? 5 : 0;
              const GemmShape s{m, n, k, trans_a, trans_b, types.ab, types.c, batch,
                                layout == 2 ? 0 : m * k + pad, layout == 3 ? 0 : k * n + pad, m * n + pad};
              CAPTURE(s.describe());
              CHECK(run_case(gemm, s, 1.5f, -0.75f, rng) <= 1.0);
            }
    CHECK(fake_cublaslt().matmuls == std::size(kTypes) * 5 * 4 * 4);
  }
  check_no_violations();
  check_all_released();
}

TEST_CASE("gemm (fake cuBLASLt): beta 0 never reads c (NaN there is overwritten), alpha 1 gives the product") {
  ds::test::fake_cublaslt_reset();
  std::mt19937 rng(8);
  {
    CublasLtGemm gemm(ds::test::fake_cublaslt_api());
    for (const Types& types : kTypes) {
      INFO(types.name);
      const GemmShape s{17, 3, 65, false, true, types.ab, types.c, 2, 17 * 65, 3 * 65, 17 * 3};
      const Buffer a(s.ab_type, random_values(rng, 2 * 17 * 65)), b(s.ab_type, random_values(rng, 2 * 3 * 65));
      const Buffer nan_c(s.c_type, std::vector<float>(2 * 17 * 3, std::numeric_limits<float>::quiet_NaN()));
      Buffer a_dev = a, b_dev = b, c = nan_c;
      gemm.run(a_dev.data(), b_dev.data(), c.data(), s, 1.0f, 0.0f, nullptr);
      CHECK(check_against_reference(s, a, b, nan_c, c, 1.0f, 0.0f) <= 1.0);
    }
  }
  check_no_violations();
  check_all_released();
}

TEST_CASE("gemm (fake cuBLASLt): k 0 gives beta times c whatever alpha; m, n or batch 0 does nothing") {
  ds::test::fake_cublaslt_reset();
  std::mt19937 rng(9);
  {
    CublasLtGemm gemm(ds::test::fake_cublaslt_api());
    for (const Types& types : kTypes)
      for (int64_t m : {3, 70}) {  // 70: k = 0's zeros grow
        INFO(types.name);
        CAPTURE(m);
        const GemmShape s{m, 5, 0, true, false, types.ab, types.c, 3, 0, 0, m * 5 + 2};
        const Buffer c0(s.c_type, random_values(rng, extent(3, s.stride_c, m * 5)));
        Buffer a(s.ab_type, {}), b(s.ab_type, {}), c = c0;
        gemm.run(a.data(), b.data(), c.data(), s, std::numeric_limits<float>::infinity(), -0.5f, nullptr);
        CHECK(check_against_reference(s, a, b, c0, c, std::numeric_limits<float>::infinity(), -0.5f) <= 1.0);
      }
    CHECK(fake_cublaslt().live_allocations == 2);  // the workspace and k = 0's zeros
    const int matmuls = fake_cublaslt().matmuls;
    float c = 42.0f;
    for (const GemmShape& s : {GemmShape{0, 5, 4, false, false, GemmType::F32, GemmType::F32, 1, 0, 0, 0},
                               GemmShape{5, 0, 4, false, false, GemmType::F32, GemmType::F32, 1, 0, 0, 0},
                               GemmShape{5, 5, 4, false, false, GemmType::F32, GemmType::F32, 0, 0, 0, 0}})
      gemm.run(nullptr, nullptr, &c, s, 1.0f, 0.0f, nullptr);
    CHECK(fake_cublaslt().matmuls == matmuls);
    CHECK(c == 42.0f);
  }
  check_no_violations();
  check_all_released();
}

TEST_CASE("gemm (fake cuBLASLt): plans are cached by shape and alignment and the cache is bounded") {
  ds::test::fake_cublaslt_reset();
  std::mt19937 rng(10);
  {
    CublasLtGemm gemm(ds::test::fake_cublaslt_api());
    // Plans are keyed by the operands' alignments too: the same buffers each time. (c's stride, 564
    // floats, keeps every entry 16-byte aligned.)
    const GemmShape s{17, 33, 65, true, false, GemmType::BF16, GemmType::F32, 3, 17 * 65, 0, 564};
    Buffer a(s.ab_type, random_values(rng, 3 * 17 * 65)), b(s.ab_type, random_values(rng, 33 * 65));
    std::vector<float> c(3 * 564 + 64 + 1);
    gemm.run(a.data(), b.data(), c.data(), s, 1.0f, 0.5f, nullptr);
    CHECK(fake_cublaslt().descs_created == 1);
    CHECK(fake_cublaslt().layouts_created == 3);
    CHECK(fake_cublaslt().preferences_created == 1);
    CHECK(fake_cublaslt().live_preferences == 0);  // released once the heuristic has answered
    gemm.run(a.data(), b.data(), c.data(), s, -2.0f, 0.0f, nullptr);  // other alpha and beta: the same plan
    CHECK(fake_cublaslt().descs_created == 1);
    CHECK(fake_cublaslt().layouts_created == 3);
    CHECK(fake_cublaslt().heuristics == 1);
    CHECK(fake_cublaslt().matmuls == 2);
    CHECK(gemm.plan_count() == 1);

    // c 4 bytes past a 256-byte boundary: the heuristic is told, in a plan of its own.
    float* c_odd = c.data() + 1 + (64 - reinterpret_cast<uintptr_t>(c.data()) % 256 / 4);
    gemm.run(a.data(), b.data(), c_odd, s, 1.0f, 0.0f, nullptr);
    CHECK(gemm.plan_count() == 2);
    CHECK(fake_cublaslt().heuristics == 2);

    // Shapes that never repeat: the cache starts over at kMaxPlans instead of growing.
    std::vector<float> x(CublasLtGemm::kMaxPlans, 1.0f), y(CublasLtGemm::kMaxPlans);
    for (int64_t n = 1; n <= static_cast<int64_t>(CublasLtGemm::kMaxPlans); ++n)
      gemm.run(x.data(), x.data(), y.data(), GemmShape{1, n, 1, false, false, GemmType::F32, GemmType::F32, 1, 0, 0, 0},
               1.0f, 0.0f, nullptr);
    CHECK(gemm.plan_count() < CublasLtGemm::kMaxPlans);
    CHECK(fake_cublaslt().live_descs == gemm.plan_count());
    CHECK(fake_cublaslt().live_layouts == 3 * gemm.plan_count());
  }
  check_no_violations();
  check_all_released();
}

TEST_CASE("gemm (fake cuBLASLt): one handle and one workspace per device") {
  ds::test::fake_cublaslt_reset();
  std::mt19937 rng(11);
  {
    CublasLtGemm gemm(ds::test::fake_cublaslt_api());
    const GemmShape s{3, 17, 64, false, true, GemmType::F32, GemmType::F32, 1, 0, 0, 0};
    const Buffer a(s.ab_type, random_values(rng, 3 * 64)), b(s.ab_type, random_values(rng, 17 * 64)),
        c0(s.c_type, random_values(rng, 3 * 17));
    Buffer a_dev = a, b_dev = b, c = c0;  // the same buffers each time (plans are keyed by alignment too)
    for (int device : {0, 1, 0, 1}) {
      fake_cublaslt().device = device;
      gemm.run(a_dev.data(), b_dev.data(), c.data(), s, 1.0f, 0.0f, nullptr);
      CHECK(check_against_reference(s, a, b, c0, c, 1.0f, 0.0f) <= 1.0);
    }
    CHECK(fake_cublaslt().handles_created == 2);
    CHECK(fake_cublaslt().mallocs == 2);
    CHECK(gemm.plan_count() == 2);  // a plan per device (the heuristic runs on its handle)
  }
  check_no_violations();  // includes: no handle used on another device, the workspace the heuristic was told
  check_all_released();
}

TEST_CASE("gemm (fake cuBLASLt): a failing cublasLtMatmul is an error naming the status and the shape") {
  ds::test::fake_cublaslt_reset();
  std::mt19937 rng(12);
  {
    CublasLtGemm gemm(ds::test::fake_cublaslt_api());
    fake_cublaslt().matmul_status = CUBLAS_STATUS_EXECUTION_FAILED;
    const GemmShape s{17, 33, 65, true, false, GemmType::BF16, GemmType::F32, 3, 17 * 65, 0, 17 * 33};
    std::string message;
    try {
      run_case(gemm, s, 1.0f, 0.0f, rng);
    } catch (const std::runtime_error& e) {
      message = e.what();
    }
    CHECK(message ==
          "cuda: gemm: cublasLtMatmul: CUBLAS_STATUS_EXECUTION_FAILED (the fake was told to fail) for m=17 n=33 k=65 "
          "trans_a=1 trans_b=0 bf16->f32 batch=3 strides=1105,0,561");
    fake_cublaslt().matmul_status = CUBLAS_STATUS_SUCCESS;
    CHECK(run_case(gemm, s, 1.0f, 0.0f, rng) <= 1.0);  // the plan stays usable
  }
  check_no_violations();
  check_all_released();
}

TEST_CASE("gemm (fake cuBLASLt): no algorithm from the heuristic is an error naming the shape; nothing leaks") {
  ds::test::fake_cublaslt_reset();
  std::mt19937 rng(13);
  {
    CublasLtGemm gemm(ds::test::fake_cublaslt_api());
    fake_cublaslt().no_algorithm = true;
    const GemmShape s{64, 3, 65, false, false, GemmType::BF16, GemmType::BF16, 1, 0, 0, 0};
    CHECK_THROWS_WITH_AS(run_case(gemm, s, 1.0f, 0.0f, rng),
                         "cuda: gemm: cublasLtMatmulAlgoGetHeuristic: no algorithm for m=64 n=3 k=65 trans_a=0 "
                         "trans_b=0 bf16->bf16 batch=1 strides=0,0,0",
                         std::runtime_error);
    CHECK(gemm.plan_count() == 0);
    CHECK(fake_cublaslt().live_descs == 0);
    CHECK(fake_cublaslt().live_layouts == 0);
    CHECK(fake_cublaslt().live_preferences == 0);
    fake_cublaslt().no_algorithm = false;
    CHECK(run_case(gemm, s, 1.0f, 0.0f, rng) <= 1.0);
  }
  check_no_violations();
  check_all_released();
}

TEST_CASE("gemm: invalid arguments are std::invalid_argument naming the value and the shape") {
  ds::test::fake_cublaslt_reset();
  CublasLtGemm fake(ds::test::fake_cublaslt_api());
  const struct {
    GemmShape shape;
    const char* message;
  } cases[] = {
      {{-1, 2, 3, false, false, GemmType::F32, GemmType::F32, 1, 0, 0, 0},
       "cuda: gemm: size -1 is outside [0, 2^31) (m=-1 n=2 k=3 trans_a=0 trans_b=0 f32->f32 batch=1 strides=0,0,0)"},
      {{1, 2, 3, false, false, GemmType::F32, GemmType::F32, int64_t{1} << 31, 6, 6, 6},
       "cuda: gemm: size 2147483648 is outside [0, 2^31) (m=1 n=2 k=3 trans_a=0 trans_b=0 f32->f32 "
       "batch=2147483648 strides=6,6,6)"},
      {{1, 2, 3, false, true, GemmType::BF16, GemmType::F32, 2, 3, -3, 2},
       "cuda: gemm: stride -3 is negative (m=1 n=2 k=3 trans_a=0 trans_b=1 bf16->f32 batch=2 strides=3,-3,2)"},
      {{1, 2, 3, false, false, GemmType::F32, GemmType::BF16, 1, 0, 0, 0},
       "cuda: gemm: a bf16 c needs bf16 inputs (m=1 n=2 k=3 trans_a=0 trans_b=0 f32->bf16 batch=1 strides=0,0,0)"},
      {{1, 2, 3, false, false, GemmType::BF16, GemmType::F16, 1, 0, 0, 0},
       "cuda: gemm: a f16 c needs f16 inputs (m=1 n=2 k=3 trans_a=0 trans_b=0 bf16->f16 batch=1 strides=0,0,0)"},
      {{4, 2, 3, false, false, GemmType::F32, GemmType::F32, 2, 12, 6, 7},
       "cuda: gemm: batch entries of c overlap (stride_c 7 < m*n 8) (m=4 n=2 k=3 trans_a=0 trans_b=0 f32->f32 "
       "batch=2 strides=12,6,7)"},
  };
  for (const auto& [s, message] : cases) {
    CHECK_THROWS_WITH_AS(fake.run(nullptr, nullptr, nullptr, s, 1.0f, 0.0f, nullptr), message, std::invalid_argument);
    // The real entry point checks before it loads cuBLASLt: the same error on any machine.
    CHECK_THROWS_WITH_AS(ds::cuda::gemm(nullptr, nullptr, nullptr, s.m, s.n, s.k, s.trans_a, s.trans_b, s.ab_type,
                                        s.c_type, 1.0f, 0.0f, s.batch, s.stride_a, s.stride_b, s.stride_c, nullptr),
                         message, std::invalid_argument);
  }
  CHECK(fake_cublaslt().handles_created == 0);
}

TEST_CASE("cuBLASLt loader: a library that cannot be opened is an error naming every path tried") {
  std::string message;
  try {
    ds::cuda::load_cublaslt_api({"libcublasLt-absent.so.13", "/nonexistent/libcublasLt.so.13"});
  } catch (const std::runtime_error& e) {
    message = e.what();
  }
  INFO(message);
  CHECK(message.starts_with("cuda: gemm: cannot load cuBLASLt (tried libcublasLt-absent.so.13: "));
  CHECK(message.find("; /nonexistent/libcublasLt.so.13: ") != std::string::npos);
  CHECK(message.ends_with("install the CUDA 13 toolkit's cuBLAS or add its directory to LD_LIBRARY_PATH"));
}

TEST_CASE("cuBLASLt loader: the toolkit's libcublasLt.so.13 has every entry point the table names") {
  const std::string path = "/usr/local/cuda/lib64/libcublasLt.so.13";
  if (!std::filesystem::exists(path)) {
    MESSAGE("skipped: no " << path << " on this machine");
    return;
  }
  const ds::cuda::CublasLtApi api = ds::cuda::load_cublaslt_api({path});
  CHECK(reinterpret_cast<void*>(api.matmul) != nullptr);
  CHECK(std::string(api.status_name(CUBLAS_STATUS_NOT_SUPPORTED)) == "CUBLAS_STATUS_NOT_SUPPORTED");
  CHECK(std::string(api.status_string(CUBLAS_STATUS_NOT_SUPPORTED)) != "");
}
