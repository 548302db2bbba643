// STUB (replaced by the sampling family work)
#include "ding/error.h"
#include "reference.h"

namespace ding::reference {

void argmax(Stream&, const ops::ArgmaxArgs&) { throw Error(ErrorCode::not_implemented, "reference argmax: stub"); }
void top_k(Stream&, const ops::TopKArgs&) { throw Error(ErrorCode::not_implemented, "reference top_k: stub"); }
void sample(Stream&, const ops::SampleArgs&) { throw Error(ErrorCode::not_implemented, "reference sample: stub"); }

}  // namespace ding::reference
