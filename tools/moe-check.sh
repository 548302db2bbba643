#!/usr/bin/env bash
# Issue 20 on a GPU machine (transformers, torch, CUDA; no network), in one go: the MoE and
# latent-attention fixtures are redrawn with transformers (tools/fixtures/make_moe_fixtures.py)
# while the tree builds, put in place under tests/data/moe-fixtures, then the whole suite runs
# (tools/gpu-check.sh: cuda, hip, cpu) and the MoE and MLA op benchmarks. The fixtures come back
# as $OUT/moe-fixtures.tgz (the device tool returns a handful of files).
#   DING_CUDA_ARCH=90 tools/moe-check.sh [ding_tests arguments]
# DING_MOE_FIXTURES=0: test the committed fixtures without redrawing them.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/results/moe-check}
mkdir -p "$out"
fresh=$(mktemp -d)
redraw=${DING_MOE_FIXTURES:-1}
# One process per fixture (each may redraw a few dozen times for a decisive routing).
pids=()
if ((redraw)); then
  for name in $(cd tools/fixtures && python3 -c 'import make_moe_fixtures as m; print(" ".join(f[0] for f in m.FIXTURES))'); do
    (cd tools/fixtures && OMP_NUM_THREADS=2 python3 make_moe_fixtures.py --out "$fresh" --only "$name") >"$out/fixtures-$name.log" 2>&1 &
    pids+=($!)
  done
fi
DING_GPU_BUILD_ONLY=1 tools/gpu-check.sh || exit 1
made=$redraw
for pid in "${pids[@]}"; do wait "$pid" || made=0; done
((redraw)) && cat "$out"/fixtures-*.log >"$out/fixtures.log"
if ((!redraw)); then
  echo "moe-check: the committed fixtures (DING_MOE_FIXTURES=0)"
elif ((made)); then
  rm -rf tests/data/moe-fixtures && cp -r "$fresh" tests/data/moe-fixtures
  tar czf "$out/moe-fixtures.tgz" -C tests/data moe-fixtures
  grep -E "^[a-z0-9-]+: (seed|no seed)" "$out/fixtures.log"
else
  echo "moe-check: fixture generation failed (the committed fixtures are tested):"; tail -20 "$out/fixtures.log"
fi
tools/gpu-check.sh "$@"
status=$?
bench=${DING_GPU_BUILD:-build-gpu}/tools/ding-bench
"$bench" ops --backend cuda --op moe_matmul 2>&1
for op in mla_decode mla_prefill; do "$bench" ops --backend cuda --op "$op" 2>&1 | grep "^mla_"; done
exit $status
