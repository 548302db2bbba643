// moe_matmul on the GPU: out[p] = act(x[p] · W[e]ᵀ) for the grouped rows offsets[e] ≤ p <
// offsets[e+1] of each expert e, act none or swiglu (ops/moe.h). Each expert's rows are cut into
// row tiles (row_tiles.cuh), so its weights are read once per tile of its rows (once in all at
// decode, where an expert owns one row or a few), and an expert without rows is never read.
//
// Decode (P ≤ E) with 16-bit x and w of x's type or 8 bits on NVIDIA sm_80+: the tensor-core GEMV
// core (gemv_mma.cuh) takes the product, one of its batches per row tile: its weight stream
// through a cp.async ring is what reaches the copy bandwidth on a decode step's few rows (the
// kernel below stalls on the latency of the loads its registers can hold). Where the op says the
// offsets come from an earlier op (offsets_from_earlier_op), its blocks find their experts and fill
// their rings before waiting for the kernel before.
//
// Otherwise the kernel below: a weight stream in the manner of the FMA GEMV (gemv.cuh), a block
// computing one row tile × one range of output columns.
//  - Launch: grid (row tiles, column tiles), 256 threads (8 warps of 32 lanes, or 4 of 64 on CDNA).
//    The offsets stay on the device (the op must be recordable in a graph), so the host sizes the
//    grid for the most tiles any offsets make (max_row_tiles), and blocks past the real count
//    leave at once. Both grid dimensions loop beyond their limits (block-uniform loops, so the
//    barriers inside them are safe).
//  - Each warp finds its block's tile (find_row_tile): a warp-wide prefix sum over the experts'
//    tile counts ⌈(offsets[e+1] − offsets[e]) / kTileRows⌉, warp_size() experts at a time; the
//    first expert whose running count passes the tile index owns it. E + 1 ints, from L2 after
//    the first blocks: nothing next to the weight rows the block then streams.
//  - 8-bit w (i8, f8e4m3) widens in registers, each vector once for all the tile's rows; each
//    row's finished sum is multiplied by the row's scale.
//  - A warp owns kColsPerWarp output columns (swiglu: one, its gate row j and up row N + j, so the
//    epilogue pairs the two sums with one shuffle) over a slice of K. Lanes read w in 16-byte
//    vectors (element by element where rows of x or w do not allow them), kUnroll per row in
//    flight, and apply each to every row of the tile; x (the tile's rows, read by every warp of
//    the block) comes through L1. Sums are f32, reduced across the warp; when row tiles × columns
//    give too few warps to cover memory latency, the warps of a block split K and add their
//    slices through shared memory in slice order (deterministic).
//  - Chained launch (vendor.h, sm_90) hides the launch gap, but unlike the GEMV nothing is
//    prefetched before the wait: which weights to read depends on the offsets.
//  - Offsets that the host backends would reject are clamped: each expert's range into [0, P] and
//    non-decreasing, so rows may go unwritten (or be written twice), but no access leaves x, w or
//    out.
// Prefill (thousands of rows) with 16-bit x and w of one type on NVIDIA sm_80+: the tensor-core
// GEMM core (gemm_mma.cuh) in its segmented form, one block row per row tile of 64 or 128 rows.
// 8-bit experts go the same way, read as stored: E4M3 on E4M3 tensor cores with x rounded per row
// (sm_89+, gemm_mma_e4m3.cu), else widened in the GEMM's registers; the row scales are applied in
// its epilogue. Where K is not whole 16-byte chunks of a row, they are widened to x's type first
// (widen.cuh), a group of experts at a time into a bounded scratch (widen_budget), only the experts
// with rows.
// Otherwise (f32, mixed dtypes, HIP, and between decode's P ≤ E and 8·E rows) the kernel below:
// every w vector loaded feeds kTileRows rows, and the blocks of one expert's consecutive tiles are
// scheduled together (tiles are grid x), so its columns come from L2 after the first; bounded by
// L1 bandwidth, not tensor-core fast.
#include <algorithm>
#include <climits>
#include <string>

