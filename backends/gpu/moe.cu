// Mixture-of-experts routing on the GPU.
//   moe_route:   one warp per token: k rounds of a warp max over (logit, expert) pairs, each
//                round below the previous pick (select.cuh: ties to the lower expert), then the
//                weights from f32 exps with double sums, as the CPU backend computes them. With
//                groups, top_groups rounds over the groups' best pairs first find the kept ones.
//                A token's (logit, expert) pairs are staged in shared memory once where they
//                fit, so the k rounds wait on shared memory, not on L2. With the router, the
//                grouping and an rms_norm (a decode step's routing, the MoE layer's way), one
//                kernel does all four (moe_route_decode_kernel).
//   moe_group:   one block: a counting sort stable in the slot index, with no atomics (every
//                run writes the same bits), its count columns in shared memory when they fit,
//                then a row gather of x for the expert matmuls. A decode step's few slots are
//                ranked directly instead, a block per token that also copies its token's row.
//   moe_combine: one thread per 4 (or 1) columns of a token, a row over several blocks, an f32
//                FMA chain over j = 0..k−1 from the residual (or 0) in the reference's order (the
//                CPU's exact operations); kCombineBatch choices' rows are loaded before their
//                FMAs, so a token's k rows cost ⌈k / kCombineBatch⌉ round trips, not k.
// Every kernel here is chained (vendor.h): the step's tiny routing kernels start while their
// predecessor finishes, and the expert matmul after them is launched early.
// moe_matmul, between moe_group and moe_combine, is in moe_matmul.cu.
// Device-held ids that the host backends reject cannot raise here: an expert id outside [0, E)
// sorts after every expert's rows (offsets[E] counts only valid slots; slots and positions stay
// a permutation, so nothing downstream indexes out of bounds), and a position outside [0, T·k)
// adds nothing to moe_combine's sum.
#include <algorithm>
#include <string>
#include <type_traits>

#include "check.h"
#include "elements.cuh"
#include "gemm.cuh"
#include "kernels.h"
#include "last_block.cuh"
#include "reduce.cuh"
#include "select.cuh"
#include "stream.h"
#include "strided.cuh"

