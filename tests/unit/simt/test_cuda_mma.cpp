// The emulator's nvcuda::wmma (simt/cuda_mma.h): products against plain loops in every operand layout,
// and the misuses it reports: unaligned pointers, ldm, lanes holding different fragments (a kernel
// relying on the unspecified layout), a partial warp, and a stored tile read before __syncwarp.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "amp/half.h"
#include "simt/cuda_mma.h"
#include "simt/cuda_subset.h"

namespace wmma = nvcuda::wmma;
using ds::amp::Half;
using ds::simt::SimtError;

namespace {

// c[16, 16] = a[16, 16] · b[16, 16] + c0 by one warp, a and b as 16-bit bits laid out per the layouts
// (ld 24 or 32 elements: padded rows), c0 and c with ldc 20.
template <class Elem, class LayoutA, class LayoutB>
void product(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, std::vector<float>& c, unsigned lda,
             unsigned ldb, wmma::layout_t c_layout) {
  alignas(32) static uint16_t a_mem[16 * 32], b_mem[16 * 32];
  alignas(32) static float c_mem[16 * 20];
  std::copy(a.begin(), a.end(), a_mem);
  std::copy(b.begin(), b.end(), b_mem);
  std::copy(c.begin(), c.end(), c_mem);
  ds::simt::launch(1, 32, {}, [&] {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, Elem, LayoutA> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, Elem, LayoutB> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::load_matrix_sync(fa, reinterpret_cast<const Elem*>(a_mem), lda);
    wmma::load_matrix_sync(fb, reinterpret_cast<const Elem*>(b_mem), ldb);
    wmma::load_matrix_sync(acc, c_mem, 20, c_layout);
    wmma::mma_sync(acc, fa, fb, acc);
    wmma::store_matrix_sync(c_mem, acc, 20, c_layout);
  });
  c.assign(c_mem, c_mem + 16 * 20);
}

}  // namespace

TEST_CASE("emulated wmma: 16x16x16 products in bf16 and fp16, row- and column-major operands and accumulators") {
  // Small integers: every product and sum is exact, so the result must equal the loops' exactly.
  for (const Half type : {Half::BF16, Half::F16}) {
    for (const bool a_col : {false, true}) {
      for (const bool b_col : {false, true}) {
        for (const auto c_layout : {wmma::mem_row_major, wmma::mem_col_major}) {
          CAPTURE((type == Half::BF16));
          CAPTURE(a_col);
          CAPTURE(b_col);
          CAPTURE((c_layout == wmma::mem_col_major));
          const unsigned lda = 24, ldb = 32;
          std::vector<uint16_t> a(16 * 32), b(16 * 32);
          std::vector<float> c(16 * 20), want(16 * 16);
          const auto A = [](int r, int k) { return float((r * 3 + k * 5) % 7 - 3); };
          const auto Bv = [](int k, int n) { return float((k * 2 + n * 7) % 9 - 4); };
          const auto C0 = [](int r, int n) { return float(r - n); };
          for (int r = 0; r < 16; ++r)
            for (int k = 0; k < 16; ++k) a[a_col ? k * lda + r : r * lda + k] = ds::amp::half_from_float(type, A(r, k));
          for (int k = 0; k < 16; ++k)
            for (int n = 0; n < 16; ++n) b[b_col ? n * ldb + k : k * ldb + n] = ds::amp::half_from_float(type, Bv(k, n));
          for (int r = 0; r < 16; ++r)
            for (int n = 0; n < 16; ++n) {
              c[c_layout == wmma::mem_col_major ? n * 20 + r : r * 20 + n] = C0(r, n);
              float sum = C0(r, n);
              for (int k = 0; k < 16; ++k) sum += A(r, k) * Bv(k, n);
              want[r * 16 + n] = sum;
            }
          const auto run = [&]<class Elem>() {
            if (a_col && b_col) product<Elem, wmma::col_major, wmma::col_major>(a, b, c, lda, ldb, c_layout);
            else if (a_col) product<Elem, wmma::col_major, wmma::row_major>(a, b, c, lda, ldb, c_layout);
            else if (b_col) product<Elem, wmma::row_major, wmma::col_major>(a, b, c, lda, ldb, c_layout);
            else product<Elem, wmma::row_major, wmma::row_major>(a, b, c, lda, ldb, c_layout);
          };
          if (type == Half::BF16) run.template operator()<__nv_bfloat16>();
          else run.template operator()<__half>();
          for (int r = 0; r < 16; ++r)
            for (int n = 0; n < 16; ++n)
              REQUIRE(c[c_layout == wmma::mem_col_major ? n * 20 + r : r * 20 + n] == want[r * 16 + n]);
        }
      }
    }
  }
}

