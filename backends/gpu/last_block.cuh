// Finishing a reduction inside the launch that produced its parts: each block leaves its partial
// result in global scratch and arrives at a ticket; the block that arrives last reads every part
// back and finishes the work. It leaves the ticket at zero for the next launch, so a recorded
// graph replays without a reset of its own. The parts are combined in a fixed order by whichever
// block arrives last, so the result does not depend on timing.
#pragma once
#include "vendor.h"

DING_GPU_BEGIN

// Loads of partials other blocks wrote during this launch: from L2, never from a possibly stale
// L1 line (this SM may have read the same scratch in an earlier launch). NVIDIA: a .cg load,
// whole quads at once; elsewhere volatile scalar loads.
__device__ inline float load_partial(const float* p) {
#if defined(DING_GPU_NVIDIA_MMA)
  float x;
  asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(x) : "l"(p) : "memory");
  return x;
#else
  return *static_cast<const volatile float*>(p);
#endif
}

// W consecutive floats from p (16-byte aligned when W == 4).
template <int W>
__device__ inline void load_partials(float (&x)[W], const float* p) {
#if defined(DING_GPU_NVIDIA_MMA)
  constexpr bool kQuadLoad = W == 4;
#else
  constexpr bool kQuadLoad = false;
#endif
  if constexpr (kQuadLoad) {
#if defined(DING_GPU_NVIDIA_MMA)
    asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(x[0]), "=f"(x[1]), "=f"(x[2]), "=f"(x[3])
                 : "l"(p)
                 : "memory");
#endif
  } else {
#pragma unroll
    for (int c = 0; c < W; ++c) x[c] = load_partial(p + c);
  }
}

// Every thread of the block calls it once its part is stored: true, in every thread, for the
// block that arrives last of `arrivals` at `ticket` (a counter at zero before the first arrives).
// The block's stores are visible device-wide before its arrival counts, and the last block's
// loads of the parts (load_partial) stay after it.
__device__ inline bool arrive_last(unsigned int* ticket, unsigned int arrivals) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    last = atomicAdd(ticket, 1u) == arrivals - 1;
    // Everyone has arrived: nobody touches the ticket again in this launch.
    if (last) atomicExch(ticket, 0u);
  }
  __syncthreads();
  const bool result = last;
  if (result) __threadfence();
  return result;
}

DING_GPU_END
