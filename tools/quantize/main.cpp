// ding-quantize: writes a model folder whose projection weights are stored in 8 bits with a scale
// per output row (models/quantized_folder.h), which ding-run loads directly.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>

#include "../cli_checks.h"
#include "ding/models/quantized_folder.h"
#include "ding/version.h"

namespace {

int fail(const std::string& what) { return ding::tools::fail("ding-quantize", what); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ding-quantize: write a model folder with its projection weights in 8 bits (int8 or fp8 E4M3, a scale "
               "per output row), which ding-run loads as it is"};
  std::string in, out, format;
  app.add_option("IN_DIR", in, "the model folder (config.json, *.safetensors, tokenizer files)")->required();
  app.add_option("OUT_DIR", out, "the folder to write (created; must not exist or be empty)")->required();
  app.add_option("--dtype", format, "int8 or fp8")->required();
  app.set_version_flag("--version", fmt::format("ding-quantize {}", ding::kVersion));
  if (const std::optional<int> stop = ding::tools::parse_command_line(app, argc, argv, "ding-quantize")) return *stop;
  try {
    if (format != "int8" && format != "fp8") return fail(fmt::format("--dtype '{}' is not int8 or fp8", format));
    const ding::DType to = format == "int8" ? ding::DType::i8 : ding::DType::f8e4m3;
    const ding::QuantizedFolderStats s = ding::write_quantized_folder(in, out, to);
    std::printf("ding-quantize: %s: %lld tensors in %s with row scales, %lld copied; %.1f MB -> %.1f MB\n", out.c_str(),
                static_cast<long long>(s.tensors_quantized), format.c_str(), static_cast<long long>(s.tensors_copied),
                double(s.bytes_before) / 1e6, double(s.bytes_after) / 1e6);
    ding::tools::check_stdout_written();
    return 0;
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}
