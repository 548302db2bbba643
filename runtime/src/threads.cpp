#include "ding/threads.h"

#include <fmt/format.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "ding/error.h"

namespace ding {

void set_cpu_threads(int n) {
  if (n < 1) throw Error(ErrorCode::invalid_argument, fmt::format("set_cpu_threads: n must be ≥ 1, got {}", n));
#ifdef _OPENMP
  omp_set_num_threads(n);
#else
  if (n > 1)
    throw Error(ErrorCode::not_implemented,
                fmt::format("set_cpu_threads({}): this build has no OpenMP (DING_OPENMP=OFF), so it runs 1 thread", n));
#endif
}

int cpu_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

}  // namespace ding
