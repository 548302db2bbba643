// STUB (replaced by the activation family work)
#include "ding/error.h"
#include "reference.h"

namespace ding::reference {

void gelu(Stream&, const ops::GeluArgs&) { throw Error(ErrorCode::not_implemented, "reference gelu: stub"); }
void silu(Stream&, const ops::SiluArgs&) { throw Error(ErrorCode::not_implemented, "reference silu: stub"); }
void swiglu(Stream&, const ops::SwigluArgs&) { throw Error(ErrorCode::not_implemented, "reference swiglu: stub"); }

}  // namespace ding::reference
