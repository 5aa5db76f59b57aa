// The vocabulary-parallel kernels' element and row bodies (formulas: vocab_parallel.h), shared by the
// CPU loops (vocab_parallel.cpp) and the CUDA kernels (kernels/cuda/vocab_parallel.cuh), so both give
// the same bits. Sums and exps run in double and round once.
#pragma once
#include <math.h>

#include <cstdint>

#include "simt/hd.h"

namespace ds::cpu {

// Whether class `id` is one of the shard's [first, first + count).
DS_HD inline bool in_shard(int32_t id, int64_t first, int64_t count) { return id >= first && id < first + count; }

// Element (p, c) of the embedding shard's lookup: the token's row if it is in the shard, else 0.
DS_HD inline float embedding_rows_element(const int32_t* tokens, const float* wte_rows, int64_t p, int64_t c,
                                          int64_t C, int64_t first, int64_t rows) {
  const int32_t token = tokens[p];
  return in_shard(token, first, rows) ? wte_rows[(token - first) * C + c] : 0.0f;
}

// stats[r] = the row's max (NaN if any logit is NaN), stats[n + r] = the label's logit or 0.
DS_HD inline void shard_max_row(const float* x, int64_t classes, int32_t label, int64_t first, int64_t r, int64_t n,
                                float* stats) {
  float m = -INFINITY;
  bool nan = false;
  for (int64_t c = 0; c < classes; ++c) {
    m = x[c] > m ? x[c] : m;
    nan = nan || isnan(x[c]);
  }
  stats[r] = nan ? NAN : m;
  stats[n + r] = in_shard(label, first, classes) ? x[label - first] : 0.0f;
}

// Σ_c exp(x[c] − m).
DS_HD inline float shard_sumexp_row(const float* x, int64_t classes, float m) {
  double sum = 0.0;
  for (int64_t c = 0; c < classes; ++c) sum += exp(static_cast<double>(x[c]) - static_cast<double>(m));
  return static_cast<float>(sum);
}

// The mean over the n rows of log S + M − picked, from the reduced stats [3, n].
DS_HD inline float shard_loss(const float* stats, int64_t n) {
  if (n <= 0) return 0.0f;
  double total = 0.0;
  for (int64_t r = 0; r < n; ++r)
    total += log(static_cast<double>(stats[2 * n + r])) + static_cast<double>(stats[r]) - static_cast<double>(stats[n + r]);
  return static_cast<float>(total / static_cast<double>(n));
}

// d(loss)/d(logit) for logit x of a row with reduced max m and Σexp s: (softmax − [label]) · scale.
DS_HD inline float shard_dlogit(float x, bool is_label, float m, float s, double scale) {
  const double p = exp(static_cast<double>(x) - static_cast<double>(m)) / static_cast<double>(s);
  return static_cast<float>((is_label ? p - 1.0 : p) * scale);
}

}  // namespace ds::cpu
