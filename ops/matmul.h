// matmul:       y = act(norm(x) · Wᵀ + bias) + residual      (the linear layer, weights row-major [N, K];
//               norm, optional, is the pre-norm of the block folded into the product)
//               Activation::swiglu (the gated FFN of Llama-family models) is the one activation that
//               changes the shapes: w is [2N, K] = [W_gate; W_up] stacked (rows 0..N−1 gate, N..2N−1 up:
//               HF's gate_proj and up_proj concatenated in that order), the optional bias is [2N], out is
//               [M, N] (or [B, M, N]) and
//                 out[m, j] = silu(g) · u + residual[m, j],  g = norm(x)[m]·w[j] + bias[j],
//                                                            u = norm(x)[m]·w[N + j] + bias[N + j]
//               with silu(g) = g·σ(g). The norm prologue works as for the other activations. Backends
//               compute g and u of a column side by side and combine them in registers or cache: the
//               [M, 2N] product is never written out.
// matmul_chain: y = A0 · A1 · … · An   computed in row chunks of A0 sized to the last-level cache,
//               so each chunk's intermediates stay in cache ("split W_E·W_V·W_O·W_U by rows of W_E").
//               Precision, the same on every backend: each product accumulates in f32; the
//               intermediates A0·…·Ai (i < n) are rounded to matmul_chain_intermediate_dtype():
//               bf16 when every factor is bf16, f16 when every factor is f16, else f32 (16-bit
//               chains then run on 16-bit hardware paths, tensor cores on a GPU, and keep twice as
//               many rows in cache); the last product is rounded once, to out's dtype.
#pragma once
#include <array>
#include <cstdint>

#include "ding/device.h"
#include "ding/ops/norm.h"
#include "ding/profile.h"
#include "ding/workspace.h"

