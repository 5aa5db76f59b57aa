// The machine's measured fp32 GEMM peak for bench/gpt_cpu: cblas_sgemm C = A·B on N×N×N (row-major, no
// transposes, beta 0), with Debian's OpenBLAS (the BLAS dsworker links) at a given thread count.
// run.py compiles it into its temporary directory: g++ -O2 sgemm_peak.cpp -lopenblas.
//   sgemm_peak N REPS THREADS  ->  one JSON line: {"n", "threads", "core", "best_gflops", "median_gflops"}
// One untimed call first (page faults, OpenBLAS's buffers); each timed call is 2·N³ FLOP.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

extern "C" {
void openblas_set_num_threads(int);
char* openblas_get_corename(void);
}

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: sgemm_peak N REPS THREADS\n");
    return 2;
  }
  const int n = std::atoi(argv[1]), reps = std::atoi(argv[2]), threads = std::atoi(argv[3]);
  if (n < 1 || reps < 1 || threads < 1) return 2;
  openblas_set_num_threads(threads);
  std::vector<float> a(static_cast<size_t>(n) * n), b(a.size()), c(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>((i * 7919) % 1000) / 1000.0f - 0.5f;
    b[i] = static_cast<float>((i * 104729) % 1000) / 1000.0f - 0.5f;
  }
  auto run = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  };
  run();
  std::vector<double> gflops;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    run();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    gflops.push_back(2.0 * n * n * static_cast<double>(n) / s / 1e9);
  }
  std::sort(gflops.begin(), gflops.end());
  std::printf("{\"n\": %d, \"threads\": %d, \"core\": \"%s\", \"best_gflops\": %.2f, \"median_gflops\": %.2f, "
              "\"checksum\": %.6g}\n",
              n, threads, openblas_get_corename(), gflops.back(), gflops[gflops.size() / 2],
              static_cast<double>(c[0] + c[c.size() - 1]));
  return 0;
}
