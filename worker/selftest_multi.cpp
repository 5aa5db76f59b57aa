// The self-test's checks of the multi-tensor launchers (selftest_multi.h): each launch over every tensor
// against the one-tensor launchers over each, from the same inputs in two sets of device arrays.
#include "selftest_multi.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "amp/half.h"
#include "cpu/adam_element.h"
#include "cpu/convert.h"
#include "cpu/sgd_element.h"
#include "cuda/launch.h"
#include "device_array.h"

namespace ds {
namespace {

// Odd sizes: none, one element, less than a vector, one block's worth, just over it, many blocks. The gaps
// after each tensor leave the next one off 16-byte alignment.
constexpr int64_t kSizes[] = {0, 1, 37, 4096, 4099, 65'539};
constexpr int64_t kGap = 3;

struct Layout {
  std::vector<int64_t> starts;  // each tensor's first element
  int64_t total = 0;            // the elements of the array holding them, gaps included
};

Layout layout() {
  Layout l;
  for (int64_t n : kSizes) {
    l.starts.push_back(l.total);
    l.total += n + kGap;
  }
  return l;
}

std::vector<float> normals(std::mt19937& rng, int64_t n) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = normal(rng);
  return x;
}

// The elements whose bits differ (the inputs hold no NaN).
template <class T>
size_t differing(const std::vector<T>& a, const std::vector<T>& b) {
  size_t d = 0;
  for (size_t i = 0; i < a.size(); ++i) d += std::memcmp(&a[i], &b[i], sizeof(T)) != 0;
  return d;
}

// The segments' table in device memory, as the CUDA backend keeps it.
template <class Segment>
DeviceArray<std::byte> device_table(const std::vector<Segment>& segments) {
  return DeviceArray<std::byte>(cuda::segment_table(segments.data(), segments.size()));
}

size_t adam(bool decoupled, std::mt19937& rng) {
  const Layout l = layout();
  const auto p = normals(rng, l.total), g = normals(rng, l.total), m = normals(rng, l.total);
  auto v = normals(rng, l.total);
  for (auto& x : v) x = std::fabs(x);
  const cpu::AdamArgs args{0.9f, 0.999f, 1e-8f, 0.01f, -1e-3f, 1.0f, -1e-5f};
  DeviceArray<float> d_g(g), p1(p), m1(m), v1(v), p2(p), m2(m), v2(v);
  std::vector<cuda::AdamSegment> segments;
  for (size_t s = 0; s < l.starts.size(); ++s) {
    const int64_t at = l.starts[s], n = kSizes[s];
    cuda::adam_step(p1.get() + at, d_g.get() + at, m1.get() + at, v1.get() + at, n, args, decoupled, nullptr);
    segments.push_back({p2.get() + at, d_g.get() + at, m2.get() + at, v2.get() + at, n});
  }
  const auto table = device_table(segments);
  cuda::adam_steps(segments.data(), segments.size(), args, decoupled, table.get(), nullptr);
  return differing(p1.to_host(), p2.to_host()) + differing(m1.to_host(), m2.to_host()) +
         differing(v1.to_host(), v2.to_host());
}

// With momentum, dampening and Nesterov, a later step's (the buffer already holds values).
size_t sgd(std::mt19937& rng) {
  const Layout l = layout();
  const auto p = normals(rng, l.total), g = normals(rng, l.total), buf = normals(rng, l.total);
  const cpu::SgdArgs args{0.05f, 0.01f, 0.9f, 0.25f, true, false};
  DeviceArray<float> d_g(g), p1(p), b1(buf), p2(p), b2(buf);
  std::vector<cuda::SgdSegment> segments;
  for (size_t s = 0; s < l.starts.size(); ++s) {
    const int64_t at = l.starts[s], n = kSizes[s];
    cuda::sgd_step(p1.get() + at, d_g.get() + at, b1.get() + at, n, args, nullptr);
    segments.push_back({p2.get() + at, d_g.get() + at, b2.get() + at, n});
  }
  const auto table = device_table(segments);
  cuda::sgd_steps(segments.data(), segments.size(), args, table.get(), nullptr);
  return differing(p1.to_host(), p2.to_host()) + differing(b1.to_host(), b2.to_host());
}

size_t scale(std::mt19937& rng) {
  const Layout l = layout();
  const auto x = normals(rng, l.total);
  const double factor = 3.0 / 65536.0;
  DeviceArray<float> x1(x), x2(x);
  std::vector<cuda::ScaleSegment> segments;
  for (size_t s = 0; s < l.starts.size(); ++s) {
    cuda::scale(x1.get() + l.starts[s], kSizes[s], factor, nullptr);
    segments.push_back({x2.get() + l.starts[s], kSizes[s]});
  }
  const auto table = device_table(segments);
  cuda::scale_multi(segments.data(), segments.size(), factor, table.get(), nullptr);
  return differing(x1.to_host(), x2.to_host());
}

// Into another array (the master's values rounded into the parameters), against rounding a copy in place.
size_t round(amp::Half type, std::mt19937& rng) {
  const Layout l = layout();
  const auto x = normals(rng, l.total);
  DeviceArray<float> src(x), in_place(x), into(x);
  std::vector<cuda::RoundSegment> segments;
  for (size_t s = 0; s < l.starts.size(); ++s) {
    cuda::round_to_half(type, in_place.get() + l.starts[s], kSizes[s], nullptr);
    segments.push_back({into.get() + l.starts[s], src.get() + l.starts[s], kSizes[s]});
  }
  const auto table = device_table(segments);
  cuda::round_copies(type, segments.data(), segments.size(), table.get(), nullptr);
  return differing(in_place.to_host(), into.to_host());
}

// The exchanges' moves between tensors and a flat buffer: fp32 copies, narrowings, widenings.
size_t moves(amp::Half type, std::mt19937& rng) {
  const Layout l = layout();
  const auto x = normals(rng, l.total), before = normals(rng, l.total);
  std::vector<uint16_t> halves(x.size()), before_halves(x.size(), 0x7777);
  cpu::from_float(type, x.data(), halves.data(), x.size());
  DeviceArray<float> d_x(x), copies1(before), copies2(before), widened1(before), widened2(before);
  DeviceArray<uint16_t> d_halves(halves), narrowed1(before_halves), narrowed2(before_halves);
  std::vector<cuda::MoveSegment> copy, narrow, widen;
  for (size_t s = 0; s < l.starts.size(); ++s) {
    const int64_t at = l.starts[s], n = kSizes[s];
    cuda::copy_on_device(copies1.get() + at, d_x.get() + at, static_cast<size_t>(n) * sizeof(float), nullptr);
    cuda::float_to_half(type, d_x.get() + at, narrowed1.get() + at, n, nullptr);
    cuda::half_to_float(type, d_halves.get() + at, widened1.get() + at, n, nullptr);
    copy.push_back({copies2.get() + at, d_x.get() + at, n});
    narrow.push_back({narrowed2.get() + at, d_x.get() + at, n});
    widen.push_back({widened2.get() + at, d_halves.get() + at, n});
  }
  const auto copy_table = device_table(copy), narrow_table = device_table(narrow), widen_table = device_table(widen);
  cuda::move_multi(cuda::MoveKind::copy, type, copy.data(), copy.size(), copy_table.get(), nullptr);
  cuda::move_multi(cuda::MoveKind::narrow, type, narrow.data(), narrow.size(), narrow_table.get(), nullptr);
  cuda::move_multi(cuda::MoveKind::widen, type, widen.data(), widen.size(), widen_table.get(), nullptr);
  return differing(copies1.to_host(), copies2.to_host()) + differing(narrowed1.to_host(), narrowed2.to_host()) +
         differing(widened1.to_host(), widened2.to_host());
}

}  // namespace

const char* multi_tensor_name(MultiTensorOp op) {
  switch (op) {
    case MultiTensorOp::adam: return "adam_steps";
    case MultiTensorOp::adamw: return "adamw_steps";
    case MultiTensorOp::sgd: return "sgd_steps";
    case MultiTensorOp::scale: return "scale_multi";
    case MultiTensorOp::round_bf16: return "round_copies_bf16";
    case MultiTensorOp::round_fp16: return "round_copies_fp16";
    case MultiTensorOp::moves_bf16: return "move_multi_bf16";
    case MultiTensorOp::moves_fp16: return "move_multi_fp16";
  }
  return "?";
}

const char* multi_tensor_shape() { return "0+1+37+4096+4099+65539"; }

size_t multi_tensor_differing(MultiTensorOp op, std::mt19937& rng) {
  switch (op) {
    case MultiTensorOp::adam: return adam(false, rng);
    case MultiTensorOp::adamw: return adam(true, rng);
    case MultiTensorOp::sgd: return sgd(rng);
    case MultiTensorOp::scale: return scale(rng);
    case MultiTensorOp::round_bf16: return round(amp::Half::BF16, rng);
    case MultiTensorOp::round_fp16: return round(amp::Half::F16, rng);
    case MultiTensorOp::moves_bf16: return moves(amp::Half::BF16, rng);
    case MultiTensorOp::moves_fp16: return moves(amp::Half::F16, rng);
  }
  return 0;
}

double multi_tensor_sum_squares_error(std::mt19937& rng) {
  const Layout l = layout();
  auto x = normals(rng, l.total);
  x[static_cast<size_t>(l.starts.back() + 100)] = 3e19f;  // its square is beyond fp32's range
  std::vector<cuda::SquaresSegment> segments;
  DeviceArray<float> d_x(x);
  double want = 0.0;
  for (size_t s = 0; s < l.starts.size(); ++s) {
    segments.push_back({d_x.get() + l.starts[s], kSizes[s]});
    for (int64_t i = l.starts[s]; i < l.starts[s] + kSizes[s]; ++i) want += static_cast<double>(x[i]) * x[i];
  }
  const auto table = device_table(segments);
  DeviceArray<double> total(std::vector<double>{0.0});
  DeviceArray<double> partial(std::vector<double>(cuda::segment_block_count(segments.data(), segments.size()), 0.0));
  cuda::sum_squares_multi(segments.data(), segments.size(), total.get(), table.get(), partial.get(), nullptr);
  const double got = total.to_host()[0];
  return std::isnan(got) ? INFINITY : std::fabs(got - want) / want;
}

}  // namespace ds