DING_GPU_BEGIN
namespace {

constexpr int kRouteThreads = 256;
constexpr int kGroupThreads = 1024;  // at most; the block's threads are the counting sort's slot segments
constexpr size_t kGroupSharedBytes = 48 * 1024;  // count columns up to this size live in shared memory
constexpr int kCombineBatch = 8;     // a token's choices whose rows are in flight together
constexpr int kCombineThreads = 128;  // per block: a token's columns over several blocks at decode
constexpr size_t kRouteSharedBytes = 48 * 1024;  // the staged pairs of a block's tokens, up to this

// The best (logit, expert) pair of group g, experts [g·size, (g+1)·size): the group's place in
// the order of groups (a group's score is its best expert's; of equal ones, the lower group
// holds the lower expert, so it ranks first).
template <class Pairs>
__device__ uint64_t group_pair(const Pairs& pair_at, int g, int size) {
  uint64_t best = 0;
  for (int e = g * size; e < (g + 1) * size; ++e) {
    const uint64_t pair = pair_at(e);
    best = pair > best ? pair : best;
  }
  return best;
}

constexpr int kMaskedGroups = 64;  // up to this many groups, the kept ones are a bit mask

// Routes one token with the calling warp (every lane calls it): pair_at(e) gives expert e's
// (logit, expert) pair (order_pair), w and chosen its k weights and experts. Grouped: DeepSeek's
// group-limited routing, an instance of its own, and every loop rolled, so that the plain routing's
// code stays short: a kernel that runs once per layer pays for every instruction it fetches, the
// instruction cache cold each time (under ncu a fully unrolled form executed 1.4 K warp
// instructions in 20 K cycles).
template <bool Grouped, class PairAt>
__device__ void route_token(const PairAt& pair_at, float* w, int32_t* chosen, int E, int k,
                            const ops::MoeRouteParams& params) {
  const int lane = lane_id();
  // Group-limited routing: round i of a warp max over the groups' best pairs (a lane per group)
  // finds the i-th best group; a group is kept when its pair is not below the last round's.
  // Up to kMaskedGroups groups, the kept ones become a bit mask; beyond, a kept test reads the
  // expert's group again (E/groups < E/64 logits).
  [[maybe_unused]] const int groups = int(params.groups), group_size = E / groups;
  [[maybe_unused]] uint64_t last_kept = 0, kept_mask = 0;
  if constexpr (Grouped) {
    uint64_t previous = ~uint64_t(0);
#pragma unroll 1
    for (int64_t i = 0; i < params.top_groups; ++i) {
      uint64_t best = 0;
#pragma unroll 1
      for (int g = lane; g < groups; g += warp_size()) {
        const uint64_t pair = group_pair(pair_at, g, group_size);
        if (pair < previous && pair > best) best = pair;
      }
      previous = warp_max_u64(best);
    }
    last_kept = previous;
    if (groups <= kMaskedGroups) {
#pragma unroll 1
      for (int g0 = 0; g0 < groups; g0 += warp_size()) {
        const int g = g0 + lane;
        kept_mask |= ballot(g < groups && group_pair(pair_at, g, group_size) >= last_kept) << g0;
      }
    }
  }
  auto kept = [&](int e) {
    if constexpr (!Grouped) return true;
    const int g = e / group_size;
    return groups <= kMaskedGroups ? ((kept_mask >> g) & 1) != 0 : group_pair(pair_at, g, group_size) >= last_kept;
  };
  // Round j: the best pair below round j−1's, i.e. the j-th in the order. Lane j % warp_size()
  // keeps it, parking the logit in w[j], which only that lane reads back below.
  uint64_t previous = ~uint64_t(0);
  float best_logit = 0;
#pragma unroll 1
  for (int j = 0; j < k; ++j) {
    uint64_t best = 0;
#pragma unroll 1
    for (int e = lane; e < E; e += warp_size()) {
      const uint64_t pair = pair_at(e);
      if (pair < previous && pair > best && kept(e)) best = pair;
    }
    best = warp_max_u64(best);  // > 0: k ≤ the kept experts leaves a pair for every round
    previous = best;
    if (j == 0) best_logit = pair_value(best);
    if (lane == j % warp_size()) {
      chosen[j] = int32_t(pair_index(best) < uint32_t(E) ? pair_index(best) : uint32_t(E - 1));
      w[j] = pair_value(best);
    }
  }
  // Scores from f32 exps (a few ulp each), their sums in double: E-term f32 sums of equal scores
  // (tied logits) would drift by ~√E ulp.
  const bool softmax = params.scoring == ops::MoeScoring::softmax;
  double chosen_sum = 0;
#pragma unroll 1
  for (int j = lane; j < k; j += warp_size()) {
    const float score = softmax ? expf(w[j] - best_logit) : 1.0f / (1.0f + expf(-w[j]));
    w[j] = score;
    chosen_sum += score;
  }
  chosen_sum = warp_sum(chosen_sum);
  double scale = params.routed_scaling;
  if (softmax && !params.renormalize) {
    double denominator = 0;  // exp(logit − max) over all E; with renormalisation it cancels
    // A pair's value is its logit (order_pair keeps every float but -0's sign and NaN's payload).
#pragma unroll 1
    for (int e = lane; e < E; e += warp_size()) denominator += expf(pair_value(pair_at(e)) - best_logit);
    scale /= warp_sum(denominator);
  } else if (params.renormalize) {
    scale /= chosen_sum;
  }
#pragma unroll 1
  for (int j = lane; j < k; j += warp_size()) w[j] = float(double(w[j]) * scale);
}

// Whole warps leave together at the end (tokens are per warp), so the shuffles and ballots see
// every lane. E < 2^31 (moe_route checks).
template <class T, bool Grouped>
__global__ void __launch_bounds__(kRouteThreads) moe_route_kernel(float* weights, int32_t* experts, const T* logits,
                                                                  int64_t tokens, int E, int k,
                                                                  ops::MoeRouteParams params, bool staged) {
  wait_for_prior_kernels();  // the logits come from the router's matmul
  release_dependents();
  const int64_t t = int64_t(blockIdx.x) * (blockDim.x / warp_size()) + threadIdx.x / warp_size();
  const int lane = lane_id();
  const T* x = logits + t * E;
  // The token's (logit, expert) pairs staged in shared memory where the launch gave room
  // (`staged`): the k rounds then wait on shared memory, not on L2.
  extern __shared__ uint64_t staged_pairs[];
  uint64_t* const token_pairs = staged_pairs + (threadIdx.x / warp_size()) * E;
  if (staged) {
#pragma unroll 1
    for (int e = lane; t < tokens && e < E; e += warp_size()) token_pairs[e] = order_pair(to_float(x[e]), uint32_t(e));
    __syncthreads();
  }
  if (t >= tokens) return;
  auto pair_at = [&](int e) { return staged ? token_pairs[e] : order_pair(to_float(x[e]), uint32_t(e)); };
  route_token<Grouped>(pair_at, weights + t * k, experts + t * k, E, k, params);
}

// The counting sort of moe_group, stable in the slot index s = t·k + j. Thread p owns the slot
// segment [p·L, (p+1)·L) and column p of counts [E + 1][P] (P = blockDim.x): first its slots per
// bucket, then, after an exclusive prefix sum in (bucket, p) order, the grouped row of its next
// slot of each bucket: every slot of the lower buckets, then this bucket's slots of the lower
// segments. Bucket E collects out-of-range ids. counts: global scratch, or null for the dynamic
// shared memory the launch sized to (E + 1)·P ints.
__global__ void __launch_bounds__(kGroupThreads) moe_group_kernel(int32_t* offsets, int32_t* slots, int32_t* positions,
                                                                  const int32_t* experts, int S, int E, int* counts) {
  __shared__ int warp_sums[32];
  extern __shared__ int shared_counts[];
  if (counts == nullptr) counts = shared_counts;
  wait_for_prior_kernels();  // the experts come from moe_route
  release_dependents();
  const int P = int(blockDim.x), p = int(threadIdx.x), buckets = E + 1;
  const int per_segment = (S + P - 1) / P;
  const int first = min(S, p * per_segment), last = min(S, first + per_segment);
  auto bucket = [&](int s) {
    const int e = experts[s];
    return e >= 0 && e < E ? e : E;
  };
  for (int e = 0; e < buckets; ++e) counts[e * P + p] = 0;
  for (int s = first; s < last; ++s) ++counts[bucket(s) * P + p];
  __syncthreads();
  // The prefix sum: thread q takes the entries [q·buckets, (q+1)·buckets) of the (bucket, p)
  // order, P·buckets in all. The scan's barriers separate every read of a count from the writes.
  int own = 0;
  for (int i = p * buckets; i < (p + 1) * buckets; ++i) own += counts[i];
  int total = 0;
  int running = block_inclusive_scan(own, warp_sums, total) - own;
  for (int i = p * buckets; i < (p + 1) * buckets; ++i) {
    const int count = counts[i];
    counts[i] = running;
    if (i % P == 0) offsets[i / P] = running;  // segment 0's start of bucket i / P
    running += count;
  }
  __syncthreads();
  for (int s = first; s < last; ++s) {
    const int row = counts[bucket(s) * P + p]++;
    slots[row] = s;
    positions[s] = row;
  }
}

// moe_group for a few slots (a decode step's T·k ≤ kSmallGroupSlots), from their buckets (the
// expert ids, E for one out of range) in shared memory: slot s's grouped row is its rank in
// (bucket, slot) order, #{s' : (bucket(s'), s') < (bucket(s), s)}, and expert e's first row
// #{s' : bucket(s') < e}: S² + (E + 1)·S compares spread over the block. The counting sort above
// gives each thread E + 1 counts to walk in series, which at 512 experts is most of a decode step's
// grouping time.
constexpr int kSmallGroupSlots = 64, kSmallGroupThreads = 256;

__device__ inline int few_slots_row(const int* buckets, int S, int s) {
  const int b = buckets[s];
  int row = 0;
#pragma unroll 1
  for (int o = 0; o < S; ++o) row += buckets[o] < b || (buckets[o] == b && o < s);
  return row;
}

// The whole block writes the offsets, slots and positions; row_of[s] (shared memory, or null)
// receives slot s's row too.
__device__ void group_few_slots(int32_t* offsets, int32_t* slots, int32_t* positions, const int* buckets, int S, int E,
                                int* row_of) {
  for (int s = int(threadIdx.x); s < S; s += int(blockDim.x)) {
    const int row = few_slots_row(buckets, S, s);
    slots[row] = s;
    positions[s] = row;
    if (row_of) row_of[s] = row;
  }
  for (int e = int(threadIdx.x); e <= E; e += int(blockDim.x)) {
    int before = 0;
#pragma unroll 1
    for (int o = 0; o < S; ++o) before += buckets[o] < e;
    offsets[e] = before;
  }
}

// Block 0 groups. With x (x_units > 0: its rows in `Unit`s), block t also copies token t's row to
// its k grouped rows, ranking those slots itself: one launch for the whole op, every block a few
// dependent loads deep.
template <class Unit>
__global__ void __launch_bounds__(kSmallGroupThreads) moe_group_small_kernel(int32_t* offsets, int32_t* slots,
                                                                             int32_t* positions, const int32_t* experts,
                                                                             int S, int E, int k, const Unit* x,
                                                                             Unit* x_grouped, int64_t x_units) {
  __shared__ int buckets[kSmallGroupSlots];
  __shared__ int token_rows[kSmallGroupSlots];
  wait_for_prior_kernels();  // the experts come from moe_route
  release_dependents();
  const int tid = int(threadIdx.x), threads = int(blockDim.x);
  for (int s = tid; s < S; s += threads) {
    const int e = experts[s];
    buckets[s] = e >= 0 && e < E ? e : E;
  }
  __syncthreads();
  if (blockIdx.x == 0) group_few_slots(offsets, slots, positions, buckets, S, E, nullptr);
  if (x_units == 0) return;
  const int t = int(blockIdx.x);
  for (int j = tid; j < k; j += threads) token_rows[j] = few_slots_row(buckets, S, t * k + j);
  __syncthreads();
  const Unit* src = x + int64_t(t) * x_units;
  for (int64_t i = tid; i < x_units; i += threads) {
    const Unit v = src[i];
    for (int j = 0; j < k; ++j) x_grouped[int64_t(token_rows[j]) * x_units + i] = v;
  }
}

// moe_route of a decode step with the router and the grouping (and an rms_norm first), in one
// launch. Every block stages the T tokens' rows in shared memory and, with a norm, norms them there
// (a warp a row; block 0 writes h). The router's E rows are dealt to the grid's warps, a row each
// (then every gridDim.x·warps-th), each scored against every staged row; a row's first pieces and
// the norm's weights are loaded before the chained-launch wait, since weights do not depend on the
// kernel before. The block that arrives last (last_block.cuh) reads the logits back, routes a token
// per warp (route_token, its choices parked in shared memory), groups the T·k slots
// (group_few_slots) and gathers the normed rows from its staged copy. So the dependent chain x →
// h → logits → routing → grouping runs inside one kernel, where four launches (rms_norm, matmul,
// moe_route, moe_group) each began with a wait for the one before.
// Cluster (sm_90+, a grid of at most kMaxRouteCluster blocks, launched as one cluster): each warp
// stores its logits straight into block 0's shared memory, and block 0 routes after the cluster's
// barrier. That barrier stands in for the ticket's chain of L2 round trips: the fence after the
// logits' stores, the atomic, and the last block's reload of the logits.
// T ≤ kMaxRouteTokens and the block's warps, T·k ≤ kSmallGroupSlots, C·sizeof(X) a multiple of 16.
constexpr int kMaxRouteTokens = 8;
constexpr int kRouterPacks = 8;  // 16-byte pieces of a router row per lane in flight together
constexpr int kRouteBatch = 4;   // loads of x or of the logits per thread in flight together
constexpr size_t kRouteGatherBytes = 64 * 1024;  // the most grouped rows the last block writes
constexpr int kMaxRouteCluster = 8;  // a portable cluster

// Its dynamic shared memory, beside the four static slot arrays, within the default 48 KB a block.
constexpr size_t kRouteDecodeSharedBytes = kRouteSharedBytes - 4 * kSmallGroupSlots * sizeof(int);

__device__ unsigned int route_ticket;  // zero at module load; the last block leaves it at zero

// A 16-byte unit of X elements as floats. bf16 goes a 32-bit word at a time, each half placed at
// the top of an f32: one instruction an element, where widening a Pack<bf16, 8> first splits it
// into 16-bit registers (this kernel's code is mostly such loops, and it runs once a layer).
template <class X>
__device__ inline void widen_unit(const uint4& u, float (&v)[kPack16<X>]) {
  if constexpr (std::is_same_v<X, ding::bf16>) {
    const uint32_t words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = __uint_as_float(words[i] << 16);
      v[2 * i + 1] = __uint_as_float(words[i] & 0xFFFF0000u);
    }
  } else {
    widen(reinterpret_cast<const Pack<X, kPack16<X>>&>(u), v);
  }
}

