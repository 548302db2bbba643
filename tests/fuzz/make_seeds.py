#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (tests/fuzz/corpus/<target>/) from the committed test data,
kept small: safetensors files cut to a few tensors of at most 4 x 4 elements (their names, dtypes and
leading values from the fixtures), the fixtures' index, config and generation_config files as they
are, tokenizer files cut to their first 256 tokens, their first 80 merges and what those merges spell, and encode/decode
inputs from the tokenizer parity texts. Run from anywhere; rerunning rewrites the same files and
keeps the regress-* inputs (each once found a bug; the test that covers it names it).
"""
import json
import struct
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "data"
OUT = HERE / "corpus"
DTYPE_BYTES = {"F32": 4, "F16": 2, "BF16": 2, "I32": 4, "I8": 1, "F8_E4M3": 1}


def write(target, name, data):
    (OUT / target).mkdir(parents=True, exist_ok=True)
    (OUT / target / name).write_bytes(data if isinstance(data, bytes) else data.encode())


def small_safetensors(path, keep):
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out_header, out_data = {}, b""
    names = [k for k in header if k != "__metadata__"][:keep]
    for name in names:
        t = header[name]
        shape = [min(d, 4) for d in t["shape"]]
        count = 1
        for d in shape:
            count *= d
        size = count * DTYPE_BYTES[t["dtype"]]
        begin = t["data_offsets"][0]
        out_header[name] = {"dtype": t["dtype"], "shape": shape,
                            "data_offsets": [len(out_data), len(out_data) + size]}
        out_data += data[begin:begin + size]
    if "__metadata__" in header:
        out_header["__metadata__"] = header["__metadata__"]
    text = json.dumps(out_header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(text)) + text + out_data


def small_tokenizer(tokenizer, tokens=256, merges=80):
    model = tokenizer["model"]
    kept_merges = model.get("merges", [])[:merges]
    spelled = set()
    for m in kept_merges:
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        spelled |= {a, b, a + b}
    vocab = {k: v for k, v in model["vocab"].items() if v < tokens or k in spelled}
    small = dict(tokenizer)
    small["model"] = dict(model, vocab=vocab, merges=kept_merges)
    return small


def main():
    # Inputs that once crashed a target (regress-*) stay; the derived seeds are rewritten.
    for path in OUT.glob("*/*"):
        if not path.name.startswith("regress-"):
            path.unlink()
    fixtures = sorted((DATA / "gpt2-fixtures").iterdir()) + sorted((DATA / "llama-fixtures").iterdir())
    for folder in fixtures:
        shard = sorted(folder.glob("*.safetensors"))[0]
        write("safetensors", folder.name + ".safetensors", small_safetensors(shard, 6))
        for name in ("config.json", "generation_config.json"):
            if (folder / name).exists():
                write("config", f"{folder.name}-{name}", (folder / name).read_bytes())
        index = folder / "model.safetensors.index.json"
        if index.exists():
            write("safetensors_index", folder.name + ".json", index.read_bytes())

    for folder in sorted((DATA / "tokenizers").iterdir()):
        for path in sorted(folder.glob("*.json")):
            if path.name in ("expected.json", "tokenizer_config.json"):
                continue
            tokenizer = json.loads(path.read_text())
            if tokenizer.get("model", {}).get("type") == "BPE":
                tokenizer = small_tokenizer(tokenizer)
            write("tokenizer_json", f"{folder.name}-{path.name}", json.dumps(tokenizer, ensure_ascii=False))

    tiny = DATA / "gpt2-fixtures" / "tiny-f32"
    write("vocab_merges", "tiny-f32", (tiny / "vocab.json").read_bytes() + b"\0" + (tiny / "merges.txt").read_bytes())
    vocab = json.loads((DATA / "gpt2" / "vocab.json").read_text())
    small_vocab = {k: v for k, v in vocab.items() if v < 300}
    merges = [line for line in (DATA / "gpt2" / "merges.txt").read_text().splitlines()[1:]
              if len(line.split(" ")) == 2 and all(p in small_vocab for p in line.split(" "))
              and "".join(line.split(" ")) in small_vocab]
    small_vocab["<|endoftext|>"] = 300
    write("vocab_merges", "gpt2-300", json.dumps(small_vocab, ensure_ascii=False).encode() + b"\0" +
          ("#version: 0.2\n" + "\n".join(merges) + "\n").encode())

    # The first byte picks the tokenizer (encode_decode_fuzz.cpp's order, six of them) and options.
    cases = json.loads((DATA / "tokenizers" / "llama3-bpe" / "expected.json").read_text())["cases"]
    texts = [c["text"] for c in cases if 0 < len(c["text"].encode()) <= 200][:24]
    for i, text in enumerate(texts):
        write("encode_decode", f"case{i:02d}", bytes([i % 24]) + text.encode())


if __name__ == "__main__":
    main()
