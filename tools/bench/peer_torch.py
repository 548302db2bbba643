#!/usr/bin/env python3
"""The best PyTorch stack we know for GPT-2, Llama, OLMoE and DeepSeek-V2 decode (issues 5, 17, 20), on ding-bench model's shapes.

Hugging Face GPT2LMHeadModel or LlamaForCausalLM in bf16 on cuda with sdpa attention and a StaticCache
sized prompt + new; prefill timed after a warm-up; decode as a hand-written greedy loop whose one-token
step (model forward + argmax) is torch.compile(mode="reduce-overhead", fullgraph=True), which
replays it as a CUDA graph. Timed with CUDA events after warm-up. Prints lines shaped like
ding-bench model's, so tools/bench/compare_table.py reads both:

  prefill   256 tokens x 1: 23.70 ms per sequence = 10801.7 tok/s
  decode    256 steps x batch 1: 2.825 ms/step = 354.0 tok/s

  tools/bench/peer_torch.py [--shape gpt2-xl | --shape llama-3.2-1b | --model DIR] [--prompt 256] [--new 256] [--batch 1]

The mixture-of-experts shapes (olmoe-1b-7b, deepseek-v2-lite) run their experts through transformers'
--experts implementation (grouped_mm by default; eager, its loop over experts, does not compile
fullgraph); --eager times the decode step without torch.compile where it does not compile.

Every decode run (compilation, warm-ups, the timed one) starts from cache.reset() and a prefill of
positions 0 .. P-1, and steps at P, P+1, ...: later transformers 5.x StaticCaches write at their own
counter (advanced by every forward, zeroed by reset) and ignore cache_position, so a warm-up between
the prefill and the timed decode pushed the timed steps past the cache's last slot (a device-side
index assert). The cache is sized prompt + new exactly; on any exception the script says which phase
failed.

Random weights of a named shape need no download (the GPU machine has no network): a Llama shape is
built from its config.json fields (never from_pretrained of a hub name); --model loads a local folder
(config.json + weights) of either family instead. Prefill runs eager (the batch's B prompts in one
call; "per sequence" is that call's time / B, where ding-bench prefills sequence by sequence).
"""
import argparse
import inspect
import os
import sys
import time
import traceback

SHAPES = {  # layers, heads, width: the GPT-2 family as released, as in tools/bench/model_bench.cpp
    "gpt2": (12, 12, 768),
    "gpt2-medium": (24, 16, 1024),
    "gpt2-large": (36, 20, 1280),
    "gpt2-xl": (48, 25, 1600),
}

