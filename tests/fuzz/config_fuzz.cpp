// libFuzzer target: config.json (and the same text as generation_config.json). A config that
// parses must be one a model can be planned from: its parameter count and the shapes of every
// weight (the family's plans for random weights, which allocate nothing) are computed.
#include <cstdint>
#include <string>

#include "ding/error.h"
#include "ding/models/config.h"
#include "ding/models/families/family.h"
#include "fuzz_files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ding;
  const std::string text(fuzz::as_text(data, size));
  try {
    const ModelConfig c = ModelConfig::from_json_text(text, "config.json");
    (void)c.parameter_count();
    (void)c.reachable_eos();
    ModelWeights w;
    (void)find_family(c.model_type, "config.json").weight_plans(c, nullptr, w);
  } catch (const Error&) {
  }
  const auto path = fuzz::scratch() / "generation_config.json";
  fuzz::write_file(path, text);
  try {
    (void)GenerationDefaults::from_json_file(path.string());
  } catch (const Error&) {
  }
  return 0;
}
