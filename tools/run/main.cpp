// ding-run: generate text with a model folder (default: the model shipped in the repo).
//   ding-run [--version] [-m DIR] [-p PROMPT | -f FILE | --tokens 1,2,3] [-n N] [-c N] [--backend auto|cpu|...]
//            [--dtype f32|bf16|f16] [--temp T] [--top-k K] [--top-p P] [--min-p P]
//            [--repeat-penalty R] [--seed S] [--greedy] [--stop TEXT] [--logits-out FILE] [--json]
//            [--threads N] [--no-graphs]
// Text streams to stdout as it is generated (token ids, space separated, for a folder without a
// tokenizer); the summary (load, warm-up, time to first token, prefill and decode speed, memory,
// KV-cache size) goes to stderr, or with --json everything is one JSON object on stdout.
// Every command-line or run-time error ends with one `ding-run: error: ...` line and exit code 1.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>

#include "../gpu_tuning.h"
#include "ding/ding.h"
#include "ding/models/generate.h"
#include "ding/models/input_files.h"
#include "ding/threads.h"
#include "../cli_checks.h"

namespace {

// ding-run's sampling when neither the command line nor generation_config.json says otherwise.
constexpr ding::SamplerOptions kDefaultSampling{.temperature = 0.8f, .top_k = 40, .top_p = 0.95f};

struct Options {
  std::string model_dir;
  bool model_given = false;   // -m was on the command line (an empty path is then an error)
  bool tokens_given = false;  // --tokens was (an empty list is then an error)
  std::string prompt = "The";
  std::string prompt_file;
  std::string token_list;
  int64_t max_new_tokens = 128;
  int64_t ctx_size = 0;  // 0: the Session's default (the model's context, capped)
  std::string backend = "auto";
  std::string dtype;  // empty: the library chooses (the checkpoint's dtype on GPUs, f32 on the CPU)
  std::string quantize;  // empty: none; int8 or fp8
  bool quantize_lm_head = false;
  ding::SamplerOptions sampler = kDefaultSampling;  // a field counts only where its flag was given
  std::string seed;                                 // as typed; parsed only when given
  bool seed_given = false;                          // false: a random seed, printed
  bool greedy = false;
  bool json = false;
  std::vector<std::string> stop;
  std::string logits_out;
  int threads = 0;  // 0: OpenMP's default (all cores)
  bool no_graphs = false;
  bool no_weight_check = false;
};

// Which sampling flags the user gave: those win over generation_config.json.
struct SamplingFlags {
  bool temperature = false, top_k = false, top_p = false, min_p = false, repetition_penalty = false;
  bool any_sampling() const { return temperature || top_k || top_p || min_p; }
};

// The sampler settled from the three sources, with what the model's generation_config.json gave.
struct Sampling {
  ding::SamplerOptions options;
  bool greedy = false;
  std::vector<std::string> from_model;  // the fields taken from generation_config.json
};

// Host memory resident now (not the peak): what loading leaves behind once the weights are on the device.
size_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * size_t(sysconf(_SC_PAGESIZE));
}

// transformers accepts bos/eos ids beyond the embedding table (tiny test models keep their parent's
// ids); so does ding, but such an eos can never be sampled, so the run says once that it will not stop on it.
void note_special_ids_outside_vocabulary(const ding::ModelConfig& c) {
  std::vector<int32_t> outside;
  for (int32_t id : c.eos_tokens)
    if (id >= c.vocab_size) outside.push_back(id);
  const bool bos_outside = c.bos_token >= c.vocab_size;
  if (outside.empty() && !bos_outside) return;
  fmt::print(stderr, "note: {}{}{} outside the vocabulary of {}: {}\n",
             outside.empty() ? "" : fmt::format("eos id {}", fmt::join(outside, ", ")),
             !outside.empty() && bos_outside ? " and " : "", bos_outside ? fmt::format("bos id {}", c.bos_token) : "",
             c.vocab_size, outside.empty() ? "ignored" : "generation stops only at -n, the context or --stop");
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The shipped model, found relative to this executable (DING_RUN_MODEL_DIR, from CMake: installed
// as <prefix>/share/ding/models/default beside <prefix>/bin; the build tree has a link at the
// same place), so an installed or moved tree works without the source tree.
std::string default_model_dir() {
  std::error_code error;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error)
    throw ding::Error(ding::ErrorCode::io,
                      fmt::format("cannot find the default model: /proc/self/exe: {}; pass -m DIR", error.message()));
  const std::filesystem::path dir = (exe.parent_path() / DING_RUN_MODEL_DIR).lexically_normal();
  if (!std::ifstream(dir / "config.json"))
    throw ding::Error(ding::ErrorCode::io, fmt::format("no default model found in {}; pass -m DIR", dir.string()));
  return dir.string();
}

std::vector<ding::Token> parse_token_list(const std::string& text, int64_t vocab) {
  std::vector<ding::Token> ids;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size())
      throw ding::Error(ding::ErrorCode::invalid_argument, fmt::format("--tokens: '{}' is not an integer", item));
    if (v < 0 || v >= vocab)
      throw ding::Error(ding::ErrorCode::invalid_argument,
                        fmt::format("--tokens: id {} is outside the vocabulary of {}", v, vocab));
    ids.push_back(ding::Token(v));
  }
  if (ids.empty()) throw ding::Error(ding::ErrorCode::invalid_argument, "--tokens: no ids given");
  return ids;
}

