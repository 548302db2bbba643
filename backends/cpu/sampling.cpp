// STUB (replaced by the sampling family work)
#include "ding/error.h"
#include "kernels.h"

namespace ding::cpu {

void argmax(Stream&, const ops::ArgmaxArgs&) { throw Error(ErrorCode::not_implemented, "cpu argmax: stub"); }
void top_k(Stream&, const ops::TopKArgs&) { throw Error(ErrorCode::not_implemented, "cpu top_k: stub"); }
void sample(Stream&, const ops::SampleArgs&) { throw Error(ErrorCode::not_implemented, "cpu sample: stub"); }

}  // namespace ding::cpu
