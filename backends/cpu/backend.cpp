// The "cpu" backend: host memory, OpenMP threads, and the kernels of backends/cpu/.
#ifdef _OPENMP
#include <omp.h>
#endif

#include "../../runtime/src/host_device.h"
#include "kernels.h"

namespace ding {

namespace {

int max_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

const ops::Kernels& cpu_kernels() {
  static const ops::Kernels k = [] {
    ops::Kernels t;
#define DING_CPU_SLOT(op, Args) t.op = cpu::op;
    DING_OP_LIST(DING_CPU_SLOT)
#undef DING_CPU_SLOT
    return t;
  }();
  return k;
}

}  // namespace

void register_cpu_backend() {
  registry::add({"cpu", [] { return true; },
                 [](int) { return std::make_unique<HostDevice>(host_caps("cpu", max_threads()), cpu_kernels()); }});
}

}  // namespace ding