#include "check.h"
#include "gemm.cuh"
#include "gemv.cuh"
#include "gemv_mma.cuh"
#include "kernels.h"
#include "matmul_cores.h"
#include "reduce.cuh"
#include "row_tiles.cuh"
#include "select.cuh"
#include "stream.h"
#include "widen.cuh"

DING_GPU_BEGIN
namespace {

constexpr int kThreads = 256;    // a multiple of 64: whole warps on either vendor
constexpr int kTileRows = kSegmentTileRows;  // grouped rows per tile: one w vector feeds this many FMAs
constexpr int kColsPerWarp = 2;  // rows of w per warp (swiglu: the gate and up rows of one column)
constexpr int kUnroll = 4;       // vectors per row of w and lane loaded before the FMAs use them
static_assert(kTileRows * kColsPerWarp <= 32, "a lane of the smallest warp holds each final sum");
#if defined(DING_GPU_NVIDIA)
constexpr int64_t kGemmRowsPerExpert = 8;  // from P = this · E rows on, the tensor-core GEMM core
#endif

struct Params {
  void* out;                // [P, N]
  DType out_dtype;
  const void* x;            // [P, K]
  const void* w;            // [E, N, K]; swiglu: [E, 2N, K]
  const float* w_scales;    // 8-bit w: [E·N] or [E·2N] row scales; else null
  const int32_t* offsets;   // [E + 1]
  int P, E;                 // P < 2^31: the offsets are i32
  int64_t N, K;
  bool swiglu;
  int64_t tiles;            // the grid's row tiles: an upper bound on the real count
  int64_t col_tiles;        // blocks across N
  int slices;               // warps sharing one column group, each over k_slice elements of K
  int64_t k_slice;          // a multiple of the vector width
};

// Vec: elements of w per load (16 bytes, or 1 where rows of x or w are not aligned for it).
template <class X, class W, int Vec>
__global__ void __launch_bounds__(kThreads) moe_matmul_kernel(const Params a) {
  const int lane = lane_id(), warp = int(threadIdx.x) / warp_size();
  const int groups = int(blockDim.x) / warp_size() / a.slices;  // column groups per block
  const int group = warp / a.slices, slice = warp % a.slices;
  const int cols = a.swiglu ? 1 : kColsPerWarp;  // output columns per column group
  const int64_t row_step = a.swiglu ? a.N : 1;   // from the warp's first row of w to its second
  const int64_t w_rows = a.swiglu ? 2 * a.N : a.N;
  const int64_t K = a.K;
  const int64_t k_begin = int64_t(slice) * a.k_slice;
  const int64_t k_end = k_begin + a.k_slice < K ? k_begin + a.k_slice : K;
  // A lane's loads start Vec-aligned: k_begin, K (Vec > 1) and k_slice are multiples of Vec, so
  // k < k_end implies k + Vec ≤ k_end.
  constexpr int64_t kStep = int64_t(Vec) * warp_size();
  __shared__ float partial[kThreads / 32][kTileRows * kColsPerWarp];  // a warp's sums, when K is split

  // The offsets and x come from earlier kernels of the step, and which weights to read is known
  // only from the offsets: nothing is read before the wait.
  wait_for_prior_kernels();
  release_dependents();

  for (int64_t tile = blockIdx.x; tile < a.tiles; tile += gridDim.x) {
    const RowTile rt = find_row_tile(a.offsets, a.E, a.P, tile);
    if (rt.rows <= 0) break;  // past the last tile, and so is every later tile of this block
    const X* x = static_cast<const X*>(a.x) + int64_t(rt.begin) * K;
    for (int64_t ct = blockIdx.y; ct < a.col_tiles; ct += gridDim.y) {
      const int64_t n0 = (ct * groups + group) * cols;
      const W* w = static_cast<const W*>(a.w) + (int64_t(rt.segment) * w_rows + n0) * K;
      bool row_ok[kColsPerWarp];
#pragma unroll
      for (int r = 0; r < kColsPerWarp; ++r) row_ok[r] = (a.swiglu ? n0 : n0 + r) < a.N;

      float acc[kTileRows][kColsPerWarp] = {};
      // The rows' scales (8-bit w): lane m · kColsPerWarp + r ends with row r's sum.
      float scale = 1.0f;
      if (a.w_scales && row_ok[lane % kColsPerWarp])
        scale = a.w_scales[int64_t(rt.segment) * w_rows + n0 + (lane % kColsPerWarp) * row_step];
      for (int64_t k0 = k_begin + int64_t(lane) * Vec; k0 < k_end && row_ok[0]; k0 += kStep * kUnroll) {
        Pack<W, Vec> wv[kUnroll][kColsPerWarp];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int64_t k = k0 + u * kStep;
#pragma unroll
          for (int r = 0; r < kColsPerWarp; ++r) {
            if (k < k_end && row_ok[r])
              wv[u][r] = *reinterpret_cast<const Pack<W, Vec>*>(w + r * row_step * K + k);
            else
              wv[u][r] = Pack<W, Vec>{};
          }
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int64_t k = k0 + u * kStep;
          if (k >= k_end) break;
          float wf[kColsPerWarp][Vec];  // widened once, used by every row of the tile
#pragma unroll
          for (int r = 0; r < kColsPerWarp; ++r) widen(wv[u][r], wf[r]);
          // m < rt.rows as a guard, not a break: hipcc leaves a loop with two exits rolled, which
          // indexes acc at run time and so moves it to scratch memory.
#pragma unroll
          for (int m = 0; m < kTileRows; ++m) {
            if (m < rt.rows) {
              float xv[Vec];
              gemv::load_floats<X, Vec>(x + m * K + k, xv);
#pragma unroll
              for (int r = 0; r < kColsPerWarp; ++r)
#pragma unroll
                for (int e = 0; e < Vec; ++e) acc[m][r] = fmaf(xv[e], wf[r][e], acc[m][r]);
            }
          }
        }
      }
      // Every lane ends with every sum; lane m · kColsPerWarp + r keeps one, so the epilogue is
      // one store per lane. rt.rows is the same on every lane: the shuffles see the whole warp.
      float mine = 0.0f;
#pragma unroll
      for (int m = 0; m < kTileRows; ++m) {
        if (m < rt.rows) {  // a guard, as in the loop above
#pragma unroll
          for (int r = 0; r < kColsPerWarp; ++r) {
            const float sum = warp_sum(acc[m][r]);
            if (lane == m * kColsPerWarp + r) mine = sum;
          }
        }
      }
      const int m = lane / kColsPerWarp, r = lane % kColsPerWarp;
      const bool owner = lane < kTileRows * kColsPerWarp && m < rt.rows;
      if (a.slices > 1) {
        // Slices of a column group add up in slice order: the same sum on every run.
        if (owner) partial[warp][lane] = mine;
        __syncthreads();
        if (slice == 0 && owner) {
          mine = 0.0f;
          for (int s = 0; s < a.slices; ++s) mine += partial[warp + s][lane];
        }
        __syncthreads();  // partial is rewritten by the next tile
      }
      mine *= scale;
      const int64_t out_row = int64_t(rt.begin) + m;
      if (a.swiglu) {
        // Lane 2m + 1 holds row m's up sum; every lane shuffles, lane 2m stores.
        static_assert(kColsPerWarp == 2, "swiglu pairs a gate row and an up row per warp");
        const float up = shfl_xor(mine, 1);
        if (slice == 0 && owner && r == 0 && n0 < a.N)
          store_from_float(a.out, a.out_dtype, out_row * a.N + n0, silu_times(mine, up));
      } else if (slice == 0 && owner && n0 + r < a.N) {
        store_from_float(a.out, a.out_dtype, out_row * a.N + n0 + r, mine);
      }
    }
  }
}

