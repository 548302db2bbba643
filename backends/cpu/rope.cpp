// Rotary position embedding on the CPU, in two parallel phases:
//  1. f·cos φ and f·sin φ (f = attention_factor) for every (token, i), once per token rather than
//     once per head. The angle φ = pos · θ_i (θ_i = θ^(−2i/R), or widened from the inv_freq table)
//     and its cos/sin are computed in double and only then rounded to f32:
//     in f32, pos·freq near pos = 8192 already carries an absolute error of ~5·10⁻⁴ rad (half
//     an ulp of 8192), which would dominate the error of the whole op. The table costs
//     tokens·R/2 double sincos calls, small beside the tokens·H·D elements rotated.
//  2. OpenMP over (token, head) rows: the row is widened into an f32 scratch row (whole, so
//     out == x is safe), its first R dims rotated with AVX2, and narrowed into out; dims ≥ R
//     travel through unchanged.
#include <cmath>
#include <vector>

#include "kernels.h"
#include "simd.h"

namespace ding::cpu {

namespace {

// Pairs (v[i], v[i + R/2]), i < R/2.
void rotate_neox(float* v, int64_t R, const float* cos, const float* sin) {
  const int64_t half = R / 2;
  float* lo = v;
  float* hi = v + half;
  int64_t i = 0;
#ifdef DING_CPU_AVX2
  for (; i + 8 <= half; i += 8) {
    const __m256 a = _mm256_loadu_ps(lo + i), b = _mm256_loadu_ps(hi + i);
    const __m256 c = _mm256_loadu_ps(cos + i), s = _mm256_loadu_ps(sin + i);
    _mm256_storeu_ps(lo + i, _mm256_fmsub_ps(a, c, _mm256_mul_ps(b, s)));
    _mm256_storeu_ps(hi + i, _mm256_fmadd_ps(a, s, _mm256_mul_ps(b, c)));
  }
#endif
  for (; i < half; ++i) {
    const float a = lo[i], b = hi[i];
    lo[i] = a * cos[i] - b * sin[i];
    hi[i] = a * sin[i] + b * cos[i];
  }
}

// Pairs (v[2i], v[2i+1]), i < R/2. A vector holds four pairs [a0 b0 a1 b1 …]; with cos and sin
// duplicated per pair, fmaddsub gives a·c − b·s in even lanes and b·c + a·s in odd lanes.
void rotate_interleaved(float* v, int64_t R, const float* cos, const float* sin) {
  const int64_t half = R / 2;
  int64_t i = 0;
#ifdef DING_CPU_AVX2
  const __m256i duplicate_pairs = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
  for (; i + 4 <= half; i += 4) {
    const __m256 x = _mm256_loadu_ps(v + 2 * i);
    const __m256 swapped = _mm256_permute_ps(x, 0b10110001);  // [b0 a0 b1 a1 …]
    const __m256 c = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(cos + i)), duplicate_pairs);
    const __m256 s = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(sin + i)), duplicate_pairs);
    _mm256_storeu_ps(v + 2 * i, _mm256_fmaddsub_ps(x, c, _mm256_mul_ps(swapped, s)));
  }
#endif
  for (; i < half; ++i) {
    const float a = v[2 * i], b = v[2 * i + 1];
    v[2 * i] = a * cos[i] - b * sin[i];
    v[2 * i + 1] = a * sin[i] + b * cos[i];
  }
}

}  // namespace

void rope(Stream&, const ops::RopeArgs& a) {
  const ops::RopeParams& p = a.params;
  const int64_t T = a.x.dim(1), H = a.x.dim(2), D = a.x.dim(3);
  const int64_t R = p.rotary_dim == 0 ? D : p.rotary_dim, half = R / 2;
  const int64_t tokens = a.x.dim(0) * T, rows = tokens * H;
  const int32_t* positions = p.positions.defined() ? p.positions.ptr<int32_t>() : nullptr;

  const float* table = p.inv_freq.defined() ? p.inv_freq.ptr<const float>() : nullptr;
  std::vector<double> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    inv_freq[i] = table ? double(table[i]) : std::pow(double(p.theta), -2.0 * double(i) / double(R));
  const double f = p.attention_factor;
  std::vector<float> cos(size_t(tokens * half)), sin(size_t(tokens * half));  // [tokens, R/2]
#pragma omp parallel for schedule(static) if (tokens * half >= 4096)
  for (int64_t n = 0; n < tokens; ++n) {
    const double pos = positions ? double(positions[n] + p.position_offset) : double(p.position_offset + n % T);
    for (int64_t i = 0; i < half; ++i) {
      const double phi = pos * inv_freq[i];
      cos[n * half + i] = float(f * std::cos(phi));
      sin[n * half + i] = float(f * std::sin(phi));
    }
  }

  const char* x = static_cast<const char*>(a.x.data);
  char* out = static_cast<char*>(a.out.data);
  // Row r = (token n = b·T + t, head h) starts at b·s0 + t·s1 + h·s2 elements (views of a fused product).
  auto row_bytes = [T, H](const Tensor& t, int64_t r) {
    const int64_t n = r / H, h = r % H;
    return size_t((n / T) * t.stride(0) + (n % T) * t.stride(1) + h * t.stride(2)) * dtype_size(t.dtype);
  };
#pragma omp parallel if (rows * D >= (1 << 14))
  {
    std::vector<float> v(static_cast<size_t>(D));  // one scratch row per thread
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t n = r / H;  // the token this head belongs to
      load_row(v.data(), x + row_bytes(a.x, r), a.x.dtype, D);
      if (p.layout == ops::RopeLayout::neox)
        rotate_neox(v.data(), R, &cos[n * half], &sin[n * half]);
      else
        rotate_interleaved(v.data(), R, &cos[n * half], &sin[n * half]);
      store_row(out + row_bytes(a.out, r), a.out.dtype, v.data(), D);
    }
  }
}

}  // namespace ding::cpu
