// The grid and block sizes the launchers use, shared by the CUDA launchers (launch.cu) and the
// emulated ones (launch_emulated.cpp), so that the emulator runs each kernel as the GPU would.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace ds::cuda {

// Threads for a row of `dim` elements: whole warps, at most 1024, about one element each.
inline unsigned row_threads(int64_t dim) {
  const int64_t warps = (dim + 31) / 32;
  return static_cast<unsigned>(32 * (warps < 1 ? 1 : warps > 32 ? 32 : warps));
}

// Blocks of kElementThreads threads for n elements, at most 65536 (then the kernels' grid-stride loops).
constexpr unsigned kElementThreads = 256;
inline unsigned element_blocks(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + kElementThreads - 1) / kElementThreads, 65536));
}

// The column kernels (bias_grad, embedding backward): one thread per column, in blocks of this many.
constexpr unsigned kColumnThreads = 256;
inline unsigned column_blocks(int64_t dim) { return static_cast<unsigned>((dim + kColumnThreads - 1) / kColumnThreads); }

// LayerNorm backward's dgamma/dbeta kernel (layernorm.cuh): one block per 32 columns (kLnParamColumns).
inline unsigned ln_param_blocks(int64_t dim) { return static_cast<unsigned>((dim + 31) / 32); }

// sum_squares (norm.cuh): partial sums of this many blocks of kReduceThreads, then one block.
constexpr unsigned kSumSquaresBlocks = 1024;
constexpr unsigned kReduceThreads = 256;
inline unsigned sum_squares_blocks(int64_t n) {
  return static_cast<unsigned>(std::clamp<int64_t>((n + kReduceThreads - 1) / kReduceThreads, 1, kSumSquaresBlocks));
}

}  // namespace ds::cuda