template <class X, bool Grouped, bool Cluster>
__global__ void __launch_bounds__(kRouteThreads) moe_route_decode_kernel(
    float* logits, float* weights, int32_t* experts, int32_t* offsets, int32_t* slots, int32_t* positions,
    const X* x, const X* router_w, X* x_grouped, int T, int E, int k, int C, ops::MoeRouteParams params,
    const X* norm_w, float eps, X* h) {
  // Rows move as 16-byte units (uint4) and are read as packs of kN elements only to widen them: a
  // Pack<bf16, 8> in registers is eight 16-bit values, and moving it splits and joins them.
  constexpr int kN = kPack16<X>;
  using P = Pack<X, kN>;
  // Dynamic shared memory: x's rows [T][C], the norm's weights [C] (with a norm), the tokens'
  // (logit, expert) pairs [T][E], then (Cluster) their logits [T][E] as the grid's warps left them.
  extern __shared__ uint4 route_shared[];
  // The routing's choices, parked here rather than in global memory, where reading them back
  // would cost a round trip to L2 each time.
  __shared__ float chosen_weights[kSmallGroupSlots];
  __shared__ int32_t chosen_experts[kSmallGroupSlots], buckets[kSmallGroupSlots], row_of[kSmallGroupSlots];
  const int lane = lane_id(), warp = int(threadIdx.x) / warp_size(), warps = int(blockDim.x) / warp_size();
  const int threads = int(blockDim.x);
  const int packs = C / kN;  // 16-byte pieces of a row
  const int x_total = T * packs;
  uint4* const xs = route_shared;
  uint4* const norm_ws = xs + x_total;
  const uint4* const w_rows = reinterpret_cast<const uint4*>(router_w);
  uint64_t* const pairs = reinterpret_cast<uint64_t*>(norm_ws + (norm_w != nullptr ? packs : 0));
  float* const cluster_logits = reinterpret_cast<float*>(pairs + T * E);
  if constexpr (Cluster) cluster_arrive();  // this block has started (waited for before the first remote store)
  const int first_row = int(blockIdx.x) * warps + warp, row_stride = int(gridDim.x) * warps;
  // Pieces p0 + i·warp_size() + lane, i < kRouterPacks, of a row of w, and their dot product with
  // the same pieces of a staged row of x.
  auto load_w = [&](uint4 (&w)[kRouterPacks], int row, int p0) {
#pragma unroll
    for (int i = 0; i < kRouterPacks; ++i) {
      const int p = p0 + i * warp_size() + lane;
      if (row < E && p < packs) w[i] = w_rows[int64_t(row) * packs + p];
    }
  };
  auto dot = [&](const uint4 (&w)[kRouterPacks], const uint4* x_row, int p0) {
    float acc = 0;
#pragma unroll
    for (int i = 0; i < kRouterPacks; ++i) {
      const int p = p0 + i * warp_size() + lane;
      if (p >= packs) continue;
      float wv[kN], xv[kN];
      widen_unit<X>(w[i], wv);
      widen_unit<X>(x_row[p], xv);
#pragma unroll
      for (int e = 0; e < kN; ++e) acc = fmaf(wv[e], xv[e], acc);
    }
    return acc;
  };
  // Copies n pieces from global to shared memory, kRouteBatch loads a thread in flight together (a
  // store to shared memory may alias a generic pointer's load, so they are not reordered).
  auto stage = [&](uint4* to, const uint4* from, int n) {
#pragma unroll 1
    for (int i0 = int(threadIdx.x); i0 < n; i0 += kRouteBatch * threads) {
      uint4 v[kRouteBatch];
#pragma unroll
      for (int b = 0; b < kRouteBatch; ++b)
        if (i0 + b * threads < n) v[b] = from[i0 + b * threads];
#pragma unroll
      for (int b = 0; b < kRouteBatch; ++b)
        if (i0 + b * threads < n) to[i0 + b * threads] = v[b];
    }
  };
  // Weights do not depend on the kernel before: the router row's first pieces and the norm's
  // weights are loaded before the wait.
  uint4 w[kRouterPacks];
  load_w(w, first_row, 0);
  if (norm_w != nullptr) stage(norm_ws, reinterpret_cast<const uint4*>(norm_w), packs);
  wait_for_prior_kernels();  // x comes from the kernel before
  release_dependents();
  stage(xs, reinterpret_cast<const uint4*>(x), x_total);
  __syncthreads();
  if (norm_w != nullptr) {
    // rms_norm of the staged rows in place, a warp a row, as the norm op computes it (f32 sums,
    // x·rstd·w rounded to x's dtype); every block norms them, block 0 also writes h.
#pragma unroll 1
    for (int t = warp; t < T; t += warps) {
      uint4* const row = xs + t * packs;
      float squares = 0;
#pragma unroll 1
      for (int p = lane; p < packs; p += warp_size()) {
        float v[kN];
        widen_unit<X>(row[p], v);
#pragma unroll
        for (int e = 0; e < kN; ++e) squares = fmaf(v[e], v[e], squares);
      }
      const float rstd = 1.0f / sqrtf(warp_sum(squares) / float(C) + eps);
#pragma unroll 1
      for (int p = lane; p < packs; p += warp_size()) {
        float v[kN], g[kN];
        widen_unit<X>(row[p], v);
        widen_unit<X>(norm_ws[p], g);
        P y;
#pragma unroll
        for (int e = 0; e < kN; ++e) y.v[e] = from_float<X>(v[e] * rstd * g[e]);
        row[p] = reinterpret_cast<const uint4&>(y);
        if (blockIdx.x == 0) reinterpret_cast<uint4*>(h)[t * packs + p] = row[p];
      }
    }
    __syncthreads();
  }
  // Loops rolled (tokens, rows, pieces past the first kRouterPacks a lane): the code stays short
  // for a kernel that runs once a layer. A row's first pieces stay in registers for every token.
  const int step = kRouterPacks * warp_size();
  if constexpr (Cluster) cluster_wait();  // every block of the cluster has started
#pragma unroll 1
  for (int row = first_row; row < E; row += row_stride) {
    if (row != first_row) load_w(w, row, 0);
#pragma unroll 1
    for (int t = 0; t < T; ++t) {
      float acc = 0;
#pragma unroll 1
      for (int p0 = 0; p0 < packs; p0 += step) {
        uint4 chunk[kRouterPacks];
        if (p0 == 0) {
#pragma unroll
          for (int i = 0; i < kRouterPacks; ++i) chunk[i] = w[i];
        } else {
          load_w(chunk, row, p0);
        }
        acc += dot(chunk, xs + t * packs, p0);
      }
      acc = warp_sum(acc);
      if (lane == 0) {
        logits[int64_t(t) * E + row] = acc;
        if constexpr (Cluster) cluster_store(cluster_logits + t * E + row, 0, acc);
      }
    }
  }
  const int logit_total = T * E;
  if constexpr (Cluster) {
    cluster_sync();  // every logit is in block 0
    if (cluster_rank() != 0) return;
#pragma unroll 1
    for (int i = int(threadIdx.x); i < logit_total; i += threads) pairs[i] = order_pair(cluster_logits[i], uint32_t(i % E));
    __syncthreads();
  } else {
    if (!arrive_last(&route_ticket, gridDim.x)) return;
    // The last block. Each token's pairs from the logits the grid wrote (loads from L2).
#pragma unroll 1
    for (int i0 = int(threadIdx.x); i0 < logit_total; i0 += kRouteBatch * threads) {
      float v[kRouteBatch];
#pragma unroll
      for (int b = 0; b < kRouteBatch; ++b)
        if (i0 + b * threads < logit_total) v[b] = load_partial(logits + i0 + b * threads);
#pragma unroll
      for (int b = 0; b < kRouteBatch; ++b) {
        const int i = i0 + b * threads;
        if (i < logit_total) pairs[i] = order_pair(v[b], uint32_t(i % E));
      }
    }
    __syncthreads();
  }
  if (warp < T) {
    const uint64_t* const token_pairs = pairs + warp * E;
    route_token<Grouped>([&](int e) { return token_pairs[e]; }, chosen_weights + warp * k, chosen_experts + warp * k,
                         E, k, params);
  }
  __syncthreads();
  const int S = T * k;
#pragma unroll 1
  for (int s = int(threadIdx.x); s < S; s += threads) {
    const int e = chosen_experts[s];
    weights[s] = chosen_weights[s];
    experts[s] = e;
    buckets[s] = e >= 0 && e < E ? e : E;
  }
  __syncthreads();
  group_few_slots(offsets, slots, positions, buckets, S, E, row_of);
  if (x_grouped == nullptr) return;
  __syncthreads();
  uint4* const grouped = reinterpret_cast<uint4*>(x_grouped);
#pragma unroll 1
  for (int i = int(threadIdx.x); i < packs; i += threads)
#pragma unroll 1
    for (int s = 0; s < S; ++s) grouped[int64_t(row_of[s]) * packs + i] = xs[(s / k) * packs + i];
}

