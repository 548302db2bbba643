// The persistent, warp-specialised Hopper matmul core (sm_90a: TMA loads, mbarrier pipeline,
// wgmma.mma_async), for x and w both bf16 or both f16, f32 accumulation, the same fused epilogue
// as the other cores (gemm.cuh). It computes what gemm_wgmma.h computes; the difference is how:
// one producer warp feeds two consumer warpgroups that overlap a tile's epilogue with the next
// tile's math (the design is at the top of sm90/gemm_tma.cuh).
//
// Compiled only with -DDING_CUDA_TMA=ON, into the sm_90a object (backends/gpu/sm90/gemm_tma*.cu,
// CMake target ding_gpu_sm90a) beside the wgmma core; DING_GPU_TMA tells the callers it is there.
// It runs only when MatmulTuning::tma is on (DING_GEMM_TMA=1) and the device is cc 9.0.
#pragma once
#include "gemm.cuh"
#include "stream.h"

DING_GPU_BEGIN

// Whether the TMA core can take the product p (product_shape: swiglu's 2N-wide form) on this
// device: cc 9.0, K a multiple of 8 and x, w 16-byte aligned (what a tensor map's row strides and
// base addresses need), enough shared memory, sizes within the tensor maps' 32-bit coordinates.
// It takes small products too: its plan (tile and K split) is chosen per shape.
bool gemm_tma_takes(const Props& props, const GemmShape& p);

// T = ding::bf16 or ding::f16 (x's and w's dtype). Only where gemm_tma_takes() said yes.
template <class T>
void launch_gemm_tma(GpuStream& s, const GemmShape& p, const Epilogue& ep);

DING_GPU_END
