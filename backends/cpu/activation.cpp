// STUB (replaced by the activation family work)
#include "ding/error.h"
#include "kernels.h"

namespace ding::cpu {

void gelu(Stream&, const ops::GeluArgs&) { throw Error(ErrorCode::not_implemented, "cpu gelu: stub"); }
void silu(Stream&, const ops::SiluArgs&) { throw Error(ErrorCode::not_implemented, "cpu silu: stub"); }
void swiglu(Stream&, const ops::SwigluArgs&) { throw Error(ErrorCode::not_implemented, "cpu swiglu: stub"); }

}  // namespace ding::cpu
