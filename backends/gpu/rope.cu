// Rotary position embedding on the GPU: one block per token (b, t) at a time. The block first
// fills a shared table of f·cos φ and f·sin φ (rotary.cuh) for up to kFreqChunk frequencies,
// then rotates those pairs of all H heads, one pair per thread at a time, and finally copies
// dims ≥ R. The table is shared by the H heads, so its cost is per token, not per element. Each
// pair is read whole by one thread before that thread writes it, and the copied dims are
// disjoint from the pairs, so out may be x itself.
#include "access.cuh"
#include "check.h"
#include "kernels.h"
#include "rotary.cuh"
#include "stream.h"

DING_GPU_BEGIN
namespace {

constexpr int kThreads = 256;
constexpr int kFreqChunk = 512;  // frequencies per table fill: 4 KiB of shared memory

// Element strides of a [B, T, H, D] view whose last dim is contiguous.
struct HeadStrides {
  int64_t batch, token, head;
};

struct RopeShape {
  int64_t tokens, T, H, D;  // tokens = B·T; x and out are [B, T, H, D] views
  HeadStrides x, out;
  int64_t position_offset;  // pos = positions[n] + position_offset, or position_offset + t when positions is null
  Rotary rot;
};

template <class Out, class In>
__global__ void __launch_bounds__(kThreads) rope_kernel(Out out, In x, const int32_t* positions, RopeShape shape) {
  __shared__ float cos_table[kFreqChunk], sin_table[kFreqChunk];
  wait_for_prior_kernels();  // chained (vendor.h): x and the positions come from earlier kernels
  release_dependents();
  const int64_t H = shape.H, D = shape.D, R = shape.rot.R, half = R / 2;
  // Loops over tokens and chunks are uniform across the block: every thread reaches the barriers.
  for (int64_t n = blockIdx.x; n < shape.tokens; n += gridDim.x) {
    const double pos = positions ? double(positions[n] + shape.position_offset) : double(shape.position_offset + n % shape.T);
    const int64_t x_token = (n / shape.T) * shape.x.batch + (n % shape.T) * shape.x.token;
    const int64_t out_token = (n / shape.T) * shape.out.batch + (n % shape.T) * shape.out.token;
    for (int64_t i0 = 0; i0 < half; i0 += kFreqChunk) {
      const int64_t len = half - i0 < kFreqChunk ? half - i0 : kFreqChunk;
      __syncthreads();  // the previous chunk's (or token's) readers are done with the table
      for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
        const float2 cs = shape.rot.cos_sin(pos, i0 + i);
        cos_table[i] = cs.x;
        sin_table[i] = cs.y;
      }
      __syncthreads();
      for (int64_t k = threadIdx.x; k < H * len; k += blockDim.x) {
        const int64_t h = k / len, i = k % len;
        const int64_t first = shape.rot.first(i0 + i), second = shape.rot.second(i0 + i);
        const int64_t x_head = x_token + h * shape.x.head, out_head = out_token + h * shape.out.head;
        const float a = x.load(x_head + first), b = x.load(x_head + second), c = cos_table[i], s = sin_table[i];
        out.store(out_head + first, a * c - b * s);
        out.store(out_head + second, a * s + b * c);
      }
    }
    const int64_t rest = D - R;
    for (int64_t k = threadIdx.x; k < H * rest; k += blockDim.x) {
      const int64_t h = k / rest, d = R + k % rest;
      out.store(out_token + h * shape.out.head + d, x.load(x_token + h * shape.x.head + d));
    }
  }
}

}  // namespace

void rope(Stream& stream, const ops::RopeArgs& a) {
  GpuStream& s = gpu_stream(stream);
  const ops::RopeParams& p = a.params;
  const int64_t D = a.x.dim(3);
  const RopeShape shape{a.x.dim(0) * a.x.dim(1),
                        a.x.dim(1),
                        a.x.dim(2),
                        D,
                        {a.x.stride(0), a.x.stride(1), a.x.stride(2)},
                        {a.out.stride(0), a.out.stride(1), a.out.stride(2)},
                        p.position_offset,
                        rotary(p, D)};
  const int32_t* positions = p.positions.defined() ? static_cast<const int32_t*>(p.positions.data) : nullptr;
  const unsigned grid = unsigned(std::min<int64_t>(shape.tokens, int64_t(s.props().sm_count) * 16));
  with_float_type(a.out.dtype, [&](auto out_tag) {
    with_float_type(a.x.dtype, [&](auto x_tag) {
      using O = decltype(out_tag);
      using X = decltype(x_tag);
      DING_GPU_CHECK(launch_chained(s.props().has_chained_launch(), rope_kernel<Typed<O>, Typed<X>>, dim3(grid),
                                    dim3(kThreads), 0, s.handle(), typed<O>(a.out), typed<X>(a.x), positions, shape));
    });
  });
  DING_GPU_CHECK_LAUNCH("rope_kernel");
}

DING_GPU_END
