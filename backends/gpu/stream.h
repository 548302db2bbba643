// GpuStream: what the kernels of backends/gpu/ need from a stream of a GPU backend (cuda, and
// hip later): the native queue, the device's properties, and scratch memory for temporaries.
#pragma once
#include <cstddef>

#include "ding/device.h"
#include "vendor.h"

namespace ding::ops {
struct MatmulArgs;
}

namespace ding::gpu {

// Read from the driver once per device.
struct Props {
  int sm_count = 0;                  // multiprocessors (NVIDIA) / compute units (AMD)
  int cc_major = 0, cc_minor = 0;    // compute capability (NVIDIA); gfx major/minor on AMD
  int warp_size = 32;
  size_t l2_bytes = 0;
  size_t shared_per_block_optin = 0; // dynamic shared memory a block may opt into
  size_t shared_per_sm = 0;
  bool has_mma_sync() const { return cc_major >= 8; }  // bf16/f16 mma.sync, ldmatrix, cp.async
  // Programmatic dependent launch (vendor.h launch_chained): NVIDIA sm_90+.
  bool has_chained_launch() const {
#if defined(DING_GPU_NVIDIA)
    return cc_major >= 9;
#else
    return false;
#endif
  }
};

// How the matmul cores choose their kernel, for experiments and as a bypass: the defaults are the
// production choice. The cuda backend reads DING_GEMM_TMA (1: on), DING_GEMM_WGMMA (0: off),
// DING_GEMM_TILE (e.g. "64x128"), DING_GEMM_SPLIT (a K split count), DING_GEMV_CHAINED and
// DING_GEMV_PREFETCH (0: off) and DING_GEMV_L2 (0, 128 or 256) once per device
// (backends/cuda/device.cpp).
struct MatmulTuning {
  bool tma = false;            // the sm_90a persistent TMA core where it fits (gemm_tma.h), ahead
                               // of wgmma: off until measured on an H100
  bool wgmma = true;           // the sm_90a wgmma core where it fits (gemm_wgmma.h)
  int tile_m = 0, tile_n = 0;  // force this tile (0: chosen per shape): 128x128, 128x64, 64x128 or
                               // 64x64 on mma.sync, 128x128 or 128x256 on wgmma, 128x256, 128x128
                               // or 64x128 on tma; others: automatic
  int splits = 0;              // force this K split on the mma.sync, wgmma and tma paths (0: chosen
                               // per shape)
  bool gemv_chained = true;    // decode GEMVs as chained launches where the device has them
  bool gemv_prefetch = true;   // and the FMA GEMV's weights asked of L2 before the wait (the
                               // tensor-core GEMV's cp.async ring starts its loads there instead)
  int gemv_l2_fetch = -1;      // the tensor-core GEMV's L2 fetch size per copy of w, in bytes:
                               // 0, 128 or 256 (-1: its default, gemv_mma.cuh)
};

class GpuStream : public Stream {
 public:
  virtual stream_t handle() const = 0;
  virtual const Props& props() const = 0;
  // Device scratch of at least `bytes`, valid for work enqueued on this stream until the next
  // call for the same slot. Grow-only: after the first steps of a workload it allocates nothing,
  // so a recorded graph keeps pointing at live memory. Slots are independent: an op that stages
  // an input (staged_input) may then call a core that takes kernel scratch.
  enum class ScratchSlot { kernel, staged_input };
  virtual void* scratch(size_t bytes, ScratchSlot slot = ScratchSlot::kernel) = 0;
  // Another library's matmul as a comparison path for ding-bench: true when it computed the
  // matmul (only if the user installed one, ding::cuda::set_matmul_override); false to run
  // ding's own kernels.
  virtual bool vendor_blas_matmul(const ops::MatmulArgs&) { return false; }
  virtual const MatmulTuning& matmul_tuning() const {
    static const MatmulTuning defaults;
    return defaults;
  }
};

// The GPU stream behind `stream`; throws Error(device_mismatch) if it is another backend's.
GpuStream& gpu_stream(Stream& stream);

}  // namespace ding::gpu
