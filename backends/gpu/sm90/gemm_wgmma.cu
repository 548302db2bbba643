// The wgmma matmul core's plan and launch (declared in ../gemm_wgmma.h; the kernel and its design
// are in gemm_wgmma.cuh, each tile's kernel for each dtype in gemm_wgmma_<tile>_<dtype>.cu).
// sm_90a only.
#include <algorithm>

#include "gemm_wgmma.cuh"

DING_GPU_BEGIN

namespace wgmma {

// Tiles of 128 × BN over the product, in waves of one block per SM.
inline int64_t waves(const Props& props, const GemmShape& p, int bn) {
  return ceil_div(ceil_div(p.M, kBM) * ceil_div(p.N, bn) * p.batches, std::max(props.sm_count, 1));
}

// Products with fewer 128 × 128 tiles than half the SMs split K so that the blocks come near one
// per SM, each split at least kMinSlicesPerSplit deep, the partials within kMaxPartialBytes.
constexpr int kMaxSplits = 8;
constexpr int64_t kMinSlicesPerSplit = 4;

inline int wanted_splits(const Props& props, const GemmShape& p) {
  const int64_t tiles = ceil_div(p.M, kBM) * ceil_div(p.N, 128) * p.batches;
  if (2 * tiles >= props.sm_count) return 1;
  int64_t splits = std::min<int64_t>({kMaxSplits, props.sm_count / tiles, ceil_div(p.K, kBK) / kMinSlicesPerSplit});
  while (splits > 1 && size_t(splits * p.batches * p.M * p.N) * sizeof(float) > kMaxPartialBytes) --splits;
  return int(std::max<int64_t>(splits, 1));
}

}  // namespace wgmma

// p: the product's shape (product_shape), as the tile counts need it.
bool gemm_wgmma_takes(const Props& props, const GemmShape& p) {
  using namespace wgmma;
  const bool fits = props.cc_major == 9 && props.cc_minor == 0 && p.K > 0 && p.K % 8 == 0 && aligned_to(p.x, 16) &&
                    aligned_to(p.w, 16) && props.shared_per_block_optin >= size_t(Tile256::kSmemBytes);
  if (!fits) return false;
  const int64_t tiles = ceil_div(p.M, kBM) * ceil_div(p.N, 128) * p.batches;
  return 2 * tiles >= props.sm_count || wanted_splits(props, p) > 1;
}

template <class T>
void launch_gemm_wgmma(GpuStream& s, const GemmShape& p, const Epilogue& ep) {
  using namespace wgmma;
  const Props& props = s.props();
  const MatmulTuning& tuning = s.matmul_tuning();
  const GemmShape product = product_shape(p, ep);
  const SplitK split =
      make_split(s, product, ceil_div(p.K, kBK), tuning.splits ? tuning.splits : wanted_splits(props, product));
  // Wave quantisation: a 128 × 256 block takes about twice as long as a 128 × 128 one and loads
  // less per MMA (kWideGain); take the wide tile when its waves cost less. Split products keep
  // 128 × 128 (their point is more blocks).
  constexpr double kWideGain = 1.1;
  const double cost128 = double(waves(props, product, 128));
  const double cost256 = 2.0 * double(waves(props, product, 256)) / kWideGain;
  const int forced = tuning.tile_m == kBM ? tuning.tile_n : 0;
  if (forced == 256 || (forced != 128 && split.splits == 1 && cost256 < cost128))
    launch_gemm_wgmma_tile<T, Tile256>(s, p, ep, split);
  else
    launch_gemm_wgmma_tile<T, Tile128>(s, p, ep, split);
  if (split.splits > 1) launch_gemm_split_reduce(s, p, split, ep);
}

template void launch_gemm_wgmma<ding::bf16>(GpuStream&, const GemmShape&, const Epilogue&);
template void launch_gemm_wgmma<ding::f16>(GpuStream&, const GemmShape&, const Epilogue&);

DING_GPU_END