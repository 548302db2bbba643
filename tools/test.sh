#!/usr/bin/env bash
# Set up, build, and run every test (GoogleTest through ctest), then the same CPU tests and the
# fuzz targets again under ASan + UBSan (tools/sanitize.sh); prints both ctest summaries.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh --hip-check --sanitize
(cd build && ctest --output-on-failure --parallel "$(nproc)" --timeout 600)
exec tools/sanitize.sh
