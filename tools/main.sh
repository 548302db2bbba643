#!/usr/bin/env bash
# The main job: set up, build, and run ding-run on the shipped default model (a small GPT-2
# trained on the Brown corpus). Extra arguments go to ding-run, e.g. -p "Once upon a time" -n 200.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
exec build/tools/ding-run "$@"
