// Reference layer_norm and rms_norm, row by row over the last dimension C, in double.
//   layer_norm: Ba, Kiros & Hinton, "Layer Normalization" (2016), eq. 4; biased variance as in
//               torch.nn.LayerNorm (HF: GPT2Block.ln_1/ln_2).
//   rms_norm:   Zhang & Sennrich, "Root Mean Square Layer Normalization" (2019), eq. 4
//               (HF: LlamaRMSNorm).
// With a residual, h = x + residual is formed in double and normalised as is; sum_out receives h
// rounded to its dtype. sum_out may be x or residual itself, so each row is read whole before
// anything of it is written. Every row tensor has a contiguous last dimension (checked by the
// front end) and its own strides in the others: row r, column c is element row_offset(t, r) + c.
// Row r takes weight (and bias) row ops::weight_row(weight, r). A gate g multiplies rms_norm's
// output by silu(g) = g / (1 + e^−g).
#include <cmath>
#include <vector>

#include "reference.h"

namespace ding::reference {

namespace {

// h ← x (+ residual) for row r, then sum_out ← h if asked.
void load_row_sum(std::vector<double>& h, int64_t r, const Tensor& x, const Tensor& residual, const Tensor& sum_out) {
  const int64_t C = int64_t(h.size()), x_row = row_offset(x, r);
  const int64_t residual_row = residual.defined() ? row_offset(residual, r) : 0;
  for (int64_t c = 0; c < C; ++c) h[c] = load(x, x_row + c) + (residual.defined() ? load(residual, residual_row + c) : 0.0);
  if (sum_out.defined()) {
    const int64_t sum_row = row_offset(sum_out, r);
    for (int64_t c = 0; c < C; ++c) store(sum_out, sum_row + c, h[c]);
  }
}

}  // namespace

void layer_norm(Stream&, const ops::LayerNormArgs& a) {
  const int64_t C = a.x.dim(-1), rows = a.x.numel() / C;
  const ops::LayerNormParams& p = a.params;
  std::vector<double> h(static_cast<size_t>(C));
  for (int64_t r = 0; r < rows; ++r) {
    load_row_sum(h, r, a.x, p.residual, p.sum_out);
    double mean = 0;
    for (double v : h) mean += v;
    mean /= double(C);
    double var = 0;
    for (double v : h) var += (v - mean) * (v - mean);
    var /= double(C);
    const double rstd = 1.0 / std::sqrt(var + double(p.eps));
    const int64_t out_row = row_offset(a.out, r), w_row = ops::weight_row(a.weight, r) * C;
    for (int64_t c = 0; c < C; ++c) {
      const double bias = p.bias.defined() ? load(p.bias, w_row + c) : 0.0;
      store(a.out, out_row + c, (h[c] - mean) * rstd * load(a.weight, w_row + c) + bias);
    }
  }
}

void rms_norm(Stream&, const ops::RmsNormArgs& a) {
  const int64_t C = a.x.dim(-1), rows = a.x.numel() / C;
  const ops::RmsNormParams& p = a.params;
  std::vector<double> h(static_cast<size_t>(C));
  for (int64_t r = 0; r < rows; ++r) {
    load_row_sum(h, r, a.x, p.residual, p.sum_out);
    double mean_square = 0;
    for (double v : h) mean_square += v * v;
    mean_square /= double(C);
    const double rstd = 1.0 / std::sqrt(mean_square + double(p.eps));
    const int64_t out_row = row_offset(a.out, r), w_row = ops::weight_row(a.weight, r) * C;
    const int64_t gate_row = p.gate.defined() ? row_offset(p.gate, r) : 0;
    for (int64_t c = 0; c < C; ++c) {
      const double g = p.gate.defined() ? load(p.gate, gate_row + c) : 0.0;
      const double silu_gate = p.gate.defined() ? silu_value(g) : 1.0;
      store(a.out, out_row + c, h[c] * rstd * load(a.weight, w_row + c) * silu_gate);
    }
  }
}

}  // namespace ding::reference
