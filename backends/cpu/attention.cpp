// CPU attention. Online softmax over blocks of keys (FlashAttention, Dao et al. 2022): each query
// row keeps a running max m, denominator l and unnormalised output acc, rescaled when m grows, so
// no Tq×Tk score matrix exists. Prefill tasks gather the query rows that read one kv head (the
// group's heads × a run of positions), so a block of K/V rows is fetched from memory once and
// reused from cache by all of them. Decode tasks take the heads of a run of kv heads over one
// fixed chunk of keys; the chunks' partial (m, l, acc) are combined afterwards (flash-decoding),
// so batch 1 still fills every core. A sliding window narrows each row's keys to the band
// [p − window + 1, p]: prefill tasks start at the first key their first row sees, and decode
// splits cover only the window's keys.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "vec_math.h"
#include "ding/error.h"
#include "ding/ops/attention.h"
#include "kernels.h"
#include "simd.h"

namespace ding::cpu {
namespace {

constexpr int64_t kKeyBlock = 32;       // keys scored per step: every row's block of scores stays in L1
constexpr int64_t kPrefillRows = 16;    // query rows per prefill task (group heads × positions)
constexpr int64_t kKeysPerSplit = 64;  // decode chunk; fixed, so results do not depend on the thread count
constexpr int64_t kPrefetchKeys = 8;   // how far ahead of the scores the key rows are asked for

// Scores of 4 consecutive keys (rows k_step apart): four independent FMA chains hide the FMA
// latency, and one horizontal reduction serves all four.
template <class T>
void dot4(const float* q, const T* k, int64_t k_step, int64_t D, float* score) {
  const T *k0 = k, *k1 = k + k_step, *k2 = k + 2 * k_step, *k3 = k + 3 * k_step;
  int64_t d = 0;
  float s[4] = {0, 0, 0, 0};
#ifdef DING_CPU_AVX2
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  for (; d + 8 <= D; d += 8) {
    const __m256 qd = load8(q + d);
    a0 = _mm256_fmadd_ps(qd, load8(k0 + d), a0);
    a1 = _mm256_fmadd_ps(qd, load8(k1 + d), a1);
    a2 = _mm256_fmadd_ps(qd, load8(k2 + d), a2);
    a3 = _mm256_fmadd_ps(qd, load8(k3 + d), a3);
  }
  // [a0 a1 a2 a3] lane sums: two rounds of pairwise adds, then the two 128-bit halves.
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  _mm_storeu_ps(s, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
#endif
  for (; d < D; ++d) {
    s[0] += q[d] * widen(k0[d]);
    s[1] += q[d] * widen(k1[d]);
    s[2] += q[d] * widen(k2[d]);
    s[3] += q[d] * widen(k3[d]);
  }
  for (int i = 0; i < 4; ++i) score[i] = s[i];
}

// acc += Σ_i p[i] · v_i over 4 consecutive value rows: acc crosses the load/store ports once.
template <class T>
void axpy4(float* acc, const float* p, const T* v, int64_t v_step, int64_t D) {
  const T *v0 = v, *v1 = v + v_step, *v2 = v + 2 * v_step, *v3 = v + 3 * v_step;
  int64_t d = 0;
#ifdef DING_CPU_AVX2
  const __m256 p0 = _mm256_set1_ps(p[0]), p1 = _mm256_set1_ps(p[1]), p2 = _mm256_set1_ps(p[2]),
               p3 = _mm256_set1_ps(p[3]);
  for (; d + 8 <= D; d += 8) {
    __m256 a = _mm256_fmadd_ps(p0, load8(v0 + d), load8(acc + d));
    a = _mm256_fmadd_ps(p1, load8(v1 + d), a);
    a = _mm256_fmadd_ps(p2, load8(v2 + d), a);
    store8(acc + d, _mm256_fmadd_ps(p3, load8(v3 + d), a));
  }
#endif
  for (; d < D; ++d)
    acc[d] += p[0] * widen(v0[d]) + p[1] * widen(v1[d]) + p[2] * widen(v2[d]) + p[3] * widen(v3[d]);
}

// Asks for 4 rows of D elements, `step` elements apart, into L2.
template <class T>
void prefetch4(const T* p, int64_t step, int64_t D) {
  const int64_t bytes = D * int64_t(sizeof(T));
  for (int i = 0; i < 4; ++i)
    for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(reinterpret_cast<const char*>(p + i * step) + b, 0, 2);
}

void scale_in_place(float* x, float a, int64_t n) {
  int64_t i = 0;
#ifdef DING_CPU_AVX2
  const __m256 av = _mm256_set1_ps(a);
  for (; i + 8 <= n; i += 8) store8(x + i, _mm256_mul_ps(av, load8(x + i)));
#endif
  for (; i < n; ++i) x[i] *= a;
}

// x[i] = e^(x[i] - shift); returns Σ x[i].
float exp_shifted_sum(float* x, float shift, int64_t n) {
  int64_t i = 0;
  float sum = 0;
#ifdef DING_CPU_AVX2
  const __m256 sv = _mm256_set1_ps(shift);
  __m256 total = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp8(_mm256_sub_ps(load8(x + i), sv));
    store8(x + i, e);
    total = _mm256_add_ps(total, e);
  }
  sum = hsum(total);
#endif
  for (; i < n; ++i) sum += x[i] = std::exp(x[i] - shift);
  return sum;
}

// The query rows of one task, all reading the same kv head, each with its online-softmax state.
struct RowBlock {
  int64_t count = 0, D = 0;
  float* q = nullptr;        // [count, D], pre-multiplied by the scale
  int64_t* first = nullptr;  // [count]: row r sees keys [first[r], keys[r])
  int64_t* keys = nullptr;   // [count]
  int64_t* k_at = nullptr;   // [count]: element offset of row r's kv head from the k passed to attend_keys
  int64_t* v_at = nullptr;   // [count]: the same into v
  float* score = nullptr;    // [count, kKeyBlock]: the current block's scores, then weights
  float* m = nullptr;        // [count] running max of the scores seen
  float* l = nullptr;        // [count] Σ e^(s - m)
  float* acc = nullptr;      // [count, D] Σ e^(s - m) · v
};

// Per-thread scratch, grown to the largest task seen and then reused: nothing allocated per row.
struct Scratch {
  std::vector<float> floats;
  std::vector<int64_t> keys;
};

// Carves the q/keys/score arrays (and, unless the caller supplies them, m/l/acc) from `s`.
RowBlock row_block(Scratch& s, int64_t count, int64_t D, bool own_state) {
  const size_t need = size_t(count * (D + kKeyBlock) + (own_state ? count * (D + 2) : 0));
  if (s.floats.size() < need) s.floats.resize(need);
  if (s.keys.size() < size_t(4 * count)) s.keys.resize(size_t(4 * count));
  RowBlock rows;
  rows.count = count;
  rows.D = D;
  rows.q = s.floats.data();
  rows.score = rows.q + count * D;
  rows.first = s.keys.data();
  rows.keys = rows.first + count;
  rows.k_at = rows.keys + count;
  rows.v_at = rows.k_at + count;
  if (own_state) {
    rows.m = rows.score + count * kKeyBlock;
    rows.l = rows.m + count;
    rows.acc = rows.l + count;
  }
  return rows;
}

void reset_state(RowBlock& rows) {
  std::fill_n(rows.m, rows.count, -std::numeric_limits<float>::infinity());
  std::fill_n(rows.l, rows.count, 0.0f);
  std::fill_n(rows.acc, rows.count * rows.D, 0.0f);
}

// Row r of `rows` := scale · the query at byte address q_row (dtype `dtype`).
void load_query(RowBlock& rows, int64_t r, const void* q_row, DType dtype, float scale) {
  float* dst = rows.q + r * rows.D;
  load_row(dst, q_row, dtype, rows.D);
  scale_in_place(dst, scale, rows.D);
}

// Row r's online-softmax state takes the n scores of its current block (rows.score): the running
// max moves up to theirs (rescaling what was summed under the old max, 0 on the first block), and
// the scores become their weights e^(s − m), summed into l.
void fold_scores(RowBlock& rows, int64_t r, int64_t n) {
  float* s = rows.score + r * kKeyBlock;
  const float m_new = std::max(rows.m[r], *std::max_element(s, s + n));
  if (m_new > rows.m[r]) {
    const float rescale = std::exp(rows.m[r] - m_new);
    scale_in_place(rows.acc + r * rows.D, rescale, rows.D);
    rows.l[r] *= rescale;
    rows.m[r] = m_new;
  }
  rows.l[r] += exp_shifted_sum(s, m_new, n);
}

// Folds keys [begin, end) (clipped to each row's visible range) into every row's state.
// k/v point at slot 0 of the kv head's cache of `slots` slots, key j at slot j mod slots (a rolling
// cache; j itself below `slots`); k_step/v_step are the element strides between slots. A block of
// keys never crosses a multiple of `slots`, so its rows stay consecutive in memory. Rows run inside
// a block of keys, so the block's K/V rows come from memory for the first row and from L1/L2 for
// the rest of the group.
// Where every row sees the whole block (decode, and prefill rows past the block), its three
// passes run key by key across the rows instead: the rows are heads of consecutive kv heads, so
// each pass walks the block's cache rows in address order, where row by row it would take each
// head's 2 or 4 cache lines a whole cache row ([Hkv, D]) apart (16-bit MHA decode ran at a fifth
// of the bandwidth). The hardware prefetchers alone left a cold cache's rows arriving while the
// core waited (decode at 40–50 % of a core pair's read bandwidth), so the score pass asks for its
// keys kPrefetchKeys ahead and for the block's value rows, which the next pass reads; once per kv
// head, as the rows of one head read the same cache rows.
template <class KT, class VT>
void attend_keys(RowBlock& rows, const KT* k, int64_t k_step, const VT* v, int64_t v_step, int64_t slots,
                 int64_t begin, int64_t end) {
  const int64_t D = rows.D;
  for (int64_t j0 = begin, j1; j0 < end; j0 = j1) {
    j1 = std::min({end, j0 + kKeyBlock, (j0 / slots + 1) * slots});
    const int64_t slot0 = j0 % slots;
    bool whole = true;
    for (int64_t r = 0; r < rows.count && whole; ++r) whole = rows.first[r] <= j0 && rows.keys[r] >= j1;
    if (whole) {
      const int64_t n = j1 - j0;
      int64_t j = 0;
      for (; j + 4 <= n; j += 4)
        for (int64_t r = 0; r < rows.count; ++r) {
          if (r == 0 || rows.k_at[r] != rows.k_at[r - 1]) {
            if (slot0 + j + kPrefetchKeys + 4 <= slots)
              prefetch4(k + rows.k_at[r] + (slot0 + j + kPrefetchKeys) * k_step, k_step, D);
            prefetch4(v + rows.v_at[r] + (slot0 + j) * v_step, v_step, D);
          }
          dot4(rows.q + r * D, k + rows.k_at[r] + (slot0 + j) * k_step, k_step, D, rows.score + r * kKeyBlock + j);
        }
      for (; j < n; ++j)
        for (int64_t r = 0; r < rows.count; ++r)
          rows.score[r * kKeyBlock + j] = dot(rows.q + r * D, k + rows.k_at[r] + (slot0 + j) * k_step, D);
      for (int64_t r = 0; r < rows.count; ++r) fold_scores(rows, r, n);
      for (j = 0; j + 4 <= n; j += 4)
        for (int64_t r = 0; r < rows.count; ++r)
          axpy4(rows.acc + r * D, rows.score + r * kKeyBlock + j, v + rows.v_at[r] + (slot0 + j) * v_step, v_step, D);
      for (; j < n; ++j)
        for (int64_t r = 0; r < rows.count; ++r)
          axpy(rows.acc + r * D, rows.score[r * kKeyBlock + j], v + rows.v_at[r] + (slot0 + j) * v_step, D);
      continue;
    }
    for (int64_t r = 0; r < rows.count; ++r) {
      // The keys [lo, lo + n) of this block that row r sees.
      const int64_t lo = std::max(j0, rows.first[r]), n = std::min(j1, rows.keys[r]) - lo;
      if (n <= 0) continue;
      const float* q = rows.q + r * D;
      float* s = rows.score + r * kKeyBlock;
      float* acc = rows.acc + r * D;
      const KT* kb = k + rows.k_at[r] + (slot0 + lo - j0) * k_step;
      const VT* vb = v + rows.v_at[r] + (slot0 + lo - j0) * v_step;
      int64_t j = 0;
      for (; j + 4 <= n; j += 4) dot4(q, kb + j * k_step, k_step, D, s + j);
      for (; j < n; ++j) s[j] = dot(q, kb + j * k_step, D);
      fold_scores(rows, r, n);
      for (j = 0; j + 4 <= n; j += 4) axpy4(acc, s + j, vb + j * v_step, v_step, D);
      for (; j < n; ++j) axpy(acc, s[j], vb + j * v_step, D);
    }
  }
}

const char* element(const Tensor& t, std::initializer_list<int64_t> index) {
  int64_t at = 0, d = 0;
  for (int64_t i : index) at += i * t.strides[d++];
  return static_cast<const char*>(t.data) + at * int64_t(dtype_size(t.dtype));
}

// Calls f(k, v) with the two tensors' data as typed pointers.
template <class F>
void with_kv_types(const Tensor& k, const Tensor& v, F&& f) {
  with_float_type(k.dtype, static_cast<const void*>(k.data), [&](auto* kp) {
    with_float_type(v.dtype, static_cast<const void*>(v.data), [&](auto* vp) { f(kp, vp); });
  });
}

}  // namespace

void attention_prefill(Stream&, const ops::AttentionPrefillArgs& a) {
  const int64_t B = a.q.dim(0), Tq = a.q.dim(1), H = a.q.dim(2), D = a.q.dim(3);
  const int64_t Tk = ops::key_positions(a), S = a.k.dim(1), Hkv = a.k.dim(2), group = H / Hkv;
  const float scale = ops::attention_scale(a.params, D);
  const int64_t window = a.params.window;  // validated: > 0 only with causal
  // A task: the `group` heads of one kv head × `positions` consecutive queries.
  const int64_t positions = std::max<int64_t>(1, kPrefillRows / group);
  const int64_t position_blocks = (Tq + positions - 1) / positions;
  const int64_t tasks = B * position_blocks * Hkv;
  with_kv_types(a.k, a.v, [&](auto* k_data, auto* v_data) {
    // Round-robin (static, 1): causal tasks grow with the position block, so interleave them.
#pragma omp parallel for schedule(static, 1)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t hk = t % Hkv, block = (t / Hkv) % position_blocks, b = t / (Hkv * position_blocks);
      const int64_t i0 = block * positions, i1 = std::min(Tq, i0 + positions);
      thread_local Scratch scratch;
      RowBlock rows = row_block(scratch, (i1 - i0) * group, D, true);
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t g = 0; g < group; ++g) {
          const int64_t r = (i - i0) * group + g;
          load_query(rows, r, element(a.q, {b, i, hk * group + g, 0}), a.q.dtype, scale);
          // Query i sits at position i + Tk - Tq of the keys.
          rows.first[r] = window > 0 ? std::max<int64_t>(0, i + (Tk - Tq) - window + 1) : 0;
          rows.keys[r] = a.params.causal ? i + (Tk - Tq) + 1 : Tk;
          rows.k_at[r] = rows.v_at[r] = 0;
        }
      reset_state(rows);
      // Keys from the first that the task's first row sees to the last that its last row sees.
      const int64_t kv_begin = rows.first[0], kv_end = a.params.causal ? i1 + (Tk - Tq) : Tk;
      attend_keys(rows, k_data + b * a.k.strides[0] + hk * a.k.strides[2], a.k.strides[1],
                  v_data + b * a.v.strides[0] + hk * a.v.strides[2], a.v.strides[1], S, kv_begin, kv_end);
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t g = 0; g < group; ++g) {
          const int64_t r = (i - i0) * group + g;
          float* o = rows.acc + r * D;
          scale_in_place(o, 1.0f / rows.l[r], D);
          store_row(const_cast<char*>(element(a.out, {b, i, hk * group + g, 0})), a.out.dtype, o, D);
        }
    }
  });
}

