// attention_decode on the GPU: flash-decoding (split the keys, merge the splits' softmax states)
// in a single launch, the cross-split merge included.
//
// Block (b, kv head, head block, split): up to HPB query heads of one kv head's group over the
// split's keys [split·chunk, min(seq_len, (split + 1)·chunk)), so every K/V row loaded serves all
// of those heads. A key is scored by a group of `lanes` lanes (a power of two ≥ D/8, ≤ 32), each
// lane holding 8 elements of q per head and 8 of the row (one 16-byte load for f16/bf16, two for
// f32), so K and V rows are read whole and contiguous. A key group takes U keys per step and
// issues all their K/V loads before any math (each warp keeps U rows per key group in flight
// instead of waiting out one load latency per key), then folds them into the online softmax as
// one batch (one rescale and no data-dependent branch per step). Each key group keeps its own
// (m, l, acc) per head; they are merged by shuffles inside a warp, then across warps through
// shared memory, and written as the output (one split) or as the split's partial state.
//
// With several splits, the block of a (b, kv head, head block) group that arrives last (an atomic
// ticket per group) merges the partials of the splits that have keys, in split order: the same
// arithmetic whichever block finishes last, so results are deterministic. It resets the ticket
// to 0 for the next call, so a recorded graph replays without a reset of its own.
//
// The split count depends on the cache capacity S, the batch, the heads and the device only,
// never on the lengths: they live on the device and grow between replays of a recorded decode
// step. The kernel is a chained launch (vendor.h): its index math overlaps the previous kernel
// (kv_append in a decode step), and it waits for that kernel before reading anything.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <type_traits>

#include "attention.cuh"
#include "check.h"
#include "kernels.h"
#include "reduce.cuh"

