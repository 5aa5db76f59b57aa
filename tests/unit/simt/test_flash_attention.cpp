// The fused attention kernels (flash_attention.cuh) on the SIMT emulator: against the CPU's double
// reference within the 16-bit products' rounding, in both thread orders (bit for bit: no atomics, no
// missing barrier), at shapes that cut tiles (T not a multiple of 64, one row, several tiles) and head
// dimensions padded to 16, to 96 and to 128 (the dK/dV columns split between two blocks); Δ against its sums
// in double. Against the GEMM path: backend/test_backend_ops.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "cpu/attention.h"
#include "cuda/flash_attention.cuh"

using ds::amp::Half;
using ds::simt::LaunchOptions;
using ds::simt::Order;
using Floats = std::vector<float>;

namespace {

struct Shape {
  int64_t B, T, H, D;
};

struct Result {
  Floats out, stats, dqkv, delta;
};

// The four kernels as the launchers run them (the launchers' dispatch of the type and column tiles), in `order`.
Result run_kernels(Half type, const Shape& s, const Floats& qkv, const Floats& dout, Order order) {
  const int64_t n = s.B * s.T * s.H * s.D;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.D));
  Result r{Floats(n, NAN), Floats(2 * s.B * s.H * s.T, NAN), Floats(3 * n, NAN), Floats(s.B * s.H * s.T, NAN)};
  ds::cuda::with_flash_types(type, s.D, [&](auto half, auto tiles) {
    constexpr Half Elem = decltype(half)::value;
    constexpr int DT = decltype(tiles)::value;
    const ds::simt::dim3 grid(ds::cuda::flash_tiles(s.T), static_cast<unsigned>(s.B * s.H));
    LaunchOptions o;
    o.order = order;
    o.dynamic_shared_bytes = ds::cuda::flash_forward_shared_bytes(DT);
    ds::simt::launch(grid, ds::cuda::kFlashThreads, o, [&] {
      ds::cuda::flash_forward_kernel<Elem, DT>(qkv.data(), r.out.data(), r.stats.data(), s.T, s.H, s.D, scale);
    });
    o.dynamic_shared_bytes = 0;
    const int64_t rows = s.B * s.T * s.H;
    ds::simt::launch(ds::cuda::flash_delta_blocks(rows), ds::cuda::kFlashThreads, o, [&] {
      ds::cuda::flash_delta_kernel(r.out.data(), dout.data(), r.delta.data(), s.T, s.H, s.D, rows);
    });
    o.dynamic_shared_bytes = ds::cuda::flash_dq_shared_bytes(DT);
    ds::simt::launch(grid, ds::cuda::kFlashThreads, o, [&] {
      ds::cuda::flash_backward_dq_kernel<Elem, DT>(qkv.data(), r.stats.data(), dout.data(), r.delta.data(),
                                                   r.dqkv.data(), s.T, s.H, s.D, scale);
    });
    o.dynamic_shared_bytes = ds::cuda::flash_dkdv_shared_bytes(DT);
    ds::simt::launch({grid.x, grid.y, ds::cuda::kFlashDkdvSplits<DT>}, ds::cuda::kFlashThreads, o, [&] {
      ds::cuda::flash_backward_dkdv_kernel<Elem, DT>(qkv.data(), r.stats.data(), dout.data(), r.delta.data(),
                                                     r.dqkv.data(), s.T, s.H, s.D, scale);
    });
  });
  return r;
}

// max |got − want| relative to want's largest value.
double worst(const Floats& got, const Floats& want) {
  double d = 0.0, top = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    d = std::max(d, std::abs(double(got[i]) - want[i]));
    if (std::isnan(got[i])) d = INFINITY;
    top = std::max(top, std::abs(double(want[i])));
  }
  return d / top;
}

}  // namespace

TEST_CASE("flash attention on the emulator: within 16-bit rounding of the reference, both thread orders alike") {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const Shape s : {Shape{1, 1, 1, 1}, Shape{2, 37, 3, 16}, Shape{1, 70, 2, 24}, Shape{1, 64, 1, 40},
                        Shape{1, 130, 1, 64}, Shape{1, 70, 1, 80}, Shape{1, 65, 1, 128}, Shape{1, 130, 2, 80}}) {
    CAPTURE(s.B);
    CAPTURE(s.T);
    CAPTURE(s.H);
    CAPTURE(s.D);
    const int64_t n = s.B * s.T * s.H * s.D;
    Floats qkv(3 * n), dout(n);
    for (auto& v : qkv) v = 1.5f * normal(rng);  // scores of a few units: peaked rows and flat ones
    for (auto& v : dout) v = normal(rng);
    Floats ref_out(n), ref_stats(ds::cpu::attention_workspace_floats(s.B, s.T, s.H, s.D)), ref_dqkv(3 * n);
    ds::cpu::attention_forward_reference(qkv.data(), ref_out.data(), ref_stats.data(), s.B, s.T, s.H, s.D);
    ds::cpu::attention_backward_reference(qkv.data(), ref_stats.data(), dout.data(), ref_dqkv.data(), s.B, s.T, s.H,
                                          s.D);
    for (const Half type : {Half::BF16, Half::F16}) {
      CAPTURE((type == Half::BF16));
      const auto run = [&](Order order) { return run_kernels(type, s, qkv, dout, order); };
      const Result fwd = run(Order::forward), rev = run(Order::reverse);
      CHECK(fwd.out == rev.out);
      CHECK(fwd.stats == rev.stats);
      CHECK(fwd.dqkv == rev.dqkv);
      CHECK(fwd.delta == rev.delta);
      // Δ [B·H, T]: each row's dO·O over the kernel's own output, summed in fp32 (within 1e-6 of its terms' sum).
      for (int64_t b = 0; b < s.B; ++b)
        for (int64_t t = 0; t < s.T; ++t)
          for (int64_t h = 0; h < s.H; ++h) {
            double want = 0.0, size = 0.0;
            for (int64_t d = 0, at = ((b * s.T + t) * s.H + h) * s.D; d < s.D; ++d) {
              want += double(dout[at + d]) * fwd.out[at + d];
              size += std::abs(double(dout[at + d]) * fwd.out[at + d]);
            }
            REQUIRE(std::abs(fwd.delta[(b * s.H + h) * s.T + t] - want) <= 1e-6 * size + 1e-30);
          }
      // Q, K, V, dO, P and dS each rounded once (2^-9 relative in bf16, 2^-12 in fp16): a few roundings
      // of the largest value; a wrong index or a missed tile is of the order of the values.
      const double rounding = type == Half::BF16 ? 0x1p-9 : 0x1p-12;
      const double out_error = worst(fwd.out, ref_out), grad_error = worst(fwd.dqkv, ref_dqkv);
      CHECK(out_error < 8 * rounding);
      CHECK(grad_error < 8 * rounding);
      if (s.T > 1) CHECK(out_error > rounding / 64);  // the products did round
      // The stats as the reference keeps them: m + log l, the log-sum-exp of the row.
      double lse_error = 0.0;
      for (size_t r = 0; r < fwd.stats.size() / 2; ++r)
        lse_error = std::max(lse_error, std::abs(double(fwd.stats[2 * r] + fwd.stats[2 * r + 1]) -
                                                 (ref_stats[2 * r] + ref_stats[2 * r + 1])));
      CHECK(lse_error < 16 * rounding);
      MESSAGE("flash attention ", (type == Half::BF16 ? "bf16 " : "fp16 "), s.B, "x", s.T, "x", s.H, "x", s.D,
              ": output ", out_error, ", gradients ", grad_error, " of the reference's largest");
    }
  }
}
