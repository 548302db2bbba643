#!/usr/bin/env bash
# ding programs built here for the GPU machine, so a device call spends its time running, not
# compiling (a whole build there takes about 3 minutes of the session's device time):
#   tools/device_pack.sh TARGET... [--dir DIR]   here: builds each TARGET (ding-bench, ding_tests) in
#                                         build-sm90/ (DING_PACK_BUILD) for sm_90 with nvcc (no GPU
#                                         needed) and without ICU (which the GPU machine lacks), then
#                                         packs them into DIR (default out/, git-ignored) as one
#                                         bin/programs.tar.xz with the libraries they need in lib/
#   tools/device_pack.sh --unpack [DIR]   there (carry DIR): unpacks into /tmp/bin and prints the
#                                         LD_LIBRARY_PATH to export
#   tools/device_pack.sh ... --base FILE  also packs FILE, a ding-bench built from another tree (the
#                                         change's parent), as ding-bench-base: an A/B of the two in
#                                         one call (tools/bench/model_ab.sh /tmp/bin/ding-bench-base
#                                         /tmp/bin/ding-bench ...). Keep the parent's before rebuilding:
#                                         tar xJf DIR/bin/programs.tar.xz -C /tmp/base ding-bench
# The programs share the library's kernels, which are most of their bytes: packed together with a
# window that spans both, ding-bench and ding_tests take 21 MB (41 MB packed apart), so both fit
# the device tool's 64 MiB beside the working tree; with a base ding-bench beside them, 25 MB.
# ding_tests reads tests/data by its path here (/work/main/tests/data); --unpack links that path
# to the copied tree where it is free.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ${1:-} == --unpack ]]; then
  dir=${2:-out}
  mkdir -p /tmp/bin
  tar xJf "$dir/bin/programs.tar.xz" -C /tmp/bin
  python3 - <<'PY'
import os
for name in os.listdir("/tmp/bin"):
    target = os.path.join("/tmp/bin", name)
    # ding_tests' data folder is a string constant: the path of this tree where it was built.
    blob = open(target, "rb").read()
    end = blob.find(b"/tests/data\0")
    if end > 0:
        root = blob[blob.rfind(b"\0", 0, end) + 1:end].decode()
        if root.startswith("/") and not os.path.exists(root):
            os.makedirs(os.path.dirname(root), exist_ok=True)
            os.symlink(os.getcwd(), root)
PY
  echo "$(cd "$dir" && pwd)/lib"
  exit 0
fi
targets=()
dir=out
base=
while (($#)); do
  case $1 in
    --dir | --base)
      (($# >= 2)) || { echo "device_pack.sh: error: $1 needs a value" >&2; exit 1; }
      if [[ $1 == --dir ]]; then dir=$2; else base=$2; fi
      shift 2 ;;
    ding-bench | ding_tests) targets+=("$1"); shift ;;
    *) echo "device_pack.sh: error: unknown argument '$1' (targets: ding-bench, ding_tests; --dir DIR; --base FILE)" >&2; exit 1 ;;
  esac
done
if [[ -n $base && ! -x $base ]]; then
  echo "device_pack.sh: error: --base '$base' is not an executable file" >&2
  exit 1
fi
if [[ -n $base && ! " ${targets[*]} " == *" ding-bench "* ]]; then
  echo "device_pack.sh: error: --base packs a ding-bench to compare with the new one: name the ding-bench target" >&2
  exit 1
fi
((${#targets[@]})) || { echo "device_pack.sh: error: name at least one target: ding-bench, ding_tests" >&2; exit 1; }
build=${DING_PACK_BUILD:-build-sm90}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDING_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DCMAKE_DISABLE_FIND_PACKAGE_ICU=TRUE -DDING_BUILD_TOOLS=ON -DDING_BUILD_TESTS=ON >/dev/null
ninja -C "$build" "${targets[@]}" >/dev/null
binaries=()
for target in "${targets[@]}"; do binaries+=("$(find "$build" -name "$target" -type f -perm -u+x | head -1)"); done
mkdir -p "$dir/bin" "$dir/lib"
rm -f "$dir"/bin/*.xz
# The base goes right after its twin, within the window of the stream's dictionary, which then
# spans all three programs.
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
order=()
for binary in "${binaries[@]}"; do
  ln -s "$(realpath "$binary")" "$stage/$(basename "$binary")"
  order+=("$(basename "$binary")")
  if [[ -n $base && $(basename "$binary") == ding-bench ]]; then
    ln -s "$(realpath "$base")" "$stage/ding-bench-base"
    order+=(ding-bench-base)
  fi
done
dict=256MiB
[[ -n $base ]] && dict=384MiB
tar chf - -C "$stage" "${order[@]}" | xz -T0 --lzma2=preset=6,dict=$dict -c >"$dir/bin/programs.tar.xz"
# What the GPU machine may lack or hold in an older version: the C++ runtime and the Debian libraries.
ldd "${binaries[@]}" | awk '/=> \// {print $3}' | sort -u | grep -E 'libstdc\+\+|libgcc_s|libgomp|libfmt|libpcre2' | xargs -I{} cp -L {} "$dir/lib/"
du -sh "$dir/bin/programs.tar.xz"
