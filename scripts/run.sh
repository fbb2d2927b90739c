#!/usr/bin/env bash
# Quick start: install, build, and serve examples/models on HTTP port 8000 (Ctrl-C stops it).
# Extra arguments go to `vramd serve`, e.g. scripts/run.sh --http-port 9000
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
# The pytorch backend (docs/pytorch.md) is built into build/backends; serve with it unless the
# caller names another backend directory.
backend_args=()
if [ -d build/backends ] && [[ " $* " != *" --backend-directory"* ]]; then
  backend_args=(--backend-directory "$PWD/build/backends")
fi
exec ./build/src/cli/vramd serve --model-repository examples/models "${backend_args[@]}" "$@"
