// fp16 and bf16 conversions: every 16-bit pattern round-trips exactly through fp32; float → 16-bit
// rounds to nearest with ties to even (checked against the two neighbouring 16-bit values in
// double precision), overflows to ±inf, keeps NaN a NaN and fp16 denormals exact.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "amp/half.h"
#include "half_test_util.h"

using namespace ds::amp;
using ds::test::from_bits;
using ds::test::is_nan16;

namespace {

// x → 16-bit is correct iff no other finite 16-bit value is nearer, and on a tie the result is even.
void check_rounding(Half t, float x) {
  const uint16_t r = half_from_float(t, x);
  const double got = half_to_float(t, r);
  CAPTURE(x);
  CAPTURE(r);
  if (std::isinf(got)) {  // overflow: x lies beyond the largest finite value plus half an ulp
    CHECK(std::abs(double(x)) >= (t == Half::F16 ? 65520.0 : 3.3961775292304527e38));
    return;
  }
  for (int step : {-1, 1}) {  // the neighbours of r
    const uint16_t n = static_cast<uint16_t>(r + step);
    const double other = half_to_float(t, n);
    if (std::isnan(other) || std::isinf(other) || ((n ^ r) & 0x8000u)) continue;
    const double dr = std::abs(got - double(x)), dn = std::abs(other - double(x));
    CHECK(dr <= dn);
    if (dr == dn) CHECK((r & 1u) == 0u);
  }
}

}  // namespace

TEST_CASE("half: every 16-bit pattern round-trips exactly through fp32") {
  for (Half t : {Half::F16, Half::BF16}) {
    for (uint32_t b = 0; b < 65536; ++b) {
      const auto bits = static_cast<uint16_t>(b);
      const float x = half_to_float(t, bits);
      if (is_nan16(t, bits)) {
        CHECK(std::isnan(x));
        CHECK(is_nan16(t, half_from_float(t, x)));
      } else {
        CHECK(half_from_float(t, x) == bits);
      }
    }
  }
}

TEST_CASE("half: float to 16-bit rounds to nearest, ties to even") {
  std::mt19937 rng(7);
  for (Half t : {Half::F16, Half::BF16}) {
    for (int i = 0; i < 200000; ++i) {
      // Random bit patterns with the exponent kept in (and a little beyond) the 16-bit range.
      uint32_t u = rng();
      if (t == Half::F16) u = (u & 0x807fffffu) | ((100u + rng() % 60u) << 23);
      const float x = from_bits(u);
      if (!std::isnan(x)) check_rounding(t, x);
    }
    // Exact ties: halfway between two neighbouring 16-bit values.
    for (uint32_t b = 0x0001; b < 0x7b00; b += 97) {
      const double lo = half_to_float(t, static_cast<uint16_t>(b)), hi = half_to_float(t, static_cast<uint16_t>(b + 1));
      const float mid = static_cast<float>((lo + hi) / 2);
      if (double(mid) == (lo + hi) / 2) CHECK((half_from_float(t, mid) & 1u) == 0u);
    }
  }
}

TEST_CASE("half: special values") {
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(fp16_from_float(65504.0f) == 0x7bffu);   // largest finite
  CHECK(fp16_from_float(65519.0f) == 0x7bffu);   // rounds down
  CHECK(fp16_from_float(65520.0f) == 0x7c00u);   // rounds to +inf
  CHECK(fp16_from_float(-inf) == 0xfc00u);
  CHECK(fp16_to_float(0x0001u) == std::ldexp(1.0f, -24));  // smallest denormal
  CHECK(fp16_from_float(std::ldexp(1.0f, -25)) == 0x0000u);  // half of it: tie to even (zero)
  CHECK(fp16_from_float(std::ldexp(1.5f, -25)) == 0x0001u);
  CHECK(fp16_from_float(-0.0f) == 0x8000u);
  CHECK(bf16_from_float(inf) == 0x7f80u);
  CHECK(bf16_from_float(3.4028235e38f) == 0x7f80u);  // FLT_MAX rounds up to +inf in bf16
  CHECK(bf16_from_float(1.0f + std::ldexp(1.0f, -8)) == 0x3f80u);  // tie: to even (1.0)
  CHECK(bf16_from_float(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82u);  // tie: to even (up)
  CHECK(bf16_to_float(bf16_from_float(1e-40f)) == doctest::Approx(1e-40).epsilon(0.01));  // denormal kept
  CHECK(std::isnan(bf16_to_float(bf16_from_float(std::nanf("")))));
  CHECK(std::isnan(fp16_to_float(fp16_from_float(-std::nanf("")))));
}