ding::DType parse_dtype(const std::string& s) {
  if (s == "f32") return ding::DType::f32;
  if (s == "bf16") return ding::DType::bf16;
  if (s == "f16") return ding::DType::f16;
  throw ding::Error(ding::ErrorCode::invalid_argument, fmt::format("--dtype: '{}' is not f32, bf16 or f16", s));
}

// --quantize: the 8-bit format of the projection weights (LoadOptions::quantize).
ding::DType parse_quantize(const std::string& s) {
  if (s == "int8") return ding::DType::i8;
  if (s == "fp8") return ding::DType::f8e4m3;
  throw ding::Error(ding::ErrorCode::invalid_argument, fmt::format("--quantize: '{}' is not int8 or fp8", s));
}

// A seed is the decimal digits of an integer in [0, 2^64): no sign, exponent or spaces.
uint64_t parse_seed(const std::string& text) {
  uint64_t seed = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, seed);
  if (text.empty() || text[0] < '0' || text[0] > '9' || error != std::errc() || stop != end)
    throw ding::Error(ding::ErrorCode::invalid_argument,
                      fmt::format("--seed: '{}' is not an integer from 0 to 2^64 - 1", text));
  return seed;
}

uint64_t random_seed() {
  std::random_device device;
  return (uint64_t(device()) << 32) | uint64_t(device());
}

// A flag the user gave, else the model's generation_config.json, else ding-run's default. A model
// that says do_sample = false decodes greedily unless a sampling flag asks otherwise.
Sampling settle_sampling(const Options& o, const SamplingFlags& given, const ding::GenerationDefaults& model,
                         uint64_t seed) {
  Sampling s;
  s.options = o.sampler;
  s.options.seed = seed;
  const auto take = [&](auto& field, bool flag_given, const auto& from_model, const char* name) {
    if (flag_given || !from_model) return;
    field = *from_model;
    s.from_model.push_back(name);
  };
  take(s.options.temperature, given.temperature, model.temperature, "temperature");
  take(s.options.top_k, given.top_k, model.top_k, "top_k");
  take(s.options.top_p, given.top_p, model.top_p, "top_p");
  take(s.options.min_p, given.min_p, model.min_p, "min_p");
  take(s.options.repetition_penalty, given.repetition_penalty, model.repetition_penalty, "repetition_penalty");
  const bool model_says_greedy = model.do_sample && !*model.do_sample && !given.any_sampling();
  if (model_says_greedy) s.from_model.push_back("do_sample");
  s.greedy = o.greedy || model_says_greedy || s.options.temperature == 0.0f;
  if (s.greedy) s.options.temperature = 0.0f;
  return s;
}

std::string describe(const Sampling& s) {
  std::string text = s.greedy ? "greedy" : fmt::format("temperature {:g}, top-k {}, top-p {:g}, min-p {:g}",
                                                       s.options.temperature, s.options.top_k, s.options.top_p,
                                                       s.options.min_p);
  if (s.options.repetition_penalty != 1.0f) text += fmt::format(", repetition penalty {:g}", s.options.repetition_penalty);
  text += fmt::format("; seed {}", s.options.seed);
  if (!s.from_model.empty()) text += fmt::format(" (from generation_config.json: {})", fmt::join(s.from_model, ", "));
  return text;
}

