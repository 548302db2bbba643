// The Hopper matmul core (sm_90a: wgmma.mma_async from shared memory), for x and w both bf16 or
// both f16, f32 accumulation, the same fused epilogue as the other cores (gemm.cuh).
//
// Compiled only into an sm_90a object (backends/gpu/sm90/gemm_wgmma.cu, CMake target
// ding_gpu_sm90a, built when CMAKE_CUDA_ARCHITECTURES names 90); DING_GPU_WGMMA tells the callers
// it is there. The host checks the device is cc 9.0 before it launches anything from it: sm_90a
// code runs on no other GPU. The RTX 4090 (sm_89) and every non-Hopper GPU keep the mma.sync core.
#pragma once
#include "gemm.cuh"
#include "stream.h"

DING_GPU_BEGIN

// Whether the wgmma core can take p on this device (cc 9.0, K a multiple of 8, rows of x and w
// 16-byte aligned, enough shared memory) and has enough 128 × 128 tiles to be worth it (about
// half the SMs or more; smaller products go to the mma.sync core, which can split K).
bool gemm_wgmma_takes(const Props& props, const GemmShape& p);

// T = ding::bf16 or ding::f16 (x's and w's dtype). Only where gemm_wgmma_takes() said yes.
template <class T>
void launch_gemm_wgmma(GpuStream& s, const GemmShape& p, const Epilogue& ep);

DING_GPU_END