void attention_decode(Stream& stream, const ops::AttentionDecodeArgs& a) {
  if (a.qk_norm || a.rope) {  // copies in q's and k_new's dtypes, as separate rms_norm and rope would leave them
    thread_local std::vector<char> q, k;
    q.resize(a.q.nbytes());
    k.resize(a.k_new.nbytes());
    const Tensor q_out = Tensor::view(q.data(), a.q.device, a.q.dtype, {a.q.dim(0), a.q.dim(1), a.q.dim(2)});
    const Tensor k_out =
        Tensor::view(k.data(), a.q.device, a.k_new.dtype, {a.k_new.dim(0), a.k_new.dim(1), a.k_new.dim(2)});
    cpu::attention_decode(stream, ops::transformed_first(stream, a, q_out, k_out));
    return;
  }
  const int64_t B = a.q.dim(0), H = a.q.dim(1), D = a.q.dim(2);
  const int64_t S = a.k_cache.dim(1), Hkv = a.k_cache.dim(2), group = H / Hkv;
  const float scale = ops::attention_scale(a.params, D);
  const int32_t* seq_lens = a.seq_lens.ptr<const int32_t>();
  // A rolling cache holds any length's window.
  const int64_t max_len = ops::rolling_cache(a.params, S) ? std::numeric_limits<int32_t>::max() : S;
  for (int64_t b = 0; b < B; ++b)
    if (seq_lens[b] < 1 || seq_lens[b] > max_len)
      throw Error(ErrorCode::invalid_argument, fmt::format("attention_decode: seq_lens[{}] = {} is outside [1, {}] (k_cache {})",
                                                           b, seq_lens[b], max_len, a.k_cache.shape_str()));
  if (a.k_new.defined()) {
    std::vector<int32_t> start(seq_lens, seq_lens + B);
    for (int32_t& s : start) --s;
    kv_append(stream, ops::decode_append(a, Tensor::view(start.data(), a.seq_lens.device, DType::i32, {B})));
  }

  // Tasks: (b, split, a run of kv heads); rows = the query heads of those kv heads. Putting many
  // heads in one task makes a block of keys read whole [Hkv, D] cache rows, contiguous memory,
  // instead of one head's D-slice a cache row apart. The runs only shape the work: a row's result
  // depends on the split boundaries alone, which are fixed, so threads never change the output.
  // Split s covers keys [first + 64·s, first + 64·(s + 1)) of sequence b's visible keys
  // [first, seq_len), first = max(0, seq_len − window): the splits span the longest sequence's
  // visible keys (the lengths are on the host), and those past a shorter sequence's end stay
  // empty. Sized by the cache instead, a short context's few busy splits would all land on the
  // first thread.
  const int64_t window = a.params.window;
  auto first_key = [&](int64_t b) { return window > 0 ? std::max<int64_t>(0, seq_lens[b] - window) : int64_t(0); };
  int64_t span = 1;
  for (int64_t b = 0; b < B; ++b) span = std::max<int64_t>(span, seq_lens[b] - first_key(b));
  const int64_t splits = (span + kKeysPerSplit - 1) / kKeysPerSplit;
#ifdef _OPENMP
  const int64_t threads = omp_get_max_threads();
#else
  const int64_t threads = 1;
#endif
  const int64_t head_runs = std::clamp<int64_t>((4 * threads + B * splits - 1) / (B * splits), 1, Hkv);
  const int64_t kv_per_run = (Hkv + head_runs - 1) / head_runs;
  const int64_t tasks = B * splits * head_runs;
  // Partial states [B, splits, H]: m, l and acc [.., D]. A split past a sequence's end stays empty (l = 0).
  const int64_t states = B * splits * H;
  thread_local std::vector<float> partial;  // grown once, then reused every step
  partial.resize(size_t(states * (D + 2)));
  float* const part_m = partial.data();
  float* const part_l = part_m + states;
  float* const part_acc = part_l + states;

  with_kv_types(a.k_cache, a.v_cache, [&](auto* k_data, auto* v_data) {
    // Round-robin: sequences of different lengths leave different splits empty.
#pragma omp parallel for schedule(static, 1)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t run = t % head_runs, split = (t / head_runs) % splits, b = t / (head_runs * splits);
      const int64_t hk0 = run * kv_per_run, hk1 = std::min(Hkv, hk0 + kv_per_run);
      if (hk0 >= hk1) continue;
      const int64_t h0 = hk0 * group, first_state = (b * splits + split) * H + h0;
      // The running state lives in this thread's scratch and is published to `partial` once at
      // the end: updating the shared arrays per key block made threads fight over cache lines
      // (two threads ran 3× slower than one).
      thread_local Scratch scratch;
      RowBlock rows = row_block(scratch, (hk1 - hk0) * group, D, true);
      reset_state(rows);
      const int64_t begin = first_key(b) + split * kKeysPerSplit;
      const int64_t end = std::min<int64_t>(seq_lens[b], begin + kKeysPerSplit);
      auto publish = [&] {
        std::copy_n(rows.m, rows.count, part_m + first_state);
        std::copy_n(rows.l, rows.count, part_l + first_state);
        std::copy_n(rows.acc, rows.count * D, part_acc + first_state * D);
      };
      if (begin >= end) {
        publish();
        continue;
      }
      for (int64_t r = 0; r < rows.count; ++r) {
        const int64_t h = h0 + r;
        load_query(rows, r, element(a.q, {b, h, 0}), a.q.dtype, scale);
        rows.first[r] = begin;
        rows.keys[r] = end;
        rows.k_at[r] = (h / group) * a.k_cache.strides[2];
        rows.v_at[r] = (h / group) * a.v_cache.strides[2];
      }
      attend_keys(rows, k_data + b * a.k_cache.strides[0], a.k_cache.strides[1], v_data + b * a.v_cache.strides[0],
                  a.v_cache.strides[1], S, begin, end);
      publish();
    }

    // Combine the splits of each (b, h): o = Σ_s e^(m_s - M) acc_s / Σ_s e^(m_s - M) l_s, M = max_s m_s.
#pragma omp parallel for schedule(static)
    for (int64_t bh = 0; bh < B * H; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      auto state_of = [&](int64_t split) { return (b * splits + split) * H + h; };
      float M = -std::numeric_limits<float>::infinity();
      for (int64_t s = 0; s < splits; ++s)
        if (part_l[state_of(s)] > 0) M = std::max(M, part_m[state_of(s)]);
      thread_local std::vector<float> o;
      o.assign(size_t(D), 0.0f);
      float L = 0;
      for (int64_t s = 0; s < splits; ++s) {
        const int64_t state = state_of(s);
        if (part_l[state] == 0) continue;
        const float w = std::exp(part_m[state] - M);
        L += w * part_l[state];
        axpy(o.data(), w, part_acc + state * D, D);
      }
      scale_in_place(o.data(), 1.0f / L, D);
      store_row(const_cast<char*>(element(a.out, {b, h, 0})), a.out.dtype, o.data(), D);
    }
  });
}