namespace ding::gpu {
namespace {

using namespace attn;

constexpr int kDecodeThreads = 128;
constexpr int kDecodeMaxLanes = 32;  // lanes per key: 8 elements each, so D ≤ 256
// The merge keeps one weight per (head, split) in shared memory: at most 4 · 1024 floats.
constexpr int kMaxSplits = 1024;
// Tickets, one per (b, kv head, head block) group while it has several splits. Several splits
// only pay while the groups do not fill the device on their own (a few thousand at most); a
// launch with more groups runs one split each and needs no ticket.
constexpr int kTicketSlots = 8192;

// Zero at module load; every merge leaves its slot at zero again.
__device__ unsigned int decode_tickets[kTicketSlots];

// Per variant: U (keys in flight per key group; each costs two slices of 4 registers for f16/bf16,
// 8 for f32) and the blocks per SM the register cap is set for. 4 blocks cap registers at 128,
// which holds 4 16-bit keys for 1 or 2 heads (8 keys spilled, even under a 168 cap); 4 heads'
// q and acc (64 registers) with 4 keys take the 168 of 3 blocks.
template <class KV, int HPB>
struct DecodeConfig {
  static constexpr int kKeysInFlight = sizeof(KV) == 2 || HPB == 1 ? 4 : 2;
  static constexpr int kBlocksPerSm = HPB >= 4 ? 3 : 4;
};

struct DecodeShape {
  int64_t H, S, Hkv, group;  // S: cache capacity
  int D;
  int heads;        // query heads per block (≤ HPB)
  int head_blocks;  // blocks per kv head: ceil(group / heads)
  int splits;
  int64_t chunk;    // keys per split
  int lanes;        // lanes per key
};

// The splits' partial states: m and l [B, H, splits], acc [B, H, splits, D].
struct Partials {
  float* m;
  float* l;
  float* acc;
};

// Elements [e0, e0 + 8) of a cache row in their storage type: one 16-byte word for f16/bf16, two
// for f32. Kept packed until used, so the U rows in flight cost 4 or 8 registers each.
template <class T>
struct Slice8 {
  static constexpr int kWords = int(sizeof(T)) * 8 / 16, kPerWord = 8 / kWords;
  Pack<T, kPerWord> word[kWords];
  __device__ float operator[](int c) const { return to_float(word[c / kPerWord].v[c % kPerWord]); }
};

// `at` points at element e0 of a row. `vec`: D is a multiple of 8 and the row start 16-byte
// aligned, so the slice is whole aligned words (or wholly past D, which the caller skips).
// Otherwise element by element, zero from D on.
template <class T>
__device__ inline Slice8<T> load_slice8(const T* at, int e0, int D, bool vec) {
  Slice8<T> x;
  constexpr int kPerWord = Slice8<T>::kPerWord;
  if (vec) {
#pragma unroll
    for (int w = 0; w < Slice8<T>::kWords; ++w) x.word[w] = *reinterpret_cast<const Pack<T, kPerWord>*>(at + w * kPerWord);
    return x;
  }
#pragma unroll
  for (int c = 0; c < 8; ++c) x.word[c / kPerWord].v[c % kPerWord] = e0 + c < D ? at[c] : T{};
  return x;
}

template <class T>
__device__ inline Slice8<T> zero_slice8() {
  Slice8<T> x;
#pragma unroll
  for (int c = 0; c < 8; ++c) x.word[c / Slice8<T>::kPerWord].v[c % Slice8<T>::kPerWord] = T{};
  return x;
}

template <class KV, int HPB>
__global__ void __launch_bounds__(kDecodeThreads,
                                  launch_min_blocks(kDecodeThreads, DecodeConfig<KV, HPB>::kBlocksPerSm))
    attention_decode_kernel(Operand out, Operand q, const KV* k, Strides3 ks, const KV* v, Strides3 vs, bool kv_vec,
                            const int32_t* seq_lens, DecodeShape sh, float scale, Partials part) {
  constexpr int kWarps = kDecodeThreads / warp_size();
  constexpr int U = DecodeConfig<KV, HPB>::kKeysInFlight;
  static_assert(HPB <= 4, "q and acc of more heads do not fit the register budget");
  __shared__ float red_m[kWarps][HPB], red_l[kWarps][HPB], red_w[kWarps][HPB], red_scale[HPB];
  __shared__ float red_acc[kWarps][HPB][8 * kDecodeMaxLanes];
  __shared__ bool merges;
  extern __shared__ float merge_w[];  // [HPB][splits]: the merging block's split weights

  int64_t idx = blockIdx.x;
  // Head blocks of one kv head and split are neighbours in launch order: the second reads the
  // K/V rows the first brought into L2.
  const int hb = int(idx % sh.head_blocks);
  idx /= sh.head_blocks;
  const int split = int(idx % sh.splits);
  idx /= sh.splits;
  const int64_t kv_head = idx % sh.Hkv, b = idx / sh.Hkv;
  const int64_t group_id = (b * sh.Hkv + kv_head) * sh.head_blocks + hb;
  const int64_t h0 = kv_head * sh.group + int64_t(hb) * sh.heads;
  const int heads = int(min(int64_t(sh.heads), sh.group - int64_t(hb) * sh.heads));
  const int D = sh.D;
  const int lanes = sh.lanes;
  const int lane = threadIdx.x % warp_size(), warp = threadIdx.x / warp_size();
  const int key_lane = lane % lanes, e0 = 8 * key_lane;
  const int groups_per_warp = warp_size() / lanes;
  const int key_group = warp * groups_per_warp + lane / lanes, key_groups = kWarps * groups_per_warp;

  // q, seq_lens and the caches come from earlier kernels of the step.
  wait_for_prior_kernels();
  release_dependents();

  // q first, then the length: both loads are in flight together.
  float qr[HPB][8];
  with_element_type(q.dtype, [&](auto tag) {
    using T = decltype(tag);
#pragma unroll
    for (int g = 0; g < HPB; ++g) {
      const T* row = static_cast<const T*>(q.data) + q.at.at(b, 0, h0 + min(g, heads - 1));
#pragma unroll
      for (int c = 0; c < 8; ++c) qr[g][c] = g < heads && e0 + c < D ? scale * to_float(row[e0 + c]) : 0.0f;
    }
  });
  // The length lives on the device: clamp it, never trust it (a host backend would raise).
  const int64_t len = min(max(int64_t(seq_lens[b]), int64_t(1)), sh.S);
  const int64_t begin = int64_t(split) * sh.chunk, end = min(len, begin + sh.chunk);

  if (begin < end) {  // uniform over the block; split 0 always has keys
    float m_run[HPB], l_run[HPB], acc[HPB][8];
#pragma unroll
    for (int g = 0; g < HPB; ++g) {
      m_run[g] = -INFINITY;
      l_run[g] = 0.0f;
#pragma unroll
      for (int c = 0; c < 8; ++c) acc[g][c] = 0.0f;
    }

    // This key group's rows start at key begin + key_group and advance key_groups rows per key:
    // pointers stepped by a fixed stride, not 64-bit multiplies per key.
    const KV* k_row = k + b * ks.b + kv_head * ks.h + (begin + key_group) * ks.t + e0;
    const KV* v_row = v + b * vs.b + kv_head * vs.h + (begin + key_group) * vs.t + e0;
    const int64_t k_step = key_groups * ks.t, v_step = key_groups * vs.t;
    const int64_t k_ahead = U * k_step, v_ahead = U * v_step;  // the same key group's row one step on
    const uint32_t row_bytes = uint32_t(D) * uint32_t(sizeof(KV));
    // Every lane runs the same number of steps (the shuffles need the whole warp); a key past
    // `end` loads nothing and leaves the state alone.
    for (int64_t j0 = begin; j0 < end; j0 += U * key_groups) {
      Slice8<KV> kx[U], vx[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (j0 + u * key_groups + key_group < end && e0 < D) {
          kx[u] = load_slice8(k_row, e0, D, kv_vec);
          vx[u] = load_slice8(v_row, e0, D, kv_vec);
        } else {
          kx[u] = vx[u] = zero_slice8<KV>();
        }
        // The same key of the next step on its way into L2 while this step computes: a second
        // step in flight without registers to hold it. Whole rows (16-byte aligned with
        // kv_vec), one request per row from the key group's first lane, never past `end`.
        if (kv_vec && key_lane == 0 && j0 + (U + u) * key_groups + key_group < end) {
          prefetch_to_l2(k_row + k_ahead, row_bytes);
          prefetch_to_l2(v_row + v_ahead, row_bytes);
        }
        k_row += k_step;
        v_row += v_step;
      }
      // The U keys as one batch of the online softmax: one rescale per batch, no branches.
#pragma unroll
      for (int g = 0; g < HPB; ++g) {
        float score[U], batch_max = m_run[g];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          float s = 0.0f;
#pragma unroll
          for (int c = 0; c < 8; ++c) s = fmaf(qr[g][c], kx[u][c], s);
          // A butterfly over the key group (unrolled; the level test is uniform over the warp):
          // every lane of the group ends with the same bits.
#pragma unroll
          for (int lane_mask = kDecodeMaxLanes / 2; lane_mask > 0; lane_mask /= 2)
            if (lane_mask < lanes) s += shfl_xor(s, lane_mask);
          score[u] = j0 + u * key_groups + key_group < end ? s : -INFINITY;
          batch_max = fmaxf(batch_max, score[u]);
        }
        // A key group past `end` has batch_max = m_run = -inf: alpha and every p are 0, so its
        // state stays (0, 0, -inf).
        const float alpha = exp_from(m_run[g], batch_max);
        l_run[g] *= alpha;
#pragma unroll
        for (int c = 0; c < 8; ++c) acc[g][c] *= alpha;
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const float p = exp_from(score[u], batch_max);
          l_run[g] += p;
#pragma unroll
          for (int c = 0; c < 8; ++c) acc[g][c] = fmaf(p, vx[u][c], acc[g][c]);
        }
        m_run[g] = batch_max;
      }
    }

