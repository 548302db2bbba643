// STUB (replaced by the matmul family work)
#include "ding/error.h"
#include "reference.h"

namespace ding::reference {

void matmul(Stream&, const ops::MatmulArgs&) { throw Error(ErrorCode::not_implemented, "reference matmul: stub"); }
void matmul_chain(Stream&, const ops::MatmulChainArgs&) { throw Error(ErrorCode::not_implemented, "reference matmul_chain: stub"); }

}  // namespace ding::reference
