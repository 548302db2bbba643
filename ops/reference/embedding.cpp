// STUB (replaced by the embedding family work)
#include "ding/error.h"
#include "reference.h"

namespace ding::reference {

void embedding(Stream&, const ops::EmbeddingArgs&) { throw Error(ErrorCode::not_implemented, "reference embedding: stub"); }

}  // namespace ding::reference