    // Merge the key groups of each warp: lanes `lanes`, 2·lanes, … apart hold the same elements.
    for (int lane_mask = lanes; lane_mask < warp_size(); lane_mask *= 2) {
#pragma unroll
      for (int g = 0; g < HPB; ++g) {
        const float m_other = shfl_xor(m_run[g], lane_mask), l_other = shfl_xor(l_run[g], lane_mask);
        const float m_new = fmaxf(m_run[g], m_other);
        const float w_self = exp_from(m_run[g], m_new), w_other = exp_from(m_other, m_new);
        l_run[g] = l_run[g] * w_self + l_other * w_other;
#pragma unroll
        for (int c = 0; c < 8; ++c) acc[g][c] = acc[g][c] * w_self + shfl_xor(acc[g][c], lane_mask) * w_other;
        m_run[g] = m_new;
      }
    }
    // ... then the warps, through shared memory: key group 0 of each warp publishes its state.
    if (lane < lanes) {
#pragma unroll
      for (int g = 0; g < HPB; ++g) {
#pragma unroll
        for (int c = 0; c < 8; ++c) red_acc[warp][g][e0 + c] = acc[g][c];
        if (lane == 0) red_m[warp][g] = m_run[g], red_l[warp][g] = l_run[g];
      }
    }
    __syncthreads();
    if (threadIdx.x < HPB) {
      const int g = threadIdx.x;
      float m_all = -INFINITY, l_all = 0.0f;
      for (int w = 0; w < kWarps; ++w) m_all = fmaxf(m_all, red_m[w][g]);
      for (int w = 0; w < kWarps; ++w) {
        red_w[w][g] = exp_from(red_m[w][g], m_all);
        l_all += red_w[w][g] * red_l[w][g];
      }
      if (sh.splits == 1) {
        red_scale[g] = 1.0f / l_all;
      } else if (g < heads) {
        const int64_t state = (b * sh.H + h0 + g) * sh.splits + split;
        part.m[state] = m_all;
        part.l[state] = l_all;
      }
    }
    __syncthreads();
    for (int t = threadIdx.x; t < heads * D; t += kDecodeThreads) {
      const int g = t / D, d = t % D;
      float o = 0.0f;
      for (int w = 0; w < kWarps; ++w) o += red_w[w][g] * red_acc[w][g][d];
      if (sh.splits == 1) {
        with_element_type(out.dtype, [&](auto tag) {
          using T = decltype(tag);
          static_cast<T*>(out.data)[out.at.at(b, 0, h0 + g) + d] = from_float<T>(o * red_scale[g]);
        });
      } else {
        part.acc[((b * sh.H + h0 + g) * sh.splits + split) * D + d] = o;
      }
    }
  }
  if (sh.splits == 1) return;

