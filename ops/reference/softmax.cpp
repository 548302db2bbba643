// Reference softmax over the last dimension, in double:
//   y_j = exp(s·x_j − m) / Σ_k exp(s·x_k − m),  m = max_k s·x_k,  over the kept columns k,
// with the causal mask of ops/softmax.h (row i of each [Tq, Tk] block keeps j ≤ i + Tk − Tq;
// masked outputs are 0). Subtracting the max is the usual overflow guard (HF transformers:
// torch.softmax after masked_fill(-inf) in the attention modules).
// The tensors are contiguous (checked by the front end), so row r, column j is element r·Tk + j.
#include <cmath>
#include <limits>
#include <vector>

#include "reference.h"

namespace ding::reference {

void softmax(Stream&, const ops::SoftmaxArgs& a) {
  const int64_t Tk = a.x.dim(-1), rows = a.x.numel() / Tk;
  const int64_t Tq = a.params.causal ? a.x.dim(-2) : 1;
  const double s = a.params.scale;
  std::vector<double> logits(size_t(Tk), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t kept = a.params.causal ? r % Tq + (Tk - Tq) + 1 : Tk;  // columns [0, kept)
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < kept; ++j) {
      logits[j] = s * load(a.x, r * Tk + j);  // read the whole row first: out may be x
      m = std::max(m, logits[j]);
    }
    double sum = 0;
    for (int64_t j = 0; j < kept; ++j) sum += std::exp(logits[j] - m);
    for (int64_t j = 0; j < Tk; ++j) store(a.out, r * Tk + j, j < kept ? std::exp(logits[j] - m) / sum : 0.0);
  }
}

}  // namespace ding::reference
