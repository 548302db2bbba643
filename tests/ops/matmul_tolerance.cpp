// The NMSE budgets of a matmul-like product (matmul, matmul_chain, moe_matmul): f32 sums against
// the reference's f64 ones, then the output's rounding; the derivations and measurements follow.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "op_cases.h"

namespace ding::testing {

namespace {

// Inputs are identical on both backends (rounded to their dtype before upload), so the only
// differences are the kernel's f32 sums against the reference's f64 ones, and the rounding of out.
// f32 out: f32 accumulation error grows like K·ε² in NMSE (ε = 2^-24, random-walk over K terms),
//   plus a few roundings that do not grow with K (bias add, GELU's exp, residual add, the store);
//   bound 10·(K + 8)·rounding_nmse(f32); measured ≤ 0.12 × that bound (worst of 300 seeds, K = 7).
// f16/bf16 out: both sides round to the same dtype, so elements differ by one step at most, and
//   only where the f32 sum straddles a rounding boundary (~K·ε/ulp of them). Measured ≤ 0.005 ×
//   rounding_nmse(out) (40 seeds) on large outputs. In small ones a single such flip decides:
//   one step at element i costs ulp_i²/Σy², up to 24·rounding_nmse·y_i²/Σy² (a full step, at the
//   bottom of a binade), and a Gaussian output's largest y_i² reaches ~16× the mean square. With
//   rounding_nmse/4 alone, M1_N64_K4096 (64 outputs, norm prologue) failed 3 of 400 seeds on the
//   CPU backend. Bound: the larger of rounding_nmse/4 and two such worst flips, 768·rounding_nmse
//   / elements (the same for outputs of ≥ 3072 elements).
double plain_tolerance(DType out, int64_t K, int64_t elements) {
  if (out == DType::f32) return 10.0 * double(K + 8) * rounding_nmse(DType::f32);
  return std::max(rounding_nmse(out) / 4, 768.0 * rounding_nmse(out) / double(elements));
}

std::string plain_reason(DType out, int64_t K) {
  if (out == DType::f32)
    return fmt::format("f32 sums of K = {} products vs f64 (NMSE ~ K·ε²) plus the epilogue's roundings: "
                       "bound 10·(K + 8)·rounding_nmse(f32)", K);
  return fmt::format("both sides round the output to {}: a few elements one step apart, bound "
                     "max(rounding_nmse({})/4, two worst-case flips: 768·rounding_nmse/elements)",
                     dtype_name(out), dtype_name(out));
}

// swiglu: y = silu(g)·u from two sums, each carrying the f32 error of a plain output.
// f32 out: δy = silu'(g)·u·δg + silu(g)·δu, so E[δy²] ≈ (E[silu'(g)²] + E[silu(g)²])·δ² ≈ 0.7·δ²
//   for unit-scale g and u, while E[y²] = E[silu(g)²] ≈ 0.36 against 1 for a plain output: about
//   twice the plain NMSE, plus the epilogue's exp and products. Bound 20·(K + 8)·rounding_nmse(f32),
//   twice the plain one; measured ≤ 0.21 × that (CPU backend, 300 seeds, M1_N33_K7).
// f16/bf16 out: the same rounding-noise floor as plain outputs, rounding_nmse/4, or two flips
//   (flip_nmse) on outputs as large as y gets: y is a product of two Gaussians' worth, so its
//   largest square among 10⁵ draws reaches ~200× the mean square (10⁴: ~130×), where a plain
//   Gaussian output's stays under 16×. Measured ≤ 0.12 × the bound (CPU, 300 seeds, M257_N77_K72
//   f16; the six largest cases 20 seeds).
constexpr double kSwigluPeak = 200.0;
double swiglu_tolerance(DType out, int64_t K, int64_t elements) {
  if (out == DType::f32) return 20.0 * double(K + 8) * rounding_nmse(DType::f32);
  return std::max(rounding_nmse(out) / 4, flip_nmse(out, elements, kSwigluPeak, 2));
}

std::string swiglu_reason(DType out, int64_t K) {
  if (out == DType::f32)
    return fmt::format("swiglu: silu(g)·u of two f32 sums of K = {} products vs f64, ~2× a plain output's NMSE "
                       "(δg and δu both reach y; E[y²] ≈ 0.36): bound 20·(K + 8)·rounding_nmse(f32)", K);
  return fmt::format("swiglu: both sides round the output to {}: bound max(rounding_nmse/4, two flips on outputs "
                     "up to 200× the mean square: flip_nmse)", dtype_name(out));
}

}  // namespace

// x rounded to E4M3 row by row (scale = max |x_row| / 448, so the scaled row lies in E4M3's range;
// only elements below 2^-6 of the scale's unit, 2^-15 of the row's largest, fall to subnormals):
// round to nearest with 3 mantissa bits gives each element x_k(1 + δ_k), |δ_k| ≤ 2^-4. An output
// y = Σ x_k w_k over independent terms then errs by e = Σ x_k δ_k w_k, E[e²] ≤ 2^-8·Σ x_k² w_k² =
// 2^-8·E[y²]: NMSE ≤ 2^-8 (δ uniform over its interval: a third of that). swiglu's gate and up sums
// both carry it into y: twice. Bias and residual only add exact terms to y.
double e4m3_x_nmse(bool swiglu) { return (swiglu ? 2.0 : 1.0) / 256.0; }

std::string e4m3_x_reason(bool swiglu) {
  return fmt::format("; x may be rounded to E4M3 per row (ops/matmul.h): |δ| ≤ 2^-4 per element, + {}",
                     swiglu ? "2·2^-8 (both swiglu sums)" : "2^-8");
}

// x rounded to integers row by row (i8 w beside 16-bit x): each element to a grid of step h ≤
// 2^-14 of the row's largest magnitude (the GPU's power of two; the CPU's 1/32767 is finer), an
// error uniform in ±h/2, so E[δ²] ≤ 2^-28·peak²/12. An output y = Σ x_k w_k then errs by
// e = Σ δ_k w_k with E[e²]/E[y²] = Σδ_k²/Σx_k² ≤ K·2^-30/3, since peak² ≤ Σx_k². swiglu: twice.
double int16_x_nmse(int64_t K, bool swiglu) { return (swiglu ? 2.0 : 1.0) * double(K) * std::ldexp(1.0, -30) / 3.0; }

std::string int16_x_reason(int64_t K, bool swiglu) {
  return fmt::format("; x may be rounded to integers per row for i8 w (ops/matmul.h): step ≤ 2^-14 of the row's "
                     "largest, + {}K·2^-30/3 (K = {})", swiglu ? "2·" : "", K);
}

double matmul_tolerance(DType out, int64_t K, int64_t elements, bool swiglu) {
  return swiglu ? swiglu_tolerance(out, K, elements) : plain_tolerance(out, K, elements);
}

std::string matmul_reason(DType out, int64_t K, bool swiglu) {
  return swiglu ? swiglu_reason(out, K) : plain_reason(out, K);
}

}  // namespace ding::testing