  // Arrive: this block's partial (if any) is visible device-wide before its ticket counts.
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned ticket = atomicAdd(&decode_tickets[group_id], 1u);
    merges = ticket == unsigned(sh.splits - 1);
    // Every split of the group has arrived: nobody touches the slot again in this launch.
    if (merges) atomicExch(&decode_tickets[group_id], 0u);
  }
  __syncthreads();
  if (!merges) return;
  __threadfence();  // the partial loads below stay after the ticket

  // Merge the splits that have keys (0 .. used - 1; the others wrote nothing). The partials are
  // read as volatile: other blocks wrote them during this launch, so no stale copy in L1 may serve.
  const int used = int((len + sh.chunk - 1) / sh.chunk);
  for (int g = warp; g < heads; g += kWarps) {
    const int64_t first = (b * sh.H + h0 + g) * sh.splits;
    const volatile float* m = part.m + first;
    const volatile float* l = part.l + first;
    float m_all = -FLT_MAX;
    for (int s = lane; s < used; s += warp_size())
      if (l[s] > 0) m_all = fmaxf(m_all, m[s]);
    m_all = warp_max(m_all);
    float l_sum = 0.0f;
    for (int s = lane; s < used; s += warp_size()) {
      const float ls = l[s];
      const float w = ls > 0 ? expf(m[s] - m_all) : 0.0f;
      merge_w[g * sh.splits + s] = w;
      l_sum += w * ls;
    }
    l_sum = warp_sum(l_sum);
    if (lane == 0) red_scale[g] = 1.0f / l_sum;
  }
  __syncthreads();
  for (int t = threadIdx.x; t < heads * D; t += kDecodeThreads) {
    const int g = t / D, d = t % D;
    const volatile float* acc = part.acc + (b * sh.H + h0 + g) * sh.splits * D + d;
    const float* w = merge_w + g * sh.splits;
    float o = 0.0f;
    // Four independent loads per round, then their fmas in split order.
    for (int s0 = 0; s0 < used; s0 += 4) {
      float a[4];
#pragma unroll
      for (int c = 0; c < 4; ++c) a[c] = s0 + c < used ? acc[int64_t(s0 + c) * D] : 0.0f;
#pragma unroll
      for (int c = 0; c < 4; ++c)
        if (s0 + c < used) o = fmaf(w[s0 + c], a[c], o);
    }
    with_element_type(out.dtype, [&](auto tag) {
      using T = decltype(tag);
      static_cast<T*>(out.data)[out.at.at(b, 0, h0 + g) + d] = from_float<T>(o * red_scale[g]);
    });
  }
}

}  // namespace