template <class X, class W>
void launch_moe_matmul(GpuStream& s, Params a) {
  // 16 bytes of W per load; x then needs the same count of elements at its own width.
  constexpr int kVec = kPack16<W>;
  const bool vec = a.K % kVec == 0 && aligned_to(a.x, std::min<size_t>(16, kVec * sizeof(X))) && aligned_to(a.w, 16);
  const int64_t unit = vec ? kVec : 1;
  const int warp = s.props().warp_size, warps = kThreads / warp;

  // Split K inside the block while the column groups of the tiles a step is likely to have give
  // fewer than ~16 warps per SM (too few loads in flight to cover memory latency), keeping ≥ 2
  // vectors per lane per slice. Likely tiles: one per expert with rows while rows are few (decode:
  // its tokens' experts), else about P / kTileRows.
  const int cols = a.swiglu ? 1 : kColsPerWarp;
  const int64_t likely_tiles = std::max<int64_t>(std::min(a.E, a.P), ceil_div(a.P, kTileRows));
  const int64_t column_groups = ceil_div(a.N, cols) * likely_tiles;
  const int64_t wanted_warps = 16 * int64_t(s.props().sm_count);
  a.slices = 1;
  while (a.slices < warps && column_groups * a.slices < wanted_warps && a.K / (2 * a.slices) >= 2 * unit * warp)
    a.slices *= 2;
  a.k_slice = ceil_div(ceil_div(a.K, a.slices), unit) * unit;
  a.col_tiles = ceil_div(a.N, int64_t(warps / a.slices) * cols);
  const dim3 grid(unsigned(std::min<int64_t>(a.tiles, INT_MAX)), unsigned(std::min(a.col_tiles, kMaxGridYZ)));
  const bool chained = gemv_chained(s);
  if (vec)
    DING_GPU_CHECK(launch_chained(chained, moe_matmul_kernel<X, W, kVec>, grid, dim3(kThreads), 0, s.handle(), a));
  else
    DING_GPU_CHECK(launch_chained(chained, moe_matmul_kernel<X, W, 1>, grid, dim3(kThreads), 0, s.handle(), a));
  DING_GPU_CHECK_LAUNCH("moe_matmul_kernel");
}

}  // namespace

