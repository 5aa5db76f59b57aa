// Bulk storage operations (cpu/convert.h): fp32 buffers behave exactly as float loops; 16-bit buffers
// compute in fp32 and round once per store; the threaded loops give their references' bits at any
// thread count, and sum_squares' blocks make its sum independent of the threads.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "../amp/half_test_util.h"
#include "amp/half.h"
#include "amp/storage.h"
#include "cpu/convert.h"
#include "cpu/parallel.h"
#include "kernel_test_util.h"

using namespace ds::amp;
using ds::test::from_bits;
using ds::test::is_nan16;
using namespace ds::cpu;

TEST_CASE("storage: fp32 operations are the plain float loops") {
  std::vector<float> a = {1.5f, -2.0f, 0.1f}, b = {0.25f, 4.0f, 0.2f};
  add(Storage::F32, b.data(), a.data(), 3);
  CHECK(a == std::vector<float>{1.75f, 2.0f, 0.1f + 0.2f});
  scale(Storage::F32, a.data(), 3, 0.5);
  CHECK(a[0] == static_cast<float>(1.75f * 0.5));
  CHECK(sum_squares(Storage::F32, b.data(), 3) == 0.0625 + 16.0 + double(0.2f) * double(0.2f));
  std::vector<float> r = {0.1f};
  round_to(Storage::F32, r.data(), 1);
  CHECK(r[0] == 0.1f);
}

TEST_CASE("storage: 16-bit operations round once per store") {
  for (Storage s : {Storage::F16, Storage::BF16}) {
    const Half h = s == Storage::F16 ? Half::F16 : Half::BF16;
    CHECK(storage_bytes(s) == 2);
    const std::vector<float> x = {1.0f, 0.3f, -7.25f, 1000.5f};
    std::vector<uint16_t> a(4), b(4);
    from_float(s, x.data(), a.data(), 4);
    for (size_t i = 0; i < 4; ++i) CHECK(a[i] == half_from_float(h, x[i]));
    std::vector<float> back(4);
    to_float(s, a.data(), back.data(), 4);
    for (size_t i = 0; i < 4; ++i) CHECK(back[i] == half_to_float(h, a[i]));
    b = a;
    add(s, a.data(), b.data(), 4);  // doubling is exact
    for (size_t i = 0; i < 4; ++i) CHECK(half_to_float(h, b[i]) == 2 * back[i]);
    add_float(s, x.data(), a.data(), 4);
    for (size_t i = 0; i < 4; ++i) CHECK(a[i] == half_from_float(h, back[i] + x[i]));
    scale(s, b.data(), 4, 0.25);
    for (size_t i = 0; i < 4; ++i) CHECK(half_to_float(h, b[i]) == half_to_float(h, half_from_float(h, 0.5f * back[i])));
    double want = 0;
    for (float v : back) want += double(v) * v;
    std::vector<uint16_t> c(4);
    from_float(s, back.data(), c.data(), 4);
    CHECK(sum_squares(s, c.data(), 4) == want);
    std::vector<float> r = {0.1f, 3.0f};
    round_to(s, r.data(), 2);
    CHECK(r[0] == half_to_float(h, half_from_float(h, 0.1f)));
    CHECK(r[1] == 3.0f);
  }
  std::vector<uint16_t> big(1);
  const float huge = 60000.0f;
  from_float(Storage::F16, &huge, big.data(), 1);
  add_float(Storage::F16, &huge, big.data(), 1);  // 120000 overflows fp16
  CHECK(std::isinf(fp16_to_float(big[0])));
}

