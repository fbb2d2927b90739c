#!/usr/bin/env bash
# Runs on the GPU machine: builds the python backend (src/backends/python ->
# build-python-device/backends/python/libvramd_python.so, with triton_python_backend_utils.py
# and vramd_python_host.py beside it, so --backend-directory build-python-device/backends)
# against the machine's Python (the torch venv's 3.12 by default: PYTHON=<python> picks
# another), its libpython and the pybind11 installed for it (pip's, found through
# `python -m pybind11 --cmakedir`). Needs no network.
# Exits 2, saying why, when the Python, its headers or pybind11 is missing; 1 when the build
# fails (its log is printed).
set -uo pipefail
cd "$(dirname "$0")/../.."

py="${PYTHON:-}"
if [ -z "$py" ]; then
  if [ -x /opt/torch/.venv/bin/python ]; then py=/opt/torch/.venv/bin/python; else py=python3; fi
fi
command -v "$py" >/dev/null || { echo "build_python.sh: no python at '$py'" >&2; exit 2; }
command -v cmake >/dev/null || { echo "build_python.sh: cmake is not installed" >&2; exit 2; }
inc="$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
if [ ! -f "$inc/Python.h" ]; then
  echo "build_python.sh: $inc/Python.h is missing (the Python development headers, e.g. python3-dev)" >&2
  exit 2
fi
pybind11_dir="$("$py" -m pybind11 --cmakedir 2>/dev/null)"
if [ -z "$pybind11_dir" ]; then
  echo "build_python.sh: pybind11 is not installed for $py ($py -m pybind11 --cmakedir failed)" >&2
  exit 2
fi
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
echo "build_python.sh: $("$py" -c 'import sys; print("Python", sys.version.split()[0], sys.executable)'), pybind11 at $pybind11_dir"

log=$(mktemp)
trap 'rm -f "$log"' EXIT
t0=$(date +%s)
rc=0
( cmake -S src/backends/python -B build-python-device "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DPython3_EXECUTABLE="$(command -v "$py")" -Dpybind11_DIR="$pybind11_dir" &&
  cmake --build build-python-device ) > "$log" 2>&1 || rc=1
echo "build_python.sh: build took $(( $(date +%s) - t0 ))s"
if [ "$rc" -ne 0 ]; then cat "$log"; else grep -E 'warning|python backend|Linking' "$log" | tail -20; fi
lib=build-python-device/backends/python/libvramd_python.so
if [ "$rc" -ne 0 ] || [ ! -f "$lib" ]; then
  echo "build_python.sh: FAILED to build $lib" >&2
  exit 1
fi
echo "build_python.sh: built $lib"