void moe_matmul(Stream& stream, const ops::MoeMatmulArgs& a) {
  const int64_t P = a.x.dim(0), K = a.x.dim(1), E = a.w.dim(0), N = a.out.dim(1);
  if (P == 0 || N == 0 || E == 0) return;  // E = 0: no expert owns a row (host backends reject P > 0)
  if (P > INT_MAX - kTileRows || E > INT_MAX)
    throw Error(ErrorCode::invalid_argument, "moe_matmul on the GPU: P = " + std::to_string(P) + " rows or E = " +
                                                 std::to_string(E) + " experts exceed the i32 offsets' range");
  Params p{};
  p.out = a.out.data;
  p.out_dtype = a.out.dtype;
  p.x = a.x.data;
  p.w = a.w.data;
  p.w_scales = a.w.scales;
  p.offsets = a.offsets.ptr<int32_t>();
  p.P = int(P);
  p.E = int(E);
  p.N = N;
  p.K = K;
  p.swiglu = a.activation == ops::Activation::swiglu;
  p.tiles = max_row_tiles(P, E);
  GpuStream& s = gpu_stream(stream);
#if defined(DING_GPU_NVIDIA)
  // 16-bit x and w of one type go to tensor cores: at decode (P ≤ E, row tiles at most one per
  // expert on average) through the GEMV core, a batch per row tile of ≤ 8 rows; from 8·E rows on
  // (a prefill chunk: 1536 rows for 256 tokens of DeepSeek-V2's top-6 of 64) through the GEMM core
  // in row tiles of 64 or 128, so an expert's weights are read once per tile of that many rows.
  const bool decode = P <= E, prefill = P >= kGemmRowsPerExpert * E;
  const bool narrow = ops::quantized_weight(a.w.dtype);
  if ((decode || prefill) && (a.x.dtype == a.w.dtype || narrow) && (a.x.dtype == DType::bf16 || a.x.dtype == DType::f16)) {
    GemmShape g;
    g.x = a.x.data;
    g.w = a.w.data;
    g.M = decode ? std::min<int64_t>(P, kSegmentTileRows) : P;
    g.N = N;
    g.K = K;
    g.batches = decode ? p.tiles : 1;
    g.w_batch = (p.swiglu ? 2 : 1) * N * K;
    g.w_scales = a.w.scales;
    Epilogue ep;
    ep.swiglu = p.swiglu;
    ep.out = a.out.data;
    ep.out_dtype = a.out.dtype;
    ep.ld = N;
    // At decode the GEMV core reads w as stored (8 bits widen in its registers).
    auto decode_on_tensor_cores = [&](auto x_tag, auto w_tag) {
      using T = decltype(x_tag);
      using W = decltype(w_tag);
      if (!gemv_mma_segments_fit<T, W>(s.props(), g, p.swiglu)) return false;
      launch_gemv_mma_segments<T, W>(s, g, ep, p.offsets, p.E, p.P, a.offsets_from_earlier_op);
      return true;
    };
    // In prefill, 8-bit experts are read as stored: E4M3 on E4M3 tensor cores (x rounded per
    // row) where the GPU has them, else widened in the 16-bit GEMM's registers; where K is not
    // whole 16-byte chunks of a row, widened to T a group of experts at a time, each group's
    // segments its experts' (offsets + e0: the rows stay where the whole offsets place them).
    auto prefill_on_tensor_cores = [&](auto x_tag) {
      using T = decltype(x_tag);
      if (!narrow) {
        if (!gemm_mma_fits(s.props(), g)) return false;
        launch_gemm_mma_segments<T>(s, g, ep, p.offsets, p.E, p.P);
        return true;
      }
      if (gemm_mma_fits(s.props(), g, true)) {
        ep.w_scales = a.w.scales;
        g.w_scales = nullptr;
        with_quantized_type(a.w.dtype, [&](auto w_tag) {
          using W = decltype(w_tag);
          if (std::is_same_v<W, ding::f8e4m3> && gemm_mma_e4m3_available(s))
            launch_gemm_mma_e4m3<T>(s, g, ep, p.offsets, p.E);
          else
            launch_gemm_mma_segments<T, W>(s, g, ep, p.offsets, p.E, p.P);
        });
        return true;
      }
      const int64_t expert = g.w_batch, rows = g.w_batch / K;
      const int64_t group = std::clamp<int64_t>(int64_t(widen_budget(s) / (size_t(expert) * sizeof(T))), 1,
                                                std::min<int64_t>(E, kMaxGridYZ));
      T* const wide = static_cast<T*>(s.scratch(size_t(group * expert) * sizeof(T), GpuStream::ScratchSlot::intermediate));
      g.w = wide;
      g.w_scales = nullptr;
      if (!gemm_mma_fits(s.props(), g)) return false;
      with_quantized_type(a.w.dtype, [&](auto w_tag) {
        using W = decltype(w_tag);
        for (int64_t e0 = 0; e0 < E; e0 += group) {
          const int count = int(std::min(group, E - e0));
          widen_segments(s, wide, static_cast<const W*>(a.w.data) + e0 * expert, expert, count, p.offsets + e0);
          ep.w_scales = a.w.scales + e0 * rows;
          launch_gemm_mma_segments<T>(s, g, ep, p.offsets + e0, count, p.P);
        }
      });
      return true;
    };
    auto on_tensor_cores = [&](auto x_tag) {
      if (!decode) return prefill_on_tensor_cores(x_tag);
      if (!narrow) return decode_on_tensor_cores(x_tag, x_tag);
      return with_quantized_type(a.w.dtype, [&](auto w_tag) { return decode_on_tensor_cores(x_tag, w_tag); });
    };
    if (a.x.dtype == DType::bf16 ? on_tensor_cores(ding::bf16{}) : on_tensor_cores(ding::f16{})) return;
  }
#endif
  with_float_type(a.x.dtype, [&](auto x_tag) {
    using X = decltype(x_tag);
    if (ops::quantized_weight(a.w.dtype))
      with_quantized_type(a.w.dtype, [&](auto w_tag) { launch_moe_matmul<X, decltype(w_tag)>(s, p); });
    else
      with_float_type(a.w.dtype, [&](auto w_tag) { launch_moe_matmul<X, decltype(w_tag)>(s, p); });
  });
}

DING_GPU_END