TEST_CASE("emulated wmma reports what CUDA forbids") {
  alignas(32) static uint16_t a_mem[16 * 32] = {};
  alignas(32) static float c_mem[16 * 32] = {};
  using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major>;
  using Acc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;
  SUBCASE("a pointer not 32-byte aligned") {
    CHECK_THROWS_WITH_AS(ds::simt::launch(1, 32, {},
                                          [&] {
                                            FragA fa;
                                            wmma::load_matrix_sync(fa, reinterpret_cast<const __nv_bfloat16*>(a_mem + 8), 16);
                                          }),
                         "wmma::load_matrix_sync: the pointer is not 32-byte aligned", SimtError);
  }
  SUBCASE("ldm not a multiple of 16 bytes") {
    CHECK_THROWS_WITH_AS(ds::simt::launch(1, 32, {},
                                          [&] {
                                            Acc acc;
                                            wmma::fill_fragment(acc, 0.0f);
                                            wmma::store_matrix_sync(c_mem, acc, 18, wmma::mem_row_major);
                                          }),
                         "wmma::store_matrix_sync: ldm 18 is not a multiple of 16 bytes", SimtError);
  }
  SUBCASE("lanes holding different fragments: a kernel that relied on a layout") {
    CHECK_THROWS_WITH_AS(ds::simt::launch(1, 32, {},
                                          [&] {
                                            FragA fa;
                                            wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fb;
                                            wmma::load_matrix_sync(fa, reinterpret_cast<const __nv_bfloat16*>(a_mem), 32);
                                            wmma::load_matrix_sync(fb, reinterpret_cast<const __nv_bfloat16*>(a_mem), 32);
                                            Acc acc;
                                            wmma::fill_fragment(acc, 0.0f);
                                            acc.x[0] = float(threadIdx.x % 32);  // "my element"
                                            wmma::mma_sync(acc, fa, fb, acc);
                                          }),
                         "wmma::mma_sync: lane 1 holds another accumulator than lane 0 (a fragment's layout is "
                         "unspecified: treat it as a whole)",
                         SimtError);
  }
  SUBCASE("part of a warp") {
    CHECK_THROWS_AS(ds::simt::launch(1, 32, {},
                                     [&] {
                                       if (threadIdx.x >= 16) return;
                                       FragA fa;
                                       wmma::load_matrix_sync(fa, reinterpret_cast<const __nv_bfloat16*>(a_mem), 32);
                                     }),
                    SimtError);
  }
}

TEST_CASE("emulated wmma: a stored tile read before __syncwarp shows other lanes' parts unwritten") {
  alignas(32) static float tile[16 * 16];
  const auto run = [&](bool sync) {
    std::fill(tile, tile + 256, 0.0f);
    std::vector<float> seen(32);
    ds::simt::launch(1, 32, {}, [&] {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 1.0f);
      wmma::store_matrix_sync(tile, acc, 16, wmma::mem_row_major);
      if (sync) __syncwarp();
      const unsigned lane = threadIdx.x % 32;
      seen[lane] = tile[(lane + 1) % 32];  // an element another lane may have stored
    });
    return seen;
  };
  CHECK(run(true) == std::vector<float>(32, 1.0f));
  CHECK(run(false) != std::vector<float>(32, 1.0f));
}
