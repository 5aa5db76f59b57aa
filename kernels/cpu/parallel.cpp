// parallel: the thread count of the kernels' OpenMP loops and of OpenBLAS (see parallel.h).
#include "cpu/parallel.h"

#include <cblas.h>

#include <stdexcept>
#include <string>

namespace ds::cpu {

void set_threads(int n) {
  if (n < 1) throw std::invalid_argument("threads: count " + std::to_string(n) + " is not >= 1");
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int threads() { return omp_get_max_threads(); }

}  // namespace ds::cpu
