// STUB (replaced by the matmul family work)
#include "ding/error.h"
#include "kernels.h"

namespace ding::cpu {

void matmul(Stream&, const ops::MatmulArgs&) { throw Error(ErrorCode::not_implemented, "cpu matmul: stub"); }
void matmul_chain(Stream&, const ops::MatmulChainArgs&) { throw Error(ErrorCode::not_implemented, "cpu matmul_chain: stub"); }

}  // namespace ding::cpu