void attention_decode(Stream& stream, const ops::AttentionDecodeArgs& a) {
  const int64_t B = a.q.dim(0), H = a.q.dim(1), D = a.q.dim(2);
  const int64_t S = a.k_cache.dim(1), Hkv = a.k_cache.dim(2), group = H / Hkv;
  if (B * H * D == 0) return;
  GpuStream& s = gpu_stream(stream);
  const float scale = ops::attention_scale(a.params, D);
  const Operand out = operand(a.out, strides_bhd(a.out)), q = operand(a.q, strides_bhd(a.q));
  const int32_t* seq_lens = static_cast<const int32_t*>(a.seq_lens.data);
  if (D > 8 * kDecodeMaxLanes || a.k_cache.dtype != a.v_cache.dtype) {
    launch_rows(s, out, q, a.k_cache, strides3(a.k_cache), a.v_cache, strides3(a.v_cache),
                RowShape{B, 1, S, H, group, int(D), false, seq_lens}, scale);
    return;
  }

  DecodeShape sh{};
  sh.H = H, sh.S = S, sh.Hkv = Hkv, sh.group = group, sh.D = int(D);
  // Heads per block: the group's heads (3 rounded up to 4, the extra slot idle), at most 4 so
  // that q and acc stay in registers (8 heads cost 240 registers and ran at half the
  // bandwidth); larger groups take several blocks per kv head.
  const int hpb = group > 2 ? 4 : int(group);
  sh.heads = hpb;
  sh.head_blocks = int(ceil_div(group, hpb));
  sh.lanes = 1;
  while (8 * sh.lanes < D) sh.lanes *= 2;
  const bool kv_vec = D % 8 == 0 && rows_aligned(a.k_cache, 16 / int64_t(dtype_size(a.k_cache.dtype))) &&
                      rows_aligned(a.v_cache, 16 / int64_t(dtype_size(a.v_cache.dtype)));
  const bool chained = s.props().has_chained_launch();

  with_float_type(a.k_cache.dtype, [&](auto kv_tag) {
    using KV = decltype(kv_tag);
    auto launch = [&](auto hpb_tag) {
      constexpr int HPB = decltype(hpb_tag)::value;
      using Config = DecodeConfig<KV, HPB>;
      // Splits from shapes and the device only. Enough blocks to fill every SM once at the
      // occupancy the kernel is built for (all of them resident: no second wave's tail), each
      // split a whole number of steps (U keys per key group), so no step runs half empty
      // except at the end of the sequence.
      const int64_t groups = B * Hkv * sh.head_blocks;
      const int64_t step_keys = int64_t(Config::kKeysInFlight) * (kDecodeThreads / sh.lanes);
      const int64_t resident = int64_t(Config::kBlocksPerSm) * s.props().sm_count;
      int64_t splits = groups > kTicketSlots ? 1 : std::max<int64_t>(1, resident / groups);
      sh.chunk = ceil_div(ceil_div(S, splits), step_keys) * step_keys;
      if (ceil_div(S, sh.chunk) > kMaxSplits) sh.chunk = ceil_div(ceil_div(S, kMaxSplits), step_keys) * step_keys;
      sh.splits = int(ceil_div(S, sh.chunk));  // no split starts past S

      Partials part{nullptr, nullptr, nullptr};
      size_t merge_bytes = 0;
      if (sh.splits > 1) {
        const int64_t states = B * H * sh.splits;
        float* scratch = static_cast<float*>(s.scratch(sizeof(float) * size_t(states * (2 + D))));
        part = {scratch, scratch + states, scratch + 2 * states};
        merge_bytes = sizeof(float) * size_t(HPB) * size_t(sh.splits);
      }
      DING_GPU_CHECK(launch_chained(chained, attention_decode_kernel<KV, HPB>, dim3(unsigned(groups * sh.splits)),
                                    dim3(kDecodeThreads), merge_bytes, s.handle(), out, q,
                                    static_cast<const KV*>(a.k_cache.data), strides3(a.k_cache),
                                    static_cast<const KV*>(a.v_cache.data), strides3(a.v_cache), kv_vec, seq_lens, sh,
                                    scale, part));
    };
    switch (hpb) {
      case 4: launch(std::integral_constant<int, 4>{}); break;
      case 2: launch(std::integral_constant<int, 2>{}); break;
      default: launch(std::integral_constant<int, 1>{}); break;
    }
  });
}

}  // namespace ding::gpu
