// Reference causal depthwise convolution with a rolling state (ops/conv.h): per sequence b and
// channel c, u = [state[b, :, c] ; x[b, :, c]] and
//   out[b, t, c] = act(bias[c] + Σ_{j<K} weight[c, j] · u[t + j]),   state[b, :, c] ← u[T …]
// as torch.nn.functional.conv1d(u, weight[:, None, :], bias, groups = C) computes it (the window
// of output t ends at input t, the kernel's last tap on the newest input), silu(v) = v·σ(v).
// Every output is computed from the old state before the new one is written.
#include <cmath>
#include <vector>

#include "reference.h"

namespace ding::reference {

void causal_conv1d(Stream&, const ops::CausalConv1dArgs& a) {
  const int64_t B = a.x.dim(0), T = a.x.dim(1), C = a.x.dim(2), K = a.weight.dim(1), S = K - 1;
  std::vector<double> u(size_t(S + T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c) {
      for (int64_t i = 0; i < S; ++i) u[size_t(i)] = load(a.state, offset(a.state, {b, i, c}));
      for (int64_t t = 0; t < T; ++t) u[size_t(S + t)] = load(a.x, offset(a.x, {b, t, c}));
      for (int64_t t = 0; t < T; ++t) {
        double v = a.bias.defined() ? load(a.bias, offset(a.bias, {c})) : 0.0;
        for (int64_t j = 0; j < K; ++j) v += load(a.weight, offset(a.weight, {c, j})) * u[size_t(t + j)];
        if (a.activation == ops::ConvActivation::silu) v = silu_value(v);
        store(a.out, offset(a.out, {b, t, c}), v);
      }
      for (int64_t i = 0; i < S; ++i) store(a.state, offset(a.state, {b, i, c}), u[size_t(T + i)]);
    }
}

}  // namespace ding::reference
