// STUB (replaced by the rope family work)
#include "ding/error.h"
#include "reference.h"

namespace ding::reference {

void rope(Stream&, const ops::RopeArgs&) { throw Error(ErrorCode::not_implemented, "reference rope: stub"); }

}  // namespace ding::reference
