// bias: add over rows and its gradient (column sums); fast paths (rows, resp. columns, split over
// the kernel threads; sums keep their order at any thread count) and scalar references.
#include "cpu/bias.h"

#include <algorithm>
#include <vector>

#include "cpu/parallel.h"

namespace ds::cpu {

void bias_add(float* __restrict y, const float* __restrict bias, int64_t rows, int64_t cols) {
  if (cols <= 0) return;
  parallel_for(rows, min_rows_per_thread(cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* __restrict row = y + r * cols;
      for (int64_t c = 0; c < cols; ++c) row[c] += bias[c];
    }
  });
}

void bias_fill(float* __restrict y, const float* __restrict bias, int64_t rows, int64_t cols) {
  if (cols <= 0) return;
  parallel_for(rows, min_rows_per_thread(cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) std::copy(bias, bias + cols, y + r * cols);
  });
}

void bias_add_reference(float* y, const float* bias, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = y[r * cols + c] + bias[c];
}

void bias_grad(const float* __restrict dy, float* __restrict dbias, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return;
  // Sum the batch first, then add once, so dbias's previous contents (accumulated micro-batches)
  // enter the sum exactly as in the reference. Each thread sums a range of columns.
  parallel_for(cols, min_rows_per_thread(rows), [&](int64_t begin, int64_t end) {
    std::vector<float> acc(dy + begin, dy + end);
    float* __restrict a = acc.data();
    const int64_t width = end - begin;
    for (int64_t r = 1; r < rows; ++r) {
      const float* __restrict row = dy + r * cols + begin;
      for (int64_t c = 0; c < width; ++c) a[c] += row[c];
    }
    for (int64_t c = 0; c < width; ++c) dbias[begin + c] += a[c];
  });
}

void bias_grad_reference(const float* dy, float* dbias, int64_t rows, int64_t cols) {
  if (rows <= 0) return;
  for (int64_t c = 0; c < cols; ++c) {
    double sum = 0.0;
    for (int64_t r = 0; r < rows; ++r) sum += dy[r * cols + c];
    dbias[c] = static_cast<float>(static_cast<double>(dbias[c]) + sum);
  }
}

}  // namespace ds::cpu
