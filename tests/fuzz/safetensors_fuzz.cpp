// libFuzzer target: a model.safetensors file. A file that opens must describe tensors inside it:
// each float tensor is then read (through mapped_read) and converted as a model load would,
// transposed where it is 2-D and its name has an odd length, so that both conversion paths see
// what the header checks let through. Anything refused must be a ding::Error.
#include <cstdint>
#include <vector>

#include "ding/ding.h"
#include "ding/threads.h"
#include "ding/models/safetensors.h"
#include "ding/models/weight_upload.h"
#include "fuzz_files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ding;
  static Device& cpu = [] () -> Device& {
    set_cpu_threads(1);
    return Device::open("cpu");
  }();
  fuzz::write_file(fuzz::scratch() / "model.safetensors", fuzz::as_text(data, size));
  try {
    const WeightFiles files = WeightFiles::open_folder(fuzz::scratch().string());
    (void)files.total_bytes();
    std::vector<Tensor> targets(files.tensors().size());
    std::vector<WeightPlan> plans;
    for (const auto& [name, t] : files.tensors()) {
      if (t->shape.empty() || (t->dtype != DType::f32 && t->dtype != DType::f16 && t->dtype != DType::bf16)) continue;
      const bool transpose = t->shape.size() == 2 && name.size() % 2 == 1;
      WeightPlan plan{.name = name, .shape = t->shape, .parts = {{t, transpose}}, .target = &targets[plans.size()]};
      if (transpose) std::swap(plan.shape[0], plan.shape[1]);
      plans.push_back(std::move(plan));
    }
    Buffer arena;
    upload_weights(cpu, plans, arena, {.dtype = size % 2 ? DType::f16 : DType::f32, .chunk_bytes = 4096});
  } catch (const Error&) {
  }
  return 0;
}
