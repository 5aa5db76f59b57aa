// layernorm: LayerNorm forward/backward over the last dimension, fast path and scalar reference
// (see layernorm.h for the formulas). The fast paths split rows (and, for the parameter gradients,
// columns) over the kernel threads; every sum keeps its order, so the bits do not depend on the
// thread count.
#include "cpu/layernorm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/parallel.h"

namespace ds::cpu {
namespace {

// Σ_{i<n} term(i) in double, in four interleaved partial sums (independent chains the compiler can
// vectorise, instead of one add-latency-bound chain), combined in a fixed order: deterministic.
template <class Term>
double lane_sum(int64_t n, Term term) {
  double acc[4] = {0.0, 0.0, 0.0, 0.0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int64_t l = 0; l < 4; ++l) acc[l] += term(i + l);
  for (int64_t l = 0; i < n; ++i, ++l) acc[l] += term(i);
  return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

}  // namespace

void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y, float* stats,
                       int64_t rows, int64_t dim, float eps) {
  if (dim <= 0) return;
  parallel_for(rows, min_rows_per_thread(dim), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* __restrict xr = x + r * dim;
      float* __restrict yr = y + r * dim;
      const double mean = lane_sum(dim, [&](int64_t c) { return static_cast<double>(xr[c]); }) /
                          static_cast<double>(dim);
      const double var = lane_sum(dim,
                                  [&](int64_t c) {
                                    const double d = xr[c] - mean;
                                    return d * d;
                                  }) /
                         static_cast<double>(dim);
      const double rstd = 1.0 / std::sqrt(var + static_cast<double>(eps));
      const float m = static_cast<float>(mean), s = static_cast<float>(rstd);
      stats[2 * r] = m;
      stats[2 * r + 1] = s;
      for (int64_t c = 0; c < dim; ++c) yr[c] = (xr[c] - m) * s * gamma[c] + beta[c];
    }
  });
}

void layernorm_forward_reference(const float* x, const float* gamma, const float* beta, float* y,
                                 float* stats, int64_t rows, int64_t dim, float eps) {
  if (dim <= 0) return;
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0.0;
    for (int64_t c = 0; c < dim; ++c) sum += x[r * dim + c];
    const double mean = sum / static_cast<double>(dim);
    double sq = 0.0;
    for (int64_t c = 0; c < dim; ++c) sq += (x[r * dim + c] - mean) * (x[r * dim + c] - mean);
    const double rstd = 1.0 / std::sqrt(sq / static_cast<double>(dim) + static_cast<double>(eps));
    stats[2 * r] = static_cast<float>(mean);
    stats[2 * r + 1] = static_cast<float>(rstd);
    for (int64_t c = 0; c < dim; ++c) {
      const double xhat = (x[r * dim + c] - mean) * rstd;
      y[r * dim + c] = static_cast<float>(xhat * gamma[c] + beta[c]);
    }
  }
}

void layernorm_backward(const float* x, const float* gamma, const float* stats, const float* dy, float* dx,
                        float* dgamma, float* dbeta, int64_t rows, int64_t dim) {
  if (rows <= 0 || dim <= 0) return;
  const double inv_dim = 1.0 / static_cast<double>(dim);
  // dx, row by row.
  parallel_for(rows, min_rows_per_thread(dim), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* __restrict xr = x + r * dim;
      const float* __restrict dyr = dy + r * dim;
      float* __restrict dxr = dx + r * dim;
      const float m = stats[2 * r], s = stats[2 * r + 1];
      const double sum_g =
          lane_sum(dim, [&](int64_t c) { return static_cast<double>(dyr[c]) * static_cast<double>(gamma[c]); });
      const double sum_gx = lane_sum(dim, [&](int64_t c) {
        return static_cast<double>(dyr[c]) * static_cast<double>(gamma[c]) * static_cast<double>((xr[c] - m) * s);
      });
      const float mean_g = static_cast<float>(sum_g * inv_dim), mean_gx = static_cast<float>(sum_gx * inv_dim);
      for (int64_t c = 0; c < dim; ++c) {
        const float xhat = (xr[c] - m) * s;
        dxr[c] = s * (dyr[c] * gamma[c] - mean_g - xhat * mean_gx);
      }
    }
  });
  // dgamma, dbeta: column sums over the rows in double, each thread a range of columns, added to
  // the previous contents once at the end.
  parallel_for(dim, min_rows_per_thread(rows), [&](int64_t begin, int64_t end) {
    std::vector<double> acc_gamma(end - begin, 0.0), acc_beta(end - begin, 0.0);
    double* __restrict ag = acc_gamma.data();
    double* __restrict ab = acc_beta.data();
    for (int64_t r = 0; r < rows; ++r) {
      const float* __restrict xr = x + r * dim;
      const float* __restrict dyr = dy + r * dim;
      const float m = stats[2 * r], s = stats[2 * r + 1];
      for (int64_t c = begin; c < end; ++c) {
        const float xhat = (xr[c] - m) * s;
        ag[c - begin] += static_cast<double>(dyr[c]) * static_cast<double>(xhat);
        ab[c - begin] += static_cast<double>(dyr[c]);
      }
    }
    for (int64_t c = begin; c < end; ++c) {
      dgamma[c] = static_cast<float>(static_cast<double>(dgamma[c]) + ag[c - begin]);
      dbeta[c] = static_cast<float>(static_cast<double>(dbeta[c]) + ab[c - begin]);
    }
  });
}

void layernorm_backward_reference(const float* x, const float* gamma, const float* stats, const float* dy,
                                  float* dx, float* dgamma, float* dbeta, int64_t rows, int64_t dim) {
  if (rows <= 0 || dim <= 0) return;
  const double inv_dim = 1.0 / static_cast<double>(dim);
  for (int64_t r = 0; r < rows; ++r) {
    const double mean = stats[2 * r], rstd = stats[2 * r + 1];
    double sum_g = 0.0, sum_gx = 0.0;
    for (int64_t c = 0; c < dim; ++c) {
      const double g = static_cast<double>(dy[r * dim + c]) * gamma[c];
      sum_g += g;
      sum_gx += g * (x[r * dim + c] - mean) * rstd;
    }
    for (int64_t c = 0; c < dim; ++c) {
      const double g = static_cast<double>(dy[r * dim + c]) * gamma[c];
      const double xhat = (x[r * dim + c] - mean) * rstd;
      dx[r * dim + c] = static_cast<float>(rstd * (g - sum_g * inv_dim - xhat * sum_gx * inv_dim));
    }
  }
  for (int64_t c = 0; c < dim; ++c) {
    double sum_gamma = dgamma[c], sum_beta = dbeta[c];
    for (int64_t r = 0; r < rows; ++r) {
      const double xhat = (x[r * dim + c] - static_cast<double>(stats[2 * r])) * stats[2 * r + 1];
      sum_gamma += dy[r * dim + c] * xhat;
      sum_beta += dy[r * dim + c];
    }
    dgamma[c] = static_cast<float>(sum_gamma);
    dbeta[c] = static_cast<float>(sum_beta);
  }
}

}  // namespace ds::cpu
