// matmul_sequence on the GPU: one kernel for the whole sequence where every step is a decode
// product the tensor-core GEMV takes (gemv_sequence.cuh), otherwise the steps' matmuls in turn.
#include <type_traits>

#include "check.h"
#include "elements.cuh"
#include "gemv_sequence.cuh"
#include "kernels.h"
#include "stream.h"

namespace ding::gpu {

namespace {

// Whether the one-kernel path takes step `a` with 16-bit type `dtype`: few rows of one batch,
// x, w and the norm's parameters of that type in 16-byte rows.
bool sequence_step_fits(const ops::MatmulArgs& a, DType dtype) {
  const ops::MatmulNorm& norm = a.params.norm;
  const int64_t K = a.x.dim(-1), M = a.x.numel() / std::max<int64_t>(K, 1);
  if (a.x.dtype != dtype || a.w.dtype != dtype || a.w.rank != 2 || M < 1 || M > kGemvMaxRows || K % 8 != 0 ||
      a.w.dim(0) == 0 || a.w.dim(0) >= (int64_t(1) << 31) || !aligned_to(a.x.data, 16) || !aligned_to(a.w.data, 16))
    return false;
  if (norm.kind == ops::NormKind::none) return true;
  return norm.weight.dtype == dtype && aligned_to(norm.weight.data, 16) &&
         (!norm.bias.defined() || (norm.bias.dtype == dtype && aligned_to(norm.bias.data, 16)));
}

static_assert(gemv::kMaxSequenceSteps + 1 <= GpuStream::kGridCounters, "a counter per step and one for the end");

template <class T>
bool launch_gemv_sequence(GpuStream& s, const ops::MatmulSequenceArgs& a) {
  using namespace gemv;
  SequenceParams params;
  params.count = a.count;
  GemmShape shapes[kMaxSequenceSteps];
  bool normed[kMaxSequenceSteps] = {};
  for (int i = 0; i < a.count; ++i) {
    const ops::MatmulArgs& m = a.steps[size_t(i)];
    SequenceStep& st = params.steps[i];
    GemmShape& p = shapes[i];
    p.x = m.x.data;
    p.w = m.w.data;
    p.K = m.x.dim(-1);
    p.N = m.w.dim(0);
    p.M = m.x.numel() / p.K;
    p.x_batch = p.M * p.K;
    st.p = p;
    st.ep = epilogue_of(m);
    const ops::MatmulNorm& norm = m.params.norm;
    normed[i] = norm.kind != ops::NormKind::none;
    if (normed[i]) st.norm = {norm.kind == ops::NormKind::layer_norm, norm.weight.data, norm.bias.data, norm.eps};
  }
  const SequencePlan plan = mma_sequence_plan(s.props(), shapes, normed, a.count);
  if (plan.depth == 0) return false;
  for (int i = 0; i < a.count; ++i) params.steps[i].rows = plan.rows[i];
  params.params_offset = plan.params_offset;
  params.sums_offset = plan.sums_offset;
  params.ring_offset = plan.ring_offset;

  auto launch = [&](auto depth_tag) {
    const auto kernel = gemv_sequence_kernel<T, decltype(depth_tag)::value>;
    if (plan.shared_bytes > 48 * 1024)
      DING_GPU_CHECK(func_set_max_dynamic_shared(reinterpret_cast<const void*>(kernel), int(plan.shared_bytes)));
    // Every block must be resident at once (they wait for each other between steps).
    if (occupancy_blocks_per_sm(kernel, kMmaThreads, plan.shared_bytes) < plan.per_sm) return false;
    params.counters = s.grid_counters();
    DING_GPU_CHECK(launch_resident(gemv_chained(s), kernel, dim3(unsigned(plan.blocks)), dim3(kMmaThreads),
                                   plan.shared_bytes, s.handle(), params));
    DING_GPU_CHECK_LAUNCH("gemv_sequence_kernel");
    return true;
  };
  static_assert(std::size(kMmaDepths) == 3);
  switch (plan.depth) {
    case kMmaDepths[0]: return launch(std::integral_constant<int, kMmaDepths[0]>{});
    case kMmaDepths[1]: return launch(std::integral_constant<int, kMmaDepths[1]>{});
    default: return launch(std::integral_constant<int, kMmaDepths[2]>{});
  }
}

// The one-kernel path, if it takes the sequence: every step a decode product of one 16-bit type.
bool sequence_in_one_kernel(GpuStream& s, const ops::MatmulSequenceArgs& a) {
#if defined(DING_GPU_NVIDIA)
  const DType dtype = a.steps[0].x.dtype;
  if (!s.matmul_tuning().gemv_sequence || !s.props().has_mma_sync() ||
      !(dtype == DType::bf16 || dtype == DType::f16))
    return false;
  for (int i = 0; i < a.count; ++i)
    if (!sequence_step_fits(a.steps[size_t(i)], dtype)) return false;
  return dtype == DType::bf16 ? launch_gemv_sequence<ding::bf16>(s, a) : launch_gemv_sequence<ding::f16>(s, a);
#else
  (void)s, (void)a;
  return false;
#endif
}

}  // namespace

void matmul_sequence(Stream& stream, const ops::MatmulSequenceArgs& a) {
  GpuStream& s = gpu_stream(stream);
  if (sequence_in_one_kernel(s, a)) return;
  for (int i = 0; i < a.count; ++i) matmul(stream, a.steps[size_t(i)]);
}

}  // namespace ding::gpu
