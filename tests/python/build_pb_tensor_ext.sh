#!/bin/sh
# Builds the test-only extension module pb_tensor_ext (vramd's pb_utils.Tensor plus test helpers)
# into OUTDIR (default: a new temporary directory) and prints that directory.
#   tests/python/build_pb_tensor_ext.sh [OUTDIR]
# EXTRA_CXXFLAGS adds compiler flags (e.g. sanitizers). Needs g++, pybind11 headers (/usr/include/pybind11) and /usr/bin/python3.11's headers.
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-$(mktemp -d /tmp/pb_tensor_ext.XXXXXX)}
mkdir -p "$OUT"
PY=${PYTHON:-/usr/bin/python3}
CONFIG=${PYTHON_CONFIG:-/usr/bin/python3.11-config}
[ -x "$CONFIG" ] || CONFIG=python3.11-config
SUFFIX=$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
CXX=${CXX:-g++}
LOCK=""
command -v flock >/dev/null 2>&1 && LOCK="flock /tmp/vramd-build.lock"
$LOCK "$CXX" -std=c++17 -O1 -g -Wall -Wextra -Werror -shared -fPIC -fvisibility=hidden ${EXTRA_CXXFLAGS:-} \
  $("$CONFIG" --includes) -I"$ROOT/include" -I"$ROOT/src" \
  "$ROOT/src/backends/python/pb_tensor.cc" "$ROOT/src/backends/python/thread_state.cc" \
  "$ROOT/tests/python/pb_tensor_ext.cc" \
  -o "$OUT/pb_tensor_ext$SUFFIX" 1>&2
echo "$OUT"
