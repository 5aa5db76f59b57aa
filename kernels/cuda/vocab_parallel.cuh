// The vocabulary-parallel embedding and cross-entropy on the GPU (formulas: kernels/cpu/vocab_parallel.h),
// on the CPU loops' own row bodies (kernels/cpu/vocab_parallel_row.h), so both give the same bits. Simple
// before fast: one thread per row for the cross-entropy's reductions, one per column and token group for the
// embedding's gradient (positions in order, as on the CPU). A token or label outside [0, vocab) cannot throw on the
// device: its embedding row is NaN, its row's stats are NaN. Written in the CUDA subset: nvcc compiles it,
// the SIMT emulator runs it in the unit tests.
#pragma once
#include <math.h>

#include <cstdint>

#include "cpu/vocab_parallel_row.h"
#include "cuda/elementwise.cuh"

namespace ds::cuda {

// out[p, c] over out[n, C]; any grid and block.
DS_KERNEL void embedding_rows_forward_kernel(const int32_t* tokens, const float* wte_rows, float* out, int64_t n,
                                             int64_t C, int64_t first, int64_t rows, int64_t vocab) {
  for (int64_t i = grid_first(); i < n * C; i += grid_stride()) {
    const int64_t p = i / C;
    out[i] = tokens[p] >= 0 && tokens[p] < vocab ? cpu::embedding_rows_element(tokens, wte_rows, p, i % C, C, first, rows)
                                                  : NAN;
  }
}

// dwte_rows[token − first, c] += dout[p, c] for the shard's tokens, positions in order: thread (c, g)
// takes column c and the tokens of group g (token % G == g, G = gridDim.y), as
// embedding_backward_wte_kernel does; any grid x covering C, any grid y.
DS_KERNEL void embedding_rows_backward_kernel(const int32_t* tokens, const float* dout, float* dwte_rows, int64_t n,
                                              int64_t C, int64_t first, int64_t rows) {
  const int64_t c = grid_first(), group = blockIdx.y, groups = gridDim.y;
  if (c >= C) return;
  for (int64_t p = 0; p < n; ++p)
    if (cpu::in_shard(tokens[p], first, rows) && tokens[p] % groups == group)
      dwte_rows[(tokens[p] - first) * C + c] += dout[p * C + c];
}

// stats[r], stats[n + r] (max, label's logit) per row: one thread per row; any grid and block covering n.
DS_KERNEL void cross_entropy_shard_max_kernel(const float* logits, const int32_t* labels, int64_t n, int64_t classes,
                                              int64_t first, int64_t vocab, float* stats) {
  const int64_t r = grid_first();
  if (r >= n) return;
  cpu::shard_max_row(logits + r * classes, classes, labels[r], first, r, n, stats);
  if (labels[r] < 0 || labels[r] >= vocab) stats[r] = NAN;
}

// stats[2n + r] = Σexp per row: one thread per row; any grid and block covering n.
DS_KERNEL void cross_entropy_shard_sumexp_kernel(const float* logits, int64_t n, int64_t classes, float* stats) {
  const int64_t r = grid_first();
  if (r < n) stats[2 * n + r] = cpu::shard_sumexp_row(logits + r * classes, classes, stats[r]);
}

// loss[0], the mean over the rows in order: one thread.
DS_KERNEL void cross_entropy_shard_loss_kernel(const float* stats, int64_t n, float* loss) {
  if (grid_first() == 0) loss[0] = cpu::shard_loss(stats, n);
}

// dlogits[r, c] over [n, classes], scaled by dloss[0] / n; any grid and block.
DS_KERNEL void cross_entropy_shard_backward_kernel(const float* logits, const int32_t* labels, const float* stats,
                                                   const float* dloss, int64_t n, int64_t classes, int64_t first,
                                                   float* dlogits) {
  const double scale = static_cast<double>(dloss[0]) / static_cast<double>(n);
  for (int64_t i = grid_first(); i < n * classes; i += grid_stride()) {
    const int64_t r = i / classes, c = i % classes;
    dlogits[i] = cpu::shard_dlogit(logits[i], labels[r] == first + c, stats[r], stats[2 * n + r], scale);
  }
}

}  // namespace ds::cuda
