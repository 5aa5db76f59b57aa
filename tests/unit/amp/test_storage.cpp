// Bulk storage operations: fp32 buffers behave exactly as float loops; 16-bit buffers compute in
// fp32 and round once per store.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "amp/half.h"
#include "amp/storage.h"

using namespace ds::amp;

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