namespace ding::ops {

enum class Activation : uint8_t { none, gelu_tanh, swiglu };

enum class NormKind : uint8_t { none, layer_norm, rms_norm };

// The optional prologue: every row of x normalised exactly as ops::layer_norm / ops::rms_norm
// (ding/ops/norm.h) define it, the result rounded to x's dtype as those ops' output would be, and
// that is what multiplies W. So "layer_norm into h, then matmul(h)" and "matmul(x, norm)" mean the
// same; a backend may fuse the two (the decode GEMV does), and then never writes h at all.
struct MatmulNorm {
  NormKind kind = NormKind::none;
  Tensor weight;     // [K]
  Tensor bias;       // [K], optional, layer_norm only
  float eps = 1e-5f;
};

struct MatmulParams {
  Tensor bias;                              // [N] ([2N] for swiglu), optional, any float dtype
  Activation activation = Activation::none; // applied after the bias, before the residual
  Tensor residual;                          // shaped like out, optional; may be out itself (in place)
  MatmulNorm norm;                          // applied to x first; kind none: x as given
};

// x: f32/f16/bf16. w: f32/f16/bf16, or quantized: i8 (symmetric) or f8e4m3 with one f32 scale per
// row (w.scales, every row of w in order, batches included), so that w[r, k] = q[r, k]·scale[r]; the
// kernels read the narrow values and widen them in registers, and apply the scale to each row's
// sum (exact in the reference's double, one f32 rounding in kernels). Accumulation is f32 in
// kernels, f64 in the reference. All tensors contiguous.
// E4M3 w beside 16-bit x over more than kMatmulDecodeRows rows of x (a prefill, not a decode
// step's batch) lets a backend round each row of x to E4M3 as well, with a scale of its own
// (max |x_row| / 448), so the product runs on E4M3 tensor cores (W8A8, as fp8 serving engines do):
// each element of x then carries up to 2^-4 relative error.
// i8 w beside 16-bit x (any rows) lets a backend round each row of x to integers on a grid of its
// own, a step of at most 2^-14 of the row's largest magnitude (|x·2^s| < 2^15: int16), so the
// products run in integers, exact (the CPU's madd over int16, the GPU's 8-bit integer mma over
// x's high and low bytes). The reference never rounds.
struct MatmulArgs {
  Tensor out;  // [M, N] or [B, M, N], f32/f16/bf16
  Tensor x;    // [M, K] or [B, M, K]
  Tensor w;    // [N, K] shared by every batch, or [B, N, K]; swiglu: [2N, K] or [B, 2N, K]
  MatmulParams params;
};

// Rows of x up to which a matmul is a decode step's: computed from x as given (above, see MatmulArgs).
inline constexpr int64_t kMatmulDecodeRows = 8;

// Whether a weight is stored quantized: i8 or f8e4m3 values with per-row scales.
inline bool quantized_weight(DType d) { return d == DType::i8 || d == DType::f8e4m3; }

class Check;
// MatmulNorm's checks for rows of K elements (weight and bias [K], eps > 0), each kept apart from
// `out`: for matmul's prologue and for other ops that take one.
void check_norm(const Check& c, const MatmulNorm& norm, int64_t K, const char* out_name, const Tensor& out);
void validate(const Device& device, const MatmulArgs& a);
Cost cost(const MatmulArgs& a);
// The prologue as the norm op it stands for, h ← norm(x) (x, weight, bias, eps from a), for a
// backend that runs it unfused: then matmul(h) without the prologue is the same product.
LayerNormArgs prologue_layer_norm(const MatmulArgs& a, const Tensor& h);
RmsNormArgs prologue_rms_norm(const MatmulArgs& a, const Tensor& h);
// For host-memory backends: h ← norm(x) into a host copy through the backend's own norm kernels,
// then the backend's matmul of h with the prologue removed.
struct HostKernels {
  void (*layer_norm)(Stream&, const LayerNormArgs&);
  void (*rms_norm)(Stream&, const RmsNormArgs&);
  void (*matmul)(Stream&, const MatmulArgs&);
};
void matmul_with_staged_prologue(Stream& stream, const MatmulArgs& a, const HostKernels& kernels);
void matmul(Stream& stream, Tensor out, Tensor x, Tensor w, const MatmulParams& params = {});

constexpr int kMaxChainFactors = 8;

struct MatmulChainParams {
  int64_t chunk_rows = 0;  // rows of A0 per chunk; 0 = chosen from the device's last-level cache
};

struct MatmulChainArgs {
  Tensor out;                                       // [R, Dn], f32/f16/bf16
  std::array<Tensor, kMaxChainFactors> factors{};   // A0 [R, D0], A1 [D0, D1], …, 2 ≤ count ≤ 8
  int count = 0;
  int64_t chunk_rows = 0;  // resolved by the front end (≥ 1)
  // 1-D, matmul_chain_intermediate_dtype(), ≥ matmul_chain_scratch_bytes(chunk_rows): two
  // ping-pong slots of S = matmul_chain_slot_elements(chunk_rows) elements (a chunk's A0·…·Ai,
  // 0 < i < n, lies row-major [cr, Di] at the start of slot i % 2, so a product never writes the
  // slot it reads), then from element 2·S the staging of 16-bit chains (see below).
  Tensor scratch;
};

void validate(const Device& device, const MatmulChainArgs& a);
Cost cost(const MatmulChainArgs& a);
// The dtype intermediates are rounded to (see the top of this file): from the factors only.
DType matmul_chain_intermediate_dtype(const MatmulChainArgs& a);
// Elements of one ping-pong slot for a chunk size: chunk_rows · max(D0..Dn-1), rounded up to 64
// (so slot 1 and the staging start as aligned as the scratch).
int64_t matmul_chain_slot_elements(const MatmulChainArgs& a, int64_t chunk_rows);
// Staging, 16-bit chains only (0 elements otherwise): room for a copy of each factor after the
// first, in the layout a backend's products want (a GPU's tensor cores read them transposed),
// factor i at element offset matmul_chain_staging_offset(i) of the staging, each rounded up to 64.
int64_t matmul_chain_staging_elements(const MatmulChainArgs& a);
int64_t matmul_chain_staging_offset(const MatmulChainArgs& a, int factor);
// The largest chunk whose two intermediates (in the intermediate dtype) fit in half of
// `llc_bytes`, leaving the other half to the factors streamed past them; at least 16 rows, at most R.
int64_t matmul_chain_chunk_rows(size_t llc_bytes, const MatmulChainArgs& a);
// Scratch the chain needs from a workspace for a given chunk size, in bytes: two slots + staging.
size_t matmul_chain_scratch_bytes(const MatmulChainArgs& a, int64_t chunk_rows);
// factors: A0..An; scratch comes from `workspace` (on the stream's device).
void matmul_chain(Stream& stream, Tensor out, const Tensor* factors, int count, Workspace& workspace,
                  const MatmulChainParams& params = {});

}  // namespace ding::ops
