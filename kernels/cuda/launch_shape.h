// The grid and block sizes the launchers use, shared by the CUDA launchers (launch.cu) and the
// emulated ones (launch_emulated.cpp), so that the emulator runs each kernel as the GPU would.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "simt/hd.h"

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

// The embedding's backward (elementwise.cuh, vocab_parallel.cuh): the token groups that split the
// positions (grid y), about 128 positions each, at most 64.
inline unsigned embedding_token_groups(int64_t positions) {
  return static_cast<unsigned>(std::clamp<int64_t>(positions / 128, 1, 64));
}

// LayerNorm backward's dgamma/dbeta partials (layernorm.cuh): one block per 32 columns (kLnParamColumns)
// and chunk of at least 256 rows, at most 64 chunks (GPT-2's 8192 x 768: 24 x 32 blocks); its partial
// sums take ln_param_partial_floats.
inline unsigned ln_param_blocks(int64_t dim) { return static_cast<unsigned>((dim + 31) / 32); }
inline unsigned ln_param_chunks(int64_t rows) { return static_cast<unsigned>(std::clamp<int64_t>(rows / 256, 1, 64)); }
inline int64_t ln_param_partial_floats(int64_t rows, int64_t dim) { return 2 * ln_param_chunks(rows) * dim; }

// sum_squares (norm.cuh): partial sums of this many blocks of kReduceThreads, then one block.
constexpr unsigned kSumSquaresBlocks = 1024;
constexpr unsigned kReduceThreads = 256;
inline unsigned sum_squares_blocks(int64_t n) {
  return static_cast<unsigned>(std::clamp<int64_t>((n + kReduceThreads - 1) / kReduceThreads, 1, kSumSquaresBlocks));
}

// The fused attention kernels (flash_attention.cuh): tiles of kFlashRows rows (queries or keys) of one
// head, kFlashThreads threads (4 warps of 16 rows), grid (tiles, B·H); head dimensions up to
// kFlashMaxHeadDim, padded to DT tiles of 16 columns: 1 to 4 tiles up to 64, then 6 (96) or 8 (128);
// above 4 tiles the dK/dV kernel splits the columns between kFlashDkdvSplits blocks (grid z).
constexpr int kFlashRows = 64;
constexpr unsigned kFlashThreads = 128;
constexpr int64_t kFlashMaxHeadDim = 128;
constexpr int64_t kFlashMaxHeads = 65535;  // gridDim.y
inline unsigned flash_tiles(int64_t T) { return static_cast<unsigned>((T + kFlashRows - 1) / kFlashRows); }
inline unsigned flash_delta_blocks(int64_t rows) {  // Δ's kernel: a warp per row
  return static_cast<unsigned>((rows + kFlashThreads / 32 - 1) / (kFlashThreads / 32));
}
inline int flash_column_tiles(int64_t D) { return D <= 64 ? static_cast<int>((D + 15) / 16) : D <= 96 ? 6 : 8; }
template <int DT>
constexpr unsigned kFlashDkdvSplits = DT > 4 ? 2 : 1;
// The row strides (elements) of the kernels' 16-bit shared tiles: each row padded by 16 bytes, so that the
// 8 rows whose 32-bit words a warp loads at once (mma_sync.h's operands) start in 8 different banks.
DS_HD constexpr int flash_half_ld(int DT) { return 16 * DT + 8; }  // [rows, 16·DT]: Q, K, V, dO
constexpr int kFlashTransposedLd = kFlashRows + 8;                  // [16·DT, rows]: the same, transposed
// Each kernel's dynamic shared memory, in bytes.
constexpr unsigned flash_forward_shared_bytes(int DT) {  // K (Q at first), V transposed
  return 2 * (kFlashRows * flash_half_ld(DT) + 16 * DT * kFlashTransposedLd);
}
constexpr unsigned flash_dq_shared_bytes(int DT) {  // K, V (Q, dO at first), K transposed
  return 2 * (2 * kFlashRows * flash_half_ld(DT) + 16 * DT * kFlashTransposedLd);
}
constexpr unsigned flash_dkdv_shared_bytes(int DT) {  // Q, dO (K, V at first), both transposed, lse, Δ
  return 2 * (2 * kFlashRows * flash_half_ld(DT) + 2 * 16 * DT * kFlashTransposedLd) + 2 * kFlashRows * 4;
}

}  // namespace ds::cuda
