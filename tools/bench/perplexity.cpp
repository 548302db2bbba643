#include "perplexity.h"

#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "ding/ding.h"
#include "ding/models/input_files.h"
#include "ding/models/session.h"
#include "../gpu_tuning.h"
#include "model_bench.h"

namespace ding::bench {

namespace {

// −log softmax(logits)[target], in double.
double cross_entropy(const float* logits, int64_t V, Token target) {
  double peak = logits[0];
  for (int64_t v = 1; v < V; ++v) peak = std::max(peak, double(logits[v]));
  double sum = 0;
  for (int64_t v = 0; v < V; ++v) sum += std::exp(double(logits[v]) - peak);
  return std::log(sum) + peak - double(logits[target]);
}

}  // namespace

int run_perplexity(const PerplexityOptions& o) {
  if (!(o.tail > 0 && o.tail <= 1))
    throw Error(ErrorCode::invalid_argument, fmt::format("--tail {} is not in (0, 1]", o.tail));
  if (o.window < 2) throw Error(ErrorCode::invalid_argument, fmt::format("--window {} must be ≥ 2", o.window));
  Device& device = Device::open(o.backend);
  ding::tools::apply_gpu_tuning_from_environment(device);  // DING_GEMM_* etc., as the other subcommands
  const Model model = Model::load(o.model_dir, device,
                                  {.dtype = parse_dtype(o.dtype), .quantize = parse_quantize(o.quantize),
                                   .quantize_lm_head = o.quantize_lm_head});
  if (o.window > model.config().n_positions)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("--window {} is longer than the model's {} positions", o.window, model.config().n_positions));
  const std::vector<Token> ids = model.tokenizer().encode(read_text_file(o.file, size_t(1) << 30));
  // The slice as train_default.py cuts it: ids[int(n · 0.95):], in whole windows that leave one
  // token beyond the last (range(0, len(val) − seq, seq)).
  const size_t first = size_t(double(ids.size()) * (1.0 - o.tail));
  const std::vector<Token> slice(ids.begin() + std::ptrdiff_t(first), ids.end());
  const int64_t windows = (int64_t(slice.size()) - 1) / o.window;
  if (windows < 1)
    throw Error(ErrorCode::invalid_argument, fmt::format("{}: its last {} of {} tokens hold no window of {}", o.file,
                                                         o.tail, ids.size(), o.window));
  Session session(model, {.max_tokens = o.window});
  const int64_t V = model.config().vocab_size;
  double total = 0;
  std::vector<float> logits;
  for (int64_t w = 0; w < windows; ++w) {
    const std::span<const Token> tokens(slice.data() + w * o.window, size_t(o.window));
    logits.clear();
    session.reset(0);
    session.prefill(0, tokens, &logits);
    double window_loss = 0;
    for (int64_t t = 0; t + 1 < o.window; ++t) window_loss += cross_entropy(logits.data() + t * V, V, tokens[size_t(t + 1)]);
    total += window_loss / double(o.window - 1);
  }
  const double loss = total / double(windows);
  fmt::print("model      {} on {} ({}{})\n", o.model_dir, device.name(), dtype_name(model.dtype()),
             model.quantized() ? fmt::format(", {} projections{}", dtype_name(*model.quantized()),
                                             o.quantize_lm_head ? " and LM head" : "")
                               : "");
  fmt::print("text       {}: {} tokens, the last {:g} ({} tokens) in {} windows of {}\n", o.file, ids.size(), o.tail,
             slice.size(), windows, o.window);
  fmt::print("loss       {:.5f} nats per token\n", loss);
  fmt::print("perplexity {:.3f}\n", std::exp(loss));
  return 0;
}

}  // namespace ding::bench
