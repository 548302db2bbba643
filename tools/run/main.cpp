// ding-run: generate text with a model folder (default: the model shipped in the repo).
//   ding-run [-m DIR] [-p PROMPT | -f FILE | --tokens 1,2,3] [-n N] [--backend auto|cpu|...]
//            [--dtype f32|bf16|f16] [--temp T] [--top-k K] [--top-p P] [--min-p P]
//            [--repeat-penalty R] [--seed S] [--greedy] [--stop TEXT] [--logits-out FILE] [--json]
// Text streams to stdout as it is generated; the summary (load time, prefill and decode speed,
// memory, KV-cache size) goes to stderr, or with --json everything is one JSON object on stdout.
#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ding/ding.h"
#include "ding/models/generate.h"


namespace {

struct Options {
  std::string model_dir;
  std::string prompt = "The";
  std::string prompt_file;
  std::string token_list;
  int64_t max_new_tokens = 128;
  std::string backend = "auto";
  std::string dtype = "f32";
  ding::SamplerOptions sampler{.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .seed = 0};
  bool greedy = false;
  bool json = false;
  std::vector<std::string> stop;
  std::string logits_out;
  int threads = 0;
  bool no_graphs = false;
};

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The shipped model: next to the installed binary's data dir, or in the source tree.
std::string default_model_dir() {
  for (const char* dir : {DING_INSTALLED_MODEL_DIR, DING_SOURCE_MODEL_DIR})
    if (std::ifstream(std::string(dir) + "/config.json")) return dir;
  throw ding::Error(ding::ErrorCode::io, fmt::format("no default model found in {} or {}; pass -m DIR",
                                                     DING_INSTALLED_MODEL_DIR, DING_SOURCE_MODEL_DIR));
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

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ding::Error(ding::ErrorCode::io, fmt::format("-f {}: cannot open", path));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

int run(const Options& o) {
  const double t_start = now_seconds();
  ding::Device& device = ding::Device::open(o.backend);
  const std::string dir = o.model_dir.empty() ? default_model_dir() : o.model_dir;
  const bool show_progress = !o.json && isatty(STDERR_FILENO);
  ding::LoadOptions load{.dtype = parse_dtype(o.dtype)};
  load.progress = [&](size_t done, size_t total) {
    if (show_progress && total > (size_t(64) << 20))
      fmt::print(stderr, "\rloading {}: {:3.0f}%", dir, 100.0 * double(done) / double(total));
  };
  ding::Model model = ding::Model::load(dir, device, load);
  if (show_progress) fmt::print(stderr, "\r\033[K");
  const double load_seconds = now_seconds() - t_start;

  std::vector<ding::Token> prompt;
  std::string prompt_text;
  if (!o.token_list.empty()) {
    prompt = parse_token_list(o.token_list, model.config().vocab_size);
  } else {
    prompt_text = o.prompt_file.empty() ? o.prompt : read_file(o.prompt_file);
    prompt = model.tokenizer().encode(prompt_text, {.strict_utf8 = true});
    if (prompt.empty()) throw ding::Error(ding::ErrorCode::invalid_argument, "the prompt is empty");
  }
  ding::Session session(model, {.max_batch = 1, .graphs = !o.no_graphs});
  if (int64_t(prompt.size()) > session.max_tokens())
    throw ding::Error(ding::ErrorCode::invalid_argument,
                      fmt::format("the prompt has {} tokens but the model's context is {}", prompt.size(), session.max_tokens()));

  if (!o.logits_out.empty()) {  // every prompt position's logits, f32 little-endian [n_prompt, V]
    std::vector<float> all;
    session.prefill(0, prompt, &all);
    std::ofstream out(o.logits_out, std::ios::binary);
    out.write(reinterpret_cast<const char*>(all.data()), std::streamsize(all.size() * sizeof(float)));
    if (!out) throw ding::Error(ding::ErrorCode::io, fmt::format("--logits-out {}: cannot write", o.logits_out));
  }

  ding::SamplerOptions sampler_options = o.sampler;
  if (o.greedy) sampler_options.temperature = 0.0f;
  ding::Sampler sampler(sampler_options);
  ding::TextStream text_stream(model.tokenizer());
  std::string generated_text;
  if (!o.json) std::fputs(prompt_text.c_str(), stdout);
  const ding::GenerateResult result = ding::generate(
      session, sampler, prompt, {.max_new_tokens = o.max_new_tokens, .stop_strings = o.stop}, [&](ding::Token t) {
        const std::string piece = text_stream.push(t);
        generated_text += piece;
        if (!o.json) {
          std::fputs(piece.c_str(), stdout);
          std::fflush(stdout);
        }
        return true;
      });
  const std::string rest = text_stream.flush();
  generated_text += rest;
  if (!o.json) std::fputs((rest + "\n").c_str(), stdout);

  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const double peak_mib = double(usage.ru_maxrss) / 1024.0;
  const int64_t n_new = int64_t(result.tokens.size());
  const double prefill_tps = double(prompt.size()) / result.prefill_seconds;
  // The first token comes from the prefill's logits, so decode speed counts the n − 1 decode steps.
  const double decode_tps = n_new > 1 ? double(n_new - 1) / result.decode_seconds : 0.0;
  const double mib = 1.0 / double(1 << 20);
  if (o.json) {
    nlohmann::json j = {{"model", dir},
                        {"backend", device.caps().backend},
                        {"device", device.caps().name},
                        {"dtype", o.dtype},
                        {"load_seconds", load_seconds},
                        {"prompt_tokens", prompt.size()},
                        {"prompt_ids", prompt},
                        {"prefill_seconds", result.prefill_seconds},
                        {"prefill_tokens_per_second", prefill_tps},
                        {"generated_tokens", n_new},
                        {"generated_ids", result.tokens},
                        {"generated_text", generated_text},
                        {"decode_seconds", result.decode_seconds},
                        {"decode_tokens_per_second", decode_tps},
                        {"stop_reason", ding::stop_reason_name(result.reason)},
                        {"max_new_tokens", result.max_new_tokens},
                        {"clamped", result.clamped},
                        {"weights_bytes", model.weight_bytes()},
                        {"kv_cache_bytes", session.kv_cache_bytes()},
                        {"activation_bytes", session.activation_bytes()},
                        {"peak_rss_bytes", usage.ru_maxrss * 1024}};
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    if (result.clamped)
      fmt::print(stderr, "note: -n {} clamped to {}: the context holds {} positions and the prompt uses {}\n",
                 o.max_new_tokens, result.max_new_tokens, session.max_tokens(), prompt.size());
    fmt::print(stderr, "\n--- ding-run: {} on {} ({}), {}\n", dir, device.caps().backend, device.caps().name, o.dtype);
    fmt::print(stderr, "load      {:.3f} s ({:.1f} MiB of weights)\n", load_seconds, double(model.weight_bytes()) * mib);
    fmt::print(stderr, "prefill   {} tokens in {:.2f} ms = {:.1f} tok/s\n", prompt.size(), result.prefill_seconds * 1e3, prefill_tps);
    fmt::print(stderr, "decode    {} tokens in {:.2f} ms = {:.1f} tok/s (stop: {})\n", n_new, result.decode_seconds * 1e3,
               decode_tps, ding::stop_reason_name(result.reason));
    fmt::print(stderr, "memory    peak RSS {:.1f} MiB; KV cache {:.2f} MiB ({} layers x 2 x {} positions x {} kv heads x {}), "
                       "activations {:.2f} MiB\n",
               peak_mib, double(session.kv_cache_bytes()) * mib, model.config().n_layer, session.max_tokens(),
               model.config().n_kv_head, model.config().d_head, double(session.activation_bytes()) * mib);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ding-run: generate text with a GPT-family model folder"};
  Options o;
  app.add_option("-m,--model", o.model_dir, "model folder (config.json, *.safetensors, tokenizer); default: the shipped model");
  auto* prompt = app.add_option("-p,--prompt", o.prompt, "prompt text (default \"The\")");
  auto* file = app.add_option("-f,--file", o.prompt_file, "read the prompt from a file")->excludes(prompt);
  app.add_option("--tokens", o.token_list, "prompt as token ids, e.g. 464,2068,7586")->excludes(prompt)->excludes(file);
  app.add_option("-n,--max-new-tokens", o.max_new_tokens, "tokens to generate (default 128)")->check(CLI::NonNegativeNumber);
  app.add_option("--backend", o.backend, "auto, cpu, ref, cuda, hip, kokkos (default auto)");
  app.add_option("--dtype", o.dtype, "compute dtype: f32, bf16, f16 (default f32)");
  app.add_option("--temp", o.sampler.temperature, "temperature (default 0.8; 0 = greedy)");
  app.add_option("--top-k", o.sampler.top_k, "top-k (default 40; 0 = off)");
  app.add_option("--top-p", o.sampler.top_p, "top-p (default 0.95; 1 = off)");
  app.add_option("--min-p", o.sampler.min_p, "min-p (default 0 = off)");
  app.add_option("--repeat-penalty", o.sampler.repetition_penalty, "repetition penalty (default 1 = off)");
  app.add_option("--seed", o.sampler.seed, "sampling seed (default 0)");
  app.add_flag("--greedy", o.greedy, "always take the most likely token");
  app.add_option("--stop", o.stop, "stop when the generated text contains this (repeatable)");
  app.add_option("--logits-out", o.logits_out, "write the f32 logits of every prompt position [n_prompt, V] to FILE");
  app.add_flag("--json", o.json, "print one JSON object (summary, ids, text) instead of streaming text");
  app.add_option("--threads", o.threads, "CPU threads (default: all cores)")->check(CLI::PositiveNumber);
  app.add_flag("--no-graphs", o.no_graphs, "run each decode step op by op instead of replaying a recorded CUDA graph");
  CLI11_PARSE(app, argc, argv);
  if (o.threads > 0) setenv("OMP_NUM_THREADS", std::to_string(o.threads).c_str(), 1);
  try {
    return run(o);
  } catch (const ding::Error& e) {
    std::fflush(stdout);
    fmt::print(stderr, "ding-run: error: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "ding-run: error: {}\n", e.what());
    return 1;
  }
}
