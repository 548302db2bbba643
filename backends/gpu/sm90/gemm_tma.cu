// The TMA matmul core's plan and launch (declared in ../gemm_tma.h; the kernel and its design are
// in gemm_tma.cuh, each tile's kernel for each dtype in gemm_tma_<tile>_<dtype>.cu). sm_90a only.
#include <algorithm>
#include <iterator>

#include "gemm_tma.cuh"

DING_GPU_BEGIN

namespace tma {

// ---- the plan -------------------------------------------------------------------------------------

enum class TileKind { t128x256, t128x128, t64x128 };

struct Plan {
  TileKind tile = TileKind::t128x128;
  int splits = 1;
};

// The cost model behind the plan, in units of one 128 × 128 × 64 slice at the tensor cores' full
// rate (~0.3 µs of an SM on an H100). A block's tiles run one after another, so a plan costs
// ⌈tiles / SMs⌉ × (slices per split × area / efficiency + exposed epilogue), plus for split K the
// reduce: a fixed part (its launch and tail) and the partials written and read back at L2 speed.
// Efficiencies are estimates of what each tile loses to shared-memory and L2 traffic per MMA
// (64 × 128 feeds one m64n128 per warpgroup from 24 KB a slice); the cooperative tile's epilogue
// has no MMAs under it. Measured numbers should replace these estimates (DING_GEMM_TILE and
// DING_GEMM_SPLIT force a plan for the sweep).
struct TileCost {
  TileKind tile;
  int bm, bn;
  double area, efficiency, exposed;
};
constexpr TileCost kTileCosts[] = {
    {TileKind::t128x256, 128, 256, 2.0, 1.0, 3.0},
    {TileKind::t128x128, 128, 128, 1.0, 0.9, 0.0},
    {TileKind::t64x128, 64, 128, 0.5, 0.75, 0.0},
};
constexpr double kSplitFixed = 10.0;            // ~3 µs: the reduce launch and its tail
constexpr double kSplitBytesPerUnit = 1.5e6;    // L2 at ~5 TB/s for ~0.3 µs
constexpr int kMaxSplits = 8;
constexpr int64_t kMinSlicesPerSplit = 4;

// The splits make_split would make of `wanted` (whole, non-empty).
inline int64_t effective_splits(int64_t k_tiles, int64_t wanted) {
  if (wanted <= 1 || k_tiles <= 1) return 1;
  return ceil_div(k_tiles, ceil_div(k_tiles, wanted));
}

inline double plan_cost(const Props& props, const GemmShape& product, const TileCost& tc, int64_t splits) {
  const int64_t k_tiles = ceil_div(product.K, kBK);
  const int64_t per_split = ceil_div(k_tiles, splits);
  const int64_t tiles = ceil_div(product.M, tc.bm) * ceil_div(product.N, tc.bn) * product.batches * splits;
  const double per_tile = double(per_split) * tc.area / tc.efficiency + tc.exposed;
  double cost = double(ceil_div(tiles, std::max(props.sm_count, 1))) * per_tile;
  if (splits > 1)
    cost += kSplitFixed +
            2.0 * double(splits * product.batches * product.M * product.N) * sizeof(float) / kSplitBytesPerUnit;
  return cost;
}

Plan choose_plan(const Props& props, const MatmulTuning& tuning, const GemmShape& product) {
  const int64_t k_tiles = ceil_div(product.K, kBK);
  const auto partial_bytes = [&](int64_t splits) {
    return size_t(splits * product.batches * product.M * product.N) * sizeof(float);
  };
  // A forced tile that is not one of this core's (e.g. an mma.sync tile) leaves the choice free.
  const bool forced_tile = std::any_of(std::begin(kTileCosts), std::end(kTileCosts), [&](const TileCost& tc) {
    return tuning.tile_m == tc.bm && tuning.tile_n == tc.bn;
  });
  Plan best;
  double best_cost = 0.0;
  bool found = false;
  for (const TileCost& tc : kTileCosts) {
    if (forced_tile && (tuning.tile_m != tc.bm || tuning.tile_n != tc.bn)) continue;
    for (int64_t wanted = 1; wanted <= kMaxSplits; ++wanted) {
      const int64_t splits = effective_splits(k_tiles, tuning.splits ? tuning.splits : wanted);
      if (!tuning.splits && splits > 1 &&
          (splits != wanted || k_tiles / splits < kMinSlicesPerSplit || partial_bytes(splits) > kMaxPartialBytes))
        continue;
      const double cost = plan_cost(props, product, tc, splits);
      if (!found || cost < best_cost) {
        best = {tc.tile, int(splits)};
        best_cost = cost;
        found = true;
      }
      if (tuning.splits) break;  // forced: one split count
    }
  }
  return best;
}

}  // namespace tma

bool gemm_tma_takes(const Props& props, const GemmShape& p) {
  using namespace tma;
  constexpr int64_t kMaxCoordinate = (int64_t(1) << 31) - 512;  // rows and K as int32 box corners
  return props.cc_major == 9 && props.cc_minor == 0 && p.K > 0 && p.K % 8 == 0 && aligned_to(p.x, 16) &&
         aligned_to(p.w, 16) && p.x_batch % 8 == 0 && p.w_batch % 8 == 0 && p.M < kMaxCoordinate &&
         p.N < kMaxCoordinate && p.K < kMaxCoordinate && p.batches < kMaxCoordinate &&
         props.shared_per_block_optin >= size_t(std::max({Tile128x256::kSmemBytes, Tile128x128::kSmemBytes,
                                                            Tile64x128::kSmemBytes}));
}

template <class T>
void launch_gemm_tma(GpuStream& s, const GemmShape& p, const Epilogue& ep) {
  using namespace tma;
  const Props& props = s.props();
  const GemmShape product = product_shape(p, ep);
  const Plan plan = choose_plan(props, s.matmul_tuning(), product);
  const SplitK split = make_split(s, product, ceil_div(p.K, kBK), plan.splits);
  switch (plan.tile) {
    case TileKind::t128x256: launch_gemm_tma_tile<T, Tile128x256>(s, p, ep, split); break;
    case TileKind::t128x128: launch_gemm_tma_tile<T, Tile128x128>(s, p, ep, split); break;
    case TileKind::t64x128: launch_gemm_tma_tile<T, Tile64x128>(s, p, ep, split); break;
  }
  if (split.splits > 1) launch_gemm_split_reduce(s, p, split, ep);
}

template void launch_gemm_tma<ding::bf16>(GpuStream&, const GemmShape&, const Epilogue&);
template void launch_gemm_tma<ding::f16>(GpuStream&, const GemmShape&, const Epilogue&);

DING_GPU_END