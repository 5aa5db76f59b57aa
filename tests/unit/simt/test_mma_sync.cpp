// The emulator's mma_16816 (simt/mma_sync.h): each lane's registers built from the PTX ISA's fragment
// layout for mma.m16n8k16 (written out here on its own, as the ISA states it per element), the product
// read back through the accumulator layout and compared with plain loops; the 16-bit packing; and the
// misuses the emulator reports (part of a warp, a lane that skips the instruction).
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "amp/half.h"
#include "simt/mma_sync.h"

using ds::amp::Half;
using ds::simt::SimtError;

namespace {

// The PTX ISA's mapping, per element index i of a lane's fragment (groupID = lane >> 2,
// threadID_in_group = lane % 4): A's a0..a7, B's b0..b3, C's c0..c3, two 16-bit elements per register.
struct Cell {
  int row, col;
};
Cell a_cell(int lane, int i) {
  const int g = lane >> 2, t = lane % 4;
  return {(i < 2 || (i >= 4 && i < 6)) ? g : g + 8, t * 2 + (i & 1) + (i >= 4 ? 8 : 0)};
}
Cell b_cell(int lane, int i) {
  const int g = lane >> 2, t = lane % 4;
  return {t * 2 + (i & 1) + (i >= 2 ? 8 : 0), g};
}
Cell c_cell(int lane, int i) {
  const int g = lane >> 2, t = lane % 4;
  return {i < 2 ? g : g + 8, t * 2 + (i & 1)};
}

}  // namespace

TEST_CASE("emulated mma.m16n8k16: the PTX ISA's register layout, bf16 and fp16, accumulating onto C") {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> small(-6, 6);
  for (const Half type : {Half::BF16, Half::F16}) {
    CAPTURE((type == Half::BF16));
    // Small integers and halves: every product and sum is exact, so the result equals the loops' exactly.
    float A[16][16], B[16][8], C[16][8], want[16][8], got[16][8];
    for (auto& row : A)
      for (float& v : row) v = small(rng) * 0.5f;
    for (auto& row : B)
      for (float& v : row) v = float(small(rng));
    for (auto& row : C)
      for (float& v : row) v = float(small(rng));
    for (int r = 0; r < 16; ++r)
      for (int n = 0; n < 8; ++n) {
        double sum = C[r][n];
        for (int k = 0; k < 16; ++k) sum += double(A[r][k]) * B[k][n];
        want[r][n] = float(sum);
      }
    ds::simt::launch(1, 32, {}, [&] {
      const int lane = threadIdx.x % 32;
      uint16_t a16[8], b16[4];
      for (int i = 0; i < 8; ++i) a16[i] = ds::amp::half_from_float(type, A[a_cell(lane, i).row][a_cell(lane, i).col]);
      for (int i = 0; i < 4; ++i) b16[i] = ds::amp::half_from_float(type, B[b_cell(lane, i).row][b_cell(lane, i).col]);
      const uint32_t a[4] = {ds::cuda::load_half2(a16), ds::cuda::load_half2(a16 + 2), ds::cuda::load_half2(a16 + 4),
                             ds::cuda::load_half2(a16 + 6)};
      const uint32_t b[2] = {ds::cuda::load_half2(b16), ds::cuda::load_half2(b16 + 2)};
      float d[4];
      for (int i = 0; i < 4; ++i) d[i] = C[c_cell(lane, i).row][c_cell(lane, i).col];
      if (type == Half::BF16) ds::cuda::mma_16816<Half::BF16>(d, a, b);
      else ds::cuda::mma_16816<Half::F16>(d, a, b);
      for (int i = 0; i < 4; ++i) got[c_cell(lane, i).row][c_cell(lane, i).col] = d[i];
    });
    for (int r = 0; r < 16; ++r)
      for (int n = 0; n < 8; ++n) {
        CAPTURE(r);
        CAPTURE(n);
        CHECK(got[r][n] == want[r][n]);
      }
  }
}

TEST_CASE("pack_half2 puts the first value in the low half, rounded to nearest even, as load_half2 and store_half2 "
          "read and write memory") {
  for (const Half type : {Half::BF16, Half::F16}) {
    const float lo = 1.0f + 0x1p-13f, hi = -3.25f;  // lo rounds to 1 in both types
    const uint32_t packed = ds::cuda::pack_half2(type, lo, hi);
    CHECK((packed & 0xffffu) == ds::amp::half_from_float(type, 1.0f));
    CHECK((packed >> 16) == ds::amp::half_from_float(type, hi));
    const uint16_t memory[2] = {ds::amp::half_from_float(type, lo), ds::amp::half_from_float(type, hi)};
    CHECK(ds::cuda::load_half2(memory) == packed);
    uint16_t stored[2] = {};
    ds::cuda::store_half2(stored, packed);
    CHECK(stored[0] == memory[0]);
    CHECK(stored[1] == memory[1]);
  }
}

TEST_CASE("emulated mma.m16n8k16 reports what mma.sync.aligned forbids") {
  const uint32_t a[4] = {}, b[2] = {};
  SUBCASE("a block of part of a warp") {
    CHECK_THROWS_AS(ds::simt::launch(1, 16, {},
                                     [&] {
                                       float d[4] = {};
                                       ds::cuda::mma_16816<Half::BF16>(d, a, b);
                                     }),
                    SimtError);
  }
  SUBCASE("a lane that does not take part") {
    CHECK_THROWS_AS(ds::simt::launch(1, 32, {},
                                     [&] {
                                       if (threadIdx.x == 7) return;
                                       float d[4] = {};
                                       ds::cuda::mma_16816<Half::BF16>(d, a, b);
                                     }),
                    SimtError);
  }
}
