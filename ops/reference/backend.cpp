// The "ref" backend: host memory, and the reference implementation of every op as its kernels.
// It is the oracle of the parity tests, so it is slow on purpose and never optimised.
#include "../../runtime/src/host_device.h"
#include "ding/ops/kernels.h"
#include "reference.h"

namespace ding {

namespace {

const ops::Kernels& reference_kernels() {
  static const ops::Kernels k = [] {
    ops::Kernels t;
#define DING_REFERENCE_SLOT(op, Args) t.op = reference::op;
    DING_OP_LIST(DING_REFERENCE_SLOT)
#undef DING_REFERENCE_SLOT
    return t;
  }();
  return k;
}

}  // namespace

void register_reference_backend() {
  registry::add({"ref", [] { return true; },
                 [](int) { return std::make_unique<HostDevice>(host_caps("ref", 1), reference_kernels()); }});
}

}  // namespace ding
