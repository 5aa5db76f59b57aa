// vocab_parallel: the vocabulary-parallel embedding and cross-entropy (vocab_parallel.h). Rows split
// over the kernel threads; the embedding's backward splits columns, so no two threads add into one
// gradient element and tokens that repeat add up in position order.
#include "cpu/vocab_parallel.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "cpu/parallel.h"

namespace ds::cpu {
namespace {

void check_ids(const int32_t* ids, int64_t n, int64_t vocab, const char* what) {
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      throw std::out_of_range(std::string(what) + " " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                              " is not in [0, " + std::to_string(vocab) + ")");
}

bool in_shard(int32_t id, int64_t first, int64_t rows) { return id >= first && id < first + rows; }

}  // namespace

void embedding_rows_forward(const int32_t* tokens, const float* wte_rows, float* out, int64_t n, int64_t C,
                            int64_t first, int64_t rows, int64_t vocab) {
  check_ids(tokens, n, vocab, "embedding: token");
  parallel_for(n, min_rows_per_thread(C), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      float* o = out + i * C;
      if (!in_shard(tokens[i], first, rows)) {
        for (int64_t c = 0; c < C; ++c) o[c] = 0.0f;
        continue;
      }
      const float* e = wte_rows + (tokens[i] - first) * C;
      for (int64_t c = 0; c < C; ++c) o[c] = e[c];
    }
  });
}

void embedding_rows_backward(const int32_t* tokens, const float* dout, float* dwte_rows, int64_t n, int64_t C,
                             int64_t first, int64_t rows, int64_t vocab) {
  check_ids(tokens, n, vocab, "embedding: token");
  parallel_for(C, min_rows_per_thread(n), [&](int64_t begin, int64_t end) {
    for (int64_t i = 0; i < n; ++i) {
      if (!in_shard(tokens[i], first, rows)) continue;
      float* e = dwte_rows + (tokens[i] - first) * C;
      for (int64_t c = begin; c < end; ++c) e[c] += dout[i * C + c];
    }
  });
}

void cross_entropy_shard_max(const float* logits, const int32_t* labels, int64_t n, int64_t classes, int64_t first,
                             int64_t vocab, float* stats) {
  check_ids(labels, n, vocab, "cross_entropy: label");
  parallel_for(n, min_rows_per_thread(classes), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* x = logits + r * classes;
      float m = -std::numeric_limits<float>::infinity();
      bool nan = false;
      for (int64_t c = 0; c < classes; ++c) {
        m = x[c] > m ? x[c] : m;
        nan |= std::isnan(x[c]);
      }
      stats[r] = nan ? std::numeric_limits<float>::quiet_NaN() : m;
      stats[n + r] = in_shard(labels[r], first, classes) ? x[labels[r] - first] : 0.0f;
    }
  });
}

void cross_entropy_shard_sumexp(const float* logits, int64_t n, int64_t classes, float* stats) {
  parallel_for(n, min_rows_per_thread(classes), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* x = logits + r * classes;
      const double m = stats[r];
      double sum = 0.0;
      for (int64_t c = 0; c < classes; ++c) sum += std::exp(static_cast<double>(x[c]) - m);
      stats[2 * n + r] = static_cast<float>(sum);
    }
  });
}

float cross_entropy_shard_loss(const float* stats, int64_t n) {
  if (n <= 0) return 0.0f;
  double total = 0.0;
  for (int64_t r = 0; r < n; ++r)
    total += std::log(static_cast<double>(stats[2 * n + r])) + stats[r] - static_cast<double>(stats[n + r]);
  return static_cast<float>(total / static_cast<double>(n));
}

void cross_entropy_shard_backward(const float* logits, const int32_t* labels, const float* stats, float g, int64_t n,
                                  int64_t classes, int64_t first, float* dlogits) {
  const double scale = static_cast<double>(g) / static_cast<double>(n);
  parallel_for(n, min_rows_per_thread(classes), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* x = logits + r * classes;
      float* d = dlogits + r * classes;
      const double m = stats[r], s = stats[2 * n + r];
      for (int64_t c = 0; c < classes; ++c) d[c] = static_cast<float>(std::exp(static_cast<double>(x[c]) - m) / s * scale);
      if (in_shard(labels[r], first, classes))
        d[labels[r] - first] = static_cast<float>((std::exp(static_cast<double>(x[labels[r] - first]) - m) / s - 1.0) * scale);
    }
  });
}

}  // namespace ds::cpu
