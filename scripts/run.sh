#!/usr/bin/env bash
# Quick start: install, build, and serve examples/models on HTTP port 8000 (Ctrl-C stops it).
# Extra arguments go to `vramd serve`, e.g. scripts/run.sh --http-port 9000
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
exec ./build/src/cli/vramd serve --model-repository examples/models "$@"
