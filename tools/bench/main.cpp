// ding-bench: op and model benchmarks with a roofline column.
//   ding-bench ops [--backend cpu] [--op matmul] [--filter TEXT[|TEXT…]]… [--all] [--threads N] [--matmul ding|cublas]
//   ding-bench model [--shape gpt2-xl|llama-3.2-1b|... | -m DIR] [--prompt 256] [--new 256] [--batch 1] (model_bench.h)
//   ding-bench cache [--backend cuda] [--contexts 4096 32768] (cache_bench.h: MHA, GQA, MQA, MLA side by side)
// `ops` runs the op cases of tests/ops in perf mode: median time per case, achieved GB/s and GFLOP/s
// from the op's cost model, and the share of the roofline min(peak FLOP/s, AI × bandwidth)
// reached, with both ceilings measured in this process and printed with how they were measured.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <iostream>
#include <string>
#include <vector>

#include "../cli_checks.h"
#include "../gpu_tuning.h"
#include "cache_bench.h"
#include "ceilings.h"
#include "load_bench.h"
#include "ding/threads.h"
#include "model_bench.h"
#include "perplexity.h"
#include "op_cases.h"
#ifdef DING_HAVE_CUDA
#include "cublas_matmul.h"
#endif

namespace ding::bench {
namespace {

struct OpsOptions {
  std::string backend = "cpu";
  std::string op;
  std::vector<std::string> filters;  // a case must match each; a filter matches if one of its |-separated texts is in the name
  bool all = false;
  bool warm = false;
  bool graphs = true;
  double min_time = 0.3;
  std::string matmul = "ding";  // who computes matmul on cuda: ding's kernels or cuBLAS
};

// Copies of a case's tensors to rotate through so that they come from memory, not the
// last-level cache, as a model's weights do in decode: the bytes one call touches, summed over
// the copies, reach 3 × LLC; the copies allocate at most 1.5 GiB and number at most 64.
int cold_copies(const Caps& caps, double touched_bytes, double allocated_bytes) {
  if (touched_bytes <= 0 || allocated_bytes <= 0) return 1;
  const double wanted = 3.0 * double(caps.llc_bytes) / touched_bytes;
  const double affordable = 1.5 * double(size_t(1) << 30) / allocated_bytes;
  return int(std::clamp(std::ceil(std::min(wanted, affordable)), 1.0, 64.0));
}

std::string human_bytes(size_t bytes) {
  if (bytes >= (size_t(1) << 30)) return fmt::format("{:.1f} GiB", double(bytes) / double(1 << 30));
  return fmt::format("{} MiB", bytes >> 20);
}

// --matmul: cuBLAS instead of ding's matmul kernels, on a cuda device only.
void choose_matmul_path(Device& device, const std::string& path) {
  if (path == "ding" && device.caps().backend != "cuda") return;
#ifdef DING_HAVE_CUDA
  if (device.caps().backend == "cuda") {
    ding::gpu::set_matmul_override(device, path == "cublas" ? make_cublas_matmul() : nullptr);
    return;
  }
#endif
  throw Error(ErrorCode::invalid_argument, fmt::format("--matmul {} needs a cuda device (backend is {})", path, device.caps().backend));
}

bool matches(const std::string& name, const std::vector<std::string>& filters) {
  for (const std::string& filter : filters) {
    bool any = false;
    for (size_t from = 0; from <= filter.size() && !any;) {
      const size_t bar = std::min(filter.find('|', from), filter.size());
      any = name.find(filter.substr(from, bar - from)) != std::string::npos;
      from = bar + 1;
    }
    if (!any) return false;
  }
  return true;
}

int run_ops(const OpsOptions& o) {
  Device& device = Device::open(o.backend);
  ding::tools::apply_gpu_tuning_from_environment(device);
  const Caps& caps = device.caps();
  choose_matmul_path(device, o.matmul);
  fmt::print("ding-bench ops: backend {} — {}, last-level cache {}, {} CPU threads\n", caps.backend, caps.name,
             human_bytes(caps.llc_bytes), cpu_threads());
  if (o.matmul != "ding")
    fmt::print("matmul through {} where it takes the call (plain products); ding's kernels otherwise\n", o.matmul);
  const Ceilings ceil = measure_ceilings(device);
  fmt::print("ceilings (measured now, best of repeated runs): bandwidth {:.1f} GB/s ({}); compute {:.1f} GFLOP/s ({})\n", ceil.bandwidth_gbs,
             ceil.bandwidth_how, ceil.gflops, ceil.gflops_how);
  fmt::print("roof% = time the roofline allows (max of bytes/bandwidth, FLOPs/compute) / measured time\n");
  fmt::print("{}\n", o.warm ? "warm: each case reuses one set of tensors, which may stay in cache"
                              : "cold: each case rotates through copies of its tensors (≥ 3 × LLC) so they come from memory");
  if (o.graphs && device.default_stream().supports_graphs())
    fmt::print("timed: a batch of back-to-back calls (every copy at least once) recorded as one graph and replayed\n");
  fmt::print("\n");
  fmt::print("{:<60} {:>10} {:>9} {:>9} {:>8} {:>5} {:>6}\n", "case", "median ms", "GB/s", "GFLOP/s", "FLOP/B", "bound",
             "roof%");
  int ran = 0;
  for (const testing::OpCase& c : testing::all_op_cases()) {
    if (!o.op.empty() && c.op != o.op) continue;
    if (!matches(c.name, o.filters)) continue;
    if (!c.in_bench || (c.in_tests && !o.all)) continue;
    std::vector<std::unique_ptr<testing::CaseRun>> runs;
    try {
      runs.push_back(std::make_unique<testing::CaseRun>(device, 1234));
      c.build(*runs[0]);
      const int copies = o.warm ? 1 : cold_copies(caps, runs[0]->cost.bytes, double(runs[0]->allocated_bytes()));
      while (int(runs.size()) < copies) {
        runs.push_back(std::make_unique<testing::CaseRun>(device, 1234 + runs.size()));
        c.build(*runs.back());
      }
      for (auto& r : runs) r->poison_outputs();
    } catch (const Error& e) {
      fmt::print("{:<60} skipped: {}\n", c.name, e.what());
      continue;
    }
    size_t next = 0;
    // Timed on the stream's clock (events on a GPU): the op alone, not the launch and the sync.
    const double seconds = time_stream_calls(
        device.default_stream(),
        [&] {
          testing::CaseRun& r = *runs[next++ % runs.size()];
          r.launch(r.stream);
        },
        2, 5, o.min_time, o.graphs, int(runs.size())).median;
    const Cost& cost = runs[0]->cost;
    const double gbs = cost.bytes / seconds * 1e-9, gflops = cost.flops / seconds * 1e-9;
    const double memory_time = cost.bytes / (ceil.bandwidth_gbs * 1e9), compute_time = cost.flops / (ceil.gflops * 1e9);
    const double roof_time = std::max(memory_time, compute_time);
    fmt::print("{:<60} {:>10.4f} {:>9.2f} {:>9.2f} {:>8.2f} {:>5} {:>5.0f}%{}{}\n", c.name, seconds * 1e3, gbs, gflops,
               cost.bytes > 0 ? cost.flops / cost.bytes : 0.0, memory_time >= compute_time ? "mem" : "flop",
               roof_time / seconds * 100.0, runs[0]->note.empty() ? "" : "  ", runs[0]->note);
    std::fflush(stdout);
    ++ran;
  }
  if (ran == 0) {
    fmt::print(stderr, "ding-bench: no case matched (op '{}', filters '{}'{})\n", o.op, fmt::join(o.filters, "' '"),
               o.all ? "" : ", try --all");
    return 2;
  }
  return 0;
}

}  // namespace
}  // namespace ding::bench

