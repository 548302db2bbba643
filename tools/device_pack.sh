#!/usr/bin/env bash
# One ding program built here for the GPU machine, so a device call spends its time running, not
# compiling (a whole build there takes about 3 minutes of the session's device time):
#   tools/device_pack.sh TARGET [DIR]     here: builds TARGET (ding-bench or ding_tests) in build-sm90/
#                                         (DING_PACK_BUILD)
#                                         for sm_90 with nvcc (no GPU needed) and without ICU (which the
#                                         GPU machine lacks), then packs it into DIR (default out/, git-
#                                         ignored) as bin/TARGET.xz with the libraries it needs in lib/
#   tools/device_pack.sh --unpack [DIR]   there (carry DIR): unpacks into /tmp/bin and prints the
#                                         LD_LIBRARY_PATH to export
# The working tree and the carried folder share the device tool's 64 MiB, so one packed program
# travels at a time. ding_tests reads tests/data by its path here (/work/main/tests/data); --unpack
# links that path to the copied tree where it is free.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ${1:-} == --unpack ]]; then
  dir=${2:-out}
  mkdir -p /tmp/bin
  python3 - "$dir" <<'PY'
import lzma, os, shutil, sys
for name in os.listdir(os.path.join(sys.argv[1], "bin")):
    if not name.endswith(".xz"):
        continue
    target = os.path.join("/tmp/bin", name[:-3])
    with lzma.open(os.path.join(sys.argv[1], "bin", name)) as f, open(target, "wb") as g:
        shutil.copyfileobj(f, g)
    os.chmod(target, 0o755)
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
target=${1:?TARGET: ding-bench or ding_tests}
dir=${2:-out}
build=${DING_PACK_BUILD:-build-sm90}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDING_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DCMAKE_DISABLE_FIND_PACKAGE_ICU=TRUE -DDING_BUILD_TOOLS=ON -DDING_BUILD_TESTS=ON >/dev/null
ninja -C "$build" "$target" >/dev/null
binary=$(find "$build" -name "$target" -type f -perm -u+x | head -1)
mkdir -p "$dir/bin" "$dir/lib"
rm -f "$dir"/bin/*.xz
xz -T0 -6 -c "$binary" >"$dir/bin/$target.xz"
# What the GPU machine may lack or hold in an older version: the C++ runtime and the Debian libraries.
ldd "$binary" | awk '/=> \// {print $3}' | grep -E 'libstdc\+\+|libgcc_s|libgomp|libfmt|libpcre2' | xargs -I{} cp -L {} "$dir/lib/"
du -sh "$dir/bin/$target.xz"
