#!/usr/bin/env python3
"""PyTorch's speed on a hybrid linear-attention shape (Qwen3-Next), for comparison with `ding-bench model`.

transformers' Qwen3-Next with random weights of ding-bench's qwen3-next-80b-a3b-12l shape, bf16 on one GPU,
eager (no torch.compile: its pure-torch delta rule loops over chunks and tokens in Python) and the cache the model
makes itself (a DynamicCache holding the KV of the attention layers and the linear layers' conv and recurrent
states); the fused kernel packages (flash-linear-attention, causal-conv1d) are not installed, so this is the
pure-torch path issue 21 names. Prints the prefill (chunk-wise form, one forward of the prompt) and the mean greedy
decode step (recurrent form), both after a warm-up run, timed with torch.cuda.synchronize().

    python3 tools/bench/peer_torch_hybrid.py [--prompt 4096] [--new 32] [--layers 12]
"""
import argparse
import sys
import time

# Qwen/Qwen3-Next-80B-A3B-Instruct's config.json, as tools/bench/model_bench.cpp's kQwen3Next80B12L.
QWEN3_NEXT_80B = {
    "decoder_sparse_step": 1, "eos_token_id": 151645, "full_attention_interval": 4, "head_dim": 256,
    "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 5120, "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
    "linear_value_head_dim": 128, "max_position_embeddings": 262144, "mlp_only_layers": [],
    "moe_intermediate_size": 512, "norm_topk_prob": True, "num_attention_heads": 16, "num_experts": 512,
    "num_experts_per_tok": 10, "num_hidden_layers": 48, "num_key_value_heads": 2, "partial_rotary_factor": 0.25,
    "rms_norm_eps": 1e-06, "rope_theta": 10000000, "shared_expert_intermediate_size": 512,
    "tie_word_embeddings": False, "vocab_size": 151936,
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=12, help="layers of the 48 kept (default 12, as ding-bench's shape)")
    ap.add_argument("--prompt", type=int, default=4096)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--experts", default="grouped_mm", choices=["grouped_mm", "batched_mm", "eager"])
    args = ap.parse_args()

    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    if not torch.cuda.is_available():
        sys.exit("peer_torch_hybrid: error: no CUDA device")
    fields = dict(QWEN3_NEXT_80B, num_hidden_layers=args.layers)
    config = AutoConfig.for_model("qwen3_next", **fields)
    config._attn_implementation = "sdpa"
    torch.manual_seed(7)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    torch.set_default_dtype(torch.float32)
    model = model.to(device="cuda", dtype=torch.bfloat16).eval().requires_grad_(False)
    if hasattr(model, "set_experts_implementation"):
        model.set_experts_implementation(args.experts)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    print(f"peer_torch_hybrid: qwen3-next-80b-a3b shape, {args.layers} layers, random weights, bf16, eager, "
          f"experts {args.experts}; weights {weights * 1e-6:.1f} MB")
    print(f"versions: torch {torch.__version__}, transformers {transformers.__version__}; GPU {torch.cuda.get_device_name()}",
          flush=True)
    gen = torch.Generator(device="cpu").manual_seed(7)
    prompt = torch.randint(0, config.vocab_size - 1, (1, args.prompt), generator=gen).to("cuda")

    @torch.no_grad()
    def run(new):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = model(input_ids=prompt, use_cache=True)
        token = out.logits[:, -1:].argmax(-1)
        torch.cuda.synchronize()
        prefill = time.perf_counter() - t0
        cache = out.past_key_values
        t0 = time.perf_counter()
        for _ in range(new):
            out = model(input_ids=token, past_key_values=cache, use_cache=True)
            cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
        torch.cuda.synchronize()
        return prefill, (time.perf_counter() - t0) / new

    run(2)  # warm-up: kernels, allocator
    prefill, step = run(args.new)
    print(f"prefill   {args.prompt} tokens: {prefill * 1e3:.2f} ms = {args.prompt / prefill:.1f} tok/s")
    print(f"decode    {args.new} steps x batch 1: {step * 1e3:.3f} ms/step = {1 / step:.1f} tok/s")


if __name__ == "__main__":
    main()
