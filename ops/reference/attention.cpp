// STUB (replaced by the attention family work)
#include "ding/error.h"
#include "reference.h"

namespace ding::reference {

void attention_prefill(Stream&, const ops::AttentionPrefillArgs&) { throw Error(ErrorCode::not_implemented, "reference attention_prefill: stub"); }
void attention_decode(Stream&, const ops::AttentionDecodeArgs&) { throw Error(ErrorCode::not_implemented, "reference attention_decode: stub"); }

}  // namespace ding::reference
