// STUB (replaced by the attention family work)
#include "ding/error.h"
#include "kernels.h"

namespace ding::cpu {

void attention_prefill(Stream&, const ops::AttentionPrefillArgs&) { throw Error(ErrorCode::not_implemented, "cpu attention_prefill: stub"); }
void attention_decode(Stream&, const ops::AttentionDecodeArgs&) { throw Error(ErrorCode::not_implemented, "cpu attention_decode: stub"); }

}  // namespace ding::cpu