void kv_append(Stream&, const ops::KvAppendArgs& a) {
  const int64_t B = a.k.dim(0), T = a.k.dim(1), S = a.k_cache.dim(1), Hkv = a.k.dim(2), D = a.k.dim(3);
  for (int64_t b = 0; b < B; ++b) {
    const int32_t start = static_cast<const int32_t*>(a.start.data)[b * a.start.strides[0]];
    if (start < 0 || (!a.rolling && start + T > S))
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("kv_append: start[{}] = {} with T = {} new positions does not fit S = {} (k_cache {})", b,
                              start, T, S, a.k_cache.shape_str()));
  }
  const size_t in_size = dtype_size(a.k.dtype), out_size = dtype_size(a.k_cache.dtype);
  // One row of D elements: a memcpy when the dtypes agree, else converted through f32 in
  // stack-sized pieces (no allocation: this runs every decode step).
  auto append_row = [&](const Tensor& cache, const Tensor& x, int64_t b, int64_t pos, int64_t t, int64_t h) {
    char* dst = static_cast<char*>(cache.data) +
                (b * cache.strides[0] + pos * cache.strides[1] + h * cache.strides[2]) * int64_t(out_size);
    const char* src = static_cast<const char*>(x.data) + (b * x.strides[0] + t * x.strides[1] + h * x.strides[2]) * int64_t(in_size);
    if (a.k.dtype == a.k_cache.dtype) {
      std::memcpy(dst, src, size_t(D) * in_size);
      return;
    }
    float piece[256];
    for (int64_t d = 0; d < D; d += 256) {
      const int64_t n = std::min<int64_t>(256, D - d);
      load_row(piece, src + d * int64_t(in_size), a.k.dtype, n);
      store_row(dst + d * int64_t(out_size), a.k_cache.dtype, piece, n);
    }
  };
#pragma omp parallel for collapse(2) schedule(static) if (B * T * Hkv * D >= (1 << 15))
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t pos = (static_cast<const int32_t*>(a.start.data)[b * a.start.strides[0]] + t) % S;
      for (int64_t h = 0; h < Hkv; ++h) {
        append_row(a.k_cache, a.k, b, pos, t, h);
        append_row(a.v_cache, a.v, b, pos, t, h);
      }
    }
}

}  // namespace ding::cpu
