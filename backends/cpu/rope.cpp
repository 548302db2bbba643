// STUB (replaced by the rope family work)
#include "ding/error.h"
#include "kernels.h"

namespace ding::cpu {

void rope(Stream&, const ops::RopeArgs&) { throw Error(ErrorCode::not_implemented, "cpu rope: stub"); }

}  // namespace ding::cpu