// Normalization may shorten text (NFC composes a jamo triple, 9 bytes, into one 3-byte syllable),
// so a token covers at most this many times its spelling's bytes of the text as given.
constexpr size_t kNormalizationShrink = 4;

// The prompt file, refused before it is read or tokenized when even its shortest possible
// encoding (Tokenizer::longest_token_bytes) would not fit the context.
std::string read_prompt_file(const std::string& path, const ding::Tokenizer& tokenizer, int64_t context) {
  const size_t bytes = ding::regular_file_size(path);
  const size_t per_token = kNormalizationShrink * tokenizer.longest_token_bytes();
  if (bytes / per_token > size_t(context))
    throw ding::Error(ding::ErrorCode::invalid_argument,
                      fmt::format("-f {}: {} bytes are more than {} tokens of at most {} bytes each: the context is {}",
                                  path, bytes, context, per_token, context));
  return ding::read_text_file(path);
}

int run(const Options& o, const SamplingFlags& sampling_flags) {
  const std::optional<ding::DType> dtype = o.dtype.empty() ? std::nullopt : std::optional(parse_dtype(o.dtype));
  const std::optional<ding::DType> quantize = o.quantize.empty() ? std::nullopt : std::optional(parse_quantize(o.quantize));
  const uint64_t seed = o.seed_given ? parse_seed(o.seed) : random_seed();
  if (o.threads > 0) ding::set_cpu_threads(o.threads);

  const double t_open = now_seconds();
  ding::Device& device = ding::Device::open(o.backend);
  ding::tools::apply_gpu_tuning_from_environment(device);
  if (o.model_given && o.model_dir.empty()) throw ding::Error(ding::ErrorCode::invalid_argument, "-m: the folder path is empty");
  const std::string dir = o.model_given ? o.model_dir : default_model_dir();
  const bool show_progress = !o.json && isatty(STDERR_FILENO);
  ding::LoadOptions load;
  if (dtype) load.dtype = *dtype;
  load.quantize = quantize;
  load.quantize_lm_head = o.quantize_lm_head;
  load.check_weights = !o.no_weight_check;
  load.progress = [&](size_t done, size_t total) {
    if (show_progress && total > (size_t(64) << 20))
      fmt::print(stderr, "\rloading {}: {:3.0f}%", dir, 100.0 * double(done) / double(total));
  };
  const double t_load = now_seconds();
  ding::Model model = ding::Model::load(dir, device, load);
  if (show_progress) fmt::print(stderr, "\r\033[K");
  const double load_seconds = now_seconds() - t_load, open_seconds = t_load - t_open;
  const double load_gbps = double(model.weight_bytes()) / load_seconds * 1e-9;
  const size_t rss_after_load = resident_bytes();
  note_special_ids_outside_vocabulary(model.config());

  ding::Session session(model, {.max_batch = 1, .max_tokens = o.ctx_size, .graphs = !o.no_graphs});
  std::vector<ding::Token> prompt;
  std::string prompt_text;
  if (o.tokens_given) {
    prompt = parse_token_list(o.token_list, model.config().vocab_size);
  } else {
    if (!model.has_tokenizer())
      throw ding::Error(ding::ErrorCode::invalid_argument,
                        "the model folder has no tokenizer (tokenizer.json or vocab.json + merges.txt); pass --tokens");
    prompt_text = o.prompt_file.empty() ? o.prompt : read_prompt_file(o.prompt_file, model.tokenizer(), session.max_tokens());
    prompt = model.tokenizer().encode(prompt_text, {.strict_utf8 = true});
    if (prompt.empty())
      throw ding::Error(ding::ErrorCode::invalid_argument,
                        o.prompt_file.empty() ? std::string("the prompt is empty") : fmt::format("-f {}: the prompt is empty", o.prompt_file));
  }
  if (!o.stop.empty() && !model.has_tokenizer())
    throw ding::Error(ding::ErrorCode::invalid_argument,
                      "--stop matches text, and the model folder has no tokenizer to make text of the tokens");
  if (int64_t(prompt.size()) > session.max_tokens())
    throw ding::Error(ding::ErrorCode::invalid_argument,
                      fmt::format("the prompt has {} tokens but the context is {}{}", prompt.size(), session.max_tokens(),
                                  o.ctx_size > 0 ? fmt::format(" (-c {})", o.ctx_size) : ""));

  // Module loading, first-call set-up and scratch allocation happen here, not in the timed prefill.
  const double t_warm = now_seconds();
  session.warm_up();
  const double warm_up_seconds = now_seconds() - t_warm;

  if (!o.logits_out.empty()) {  // every prompt position's logits, f32 little-endian [n_prompt, V]
    std::vector<float> all;
    session.prefill(0, prompt, &all);
    std::ofstream out(o.logits_out, std::ios::binary);
    out.write(reinterpret_cast<const char*>(all.data()), std::streamsize(all.size() * sizeof(float)));
    out.close();  // a write error may only show when the buffer is flushed
    if (!out) throw ding::Error(ding::ErrorCode::io, fmt::format("--logits-out {}: cannot write", o.logits_out));
  }

  const Sampling sampling = settle_sampling(o, sampling_flags, model.generation(), seed);
  ding::Sampler sampler(sampling.options);
  std::optional<ding::TextStream> text_stream;
  if (model.has_tokenizer()) text_stream.emplace(model.tokenizer());
  std::string generated_text;
  const auto show = [&](const std::string& piece) {
    if (o.json) return;
    std::fputs(piece.c_str(), stdout);
    std::fflush(stdout);
  };
  show(prompt_text);
  std::optional<double> first_token_at;
  int64_t ids_shown = 0;
  const double t_generate = now_seconds();
  const ding::GenerateResult result = ding::generate(
      session, sampler, prompt, {.max_new_tokens = o.max_new_tokens, .stop_strings = o.stop}, [&](ding::Token t) {
        if (!first_token_at) first_token_at = now_seconds();
        if (!text_stream) {  // no tokenizer: the ids, space separated
          show(fmt::format("{}{}", ids_shown++ > 0 ? " " : "", t));
          return true;
        }
        const std::string piece = text_stream->push(t);
        generated_text += piece;
        show(piece);
        return true;
      });
  const double generate_seconds = now_seconds() - t_generate;
  if (text_stream) {
    const std::string rest = text_stream->flush();
    generated_text += rest;
    show(rest);
  }
  show("\n");
  // Time to the first token: the prompt's prefill and the first sample. A first token that ends
  // generation (EOS) is not streamed; then generation was exactly those two steps.
  std::optional<double> ttft_seconds;
  if (!result.tokens.empty()) ttft_seconds = first_token_at ? *first_token_at - t_generate : generate_seconds;

  if (!o.json) ding::tools::check_stdout_written();  // before the summary: the error is then the only line
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const double peak_mib = double(usage.ru_maxrss) / 1024.0;
  const int64_t n_new = int64_t(result.tokens.size());
  const double prefill_tps = double(prompt.size()) / result.prefill_seconds;
  // The first token comes from the prefill's logits, so decode speed counts the n − 1 decode steps.
  const double decode_tps = n_new > 1 ? double(n_new - 1) / result.decode_seconds : 0.0;
  const double mib = 1.0 / double(1 << 20);
  const std::string dtype_used(ding::dtype_name(model.dtype()));
  const int threads = ding::cpu_threads();
  if (o.json) {
    nlohmann::json j = {{"model", dir},
                        {"backend", device.caps().backend},
                        {"device", device.caps().name},
                        {"dtype", dtype_used},
                        {"threads", threads},
                        {"seed", seed},
                        {"greedy", sampling.greedy},
                        {"temperature", sampling.options.temperature},
                        {"top_k", sampling.options.top_k},
                        {"top_p", sampling.options.top_p},
                        {"min_p", sampling.options.min_p},
                        {"repetition_penalty", sampling.options.repetition_penalty},
                        {"sampling_from_generation_config", sampling.from_model},
                        {"ctx_size", session.max_tokens()},
                        {"device_open_seconds", open_seconds},
                        {"load_seconds", load_seconds},
                        {"load_gbps", load_gbps},
                        {"weights_checked", !o.no_weight_check},
                        {"warm_up_seconds", warm_up_seconds},
                        {"ttft_seconds", ttft_seconds ? nlohmann::json(*ttft_seconds) : nlohmann::json()},
                        {"prompt_tokens", prompt.size()},
                        {"prompt_ids", prompt},
                        {"prefill_seconds", result.prefill_seconds},
                        {"prefill_tokens_per_second", prefill_tps},
                        {"generated_tokens", n_new},
                        {"generated_ids", result.tokens},
                        {"generated_text", text_stream ? nlohmann::json(generated_text) : nlohmann::json()},
                        {"decode_seconds", result.decode_seconds},
                        {"decode_tokens_per_second", decode_tps},
                        {"stop_reason", ding::stop_reason_name(result.reason)},
                        {"max_new_tokens", result.max_new_tokens},
                        {"clamped", result.clamped},
                        {"weights_bytes", model.weight_bytes()},
                        {"weights_quantized", model.quantized() ? nlohmann::json(ding::dtype_name(*model.quantized())) : nlohmann::json()},
                        {"kv_cache_bytes", session.kv_cache_bytes()},
                        {"activation_bytes", session.activation_bytes()},
                        {"peak_rss_bytes", usage.ru_maxrss * 1024},
                        {"rss_after_load_bytes", rss_after_load}};
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    ding::tools::check_stdout_written();
    return 0;
  }
  if (result.clamped)
    fmt::print(stderr, "note: -n {} clamped to {}: the context holds {} positions and the prompt uses {}\n",
               o.max_new_tokens, result.max_new_tokens, session.max_tokens(), prompt.size());
  fmt::print(stderr, "\n--- ding-run: {} on {} ({}), {}, {} CPU thread{}\n", dir, device.caps().backend,
             device.caps().name, dtype_used, threads, threads == 1 ? "" : "s");
  fmt::print(stderr, "load      {:.3f} s for {:.1f} MiB of weights{} = {:.2f} GB/s (device open {:.3f} s before it){}\n",
             load_seconds, double(model.weight_bytes()) * mib,
             model.quantized() ? fmt::format(" (projections{} {} with row scales)", o.quantize_lm_head ? " and LM head" : "",
                                             ding::dtype_name(*model.quantized()))
                               : "",
             load_gbps, open_seconds, o.no_weight_check ? "; values not checked (--no-weight-check)" : "");
  fmt::print(stderr, "warm-up   {:.2f} ms (a prefill chunk and decode steps run once before anything is timed)\n", warm_up_seconds * 1e3);
  fmt::print(stderr, "sampling  {}\n", describe(sampling));
  fmt::print(stderr, "prefill   {} tokens in {:.2f} ms = {:.1f} tok/s; time to first token {}\n", prompt.size(),
             result.prefill_seconds * 1e3, prefill_tps, ttft_seconds ? fmt::format("{:.2f} ms", *ttft_seconds * 1e3) : "-");
  fmt::print(stderr, "decode    {} tokens in {:.2f} ms = {:.1f} tok/s (stop: {})\n", n_new, result.decode_seconds * 1e3,
             decode_tps, ding::stop_reason_name(result.reason));
  const ding::ModelConfig& config = model.config();
  const int64_t run_tokens = int64_t(prompt.size()) + n_new;
  const ding::CacheSize cache = ding::model_cache_size(config, model.dtype());
  fmt::print(stderr, "cache     {:.0f} bytes per token over {} layers{}; {:.2f} MiB for this run's {} tokens; {:.2f} MiB "
                     "allocated for {} positions\n",
             cache.per_token, config.n_layer,
             cache.per_sequence > 0 ? fmt::format(" + {:.0f} bytes of recurrent state per sequence at any length",
                                                  cache.per_sequence)
                                    : "",
             ding::model_cache_bytes(config, model.dtype(), 1, run_tokens) * mib, run_tokens,
             double(session.kv_cache_bytes()) * mib, session.max_tokens());
  fmt::print(stderr, "memory    peak RSS {:.1f} MiB; activations {:.2f} MiB\n", peak_mib,
             double(session.activation_bytes()) * mib);
  return 0;
}

