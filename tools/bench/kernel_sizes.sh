#!/usr/bin/env bash
# Machine-code bytes of each kernel in one CUDA unit, on the CPU machine (no GPU, no cuobjdump needed):
# compiles the unit to a cubin with its build's flags (build-sm90/ by default: tools/device_pack.sh's)
# and lists the .text section of every kernel, largest first. A decode kernel runs once a layer for a few
# µs, so it fetches most of its code cold: a large one pays instruction-fetch stalls (ncu's no_inst) on
# its critical path (docs/PERFORMANCE.md, decode attention's profile).
#   tools/bench/kernel_sizes.sh backends/gpu/attention_decode.cu [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
unit=${1:?usage: kernel_sizes.sh UNIT.cu [BUILD_DIR]}
build=${2:-build-sm90}
[[ -f $unit ]] || { echo "kernel_sizes.sh: error: no unit '$unit'" >&2; exit 1; }
[[ -f $build/build.ninja ]] || { echo "kernel_sizes.sh: error: '$build' is no configured build (tools/device_pack.sh makes build-sm90)" >&2; exit 1; }
command=$(ninja -C "$build" -t commands | grep -F -- "-c $PWD/$unit" | head -1)
[[ -n $command ]] || { echo "kernel_sizes.sh: error: '$build' does not compile '$unit'" >&2; exit 1; }
cubin=$(mktemp --suffix=.cubin)
trap 'rm -f "$cubin"' EXIT
# One real architecture (the build's first), a cubin instead of an object.
arch=$(grep -o -E 'code=\[?[a-z_0-9,]*sm_[0-9]+a?' <<<"$command" | grep -o -E 'sm_[0-9]+a?' | head -1)
command=$(sed -E "s/ -o [^ ]+/ -o ${cubin//\//\\/}/; s/ -c / -cubin /; s/--generate-code=[^ ]+/-arch=${arch:-sm_90}/g" <<<"$command")
(cd "$build" && eval "$command")
readelf -S -W "$cubin" 2>/dev/null | awk '$2 ~ /^\.text\./ { print $6, substr($2, 7) }' |
  while read -r hex name; do echo "$((16#$hex)) $name"; done | sort -rn |
  while read -r bytes name; do printf '%8d  %s\n' "$bytes" "$(c++filt <<<"$name" | sed -E 's/ding::gpu::cuda_api::\(anonymous namespace\):://g' | cut -c1-150)"; done