// x_grouped[p] = x[slots[p] / k]: rows of `Unit`s when the dtypes agree (16, 8, 4 or 2 bytes,
// whatever every row start allows), else element by element through f32.
template <class Unit>
__global__ void moe_gather_bytes_kernel(char* x_grouped, const char* x, const int32_t* slots, int S, int k,
                                        int64_t units_per_row) {
  wait_for_prior_kernels();  // slots from moe_group, x from the layer before
  release_dependents();
  for (int64_t p = blockIdx.x * int64_t(blockDim.y) + threadIdx.y; p < S; p += int64_t(gridDim.x) * blockDim.y) {
    const int s = slots[p];
    if (s < 0 || s >= S) continue;  // cannot happen: slots is a permutation of [0, S)
    const Unit* src = reinterpret_cast<const Unit*>(x) + int64_t(s / k) * units_per_row;
    Unit* dst = reinterpret_cast<Unit*>(x_grouped) + p * units_per_row;
    for (int64_t i = threadIdx.x; i < units_per_row; i += blockDim.x) dst[i] = src[i];
  }
}

template <class Out, class In>
__global__ void moe_gather_convert_kernel(Out* x_grouped, const In* x, const int32_t* slots, int S, int k, int64_t C) {
  wait_for_prior_kernels();  // slots from moe_group, x from the layer before
  release_dependents();
  for (int64_t p = blockIdx.x * int64_t(blockDim.y) + threadIdx.y; p < S; p += int64_t(gridDim.x) * blockDim.y) {
    const int s = slots[p];
    if (s < 0 || s >= S) continue;
    const In* src = x + int64_t(s / k) * C;
    Out* dst = x_grouped + p * C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dst[c] = from_float<Out>(to_float(src[c]));
  }
}

