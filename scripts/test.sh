#!/usr/bin/env bash
# Install, build, and run the whole test suite (unit tests and end-to-end tests).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
ctest --test-dir "${VRAMD_BUILD_DIR:-build}" --output-on-failure --parallel "$(nproc)"
