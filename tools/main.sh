#!/usr/bin/env bash
# The main job: set up, build, and run the op benchmarks with their roofline table on the CPU.
# (ding-run on the embedded model replaces this once the model runner exists.)
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
exec build/tools/ding-bench ops --backend cpu "$@"
