// STUB (replaced by the moe family work)
#include "ding/error.h"
#include "reference.h"

namespace ding::reference {

void moe_route(Stream&, const ops::MoeRouteArgs&) { throw Error(ErrorCode::not_implemented, "reference moe_route: stub"); }
void moe_group(Stream&, const ops::MoeGroupArgs&) { throw Error(ErrorCode::not_implemented, "reference moe_group: stub"); }
void moe_combine(Stream&, const ops::MoeCombineArgs&) { throw Error(ErrorCode::not_implemented, "reference moe_combine: stub"); }

}  // namespace ding::reference
