// Controls of a GPU device ("cuda" or "hip"), for benchmarks and experiments: none is needed
// to run models. Both throw Error(invalid_argument) when `device` is not a GPU device, which
// includes every device of a library built without a GPU backend (ding::cpu).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "ding/device.h"
#include "ding/ops/matmul.h"

namespace ding::gpu {

// How the matmul kernels are chosen; the defaults are the production choice. A field left at its
// default keeps the automatic choice. ding's own tools fill it from DING_GEMM_* / DING_GEMV_*
// environment variables (tools/gpu_tuning.h); the library itself reads no environment.
struct MatmulTuning {
  bool tma = false;            // the sm_90a persistent TMA core where it fits, ahead of wgmma: off
                               // until it beats wgmma on the H100 for the shapes it takes
  bool wgmma = true;           // the sm_90a wgmma core where it fits; false bypasses it
  int tile_m = 0, tile_n = 0;  // force this tile (0: chosen per shape): 128x128, 128x64, 64x128 or
                               // 64x64 on mma.sync, 128x128 or 128x256 on wgmma, 128x256, 128x128
                               // or 64x128 on tma; others: automatic
  int splits = 0;              // force this K split on the mma.sync, wgmma and tma paths (0: chosen
                               // per shape)
  bool gemv_chained = true;    // decode GEMVs as chained launches where the device has them
  bool gemv_prefetch = true;   // and the FMA GEMV's weights asked of L2 before the wait (the
                               // tensor-core GEMV's cp.async ring starts its loads there instead)
  int gemv_l2_fetch = -1;      // the tensor-core GEMV's L2 fetch size per copy of w, in bytes:
                               // 0, 128 or 256 (-1: its default)
  int gemv_early_units = -1;   // units of each thread's ring the tensor-core GEMV copies before the
                               // chained-launch wait, the rest after x's copies (-1: its default)
  bool gemv_early_segments = true;  // and a mixture's experts found there too, where the offsets
                                    // that select them come from an earlier op (ops::MoeMatmulArgs)
  bool gemv_evict_first = true;  // the tensor-core GEMV's copies of w evicted from L2 first (a
                                 // decode step reads each weight once; the rest it reads stays)
  int64_t gemv_mma_min_bytes = -1;  // one row of x times weights below this many bytes takes the
                                    // FMA GEMV, not the tensor-core one (-1: its default, 1 MiB; 0: never)
  bool e4m3_mma = true;        // prefill products of 16-bit x and E4M3 w on E4M3 tensor cores, x
                               // rounded per row (ops/matmul.h allows it), where the GPU has them
                               // (sm_89+); false: w widened to x's type in registers, x as given
  size_t widen_bytes = 0;      // scratch for 8-bit weights widened to 16 bits for the prefill
                               // GEMMs, which take a weight (matmul: a run of its rows; moe_matmul:
                               // a group of experts) this many bytes at a time (at least 64 rows or
                               // one expert; 0: 256 MiB)
};

// Applies to the calls enqueued after it on every stream of `device`.
void set_matmul_tuning(Device& device, const MatmulTuning& tuning);

// How the kernels of the ops other than the products are configured: attention, latent attention,
// the delta rule and the routing of a mixture; the defaults are the production choice. ding's own
// tools fill it from DING_MLA_*, DING_DELTA_*, DING_DECODE_* and DING_ROUTE_* environment variables
// (tools/gpu_tuning.h). Lets one GPU run every configuration another chip would get (an RTX 4090's
// smaller rings, cp.async copies and tickets in place of clusters on an H100).
struct OpTuning {
  int mla_stages = 0;           // the latent attend kernel's ring: at most this many tiles, 2 to 4
                                // (0: as many as the device's shared memory holds)
  bool mla_bulk_copies = true;  // its tiles by the copy engine's bulk copies where the device has
                                // them (sm_90+); false: by cp.async, as on sm_80/sm_89
  bool mla_fold_projection = true;  // decode's several splits merged and projected by W_uv in one
                                    // launch where W_uv's rows allow it; false: a merge launch, then
                                    // a projection launch
  int delta_rule_segment_chunks = 0;  // the chunk-wise delta rule's chunks per pair of passes
                                      // (0: equal segments of at most 192 MB of first-pass output)
  bool delta_rule_bf16_pairs = true;  // its walk's computed operands as bf16 pairs (hi + lo) where q,
                                      // k and v are bf16 and the output 16-bit; false: as tf32 head and
                                      // tail, as for f32 outputs
  bool delta_rule_bulk_copies = true;  // its walk's operands by the copy engine's bulk copies where the device
                                       // has them (sm_90+); false: by cp.async, as on sm_80/sm_89
  int delta_rule_prepare_blocks = 0;  // its first pass's blocks an SM: 2; 3 (T over the chunk's queries, at
                                      // most 80 registers) where the rows are 16-bit and chunks of 64 leave
                                      // room; 0: three where they fit and take fewer waves than two
  bool delta_rule_cluster_norm = true;  // the op's out_norm inside its recurrent kernel, the column tiles of
                                        // a head one cluster (sm_90+); false: staged through rms_norm, as
                                        // on sm_80/sm_89
  bool decode_early_tiles = true;  // decode attention's first K/V tiles copied before the chained-launch
                                   // wait, where the op says the cache comes from earlier ops
  bool decode_cluster_merge = true;  // decode attention's splits of a group one cluster (sm_90+, at most
                                     // 8, where the grid is at most a block an SM), merged in shared
                                     // memory; false: through L2 and a ticket
  bool moe_route_cluster = true;  // a decode step's routing kernel as one cluster (sm_90+, at most 8
                                  // blocks): the logits handed to its first block in shared memory;
                                  // false: through L2 and a ticket, as on sm_80/sm_89
};

// Applies to the calls enqueued after it on every stream of `device`.
void set_op_tuning(Device& device, const OpTuning& tuning);

// The forms a device's kernels took where the device or a tuning switch chooses between two ways
// to compute the same op (a cluster or a ticket; bulk copies or cp.async; bf16 pairs or tf32):
// while a log is set, each such op appends "op: form" as it is enqueued, so that a test or a
// benchmark can say which one ran rather than infer it from a timing. nullptr stops the log.
using FormLog = std::vector<std::string>;
void set_form_log(Device& device, std::shared_ptr<FormLog> log);

// Who computes ops::matmul on the device: ding's own kernels (the default), or another library
// for comparison (ding-bench --matmul cublas installs one). The library links no vendor BLAS
// itself; the override brings its own.
class MatmulOverride {
 public:
  virtual ~MatmulOverride() = default;
  // Computes the call on `stream` (the device's cudaStream_t or hipStream_t) and returns true, or
  // returns false without doing anything for a call it does not take: ding's kernels then run
  // it. Called after ops::matmul has checked the arguments.
  virtual bool matmul(void* stream, const ops::MatmulArgs& args) = 0;
};

// nullptr returns matmul to ding's kernels.
void set_matmul_override(Device& device, std::shared_ptr<MatmulOverride> override);

}  // namespace ding::gpu