TEST_CASE("storage: the threaded operations give their references' bits at 1-3 threads") {
  // Sizes across the threads' split (16384 elements per thread at least) and sum_squares' blocks.
  const int saved = threads();
  ds::test::Rng rng(11);
  for (Storage s : {Storage::F32, Storage::F16, Storage::BF16})
    for (size_t n : {size_t{1}, size_t{300}, size_t{70001}, size_t{3 * kSumBlock + 5}}) {
      CAPTURE(static_cast<int>(s));
      CAPTURE(n);
      const size_t bytes = n * storage_bytes(s);
      const std::vector<float> x = ds::test::random_vec(rng, n, -300.0f, 300.0f), y = ds::test::random_vec(rng, n);
      std::vector<std::byte> a(bytes), b(bytes);
      from_float_reference(s, x.data(), a.data(), n);
      from_float_reference(s, y.data(), b.data(), n);
      std::vector<float> wide_ref(n), rounded_ref = x;
      to_float_reference(s, a.data(), wide_ref.data(), n);
      round_to_reference(s, rounded_ref.data(), n);
      auto added_ref = b, sum_ref = b, scaled_ref = a;
      add_float_reference(s, x.data(), added_ref.data(), n);
      add_reference(s, a.data(), sum_ref.data(), n);
      scale_reference(s, scaled_ref.data(), n, 1.0 / 3.0);
      const double squares_ref = sum_squares_reference(s, a.data(), n, 0.5);
      double squares_one_thread = 0;
      for (int t : {1, 2, 3}) {
        CAPTURE(t);
        set_threads(t);
        std::vector<std::byte> stored(bytes);
        from_float(s, x.data(), stored.data(), n);
        CHECK(stored == a);
        std::vector<float> wide(n), rounded = x;
        to_float(s, a.data(), wide.data(), n);
        CHECK(ds::test::bit_identical(wide, wide_ref));
        round_to(s, rounded.data(), n);
        CHECK(ds::test::bit_identical(rounded, rounded_ref));
        std::vector<float> copied(n, NAN);
        round_to(s, x.data(), copied.data(), n);  // rounded as copied
        CHECK(ds::test::bit_identical(copied, rounded_ref));
        auto added = b, sum = b, scaled = a;
        add_float(s, x.data(), added.data(), n);
        CHECK(added == added_ref);
        add(s, a.data(), sum.data(), n);
        CHECK(sum == sum_ref);
        scale(s, scaled.data(), n, 1.0 / 3.0);
        CHECK(scaled == scaled_ref);
        const double squares = sum_squares(s, a.data(), n, 0.5);
        if (t == 1) squares_one_thread = squares;
        CHECK(squares == squares_one_thread);  // the same bits at any thread count
        // Blocks change only the order of additions: within a few roundings of the sum in order.
        CHECK(std::fabs(squares - squares_ref) <= 1e-12 * squares_ref);
        if (n <= kSumBlock) CHECK(squares == squares_ref);  // one block: the order itself
      }
    }
  set_threads(saved);
}

TEST_CASE("half: bulk conversion and accumulation") {
  std::vector<float> x = {1.0f, -2.5f, 1e-3f, 70000.0f};
  std::vector<uint16_t> h(4);
  from_float(Half::F16, x.data(), h.data(), 4);
  std::vector<float> back(4);
  to_float(Half::F16, h.data(), back.data(), 4);
  CHECK(back[0] == 1.0f);
  CHECK(back[1] == -2.5f);
  CHECK(std::isinf(back[3]));
  std::vector<float> add = {1.0f, 0.5f, 0.0f, 0.0f};
  accumulate(Half::F16, add.data(), h.data(), 4);
  to_float(Half::F16, h.data(), back.data(), 4);
  CHECK(back[0] == 2.0f);
  CHECK(back[1] == -2.0f);
}

// The bulk paths (F16C eight at a time for fp16, where the CPU has it) give exactly the scalar
// conversions: every 16-bit pattern to fp32, and to 16 bits every pattern's value, the values half
// an ulp either side (ties and near-ties) and random fp32 bit patterns; odd lengths cover the tails.
TEST_CASE("half: bulk conversions equal the scalar ones bit for bit") {
  std::mt19937 rng(11);
  for (Half t : {Half::F16, Half::BF16}) {
    CAPTURE(t == Half::F16 ? "fp16" : "bf16");
    std::vector<uint16_t> all(65536);
    for (uint32_t b = 0; b < 65536; ++b) all[b] = static_cast<uint16_t>(b);
    std::vector<float> floats(all.size());
    to_float(t, all.data(), floats.data(), all.size());
    for (uint32_t b = 0; b < 65536; ++b) {
      const float scalar = half_to_float(t, all[b]);
      CHECK(std::memcmp(&floats[b], &scalar, 4) == 0);
    }
    std::vector<float> probes;
    for (float x : floats) {
      if (!std::isfinite(x)) continue;
      probes.push_back(x);
      probes.push_back(std::nextafter(x, INFINITY));
      probes.push_back(std::nextafter(x, -INFINITY));
    }
    for (uint32_t b = 0; b + 1 < 65536; ++b) {
      const float lo = half_to_float(t, static_cast<uint16_t>(b)), hi = half_to_float(t, static_cast<uint16_t>(b + 1));
      if (std::isfinite(lo) && std::isfinite(hi)) probes.push_back(static_cast<float>((double(lo) + hi) / 2));
    }
    for (int i = 0; i < 100000; ++i) probes.push_back(from_bits(static_cast<uint32_t>(rng())));
    probes.resize(probes.size() - (probes.size() % 8 == 0 ? 3 : 0));  // never a multiple of 8
    std::vector<uint16_t> bulk(probes.size());
    from_float(t, probes.data(), bulk.data(), probes.size());
    size_t mismatches = 0;
    for (size_t i = 0; i < probes.size(); ++i) {
      const uint16_t scalar = half_from_float(t, probes[i]);
      if (bulk[i] != scalar && !(is_nan16(t, bulk[i]) && is_nan16(t, scalar))) ++mismatches;
    }
    CHECK(mismatches == 0);
  }
}
