// Deterministic split-K for the tensor-core cores (gemm_mma.cuh, sm90/gemm_wgmma.cu): for
// products whose tile grid would leave SMs idle, blocks z = b · splits + s compute K slices
// [s · per, (s + 1) · per) of their tile for batch b and write f32 partial sums to
// partial[s][b · M + m][n] in the stream's scratch (n a column of the product: for swiglu both
// sums of each output, gemm.cuh); gemm_split_reduce_kernel then adds the `splits` partials of
// each element in order s = 0, 1, … (the same sum whatever the timing) and applies the epilogue,
// swiglu's to the two sums of an output once both are complete. The partials stay small
// (kMaxPartialBytes) so they live in L2.
#pragma once
#include <algorithm>

#include "check.h"
#include "gemm.cuh"
#include "stream.h"

DING_GPU_BEGIN

struct SplitK {
  int splits = 1;            // 1: no split, the GEMM kernel applies the epilogue itself
  int64_t tiles_per = 0;     // K slices (of the core's depth) per split
  int64_t product_n = 0;     // columns of the product (product_shape, gemm.cuh): N, or swiglu_cols(N)
  float* partial = nullptr;  // [splits, batches · M, product_n]; null when splits == 1

  // Split s's K slices are [first_tile(s), first_tile(s) + tile_count(s, k_tiles)) of the k_tiles
  // in all; make_split makes every split non-empty.
  __device__ int64_t first_tile(int64_t s) const { return splits == 1 ? 0 : s * tiles_per; }
  __device__ int64_t tile_count(int64_t s, int64_t k_tiles) const {
    const int64_t left = k_tiles - first_tile(s);
    return splits == 1 ? k_tiles : (tiles_per < left ? tiles_per : left);
  }
  // The sum v of out[b · M + m, n] over split s's slices: through the epilogue when K is not
  // split, else into the partial sums the reduce kernel adds.
  __device__ void store(const Epilogue& ep, const GemmShape& p, int64_t s, int64_t b, int64_t m, int64_t n,
                        float v) const {
    if (splits == 1)
      ep.store(b * p.M + m, n, v);
    else
      partial[((s * p.batches + b) * p.M + m) * product_n + n] = v;
  }

  // A warp's staged piece of its tile, `rows` × `cols` floats at `piece` (row stride ld_piece, a
  // multiple of 4; cols a multiple of 8; 16-byte aligned), whose element (r, c) is the sum for
  // row b · M + m0 + r, column n0 + c of the product: each lane takes 8 consecutive columns of a
  // row at a time, so a store instruction covers whole rows, and the epilogue writes 16-bit
  // outputs 16 bytes at once. swiglu (n0 and cols multiples of 16) goes to store_swiglu_piece
  // unless K is split: its partials are the product's columns like any other.
  __device__ void store_piece(const Epilogue& ep, const GemmShape& p, int64_t s, int64_t b, const float* piece,
                              int ld_piece, int rows, int cols, int64_t m0, int64_t n0, int lane) const {
    if (ep.swiglu && splits == 1) return store_swiglu_piece(ep, p, b, piece, ld_piece, rows, cols, m0, n0, lane);
    const int vecs = cols / 8;
#pragma unroll 1
    for (int e = lane; e < rows * vecs; e += 32) {
      const int r = e / vecs, c = (e % vecs) * 8;
      const int64_t m = m0 + r, n = n0 + c;
      if (m >= p.M || n >= product_n) continue;
      float v[8];
      load8(v, piece + r * ld_piece + c);
      if (n + 8 <= product_n && splits == 1) {
        ep.store8(b * p.M + m, n, v);
        continue;
      }
      float* const part = splits == 1 ? nullptr : partial + ((s * p.batches + b) * p.M + m) * product_n + n;
      if (part && n + 8 <= product_n && reinterpret_cast<uintptr_t>(part) % 16 == 0) {
        // Partials as two 16-byte stores (eight scalar stores 32 bytes apart per lane scattered a
        // warp's store over eight times the sectors: M = 256 split products ran 2× slower).
        reinterpret_cast<float4*>(part)[0] = make_float4(v[0], v[1], v[2], v[3]);
        reinterpret_cast<float4*>(part)[1] = make_float4(v[4], v[5], v[6], v[7]);
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i)
          if (n + i < product_n) store(ep, p, s, b, m, n + i, v[i]);
      }
    }
  }

  // swiglu, K not split: each 16 columns of the piece are the gate sums of 8 outputs, then their
  // up sums (gemm.cuh); a lane takes such a group of a row and stores its 8 outputs.
  __device__ void store_swiglu_piece(const Epilogue& ep, const GemmShape& p, int64_t b, const float* piece,
                                     int ld_piece, int rows, int cols, int64_t m0, int64_t n0, int lane) const {
    const int groups = cols / 16;
#pragma unroll 1
    for (int e = lane; e < rows * groups; e += 32) {
      const int r = e / groups, c = (e % groups) * 16;
      const int64_t m = m0 + r, j = swiglu_out_col(n0 + c);
      if (m >= p.M || j >= p.N) continue;
      float gate[8], up[8];
      load8(gate, piece + r * ld_piece + c);
      load8(up, piece + r * ld_piece + c + 8);
      if (j + 8 <= p.N) {
        ep.store8(b * p.M + m, j, gate, up);
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i)
          if (j + i < p.N) ep.store(b * p.M + m, j + i, gate[i], up[i]);
      }
    }
  }

  // Eight floats from 16-byte-aligned memory.
  __device__ static void load8(float (&v)[8], const float* from) {
    const float4 lo = reinterpret_cast<const float4*>(from)[0], hi = reinterpret_cast<const float4*>(from)[1];
    v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w, v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
  }
};

