// Weight upload: the weights a family asks for, read from memory-mapped safetensors, converted to
// the compute dtype with vector code on every core, and copied into one device allocation in
// chunks that overlap the conversion of the next chunk with the copy of the last.
//
// A destination weight is one or more stored tensors concatenated along dim 0 (q/k/v into one
// fused projection, gate/up into one), each optionally transposed (GPT-2's Conv1D stores [K, N];
// ops::matmul wants [N, K]). Weights with no stored parts are generated (random benchmarks).
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "ding/device.h"
#include "ding/models/safetensors.h"

namespace ding {

// Where each weight starts in an arena: a multiple of this many bytes.
inline constexpr size_t kWeightAlignment = 256;

struct WeightPart {
  const StoredTensor* tensor = nullptr;
  bool transpose = false;  // stored [K, N] (2-D only): its rows of the destination are its columns
  // Rows [row_begin, row_end) of dim 0 only (not with transpose), so a weight can gather blocks of
  // rows in another order (Qwen3-Next's per-key-head q/k/v/z groups into q, k, v, z); -1: to the end.
  int64_t row_begin = 0, row_end = -1;
  // An 8-bit tensor (i8 or f8e4m3) stored with scales: value[r, c] = q[r, c] · scales[r / block_rows,
  // c / block_cols], in the stored tensor's own orientation ([⌈R / block_rows⌉, ⌈C / block_cols⌉]
  // f32, bf16 or f16 scales, any rank that holds that many; attach_scales holds a block-wise
  // checkpoint's to that exact shape). Row scales are blocks of one row (of one
  // column for a transposed part); checkpoints quantized block-wise bring 128 × 128 blocks.
  const StoredTensor* scales = nullptr;
  int64_t block_rows = 0, block_cols = 0;
  int64_t rows() const;  // the rows this part contributes (dim 0 of the tensor, or its range)
};

enum class WeightInit : uint8_t { stored, normal, ones, zeros };

struct WeightPlan {
  std::string name;                // for messages: the stored name, or the family's name for a fused weight
  std::vector<int64_t> shape;      // the destination shape (after transposition and concatenation)
  std::vector<WeightPart> parts;   // concatenated along dim 0 (their dim-0 extents sum to shape[0]); init stored
  WeightInit init = WeightInit::stored;
  float normal_std = 0.02f;        // init normal: N(0, σ²) from a counter-based generator (any thread order,
                                   // same values for the same seed and plan order)
  Tensor* target = nullptr;        // receives the view of the weight in the arena
  // Added to every stored value (in f32, before the one rounding to the compute dtype): norm
  // weights stored as w for a scale of 1 + w (Qwen3-Next) load as the scale. Generated weights
  // take their init as it is.
  float stored_offset = 0.0f;
};

struct UploadOptions {
  DType dtype = DType::f32;        // the compute dtype: f32, f16 or bf16
  uint64_t seed = 0;               // for WeightInit::normal
  // Called after each chunk with the arena bytes written so far and the arena's size.
  std::function<void(size_t done, size_t total)> progress;
  // The unit of the pipeline: each chunk of the arena is converted on every core, then copied
  // while the next one is converted. Devices with host memory are written in place (no copy).
  // Tests make it tiny so that chunks split weights at odd places.
  size_t chunk_bytes = size_t(32) << 20;
  // False: stored values are not checked. NaN and ±Inf load as they are and a value beyond the
  // compute dtype becomes ±Inf, for a folder that is trusted (the check shares the conversion's
  // pass over the data, so skipping it saves little). Generated weights are always checked.
  bool check_values = true;
  // Bytes the arena keeps past the weights, from UploadStats::reserved_at on, for weights placed
  // there afterwards (a ding folder's 8-bit weights: place_stored_narrow), so that the model's
  // weights share one allocation.
  size_t reserve_bytes = 0;
};

struct UploadStats {
  size_t bytes_read = 0;     // stored bytes converted
  size_t bytes_written = 0;  // device bytes written
  double seconds = 0;        // wall time of the whole upload, copies included
  size_t reserved_at = 0;    // the arena offset where UploadOptions::reserve_bytes begin (aligned)
};

// Allocates `arena` on `device`, lays every weight out in it (each 256-byte aligned), points each
// plan's target at its view. Checks every plan before allocating: Error(invalid_argument) for a
// plan that cannot be carried out (no target, a rank outside 1…kMaxRank, a generated weight with
// parts), Error(parse) naming the tensor and its file for a stored part whose dtype is not a float
// (f32, f16, bf16; or i8 / f8e4m3 with scales, widened with them: 2-D, not transposed) or whose
// shape does not concatenate to plan.shape. While converting, throws Error(parse) naming
// the tensor, its file and the element when a stored value is NaN or ±Inf or a finite value
// overflows the compute dtype (an f32 weight beyond f16's range), unless options.check_values is
// false; Error(io) naming the tensor and its file when its bytes can no longer be read (the file
// was truncated after it was mapped); and Error(out_of_memory) from the device when the arena does
// not fit. On any error `arena` and the targets are left as they were. Stored pages already
// converted are released from the process (madvise), so after a GPU upload the host holds little
// of the file.
UploadStats upload_weights(Device& device, std::span<WeightPlan> plans, Buffer& arena, const UploadOptions& options);

// An 8-bit part's scales (WeightPart::scales), checked against its tensor: Error(parse) naming the
// files and tensors (`where` names the part) unless the tensor is an i8 or f8e4m3 matrix and the
// scales f32, bf16 or f16 holding one value per block; Error(invalid_argument) for blocks not ≥ 1 × 1.
void check_scales(const WeightPart& part, const std::string& where);
// The checked part's scales as f32, in the stored order: Error(parse) naming the scales and the
// index of a value that is not finite and ≥ 0; Error(io) when the file can no longer be read. A zero
// scale makes its block zeros, as transformers' dequantization does, whatever its codes.
std::vector<float> read_scales(const WeightPart& part);

}  // namespace ding
