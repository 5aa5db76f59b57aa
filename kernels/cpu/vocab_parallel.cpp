// vocab_parallel: the vocabulary-parallel embedding and cross-entropy (vocab_parallel.h), on the row
// bodies shared with the CUDA kernels (vocab_parallel_row.h). Rows split over the kernel threads; the
// embedding's backward splits columns, so no two threads add into one gradient element and tokens that
// repeat add up in position order.
#include "cpu/vocab_parallel.h"

#include <stdexcept>
#include <string>

#include "cpu/parallel.h"
#include "cpu/vocab_parallel_row.h"

namespace ds::cpu {
namespace {

void check_ids(const int32_t* ids, int64_t n, int64_t vocab, const char* what) {
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      throw std::out_of_range(std::string(what) + " " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                              " is not in [0, " + std::to_string(vocab) + ")");
}

}  // namespace

void embedding_rows_forward(const int32_t* tokens, const float* wte_rows, float* out, int64_t n, int64_t C,
                            int64_t first, int64_t rows, int64_t vocab) {
  check_ids(tokens, n, vocab, "embedding: token");
  parallel_for(n, min_rows_per_thread(C), [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p)
      for (int64_t c = 0; c < C; ++c) out[p * C + c] = embedding_rows_element(tokens, wte_rows, p, c, C, first, rows);
  });
}

void embedding_rows_backward(const int32_t* tokens, const float* dout, float* dwte_rows, int64_t n, int64_t C,
                             int64_t first, int64_t rows, int64_t vocab) {
  check_ids(tokens, n, vocab, "embedding: token");
  parallel_for(C, min_rows_per_thread(n), [&](int64_t begin, int64_t end) {
    for (int64_t p = 0; p < n; ++p) {
      if (!in_shard(tokens[p], first, rows)) continue;
      float* e = dwte_rows + (tokens[p] - first) * C;
      for (int64_t c = begin; c < end; ++c) e[c] += dout[p * C + c];
    }
  });
}

void cross_entropy_shard_max(const float* logits, const int32_t* labels, int64_t n, int64_t classes, int64_t first,
                             int64_t vocab, float* stats) {
  check_ids(labels, n, vocab, "cross_entropy: label");
  parallel_for(n, min_rows_per_thread(classes), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) shard_max_row(logits + r * classes, classes, labels[r], first, r, n, stats);
  });
}

void cross_entropy_shard_sumexp(const float* logits, int64_t n, int64_t classes, float* stats) {
  parallel_for(n, min_rows_per_thread(classes), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) stats[2 * n + r] = shard_sumexp_row(logits + r * classes, classes, stats[r]);
  });
}

float cross_entropy_shard_loss(const float* stats, int64_t n) { return shard_loss(stats, n); }

void cross_entropy_shard_backward(const float* logits, const int32_t* labels, const float* stats, float g, int64_t n,
                                  int64_t classes, int64_t first, float* dlogits) {
  const double scale = static_cast<double>(g) / static_cast<double>(n);
  parallel_for(n, min_rows_per_thread(classes), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      for (int64_t c = 0; c < classes; ++c)
        dlogits[r * classes + c] =
            shard_dlogit(logits[r * classes + c], labels[r] == first + c, stats[r], stats[2 * n + r], scale);
  });
}

}  // namespace ds::cpu
