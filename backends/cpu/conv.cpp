// causal_conv1d on the CPU (ops/conv.h). Outputs are independent given the old state, so OpenMP
// takes blocks of output rows: row t of sequence b sums the K input rows u[t] … u[t + K − 1]
// (state rows, then x rows), widened to f32 into a ring as the window slides, each multiplied
// channel-wise by a tap of the weight (transposed to [K, C] f32 first, so every product runs along
// contiguous channels). The state is rolled afterwards, row by row from the oldest, which reads
// each old row before anything overwrites it.
#include <algorithm>

#include "kernels.h"
#include "scratch.h"
#include "simd.h"
#include "strided.h"
#include "vec_math.h"

namespace ding::cpu {

void causal_conv1d(Stream&, const ops::CausalConv1dArgs& a) {
  const int64_t B = a.x.dim(0), T = a.x.dim(1), C = a.x.dim(2), K = a.weight.dim(1), S = K - 1;
  // weight [C, K] → taps [K, C] in f32, and the bias, in the calling thread's scratch.
  float* const taps = thread_scratch(ScratchSlot::first, size_t(K * C + C));
  float* const bias = taps + K * C;
  {
    float* const w = thread_scratch(ScratchSlot::second, size_t(K * C));
    load_row(w, a.weight.data, a.weight.dtype, K * C);
    for (int64_t c = 0; c < C; ++c)
      for (int64_t j = 0; j < K; ++j) taps[j * C + c] = w[c * K + j];
  }
  if (a.bias.defined()) load_row(bias, a.bias.data, a.bias.dtype, C);
  else std::fill(bias, bias + C, 0.0f);

  // Blocks of kBlockRows output rows of one sequence per OpenMP item: a block widens its K − 1 + n
  // input rows to f32 once each, into a ring of K rows, so the window slides instead of reloading.
  constexpr int64_t kBlockRows = 64;
  const int64_t blocks_per_sequence = (T + kBlockRows - 1) / kBlockRows;
  auto load_u = [&](float* dst, int64_t b, int64_t i) {  // row i of u = [state ; x]
    if (i < S) load_row(dst, row_bytes(a.state, b * S + i), a.state.dtype, C);
    else load_row(dst, row_bytes(a.x, b * T + i - S), a.x.dtype, C);
  };
#pragma omp parallel for schedule(static) if (B * T * C * K >= (1 << 15))
  for (int64_t block = 0; block < B * blocks_per_sequence; ++block) {
    const int64_t b = block / blocks_per_sequence, t0 = block % blocks_per_sequence * kBlockRows;
    const int64_t t1 = std::min(T, t0 + kBlockRows);
    float* const ring = thread_scratch(ScratchSlot::third, size_t(K * C));  // u row i at slot i mod K
    float* const acc = thread_scratch(ScratchSlot::fourth, size_t(C));
    for (int64_t i = t0; i < t0 + S; ++i) load_u(ring + i % K * C, b, i);
    for (int64_t t = t0; t < t1; ++t) {
      load_u(ring + (t + S) % K * C, b, t + S);
      std::copy(bias, bias + C, acc);
      for (int64_t j = 0; j < K; ++j) {
        const float* const w = taps + j * C;
        const float* const in = ring + (t + j) % K * C;
        for (int64_t c = 0; c < C; ++c) acc[c] += w[c] * in[c];
      }
      if (a.activation == ops::ConvActivation::silu) silu_row(acc, C);
      store_row(row_bytes_out(a.out, b * T + t), a.out.dtype, acc, C);
    }
  }

  float* const row = thread_scratch(ScratchSlot::third, size_t(C));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < S; ++i) {  // new row i = u[T + i]: an old state row further on, or an x row
      if (T + i < S) load_row(row, row_bytes(a.state, b * S + T + i), a.state.dtype, C);
      else load_row(row, row_bytes(a.x, b * T + T + i - S), a.x.dtype, C);
      store_row(row_bytes_out(a.state, b * S + i), a.state.dtype, row, C);
    }
}

}  // namespace ding::cpu