// out[t, c..c+N) = residual[t, c..c+N) + Σ_j weights[t, j] · y_grouped[positions[t·k + j], c..c+N),
// j ascending. residual (null: none) is read at run time in its own dtype; it may be out itself,
// since each element's residual is read by the thread that writes that element, before it does.
// Thread x of block (bx, by) owns columns [N·(bx·blockDim.x + x), +N) of tokens by, by + gridDim.y,
// ...: a decode token's row spreads over several blocks, each thread a single pack, so the
// kernel is a few dependent loads deep (choices, then their rows) however wide the row is.
template <class Out, class Y, int N>
__global__ void moe_combine_kernel(Out* out, const Y* y_grouped, const float* weights, const int32_t* positions,
                                   const void* residual, DType residual_dtype, int64_t tokens, int k, int64_t C) {
  wait_for_prior_kernels();  // the experts' rows from moe_matmul, weights and positions before it
  release_dependents();
  const int64_t S = tokens * k;
  const int64_t c = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * N;
  if (c >= C) return;
  for (int64_t t = blockIdx.y; t < tokens; t += gridDim.y) {
    const float* w = weights + t * k;
    const int32_t* position = positions + t * k;
    float sum[N] = {};
    if (residual)
#pragma unroll
      for (int n = 0; n < N; ++n) sum[n] = load_as_float(residual, residual_dtype, t * C + c + n);
    for (int j0 = 0; j0 < k; j0 += kCombineBatch) {
      bool in[kCombineBatch];
      float wj[kCombineBatch];
      Pack<Y, N> y[kCombineBatch];
#pragma unroll
      for (int u = 0; u < kCombineBatch; ++u) {
        const int64_t row = j0 + u < k ? position[j0 + u] : -1;
        in[u] = row >= 0 && row < S;
        wj[u] = in[u] ? w[j0 + u] : 0.0f;
        y[u] = in[u] ? *reinterpret_cast<const Pack<Y, N>*>(y_grouped + row * C + c) : Pack<Y, N>{};
      }
#pragma unroll
      for (int u = 0; u < kCombineBatch; ++u)
        if (in[u]) {
#pragma unroll
          for (int n = 0; n < N; ++n) sum[n] = fmaf(wj[u], to_float(y[u].v[n]), sum[n]);
        }
    }
    Pack<Out, N> o;
#pragma unroll
    for (int n = 0; n < N; ++n) o.v[n] = from_float<Out>(sum[n]);
    store_pack(out + t * C + c, o);
  }
}

bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

void moe_gather(GpuStream& s, const ops::MoeGroupArgs& a, int S, int k) {
  const int64_t C = a.x.dim(1);
  if (a.x.dtype == a.x_grouped.dtype) {
    const int64_t row_bytes = C * int64_t(dtype_size(a.x.dtype));
    int64_t unit = 16;
    while (unit > 1 && !(row_bytes % unit == 0 && aligned(a.x.data, size_t(unit)) && aligned(a.x_grouped.data, size_t(unit))))
      unit /= 2;
    const int64_t units = row_bytes / unit;
    const dim3 block = row_block(units);
    const unsigned grid = row_grid(s, S, block);
    with_byte_unit(unit, [&](auto tag) {
      using Unit = decltype(tag);
      DING_GPU_CHECK(launch_chained(s.props().has_chained_launch(), moe_gather_bytes_kernel<Unit>, dim3(grid), block, 0,
                                    s.handle(), static_cast<char*>(a.x_grouped.data), static_cast<const char*>(a.x.data),
                                    a.slots.ptr<int32_t>(), S, k, units));
    });
    DING_GPU_CHECK_LAUNCH("moe_gather_bytes_kernel");
    return;
  }
  const dim3 block = row_block(C);
  const unsigned grid = row_grid(s, S, block);
  with_float_type(a.x_grouped.dtype, [&](auto out_tag) {
    with_float_type(a.x.dtype, [&](auto in_tag) {
      using Out = decltype(out_tag);
      using In = decltype(in_tag);
      DING_GPU_CHECK(launch_chained(s.props().has_chained_launch(), moe_gather_convert_kernel<Out, In>, dim3(grid), block,
                                    0, s.handle(), static_cast<Out*>(a.x_grouped.data),
                                    static_cast<const In*>(a.x.data), a.slots.ptr<int32_t>(), S, k, C));
    });
  });
  DING_GPU_CHECK_LAUNCH("moe_gather_convert_kernel");
}

