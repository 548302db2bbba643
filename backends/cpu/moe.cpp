// STUB (replaced by the moe family work)
#include "ding/error.h"
#include "kernels.h"

namespace ding::cpu {

void moe_route(Stream&, const ops::MoeRouteArgs&) { throw Error(ErrorCode::not_implemented, "cpu moe_route: stub"); }
void moe_group(Stream&, const ops::MoeGroupArgs&) { throw Error(ErrorCode::not_implemented, "cpu moe_group: stub"); }
void moe_combine(Stream&, const ops::MoeCombineArgs&) { throw Error(ErrorCode::not_implemented, "cpu moe_combine: stub"); }

}  // namespace ding::cpu
