// Tensor-core products in the CUDA subset: nvcuda::wmma's 16x16x16 fragments with bf16 or fp16
// inputs and fp32 accumulators, and the 16-bit types __nv_bfloat16 and __half they read. Under nvcc
// this is CUDA's own <mma.h>; in a C++ build, an emulation for the SIMT emulator (simt.h).
//
// The hardware spreads a fragment over the warp's lanes in a layout CUDA leaves unspecified, so a
// kernel may only treat a fragment as a whole: fill, load, store, mma, or the same operation on every
// element of x[]. The emulation gives each lane the whole tile and checks that use:
//   - every call is a warp collective of the full warp (as CUDA requires: "waits until all warp lanes
//     have arrived");
//   - mma_sync's operands must hold the same values in every lane: a kernel that gave lanes different
//     elements (relying on a layout) is an error;
//   - a store writes only part of the tile from each lane, so a lane that reads the stored tile
//     before a __syncwarp reads other lanes' parts unwritten;
//   - pointers 32-byte aligned, ldm a multiple of 16 bytes (CUDA's rules).
// 16-bit values live in memory as their bits (uint16_t arrays, amp/half.h's encodings); a kernel
// hands them to load_matrix_sync as `const __nv_bfloat16*` or `const __half*`.
#pragma once

#if defined(__CUDACC__)

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#else

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "amp/half.h"
#include "simt/simt.h"

// The 16-bit element types, as bits (the emulator converts them with amp/half.h).
struct __nv_bfloat16 {
  uint16_t bits;
};
struct __half {
  uint16_t bits;
};

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void>
class fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the emulator has the 16x16x16 shape");
  static_assert(std::is_same_v<Use, accumulator> ? std::is_same_v<T, float>
                                                 : std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>,
                "inputs bf16 or fp16, accumulators fp32");

 public:
  static constexpr int rows = std::is_same_v<Use, matrix_b> ? K : M;
  static constexpr int cols = std::is_same_v<Use, matrix_a> ? K : N;
  static constexpr int num_elements = rows * cols;
  T x[num_elements];  // the whole tile, row-major whatever the layout it was loaded from
};

namespace emulated {

inline void enter(const char* what) {
  if (::ds::simt::block_dim().count() % ::ds::simt::kWarpSize != 0)
    throw ::ds::simt::SimtError(std::string("wmma::") + what + ": the block is not whole warps");
  ::ds::simt::warp_sync(0xffffffffu);
}

inline void check_pointer(const char* what, const void* p, unsigned ldm, size_t element_bytes) {
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0)
    throw ::ds::simt::SimtError(std::string("wmma::") + what + ": the pointer is not 32-byte aligned");
  if (ldm * element_bytes % 16 != 0)
    throw ::ds::simt::SimtError(std::string("wmma::") + what + ": ldm " + std::to_string(ldm) +
                                " is not a multiple of 16 bytes");
}

inline float to_float(float v) { return v; }
inline float to_float(__nv_bfloat16 v) { return ::ds::amp::bf16_to_float(v.bits); }
inline float to_float(__half v) { return ::ds::amp::fp16_to_float(v.bits); }

// FNV-1a over a fragment's 32-bit words, compared across the warp.
template <class F>
uint32_t digest(const F& f) {
  uint32_t words[sizeof f.x / 4];
  std::memcpy(words, f.x, sizeof words);
  uint32_t h = 2166136261u;
  for (uint32_t w : words) h = (h ^ w) * 16777619u;
  return h;
}

template <class F>
void check_uniform(const F& f, const char* operand) {
  const uint32_t h = digest(f);
  if (::ds::simt::shfl(0xffffffffu, h, 0) != h)
    throw ::ds::simt::SimtError(std::string("wmma::mma_sync: lane ") + std::to_string(::ds::simt::lane_id()) +
                                " holds another " + operand +
                                " than lane 0 (a fragment's layout is unspecified: treat it as a whole)");
}

}  // namespace emulated

template <class Use, int M, int N, int K, class T, class Layout, class V>
void fill_fragment(fragment<Use, M, N, K, T, Layout>& f, V value) {
  for (auto& e : f.x) e = static_cast<T>(value);
}

// a or b from p: element (r, c) at p[r·ldm + c] (row_major) or p[c·ldm + r] (col_major).
template <class Use, class T, class Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const T* p, unsigned ldm) {
  emulated::enter("load_matrix_sync");
  emulated::check_pointer("load_matrix_sync", p, ldm, sizeof(T));
  using F = fragment<Use, 16, 16, 16, T, Layout>;
  for (int r = 0; r < F::rows; ++r)
    for (int c = 0; c < F::cols; ++c) {
      const size_t at = std::is_same_v<Layout, row_major> ? size_t(r) * ldm + c : size_t(c) * ldm + r;
      std::memcpy(&f.x[r * F::cols + c], p + at, sizeof(T));
    }
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p, unsigned ldm,
                             layout_t layout) {
  emulated::enter("load_matrix_sync");
  emulated::check_pointer("load_matrix_sync", p, ldm, sizeof(float));
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) f.x[r * 16 + c] = p[layout == mem_row_major ? size_t(r) * ldm + c : size_t(c) * ldm + r];
}

// Each lane writes the elements i ≡ lane (mod 32): the tile is whole once the warp has synchronised.
inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm,
                              layout_t layout) {
  emulated::enter("store_matrix_sync");
  emulated::check_pointer("store_matrix_sync", p, ldm, sizeof(float));
  for (int i = ::ds::simt::lane_id(); i < 256; i += ::ds::simt::kWarpSize) {
    const int r = i / 16, c = i % 16;
    p[layout == mem_row_major ? size_t(r) * ldm + c : size_t(c) * ldm + r] = f.x[i];
  }
}

// d = a·b + c, the products exact in fp32 and summed in fp32 in k's order.
template <class T, class LA, class LB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const fragment<matrix_a, 16, 16, 16, T, LA>& a,
              const fragment<matrix_b, 16, 16, 16, T, LB>& b, const fragment<accumulator, 16, 16, 16, float>& c) {
  emulated::enter("mma_sync");
  emulated::check_uniform(a, "matrix_a");
  emulated::check_uniform(b, "matrix_b");
  emulated::check_uniform(c, "accumulator");
  float fa[256], fb[256], out[256];
  for (int i = 0; i < 256; ++i) {
    fa[i] = emulated::to_float(a.x[i]);
    fb[i] = emulated::to_float(b.x[i]);
  }
  for (int r = 0; r < 16; ++r) {
    float* sum = out + r * 16;
    for (int n = 0; n < 16; ++n) sum[n] = c.x[r * 16 + n];
    for (int k = 0; k < 16; ++k)
      for (int n = 0; n < 16; ++n) sum[n] += fa[r * 16 + k] * fb[k * 16 + n];
  }
  std::memcpy(d.x, out, sizeof out);
}

}  // namespace nvcuda::wmma

#endif
