// matmul and matmul_chain. Each team of matmul computes a block of kColumns outputs of up to
// kDotRows rows, a thread per output, accumulating the K products in f32 over w's stored type
// (dot_rows() of elements.h: w's dtype is dispatched once per output, not per product) and the
// rows of x, which the team widens to f32 once in its scratch. matmul's epilogue
// (bias, activation, residual) runs on the accumulator before the one rounding to out's dtype;
// its norm prologue is the norm kernel into a temporary in x's dtype, as ops/matmul.h defines it.
// A quantized w's 8-bit values widen like the 16-bit floats; its row scale multiplies the sum.
#include "elements.h"
#include "kernels.h"

namespace ding::kokkos {

namespace {

constexpr int64_t kColumns = 64;

// Teams for `rows` rows of `columns` outputs, kColumns per team.
TeamPolicy row_blocks(int64_t rows, int64_t columns) {
  return TeamPolicy(int(rows * ((columns + kColumns - 1) / kColumns)), Kokkos::AUTO);
}

// out = act(x · wᵀ + bias) + residual for contiguous x [B?, M, K], w [B?, N(·2), K], out [B?, M, N]:
// a team per (batch, kDotRows rows of x, kColumns outputs), each weight row read once for the
// team's rows (dot_rows).
void matmul_plain(const ops::MatmulArgs& a) {
  const int64_t M = a.x.dim(-2), K = a.x.dim(-1), N = a.out.dim(-1);
  const int64_t batches = a.x.numel() / K / M, row_groups = (M + kDotRows - 1) / kDotRows, blocks = (N + kColumns - 1) / kColumns;
  const int64_t w_batch = a.w.rank == 3 ? a.w.dim(-2) * K : 0;  // elements between batches of w
  const Elements out = elements(a.out), x = elements(a.x), w = elements(a.w), bias = elements(a.params.bias),
                 residual = elements(a.params.residual);
  const ops::Activation activation = a.params.activation;
  // A quantized w's row scales: batch b's rows start at b·w_rows.
  const float* const scales = a.w.scales;
  const int64_t w_rows = a.w.dim(-2), scale_batch = a.w.rank == 3 ? w_rows : 0;
  const int64_t room = M < kDotRows ? M : kDotRows;
  const TeamPolicy teams = with_row_scratch(TeamPolicy(int(batches * row_groups * blocks), Kokkos::AUTO), K, room);
  Kokkos::parallel_for("ding::matmul", teams, KOKKOS_LAMBDA(const Team& team) {
    const int64_t n0 = team.league_rank() % blocks * kColumns, group = team.league_rank() / blocks;
    const int64_t batch = group / row_groups, m0 = group % row_groups * kDotRows;
    const int R = int(M - m0 < kDotRows ? M - m0 : kDotRows);
    const int64_t n_end = n0 + kColumns < N ? n0 + kColumns : N;
    const int64_t row0 = batch * M + m0, w_at = batch * w_batch, scale_at = batch * scale_batch;
    const ScratchFloats xs = widened_rows(team, x, row0 * K, K, R, room);
    // Weight row r's scale (1 unless w is quantized) and bias (0 if none), the same for every row of x.
    auto scale_of = [&](int64_t r) { return scales ? scales[scale_at + r] : 1.0f; };
    auto bias_of = [&](int64_t r) { return bias.defined() ? bias.load(r) : 0.0f; };
    const bool swiglu = activation == ops::Activation::swiglu;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n0, n_end), [&](const int64_t n) {
      float acc[kDotRows], up[kDotRows];
      dot_rows(xs.data(), K, R, w, w_at + n * K, acc);
      // [W_gate; W_up]: the up row N + n beside the gate row n.
      if (swiglu) dot_rows(xs.data(), K, R, w, w_at + (N + n) * K, up);
      const float scale = scale_of(n), shift = bias_of(n);
      const float up_scale = swiglu ? scale_of(N + n) : 0.0f, up_shift = swiglu ? bias_of(N + n) : 0.0f;
      for (int r = 0; r < R; ++r) {
        float y = scale * acc[r] + shift;
        if (activation == ops::Activation::gelu_tanh) y = gelu_tanh(y);
        if (swiglu) y = silu(y) * (up_scale * up[r] + up_shift);
        // The residual is read before out is written: they may be one tensor.
        const int64_t at = (row0 + r) * N + n;
        if (residual.defined()) y += residual.load(at);
        out.store(at, y);
      }
    });
  });
}

// dst[r, j] = Σ_k src[r, k] · f[k, j] for `rows` rows: one product of matmul_chain.
void chain_product(Elements dst, int64_t dst_at, Elements src, int64_t src_at, const Tensor& f, int64_t rows) {
  const int64_t K = f.dim(0), J = f.dim(1), blocks = (J + kColumns - 1) / kColumns;
  const Elements factor = elements(f);
  Kokkos::parallel_for("ding::matmul_chain", row_blocks(rows, J), KOKKOS_LAMBDA(const Team& team) {
    const int64_t r = team.league_rank() / blocks, j0 = team.league_rank() % blocks * kColumns;
    const int64_t j_end = j0 + kColumns < J ? j0 + kColumns : J;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, j0, j_end), [&](const int64_t j) {
      dst.store(dst_at + r * J + j, dot(src, src_at + r * K, factor, j, J, K));
    });
  });
}

}  // namespace

void matmul(Stream& stream, const ops::MatmulArgs& a) {
  if (a.params.norm.kind == ops::NormKind::none) return matmul_plain(a);
  const Buffer staged = temporary(stream, a.x.nbytes());
  const Tensor h = Tensor::view(staged.data(), a.x.device, a.x.dtype, a.x.shape.data(), a.x.rank);
  if (a.params.norm.kind == ops::NormKind::layer_norm)
    layer_norm(stream, ops::prologue_layer_norm(a, h));
  else
    rms_norm(stream, ops::prologue_rms_norm(a, h));
  ops::MatmulArgs plain = a;
  plain.x = h;
  plain.params.norm = {};
  matmul_plain(plain);
  stream.synchronize();  // before `staged` is freed
}

// Chunks of chunk_rows rows of A0 go through the chain one product at a time; the
// intermediates alternate between the scratch's two slots in the chain's intermediate dtype.
void matmul_chain(Stream&, const ops::MatmulChainArgs& a) {
  const int64_t R = a.factors[0].dim(0), slot = ops::matmul_chain_slot_elements(a, a.chunk_rows);
  const Elements scratch = elements(a.scratch), out = elements(a.out);
  for (int64_t r0 = 0; r0 < R; r0 += a.chunk_rows) {
    const int64_t rows = a.chunk_rows < R - r0 ? a.chunk_rows : R - r0;
    Elements src = elements(a.factors[0]);
    int64_t src_at = r0 * a.factors[0].dim(1);
    for (int i = 1; i < a.count; ++i) {
      const bool last = i == a.count - 1;
      const Elements dst = last ? out : scratch;
      const int64_t dst_at = last ? r0 * a.out.dim(1) : (i % 2) * slot;
      chain_product(dst, dst_at, src, src_at, a.factors[i], rows);
      src = dst;
      src_at = dst_at;
    }
  }
}

}  // namespace ding::kokkos