// Whether the routing kernel's cluster form can run here: a device with clusters (sm_90+) and the
// kernel's loaded code compiled for one (a build for older chips carries it without the cluster
// code). Asked once: a decode step without graphs routes every layer.
bool route_cluster_compiled(const Props& props) {
  static const bool compiled =
      kernel_compiled_for(reinterpret_cast<const void*>(moe_route_decode_kernel<ding::bf16, false, true>), 90);
  return props.has_chained_launch() && compiled;  // sm_90+: clusters and chained launches came together
}

// moe_route with the router and the grouping in one launch (moe_route_decode_kernel) where a
// decode step's sizes allow it; false, with nothing launched, where they do not.
bool route_in_one_launch(GpuStream& s, const ops::MoeRouteArgs& a) {
  if (!ops::has_router(a) || !ops::has_grouping(a) || a.x.dtype != a.router_w.dtype) return false;
  const bool normed = ops::has_norm(a);
  if (normed && (a.norm.kind != ops::NormKind::rms_norm || a.norm.weight.dtype != a.x.dtype ||
                 !aligned(a.norm.weight.data, 16) || !aligned(a.h.data, 16)))
    return false;
  const int64_t T = a.logits.dim(0), E = a.logits.dim(1), k = a.params.k, C = a.x.dim(1);
  const int64_t row_bytes = C * int64_t(dtype_size(a.x.dtype));
  // The pairs, then the cluster form's logits (asked of every form: one rule for what fits).
  const size_t shared_bytes =
      size_t((T + (normed ? 1 : 0)) * row_bytes) + size_t(T * E) * (sizeof(uint64_t) + sizeof(float));
  const int warps = kRouteThreads / s.props().warp_size;
  if (T > std::min(kMaxRouteTokens, warps) || T * k > kSmallGroupSlots || row_bytes % 16 != 0 ||
      !aligned(a.x.data, 16) || !aligned(a.router_w.data, 16) || shared_bytes > kRouteDecodeSharedBytes ||
      E >= (int64_t(1) << 31) || C >= (int64_t(1) << 31))
    return false;
  // The rows move as whole 16-byte pieces where x_grouped is x's dtype; else a second kernel converts them.
  const bool gathers = a.x_grouped.defined() && a.x_grouped.dtype == a.x.dtype && aligned(a.x_grouped.data, 16);
  // The last block writes every grouped row alone: beyond kRouteGatherBytes the four parts, whose
  // gather spreads over a block per token, are faster (OLMoE at batch 8: 256 KB, docs/PERFORMANCE.md).
  if (gathers && size_t(T * k * row_bytes) > kRouteGatherBytes) return false;
  const int64_t blocks = ceil_div(E, warps);
  const bool cluster =
      s.op_tuning().moe_route_cluster && blocks <= kMaxRouteCluster && route_cluster_compiled(s.props());
  s.note_form("moe_route", cluster ? "logits handed over in a cluster" : "logits handed over by a ticket");
  with_float_type(a.x.dtype, [&](auto tag) {
    using X = decltype(tag);
    auto launch = [&](auto kernel) {
      DING_GPU_CHECK(launch_chained_in_clusters(s.props().has_chained_launch(), cluster ? unsigned(blocks) : 0u, kernel,
                                    dim3(unsigned(blocks)), dim3(kRouteThreads), shared_bytes, s.handle(), a.logits.ptr<float>(),
                                    a.weights.ptr<float>(), a.experts.ptr<int32_t>(), a.offsets.ptr<int32_t>(),
                                    a.slots.ptr<int32_t>(), a.positions.ptr<int32_t>(), static_cast<const X*>(a.x.data),
                                    static_cast<const X*>(a.router_w.data), gathers ? static_cast<X*>(a.x_grouped.data) : nullptr,
                                    int(T), int(E), int(k), int(C), a.params,
                                    normed ? static_cast<const X*>(a.norm.weight.data) : nullptr, a.norm.eps,
                                    normed ? static_cast<X*>(a.h.data) : nullptr));
    };
    if (a.params.groups > 1)
      cluster ? launch(moe_route_decode_kernel<X, true, true>) : launch(moe_route_decode_kernel<X, true, false>);
    else
      cluster ? launch(moe_route_decode_kernel<X, false, true>) : launch(moe_route_decode_kernel<X, false, false>);
  });
  DING_GPU_CHECK_LAUNCH("moe_route_decode_kernel");
  if (a.x_grouped.defined() && !gathers) moe_gather(s, ops::grouping_part(a), int(T * k), int(k));
  return true;
}

}  // namespace

void moe_route(Stream& stream, const ops::MoeRouteArgs& a) {
  const int64_t T = a.logits.dim(0), E = a.logits.dim(1);
  if (E >= (int64_t(1) << 31))
    throw Error(ErrorCode::invalid_argument, "moe_route on the GPU: E = " + std::to_string(E) +
                                                 " experts exceed the i32 index range");
  GpuStream& s = gpu_stream(stream);
  if (ops::has_parts(a)) {
    if (!route_in_one_launch(s, a)) ops::moe_route_in_parts(stream, a, {layer_norm, rms_norm, matmul, moe_route, moe_group});
    return;
  }
  const int64_t tokens_per_block = kRouteThreads / s.props().warp_size;
  const size_t staged_bytes = size_t(tokens_per_block * E) * sizeof(uint64_t);
  const bool staged = staged_bytes <= kRouteSharedBytes;
  with_float_type(a.logits.dtype, [&](auto tag) {
    using L = decltype(tag);
    auto launch = [&](auto kernel) {
      DING_GPU_CHECK(launch_chained(s.props().has_chained_launch(), kernel, dim3(unsigned(ceil_div(T, tokens_per_block))),
                                    dim3(kRouteThreads), staged ? staged_bytes : 0, s.handle(), a.weights.ptr<float>(),
                                    a.experts.ptr<int32_t>(), static_cast<const L*>(a.logits.data), T, int(E),
                                    int(a.params.k), a.params, staged));
    };
    if (a.params.groups > 1)
      launch(moe_route_kernel<L, true>);
    else
      launch(moe_route_kernel<L, false>);
  });
  DING_GPU_CHECK_LAUNCH("moe_route_kernel");
}