int main(int argc, char** argv) {
  CLI::App app{"ding-bench: op and model benchmarks with a roofline column"};
  app.require_subcommand(1);
  ding::bench::OpsOptions ops;
  int threads = 0;
  CLI::App* ops_cmd = app.add_subcommand("ops", "time every op case on a backend against measured ceilings");
  ops_cmd->add_option("--backend", ops.backend, "backend: cpu, ref, cuda, ... (default cpu)");
  ops_cmd->add_option("--op", ops.op, "only this op (a name from ops/op_list.h)");
  ops_cmd->add_option("--filter", ops.filters,
                      "only cases whose name contains this text (A|B: either; repeated: every filter must match)");
  ops_cmd->add_flag("--all", ops.all, "also time the small parity-test cases, not only the benchmark shapes");
  ops_cmd->add_flag("--warm", ops.warm, "reuse one set of tensors (cache-resident) instead of rotating through copies");
  ops_cmd->add_flag("!--no-graphs", ops.graphs, "time calls as enqueued from the host instead of replaying a recorded batch");
  ops_cmd->add_option("--min-time", ops.min_time, "seconds to spend timing each case (default 0.3)")->check(CLI::PositiveNumber);
  ops_cmd->add_option("--threads", threads, "CPU threads (default: all cores)")->check(ding::tools::at_least(1));
  ops_cmd->add_option("--matmul", ops.matmul, "cuda: matmul by ding's kernels or by cuBLAS, for comparison (default ding)")
      ->check(CLI::IsMember({"ding", "cublas"}));
  ding::bench::ModelBenchOptions model;
  CLI::App* model_cmd = app.add_subcommand("model", "prefill + decode a named shape (random weights) or a model folder");
  model_cmd->add_option("--shape", model.shape, fmt::format("{} (default gpt2-xl)", ding::bench::model_shape_names()));
  model_cmd->add_option("-m,--model", model.model_dir, "a model folder instead of a named shape");
  model_cmd->add_option("--positions", model.positions,
                        "named shapes: positions the model has (default: its config's; GPT-2's 1024 are learned, raise "
                        "them for long contexts)")
      ->check(ding::tools::at_least(1));
  model_cmd->add_option("--backend", model.backend, "backend (default auto)");
  model_cmd->add_option("--dtype", model.dtype, "f32, bf16, f16 (default bf16)");
  model_cmd->add_option("--quantize", model.quantize, "int8 or fp8: the projection weights in 8 bits with row scales");
  model_cmd->add_flag("--quantize-lm-head", model.quantize_lm_head, "with --quantize: the LM head in 8 bits too");
  model_cmd->add_flag("--paired", model.paired,
                      "with --quantize: also load the model unquantized and time the two a decode step each in turn "
                      "(their ratio then does not depend on the machine's state between runs)");
  model_cmd->add_option("--prompt", model.prompt, "prompt tokens (default 256)");
  model_cmd->add_option("--new", model.new_tokens, "generated tokens (default 256)");
  model_cmd->add_option("--batch", model.batch, "sequences decoded together (default 1)");
  model_cmd->add_option("--prefill-chunk", model.prefill_chunk,
                        "prompt tokens per prefill step, as a Session takes them (default: the whole prompt at once)")
      ->check(ding::tools::at_least(1));
  CLI::Option* profile =
      model_cmd->add_flag("--profile", model.profile, "also print a per-op time profile of the prefill and of decode steps");
  model_cmd->add_flag("--profile-by-bytes", model.profile_by_bytes,
                      "with --profile: each op's calls apart by the bytes they move (a layer's products, each on its own row)")
      ->needs(profile);
  model_cmd->add_option("--skip-op", model.skip_ops,
                        "an op (ops/op_list.h) not run at all, its outputs left as they were: the step's time without "
                        "it, timing only (repeatable)");
  model_cmd->add_flag("!--no-graphs", model.graphs, "decode op by op instead of replaying recorded CUDA graphs");
  model_cmd->add_option("--threads", threads, "CPU threads (default: all cores)")->check(ding::tools::at_least(1));
  ding::bench::LoadBenchOptions load;
  CLI::App* load_cmd = app.add_subcommand("load", "time weight upload (upload_weights) from a folder's safetensors");
  load_cmd->add_option("-m,--model", load.model_dir, "the model folder")->required();
  load_cmd->add_option("--backend", load.backend, "backend (default cpu)");
  load_cmd->add_option("--dtype", load.dtype, "compute dtype: f32, f16, bf16 (default f32)");
  load_cmd->add_option("--repeat", load.repeat, "loads to time (default 5)")->check(CLI::PositiveNumber);
  load_cmd->add_option("--chunk-mib", load.chunk_mib, "pipeline chunk in MiB (default 32)")->check(CLI::PositiveNumber);
  load_cmd->add_option("--write-gpt2", load.write_gpt2, "first write random weights of this GPT-2 shape (gpt2 … gpt2-xl) into the folder");
  load_cmd->add_option("--stored", load.stored, "dtype --write-gpt2 stores: f32, f16, bf16 (default f16)");
  load_cmd->add_flag("--no-weight-check", load.no_weight_check, "do not check the stored values (NaN, Inf, overflow)");
  load_cmd->add_option("--threads", threads, "CPU threads (default: all cores)")->check(ding::tools::at_least(1));
  ding::bench::CacheBenchOptions cache;
  CLI::App* cache_cmd = app.add_subcommand("cache", "cache bytes (per token and per sequence) and decode tok/s of MHA, GQA, MQA, MLA, Gated DeltaNet and a 3:1 hybrid at equal size");
  cache_cmd->add_option("--backend", cache.backend, "backend (default auto)");
  cache_cmd->add_option("--dtype", cache.dtype, "f32, bf16, f16 (default bf16)");
  cache_cmd->add_option("--contexts", cache.contexts, "context lengths to decode at (default 4096 32768)")
      ->check(CLI::PositiveNumber);
  cache_cmd->add_option("--layers", cache.layers, "layers of every model (default 27, DeepSeek-V2-Lite's)")->check(CLI::PositiveNumber);
  cache_cmd->add_option("--width", cache.width, "model width, 128 per head (default 2048)")->check(ding::tools::at_least(128));
  cache_cmd->add_option("--steps", cache.steps, "decode steps timed per context (default 32)")->check(CLI::PositiveNumber);
  cache_cmd->add_option("--threads", threads, "CPU threads (default: all cores)")->check(ding::tools::at_least(1));
  ding::bench::PerplexityOptions ppl;
  CLI::App* ppl_cmd = app.add_subcommand("perplexity", "a model folder's perplexity on the last part of a text file, in windows");
  ppl_cmd->add_option("-m,--model", ppl.model_dir, "the model folder (with its tokenizer)")->required();
  ppl_cmd->add_option("-f,--file", ppl.file, "the text")->required();
  ppl_cmd->add_option("--tail", ppl.tail, "the last fraction of the text's tokens to score (default 0.05)");
  ppl_cmd->add_option("--window", ppl.window, "tokens per window, each from an empty cache (default 256)");
  ppl_cmd->add_option("--backend", ppl.backend, "backend (default auto)");
  ppl_cmd->add_option("--dtype", ppl.dtype, "f32, bf16, f16 (default f32)");
  ppl_cmd->add_option("--quantize", ppl.quantize, "int8 or fp8: the projection weights in 8 bits with row scales");
  ppl_cmd->add_flag("--quantize-lm-head", ppl.quantize_lm_head, "with --quantize: the LM head in 8 bits too");
  ppl_cmd->add_option("--threads", threads, "CPU threads (default: all cores)")->check(ding::tools::at_least(1));
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string line = e.what();
    std::replace(line.begin(), line.end(), '\n', ' ');
    std::cerr << "ding-bench: error: " << line << "\n";
    return 1;
  }
  if (ops_cmd->parsed() && !ops.op.empty()) {
    bool known = false;
    for (const char* name : ding::ops::kOpNames) known |= ops.op == name;
    if (!known) {
      std::cerr << "ding-bench: error: unknown op '" << ops.op << "' (see ops/op_list.h)\n";
      return 1;
    }
  }
  try {
    if (threads > 0) ding::set_cpu_threads(threads);  // before any device opens
    const int status = model_cmd->parsed()   ? ding::bench::run_model(model)
                       : load_cmd->parsed()  ? ding::bench::run_load(load)
                       : cache_cmd->parsed() ? ding::bench::run_cache(cache)
                       : ppl_cmd->parsed()   ? ding::bench::run_perplexity(ppl)
                                             : ding::bench::run_ops(ops);
    ding::tools::check_stdout_written();
    return status;
  } catch (const std::exception& e) {
    std::cerr << "ding-bench: error: " << e.what() << "\n";
    return 1;
  }
}
