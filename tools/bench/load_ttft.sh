#!/usr/bin/env bash
# Load speed, host memory after loading and time to first token on a GPU (issue 17, items 5 and 6),
# on a full-size GPT-2 folder as users have it: a random gpt2-xl in bf16 written by transformers.
#   tools/bench/load_ttft.sh [build folder]      (needs ding-run and ding-bench built; python3 + torch)
# Prints, for ding-run on that folder (3 runs, warm page cache after the first): load seconds, load GB/s,
# peak and current host RSS against the weight bytes, warm-up, TTFT and prefill of a 251-token
# prompt; then ding-bench model's warmed prefill of the same shape and length for comparison.
# Environment: SHAPE (default gpt2-xl), DTYPE (stored and computed, default bf16), OUT (folder, default /tmp).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
build=${1:-build-gpu}
shape=${SHAPE:-gpt2-xl}
dtype=${DTYPE:-bf16}
folder=${OUT:-/tmp}/ding-$shape-$dtype
[[ -f $folder/config.json ]] || python3 tools/fixtures/make_random_gpt2.py --shape "$shape" --dtype "$dtype" --out "$folder" >/dev/null ||
  { echo "load_ttft: could not write $folder"; exit 1; }
du -sh "$folder"
cat "$folder"/*.safetensors >/dev/null  # warm page cache, as the target states
prompt=$(python3 -c "print(','.join(str((i * 7919) % 50000 + 1) for i in range(251)))")
for run in 1 2 3; do
  "$build/tools/ding-run" -m "$folder" --backend cuda --dtype "$dtype" --tokens "$prompt" -n 8 --greedy --json |
    python3 -c "
import json, sys
j = json.load(sys.stdin)
w = j['weights_bytes']
print(f\"ding-run run $run: load {j['load_seconds']:.3f} s = {j.get('load_gbps', 0):.2f} GB/s, weights {w/1e9:.2f} GB, \"
      f\"RSS now {j.get('rss_after_load_bytes', 0)/1e9:.2f} GB ({100*j.get('rss_after_load_bytes', 0)/w:.1f} % of weights), peak {j['peak_rss_bytes']/1e9:.2f} GB, \"
      f\"warm-up {1e3*j.get('warm_up_seconds', 0):.1f} ms, TTFT {1e3*(j.get('ttft_seconds') or 0):.2f} ms, prefill {1e3*j['prefill_seconds']:.2f} ms for {j['prompt_tokens']} tokens\")"
done
"$build/tools/ding-bench" model --shape "$shape" --backend cuda --dtype "$dtype" --prompt 251 --new 8 2>&1 | grep -iE "prefill|device"
"$build/tools/ding-bench" load -m "$folder" --backend cuda --dtype "$dtype" --repeat 3 2>&1 | tail -6