void moe_group(Stream& stream, const ops::MoeGroupArgs& a) {
  const int64_t k = a.experts.dim(1), S = a.experts.dim(0) * k, E = a.offsets.dim(0) - 1;
  if (S >= (int64_t(1) << 31) || (E + 1) * kGroupThreads >= (int64_t(1) << 31))
    throw Error(ErrorCode::invalid_argument, "moe_group on the GPU: T·k = " + std::to_string(S) + " slots or E = " +
                                                 std::to_string(E) + " experts exceed the i32 index range");
  GpuStream& s = gpu_stream(stream);
  if (S <= kSmallGroupSlots) {
    // The gather in the same launch where x's rows move as whole 16-byte units (else a second
    // kernel converts them).
    const int64_t T = a.experts.dim(0);
    const int64_t row_bytes = a.x.defined() ? a.x.dim(1) * int64_t(dtype_size(a.x.dtype)) : 0;
    const bool gathers = a.x.defined() && a.x.dtype == a.x_grouped.dtype && row_bytes % 16 == 0 &&
                         aligned(a.x.data, 16) && aligned(a.x_grouped.data, 16);
    DING_GPU_CHECK(launch_chained(s.props().has_chained_launch(), moe_group_small_kernel<uint4>,
                                  dim3(gathers ? unsigned(T) : 1u), dim3(kSmallGroupThreads), 0, s.handle(),
                                  a.offsets.ptr<int32_t>(), a.slots.ptr<int32_t>(), a.positions.ptr<int32_t>(),
                                  a.experts.ptr<int32_t>(), int(S), int(E), int(k),
                                  gathers ? static_cast<const uint4*>(a.x.data) : nullptr,
                                  gathers ? static_cast<uint4*>(a.x_grouped.data) : nullptr,
                                  gathers ? row_bytes / 16 : int64_t(0)));
    DING_GPU_CHECK_LAUNCH("moe_group_small_kernel");
    if (a.x.defined() && !gathers) moe_gather(s, a, int(S), int(k));
    return;
  }
  // One slot per thread up to kGroupThreads: a prefill's slots split into segments, one per thread.
  const int warp = s.props().warp_size;
  const int threads = int(std::min<int64_t>(kGroupThreads, std::max<int64_t>(warp, (S + warp - 1) / warp * warp)));
  const size_t count_bytes = size_t(E + 1) * size_t(threads) * sizeof(int);
  const bool shared = count_bytes <= kGroupSharedBytes;
  int* counts = shared ? nullptr : static_cast<int*>(s.scratch(count_bytes));
  DING_GPU_CHECK(launch_chained(s.props().has_chained_launch(), moe_group_kernel, dim3(1), dim3(unsigned(threads)),
                                shared ? count_bytes : 0, s.handle(), a.offsets.ptr<int32_t>(), a.slots.ptr<int32_t>(),
                                a.positions.ptr<int32_t>(), a.experts.ptr<int32_t>(), int(S), int(E), counts));
  DING_GPU_CHECK_LAUNCH("moe_group_kernel");
  if (a.x.defined()) moe_gather(s, a, int(S), int(k));
}

void moe_combine(Stream& stream, const ops::MoeCombineArgs& a) {
  const int64_t T = a.weights.dim(0), k = a.weights.dim(1), C = a.out.dim(1);
  GpuStream& s = gpu_stream(stream);
  with_float_type(a.out.dtype, [&](auto out_tag) {
    with_float_type(a.y_grouped.dtype, [&](auto y_tag) {
      using Out = decltype(out_tag);
      using Y = decltype(y_tag);
      auto launch = [&](auto width) {
        constexpr int N = decltype(width)::value;
        const int64_t packs = ceil_div(C, N);
        const dim3 grid(unsigned(ceil_div(packs, kCombineThreads)), unsigned(std::min<int64_t>(T, kMaxGridYZ)));
        DING_GPU_CHECK(launch_chained(s.props().has_chained_launch(), moe_combine_kernel<Out, Y, N>, grid,
                                      dim3(kCombineThreads), 0, s.handle(), static_cast<Out*>(a.out.data),
                                      static_cast<const Y*>(a.y_grouped.data), a.weights.ptr<float>(),
                                      a.positions.ptr<int32_t>(), a.residual.data, a.residual.dtype, T, int(k), C));
      };
      // Packs of 4 when every row start is aligned to one (rows are C elements apart).
      if (C % 4 == 0 && aligned(a.out.data, 4 * sizeof(Out)) && aligned(a.y_grouped.data, 4 * sizeof(Y)))
        launch(std::integral_constant<int, 4>{});
      else
        launch(std::integral_constant<int, 1>{});
    });
  });
  DING_GPU_CHECK_LAUNCH("moe_combine_kernel");
}

DING_GPU_END
