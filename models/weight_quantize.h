// Quantizing a loaded model's matrix weights to 8 bits (LoadOptions::quantize): each weight that
// only ops::matmul reads becomes i8 or f8e4m3 values with one f32 scale per row (Tensor::scales,
// ops/matmul.h: w[r, k] = q[r, k]·scale[r]), and every weight moves into one new arena, so the
// model holds the narrow weights and not the wide ones beside them.
#pragma once
#include <cstdint>
#include <span>
#include <string>

#include "ding/device.h"
#include "ding/models/config.h"
#include "weight_upload.h"

namespace ding {

// One row of `cols` f32 values as `to` (i8 or f8e4m3) into q, returning its scale:
// scale = max|x| / Q with Q the largest magnitude `to` holds (127; E4M3's 448), each q the nearest
// value of x / scale (i8: an integer, ties to even; f8e4m3: E4M3's own rounding). A row of zeros
// has scale 0 and q 0; a row holding NaN or ±Inf gets q 0 and a NaN scale, for the caller to refuse.
float quantize_row(const float* x, int64_t cols, DType to, void* q);

// The scales of every 8-bit stored part of `plans` (WeightPart::scales and its blocks) as the
// checkpoint's quantization_config lays them out (config.h): "T_scale" per output row for a ding
// folder, "T_scale_inv" per block for a block-wise fp8 one. Error(parse) naming the tensor and
// `dir` for an 8-bit tensor whose scales are absent; other tensors are left as they are.
void attach_scales(std::span<WeightPlan> plans, const WeightFiles& files, const QuantizedCheckpoint& checkpoint,
                   const std::string& dir);

// Whether every part of `plan` is stored in `to` with one scale per output row (a ding folder's
// matmul weight): quantize_weights then reads it from the files as it is, and it is not uploaded.
bool stored_narrow(const WeightPlan& plan, DType to);

// The arena bytes place_stored_narrow lays `plans` out in: each plan's values, then its row scales,
// each aligned to kWeightAlignment.
size_t stored_narrow_bytes(std::span<const WeightPlan> plans);

// A ding folder's 8-bit weights straight from the files into an arena that already holds the
// others (UploadOptions::reserve_bytes): every plan must be stored_narrow in `to`; from `at` on
// (stored_narrow_bytes of them, on `device`) each gets its values and scales and its target points
// there. Error(parse) naming the tensor for parts that do not fit the plan's shape, an f8e4m3 NaN
// code, or scales read_scales refuses; the targets are then left as they were.
void place_stored_narrow(Device& device, std::span<WeightPlan> plans, char* at, DType to);

struct QuantizeStats {
  int64_t weights = 0;      // weights quantized
  size_t bytes_before = 0;  // the arena's size before and after
  size_t bytes_after = 0;
};

// Every plan's target must lie in `arena` (upload_weights has run), except the plans stored_narrow
// in `to` whose targets are listed, which come from their files as they are (f8e4m3 NaN codes
// refused, scales by read_scales). The other targets listed in `quantize` (2-D [N, K], contiguous,
// of a float dtype) are quantized row by row on the host; the rest are copied as they are;
// `arena` is then the new allocation, and each target points into it. Error(invalid_argument) for `to` other than i8/f8e4m3 or a listed weight that is not a
// contiguous float matrix; Error(parse) naming the weight and row for a NaN or ±Inf (weights loaded
// unchecked); Error(out_of_memory) from the device. On any error `arena` is left as it was.
QuantizeStats quantize_weights(Device& device, std::span<WeightPlan> plans, std::span<Tensor* const> quantize,
                               Buffer& arena, DType to);

}  // namespace ding