// One line, whatever the error: CLI11's messages may span several.
int fail(const std::string& message) { return ding::tools::fail("ding-run", message); }

}  // namespace

int main(int argc, char** argv) {
  // CUDA loads every kernel when the device opens instead of at its first launch, so no module
  // loading lands in the first, timed prefill. A value the user set is kept.
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);
  CLI::App app{"ding-run: generate text with a decoder model folder"};
  Options o;
  auto* model_dir = app.add_option("-m,--model", o.model_dir,
                                   "model folder (config.json, *.safetensors, tokenizer files); default: the shipped model");
  auto* prompt = app.add_option("-p,--prompt", o.prompt, "prompt text (default \"The\")");
  auto* file = app.add_option("-f,--file", o.prompt_file, "read the prompt from a file")->excludes(prompt);
  auto* tokens = app.add_option("--tokens", o.token_list,
                                "prompt as token ids, e.g. 464,2068,7586 (needed for a folder without a tokenizer)")
                     ->excludes(prompt)
                     ->excludes(file);
  app.add_option("-n,--max-new-tokens", o.max_new_tokens, "tokens to generate (default 128)")->check(ding::tools::at_least(0));
  app.add_option("-c,--ctx-size", o.ctx_size,
                 fmt::format("KV-cache positions (default: the model's context, at most {})", ding::SessionOptions::kDefaultContext))
      ->check(ding::tools::at_least(1));
  app.add_option("--backend", o.backend, "auto, cpu, ref, cuda, hip, kokkos (default auto)");
  app.add_option("--dtype", o.dtype, "compute dtype: f32, bf16, f16 (default: the checkpoint's on a GPU, f32 on the CPU)");
  app.add_flag("--quantize-lm-head", o.quantize_lm_head, "with --quantize: the LM head in 8 bits too (default: kept in --dtype)");
  app.add_option("--quantize", o.quantize,
                 "int8 or fp8: the layers' projection weights quantized at load to 8 bits with a scale per row "
                 "(activations stay in --dtype)");
  auto* temp = app.add_option("--temp", o.sampler.temperature, "temperature (0 = greedy)");
  auto* top_k = app.add_option("--top-k", o.sampler.top_k, "top-k (0 = off)");
  auto* top_p = app.add_option("--top-p", o.sampler.top_p, "top-p (1 = off)");
  auto* min_p = app.add_option("--min-p", o.sampler.min_p, "min-p (0 = off)");
  auto* penalty = app.add_option("--repeat-penalty", o.sampler.repetition_penalty, "repetition penalty (1 = off)");
  auto* seed = app.add_option("--seed", o.seed, "sampling seed, an integer from 0 to 2^64 - 1 (default: random, printed)");
  app.add_flag("--greedy", o.greedy, "always take the most likely token");
  app.add_option("--stop", o.stop, "stop when the generated text contains this (repeatable)");
  app.add_option("--logits-out", o.logits_out, "write the f32 logits of every prompt position [n_prompt, V] to FILE");
  app.add_flag("--json", o.json, "print one JSON object (summary, ids, text) instead of streaming text");
  app.add_option("--threads", o.threads, "CPU threads (default: all cores)")->check(ding::tools::at_least(1));
  app.add_flag("--no-graphs", o.no_graphs, "run each decode step op by op instead of replaying a recorded CUDA graph");
  app.add_flag("--no-weight-check", o.no_weight_check,
               "do not check the weights for NaN, Inf and values beyond the compute dtype while loading (a trusted folder)");
  app.set_version_flag("--version", fmt::format("ding-run {} (backends: {})", ding::kVersion,
                                                fmt::join(ding::registry::compiled_backends(), ", ")));
  app.footer(fmt::format("Sampling flags not given take the model's generation_config.json (do_sample false: greedy), "
                         "else temperature {:g}, top-k {}, top-p {:g}.",
                         kDefaultSampling.temperature, kDefaultSampling.top_k, kDefaultSampling.top_p));
  if (const std::optional<int> stop = ding::tools::parse_command_line(app, argc, argv, "ding-run")) return *stop;
  o.seed_given = seed->count() > 0;
  o.model_given = model_dir->count() > 0;
  o.tokens_given = tokens->count() > 0;
  const SamplingFlags given{.temperature = temp->count() > 0, .top_k = top_k->count() > 0, .top_p = top_p->count() > 0,
           .min_p = min_p->count() > 0, .repetition_penalty = penalty->count() > 0};
  try {
    return run(o, given);
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}
