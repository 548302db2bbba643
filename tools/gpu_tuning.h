// The GPU matmul and op tunings (ding::gpu::MatmulTuning, OpTuning) from the
// environment, for ding's own programs (ding-bench, ding-run, ding_tests): a benchmark sweeps the
// plans, and a bypass is tried, without a rebuild. The library itself reads no environment.
//   DING_GEMM_TMA=1        the sm_90a TMA core where it fits
//   DING_GEMM_WGMMA=0      not the sm_90a wgmma core
//   DING_GEMM_TILE=MxN     force a tile, e.g. 64x128
//   DING_GEMM_SPLIT=S      force a K split count (0: chosen per shape)
//   DING_GEMV_CHAINED=0    decode GEMVs as plain launches
//   DING_GEMV_PREFETCH=0   no L2 prefetch of GEMV weights before the wait
//   DING_GEMV_L2=B         the tensor-core GEMV's L2 fetch size: 0, 128 or 256
//   DING_GEMV_EARLY=N      units of the tensor-core GEMV's ring copied before the chained-launch wait
//   DING_GEMV_EARLY_SEGMENTS=0  the tensor-core GEMV finds a mixture's experts after the wait only,
//                          whatever the op's hint
//   DING_GEMV_EVICT_FIRST=0  the tensor-core GEMV's copies of w kept in L2 as any other data
//   DING_GEMV_MMA_MIN_KB=N one row times weights below N KiB takes the FMA GEMV (0: never)
//   DING_GEMM_E4M3=0       prefill products of E4M3 weights not on E4M3 tensor cores (x kept 16-bit)
//   DING_MLA_STAGES=N      the latent attend kernel's ring: at most N tiles, 2 to 4 (0: automatic)
//   DING_MLA_BULK=0        its tiles by cp.async, not by sm_90's bulk copies
//   DING_MLA_FOLD=0        latent decode's splits merged, then projected: two launches, not one
//   DING_DELTA_SEGMENT=N   the chunk-wise delta rule's chunks per pair of passes (0: by workspace size)
//   DING_DELTA_PAIRS=0     its walk's products as tf32 head and tail, not bf16 pairs, for bf16 q, k, v
//   DING_DELTA_BULK=0      its walk's operands by cp.async, not by sm_90's bulk copies
//   DING_DELTA_PREPARE_BLOCKS=N  its first pass N blocks an SM, 2 or 3 (0: three where that saves a wave)
//   DING_DELTA_CLUSTER_NORM=0  its output's gated norm by rms_norm after it, not in its recurrent kernel
//   DING_DECODE_EARLY=0    decode attention copies no K/V tile before the chained-launch wait
//   DING_DECODE_CLUSTER=0  decode attention's splits merge through L2 and a ticket, not in a cluster
//   DING_ROUTE_CLUSTER=0   a decode step's routing kernel hands its logits over through L2 and a
//                          ticket, not in a cluster's shared memory
#pragma once
#include <optional>

#include "ding/device.h"
#include "ding/gpu.h"

namespace ding::tools {

// nullopt when none of the variables is set; Error(invalid_argument) naming the variable when
// one cannot be read.
std::optional<gpu::MatmulTuning> matmul_tuning_from_environment();

std::optional<gpu::OpTuning> op_tuning_from_environment();

// Sets each on `device` when one of its variables is set and `device` is a GPU device.
void apply_gpu_tuning_from_environment(Device& device);

}  // namespace ding::tools