# The config.json of each Llama shape as Hugging Face publishes it, as in tools/bench/model_bench.cpp
# (read by LlamaConfig.from_dict, as from_pretrained reads the file: any transformers version turns
# rope_scaling and rope_theta into its own form).
LLAMA_COMMON = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "initializer_range": 0.02,
    "max_position_embeddings": 131072, "mlp_bias": False, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0, "torch_dtype": "bfloat16", "use_cache": True, "vocab_size": 128256,
}
LLAMA_SHAPES = {
    "llama-3.2-1b": {**LLAMA_COMMON, "head_dim": 64, "hidden_size": 2048, "intermediate_size": 8192,
                     "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
                     "tie_word_embeddings": True,
                     "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                      "original_max_position_embeddings": 8192, "rope_type": "llama3"}},
    "llama-3.1-8b": {**LLAMA_COMMON, "hidden_size": 4096, "intermediate_size": 14336,
                     "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
                     "tie_word_embeddings": False,
                     "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                      "original_max_position_embeddings": 8192, "rope_type": "llama3"}},
}


# Mixture-of-experts shapes, config.json as Hugging Face publishes them (as in tools/bench/model_bench.cpp),
# built by AutoConfig.for_model; their experts run through transformers' --experts implementation.
MOE_SHAPES = {
    "olmoe-1b-7b": {"model_type": "olmoe", "attention_bias": False, "clip_qkv": None, "eos_token_id": 50279,
                    "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 1024,
                    "max_position_embeddings": 4096, "norm_topk_prob": False, "num_attention_heads": 16,
                    "num_experts": 64, "num_experts_per_tok": 8, "num_hidden_layers": 16, "num_key_value_heads": 16,
                    "pad_token_id": 1, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "tie_word_embeddings": False,
                    "vocab_size": 50304},
    "deepseek-v2-lite": {"model_type": "deepseek_v2", "attention_bias": False, "bos_token_id": 100000,
                         "eos_token_id": 100001, "first_k_dense_replace": 1, "hidden_act": "silu", "hidden_size": 2048,
                         "intermediate_size": 10944, "kv_lora_rank": 512, "max_position_embeddings": 163840,
                         "moe_intermediate_size": 1408, "moe_layer_freq": 1, "n_group": 1, "n_routed_experts": 64,
                         "n_shared_experts": 2, "norm_topk_prob": False, "num_attention_heads": 16,
                         "num_experts_per_tok": 6, "num_hidden_layers": 27, "num_key_value_heads": 16,
                         "q_lora_rank": None, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06,
                         "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707,
                                          "mscale_all_dim": 0.707, "original_max_position_embeddings": 4096,
                                          "type": "yarn"},
                         "rope_theta": 10000, "routed_scaling_factor": 1.0, "scoring_func": "softmax",
                         "tie_word_embeddings": False, "topk_group": 1, "topk_method": "greedy", "v_head_dim": 128,
                         "vocab_size": 102400},
}


def fail(message):
    print(f"peer_torch: {message}", file=sys.stderr)
    sys.exit(1)


def random_model(model_class, config, args, torch):
    """Random weights of a named shape, drawn on the GPU (1.5 to 8 G parameters take minutes on a CPU) in
    the config's dtype (a Llama config says bf16: 8 G parameters in f32 would be 32 GB)."""
    torch.manual_seed(args.seed)
    with torch.device("cuda"):
        try:
            return model_class._from_config(config, attn_implementation="sdpa")
        except (TypeError, AttributeError):  # a transformers without it: set it on the config
            config._attn_implementation = "sdpa"
            return model_class(config)


def build_model(args, torch, transformers, dtype):
    from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    if args.model:  # a GPT-2 or Llama folder: the class its config.json names
        try:
            model = AutoModelForCausalLM.from_pretrained(args.model, attn_implementation="sdpa")
        except TypeError:  # an older transformers without the keyword
            model = AutoModelForCausalLM.from_pretrained(args.model)
        source = args.model
    elif args.shape in MOE_SHAPES:
        from transformers import AutoConfig
        fields = dict(MOE_SHAPES[args.shape])
        config = AutoConfig.for_model(fields.pop("model_type"), **fields)
        config.torch_dtype = dtype  # drawn on the GPU in bf16: 16 G parameters in f32 would not fit
        torch.set_default_dtype(dtype)
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING
        model = random_model(MODEL_FOR_CAUSAL_LM_MAPPING[type(config)], config, args, torch)
        torch.set_default_dtype(torch.float32)
        if hasattr(model, "set_experts_implementation"):
            model.set_experts_implementation(args.experts)
        source = f"{args.shape} shape, random weights, experts {args.experts}"
    elif args.shape in LLAMA_SHAPES:
        model = random_model(LlamaForCausalLM, LlamaConfig.from_dict(LLAMA_SHAPES[args.shape]), args, torch)
        source = f"{args.shape} shape, random weights"
    else:
        layers, heads, width = SHAPES[args.shape]
        config = GPT2Config(n_layer=layers, n_head=heads, n_embd=width, n_positions=1024, vocab_size=50257,
                            bos_token_id=50256, eos_token_id=50256)
        model = random_model(GPT2LMHeadModel, config, args, torch)
        source = f"{args.shape} shape, random weights"
    if getattr(model.config, "_attn_implementation", None) != "sdpa" and hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation("sdpa")
    model = model.to(device="cuda", dtype=dtype).eval()
    model.requires_grad_(False)
    attn = getattr(model.config, "_attn_implementation", "?")
    if attn != "sdpa":
        fail(f"attention implementation is '{attn}', not sdpa (transformers {transformers.__version__})")
    return model, source


def make_static_cache(model, batch, max_len, dtype, torch, transformers):
    """StaticCache across transformers versions: 5.x takes (config, max_cache_len) and sizes batch,
    device and dtype from the first update; 4.x wanted them up front under varying names."""
    from transformers import StaticCache

    params = inspect.signature(StaticCache.__init__).parameters
    wanted = {
        "config": model.config,
        "max_cache_len": max_len,
        "max_batch_size": batch,  # 4.4x
        "batch_size": batch,      # 4.3x
        "device": "cuda",
        "dtype": dtype,
    }
    kwargs = {k: v for k, v in wanted.items() if k in params}
    if "config" not in kwargs or "max_cache_len" not in kwargs:
        fail(f"StaticCache{inspect.signature(StaticCache.__init__)} in transformers {transformers.__version__} takes "
             "neither config nor max_cache_len: this script knows the 4.x and 5.x constructors only")
    try:
        return StaticCache(**kwargs)
    except Exception as e:  # noqa: BLE001 - reported with what was tried
        fail(f"StaticCache({', '.join(kwargs)}) failed in transformers {transformers.__version__}: {e}")


def cache_tensors(cache, torch):
    """The cache's 4-D key/value tensors, wherever this transformers keeps them (5.x: layers[i].keys
    and .values, or keys.layers[i].inner; 4.x: key_cache / value_cache lists): a walk over
    attributes, lists and dicts, a few levels deep."""
    found, seen = [], set()

    def walk(obj, depth):
        if id(obj) in seen or depth > 4:
            return
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            if obj.dim() == 4:
                found.append(obj)
        elif isinstance(obj, (list, tuple)):
            for item in obj:
                walk(item, depth + 1)
        elif isinstance(obj, dict):
            for item in obj.values():
                walk(item, depth + 1)
        elif hasattr(obj, "__dict__") and not isinstance(obj, (torch.nn.Module, type)):
            for item in vars(obj).values():
                walk(item, depth + 1)

    walk(cache, 0)
    return found


def main(state):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="gpt2-xl", choices=sorted(SHAPES) + sorted(LLAMA_SHAPES) + sorted(MOE_SHAPES))
    ap.add_argument("--experts", default="grouped_mm", choices=["grouped_mm", "batched_mm", "eager"],
                    help="transformers' expert implementation for the MoE shapes (default grouped_mm)")
    ap.add_argument("--eager", action="store_true", help="decode without torch.compile (when it does not compile)")
    ap.add_argument("--model", help="a local model folder instead of a named shape")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "f32"])
    ap.add_argument("--prompt", type=int, default=256)
    ap.add_argument("--new", type=int, default=256)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=8, help="untimed decode steps after compilation (default 8)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--wait-for", metavar="PATH",
                    help="after compiling and warming up, create PATH.ready, wait until PATH exists, then time "
                         "(compare.sh compiles while ding builds, and times with the GPU to itself)")
    ap.add_argument("--wait-timeout", type=float, default=900, help="seconds --wait-for waits (default 900)")
    args = ap.parse_args()

    state["phase"] = "set-up (imports, model)"
    import torch
    import transformers

    if not torch.cuda.is_available():
        fail("no CUDA device: this benchmark runs on cuda only")
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[args.dtype]
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    model, source = build_model(args, torch, transformers, dtype)
    c = model.config
    # The generic config names (GPT2Config maps them to n_layer, n_head, n_embd, n_positions).
    positions = c.max_position_embeddings
    if args.prompt < 1 or args.new < 1 or args.batch < 1 or args.prompt + args.new > positions:
        fail(f"--prompt {args.prompt} + --new {args.new} must fit the {positions} positions (and be >= 1, batch >= 1)")
    kv_heads = getattr(c, "num_key_value_heads", c.num_attention_heads)
    heads = f"{c.num_attention_heads} heads" + (f" over {kv_heads} kv heads" if kv_heads != c.num_attention_heads else "")
    print(f"peer_torch: {source} ({c.num_hidden_layers} layers, {heads}, width {c.hidden_size}, vocab {c.vocab_size}), "
          f"{args.dtype}, sdpa, static cache, decode step torch.compile(reduce-overhead, fullgraph)")
    print(f"versions: torch {torch.__version__}, transformers {transformers.__version__}, CUDA {torch.version.cuda}; "
          f"GPU {torch.cuda.get_device_name()}")
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    print(f"weights {weight_bytes * 1e-6:.1f} MB", flush=True)

    B, P, N = args.batch, args.prompt, args.new
    total = P + N  # the cache holds exactly the prompt and the new tokens: no slot past P + N - 1 is written
    cache = make_static_cache(model, B, total, dtype, torch, transformers)
    gen = torch.Generator(device="cpu").manual_seed(args.seed)
    prompt = torch.randint(0, c.vocab_size - 1, (B, P), generator=gen).to("cuda")
    prefill_positions = torch.arange(P, device="cuda")
    decode_positions = torch.arange(P, total, device="cuda")  # only ever copied from, into pos_buf
    # The compiled step's inputs live in two dedicated tensors at fixed addresses, written (copy_) before
    # each call: no views with storage offsets, no fresh tensors, nothing for the CUDA graph to re-copy.
    pos_buf = torch.full((1,), P, dtype=torch.long, device="cuda")
    tok_buf = torch.zeros((B, 1), dtype=torch.long, device="cuda")

    # Where the cache writes: transformers 4.x and early 5.x write each token at the slot named by
    # cache_position; later 5.x StaticLayer ignores cache_position and writes at its own counter
    # (cumulative_length), advanced by every forward and set back to 0 only by cache.reset(), and its
    # masks take their query offset from that counter. So the script keeps one rule that satisfies
    # both: every sequence starts with reset() and a prefill of positions 0 .. P-1, and its decode
    # steps follow at P, P+1, ... in order, at most N of them. `filled` counts the slots written
    # since the last reset, as the script sees it; it is checked on every call (host side, free) and
    # against the cache's own count at each synchronisation point outside the timed regions.
    filled = [0]

    def reset_cache():
        if hasattr(cache, "reset"):
            cache.reset()
        filled[0] = 0

    def cache_length():
        """The cache's own count of written slots (a device read: only outside timed regions)."""
        try:
            n = cache.get_seq_length()
        except Exception:  # noqa: BLE001 - an API this transformers lacks: no check
            return None
        return int(n.item()) if isinstance(n, torch.Tensor) else int(n)

    def check_length(expected, where):
        torch.cuda.synchronize()
        n = cache_length()
        if n is not None and n != expected:
            raise RuntimeError(f"after {where} the StaticCache counts {n} tokens where this script wrote {expected}: "
                               f"transformers {transformers.__version__} places cache writes differently from what this "
                               "script assumes (see the comment on `filled`), so its timings would not be of a "
                               "correct decode")

    @torch.no_grad()
    def prefill():  # positions 0 .. P-1 into an empty cache (after reset_cache, or the very first call)
        if filled[0] != 0:
            raise RuntimeError(f"internal: prefill into a cache holding {filled[0]} tokens (reset it first)")
        out = model(input_ids=prompt, past_key_values=cache, cache_position=prefill_positions,
                    position_ids=prefill_positions.unsqueeze(0).expand(B, -1), use_cache=True)
        filled[0] = P
        return out.logits[:, -1, :].argmax(dim=-1, keepdim=True)

    @torch.no_grad()
    def step(token, position):  # token [B, 1], position [1]: one greedy decode step
        out = model(input_ids=token, past_key_values=cache, cache_position=position,
                    position_ids=position.unsqueeze(0).expand(B, -1), use_cache=True)
        return out.logits[:, -1, :].argmax(dim=-1, keepdim=True)

    def begin_sequence():
        """An empty cache, then the prompt: the state every decode run starts from."""
        reset_cache()
        tok_buf.copy_(prefill())

    # The first prefill allocates the static cache (lazily in transformers 5.x) and warms up.
    state["phase"] = "first prefill (allocates the static cache)"
    tok_buf.copy_(prefill())
    torch.cuda.synchronize()
    tensors = cache_tensors(cache, torch)
    if not tensors:  # transformers marks them itself when it allocates them; the skip count below tells
        print(f"WARNING: found no key/value tensors in transformers {transformers.__version__}'s StaticCache to mark static")
    elif min(t.shape[-2] for t in tensors) < total:
        fail(f"the StaticCache holds {min(t.shape[-2] for t in tensors)} positions, fewer than prompt + new = {total}")
    for t in tensors:  # the CUDA graph must see fixed addresses (transformers marks them too; harmless twice)
        torch._dynamo.mark_static_address(t)
    for t in (tok_buf, pos_buf):  # the step's inputs: written in place before each call, never reallocated
        torch._dynamo.mark_static_address(t)
    print(f"static cache: {len(tensors)} tensors of {tuple(tensors[0].shape) if tensors else '?'}")
    counter = any(isinstance(getattr(layer, "cumulative_length", None), torch.Tensor)
                  for layer in getattr(cache, "layers", []) or [])
    print("cache writes at " + ("the cache's own counter (StaticLayer.cumulative_length; cache_position passed too)"
                                if counter else "cache_position") +
          f"; each run resets it, prefills 0..{P - 1}, then decodes at {P}.. (at most {total - 1})", flush=True)
    check_length(P, "the first prefill")

    compiled = step if args.eager else torch.compile(step, mode="reduce-overhead", fullgraph=True)
    if args.eager:
        print("decode step: eager (--eager), no torch.compile", flush=True)
    warm = min(max(args.warmup, 3), N)

    def decode(steps):
        """`steps` greedy steps from tok_buf after begin_sequence(): step i at position P + i."""
        if filled[0] != P:
            raise RuntimeError(f"internal: decode from a cache holding {filled[0]} tokens, not the prompt's {P}")
        if steps > N:
            raise RuntimeError(f"internal: {steps} decode steps would write past position {total - 1}")
        for i in range(steps):
            pos_buf.copy_(decode_positions[i:i + 1])
            torch.compiler.cudagraph_mark_step_begin()
            tok_buf.copy_(compiled(tok_buf, pos_buf))
            filled[0] += 1

    def warm_decode(where):  # a whole short sequence: reset, prefill, `warm` decode steps
        begin_sequence()
        decode(warm)
        check_length(P + warm, where)

    state["phase"] = "compile (torch.compile and CUDA graph recording of the decode step)"
    compile_start = time.monotonic()
    warm_decode("compilation")
    print(f"compiled and recorded the decode step in {time.monotonic() - compile_start:.1f} s", flush=True)
    skips = torch._dynamo.utils.counters["inductor"].get("cudagraph_skips", 0)
    if skips:
        print(f"WARNING: torch skipped CUDA graphs {skips} time(s) (see the inductor log): decode is not graph-replayed")

    if args.wait_for:
        state["phase"] = "waiting for --wait-for"
        open(args.wait_for + ".ready", "w").close()
        deadline = time.monotonic() + args.wait_timeout
        while not os.path.exists(args.wait_for):
            if time.monotonic() > deadline:
                fail(f"waited {args.wait_timeout:.0f} s for {args.wait_for}")
            time.sleep(0.05)
        state["phase"] = "warm-up (decode after the wait)"
        warm_decode("the warm-up after the wait")  # the GPU may have idled (clocks down) while this process waited

    # Timed prefill (eager) from an empty cache, after one untimed.
    state["phase"] = "prefill (untimed warm-up and timed)"
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin_sequence()
    reset_cache()
    start.record()
    prefill()
    end.record()
    torch.cuda.synchronize()
    prefill_ms = start.elapsed_time(end)
    check_length(P, "the timed prefill")

    state["phase"] = "warm-up (decode before the timed decode)"
    warm_decode("the warm-up before the timed decode")

    # Timed decode: N greedy steps from a fresh prefill's token at positions P .. P+N-1, the last
    # slot of the cache; each step writes its own position before attending over it.
    state["phase"] = "decode (timed)"
    begin_sequence()
    torch.cuda.synchronize()
    start.record()
    decode(N)
    end.record()
    torch.cuda.synchronize()
    decode_ms = start.elapsed_time(end)
    step_ms = decode_ms / N
    check_length(total, "the timed decode")

    state["phase"] = "report"
    print(f"prefill   {P} tokens x {B}: {prefill_ms / B:.2f} ms per sequence = {P * B / (prefill_ms * 1e-3):.1f} tok/s")
    print(f"decode    {N} steps x batch {B}: {step_ms:.3f} ms/step = {B / (step_ms * 1e-3):.1f} tok/s")
    return 0


def run():
    """main(), and on any exception the phase it happened in (CUDA reports device errors late: at the
    next synchronisation, which this script places at the end of each phase)."""
    state = {"phase": "start-up"}
    try:
        return main(state)
    except Exception as e:  # noqa: BLE001 - reported, then the exit status says it failed
        sys.stdout.flush()
        traceback.print_exc()
        first = (str(e).strip().splitlines() or [""])[0]
        print(f"peer_torch: FAILED during {state['phase']}: {type(e).__name__}: {first}", file=sys.stderr)
        if "CUDA" in str(e) or "device-side" in str(e):
            print("peer_torch: CUDA errors surface at the next synchronisation, possibly after the kernel that caused "
                  "them (the phases end with one); CUDA_LAUNCH_BLOCKING=1 pins them down", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(run())
