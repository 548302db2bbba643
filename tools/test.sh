#!/usr/bin/env bash
# Set up, build, and run every test (GoogleTest through ctest); prints the ctest summary.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh --hip-check
cd build
exec ctest --output-on-failure --parallel "$(nproc)" --timeout 600