inline constexpr size_t kMaxPartialBytes = size_t(16) << 20;

// `wanted` splits of k_tiles slices made into whole, non-empty ones (possibly fewer), with their
// scratch; splits == 1 when there is nothing to split. `product` is product_shape(p, ep).
inline SplitK make_split(GpuStream& s, const GemmShape& product, int64_t k_tiles, int wanted) {
  SplitK split;
  split.product_n = product.N;
  if (wanted <= 1 || k_tiles <= 1) return split;
  split.tiles_per = ceil_div(k_tiles, wanted);
  split.splits = int(ceil_div(k_tiles, split.tiles_per));  // every split non-empty
  if (split.splits > 1)
    split.partial = static_cast<float*>(
        s.scratch(size_t(split.splits * product.batches * product.M * product.N) * sizeof(float)));
  return split;
}

// Eight consecutive outputs of one row per thread: the partials' 16-byte loads of a batch of
// splits all go out before any add, and a 16-bit out takes the eight results as one 16-byte store
// (Epilogue::store8). One element per thread, with scalar loads, took 8.5 µs (ncu) to add five
// 256 × 1600 partials. The sum is split 0 + split 1 + … in order, whatever the width. swiglu's
// outputs n … n + 7 have their gate sums at product column 2n (a multiple of 16, so always
// aligned) and their up sums 8 further. A template only so that every translation unit that
// launches it may define it.
template <int kThreads>
__global__ void __launch_bounds__(kThreads) gemm_split_reduce_kernel(const float* partial, int splits, int64_t rows,
                                                                      int64_t N, int64_t product_n, const Epilogue ep) {
  constexpr int kBatch = 4;  // splits whose loads are in flight together
  const int64_t count = rows * product_n, row_vecs = (N + 7) / 8;
  // Σ over the splits of the partial at `at` (split 0's), in split order.
  auto sum = [&](const float* at) {
    float acc = at[0];
    for (int s = 1; s < splits; ++s) acc += at[s * count];
    return acc;
  };
  // The same for eight consecutive (16-byte aligned) partials.
  auto sum8 = [&](float (&acc)[8], const float* at) {
    SplitK::load8(acc, at);
    for (int s0 = 1; s0 < splits; s0 += kBatch) {
      float part[kBatch][8];
#pragma unroll
      for (int i = 0; i < kBatch; ++i)
        if (s0 + i < splits) SplitK::load8(part[i], at + (s0 + i) * count);
#pragma unroll
      for (int i = 0; i < kBatch; ++i)
        if (s0 + i < splits)
#pragma unroll
          for (int c = 0; c < 8; ++c) acc[c] += part[i][c];
    }
  };
  for (int64_t v = int64_t(blockIdx.x) * kThreads + threadIdx.x; v < rows * row_vecs;
       v += int64_t(gridDim.x) * kThreads) {
    const int64_t m = v / row_vecs, n = (v % row_vecs) * 8;
    if (ep.swiglu) {
      const float* const gate_at = partial + m * product_n + 2 * n;
      if (n + 8 > N) {  // a row's ragged end
        for (int c = 0; n + c < N; ++c) ep.store(m, n + c, sum(gate_at + c), sum(gate_at + 8 + c));
        continue;
      }
      float gate[8], up[8];
      sum8(gate, gate_at);
      sum8(up, gate_at + 8);
      ep.store8(m, n, gate, up);
      continue;
    }
    const float* const at = partial + m * N + n;
    if (n + 8 > N || N % 4 != 0) {  // a row's ragged end, or rows not 16-byte aligned
      for (int c = 0; c < 8 && n + c < N; ++c) ep.store(m, n + c, sum(at + c));
      continue;
    }
    float acc[8];
    sum8(acc, at);
    ep.store8(m, n, acc);
  }
}

inline void launch_gemm_split_reduce(GpuStream& s, const GemmShape& p, const SplitK& split, const Epilogue& ep) {
  constexpr int kThreads = 256;
  const int64_t vecs = p.batches * p.M * ceil_div(p.N, int64_t(8));
  const int64_t blocks = std::clamp<int64_t>(ceil_div(vecs, kThreads), 1, int64_t(s.props().sm_count) * 16);
  gemm_split_reduce_kernel<kThreads><<<unsigned(blocks), kThreads, 0, s.handle()>>>(
      split.partial, split.splits, p.batches * p.M, p.N, split.product_n, ep);
  DING_GPU_CHECK_LAUNCH("gemm_split_reduce_kernel");
}

DING_GPU_END
