// ding-quantize's model folders: a Hugging Face folder whose projection weights are stored in 8 bits,
// which Model::load reads as they are (docs/DESIGN.md, "Quantized model folders").
//
// Layout, format_version 1 (kDingQuantizedFormat, config.h):
//   config.json        the original, plus "quantization_config": {"quant_method": "ding",
//                      "format_version": 1, "weights": "int8" | "float8_e4m3fn", ...}
//   model.safetensors  every stored tensor of the original under its own name. A tensor T that only
//                      feeds the weights LoadOptions::quantize stores narrow (projection_weights) is i8
//                      or F8_E4M3 in its stored shape and orientation, and "T_scale" is F32 with one
//                      scale per output row: per stored row, or per stored column of a weight the
//                      family reads transposed (GPT-2's Conv1D). T[r, c] = q[r, c] · scale. Every
//                      other tensor is copied as it is.
//   everything else    the tokenizer and generation files, copied.
// Quantization is quantize_row's (weight_quantize.h) on each output row of the stored values
// widened to f32: the same values LoadOptions::quantize gives wherever the compute dtype holds the
// stored values exactly (a bf16 checkpoint in bf16 or f32, any checkpoint in f32).
#pragma once
#include <cstdint>
#include <string>

#include "ding/dtype.h"

namespace ding {

struct QuantizedFolderStats {
  int64_t tensors_quantized = 0;
  int64_t tensors_copied = 0;
  size_t bytes_before = 0;  // of the stored tensors
  size_t bytes_after = 0;   // values and scales
};

// Writes the folder `out` (created; it must not exist or be empty) from the model folder `in`, with
// the matmul weights in `to` (i8 or f8e4m3). Throws Error(invalid_argument) for another `to`, `out`
// that is `in` or holds files, or `in` already quantized; any error Model::load gives for `in`
// (config, weights, tokenizer files are read as it reads them); Error(parse) naming the tensor and
// row for a NaN or ±Inf weight; Error(io) when `out` cannot be written (then it is removed).
QuantizedFolderStats write_quantized_folder(const std::string& in, const std::string& out, DType to);

}  // namespace ding
