#!/usr/bin/env bash
# Runs on the GPU machine (from scripts/device/run.sh's pytorch step): builds, against the torch
# wheel's CUDA LibTorch, the pytorch backend (src/backends/pytorch ->
# build-torch-device/backends/pytorch/libvramd_pytorch.so, so --backend-directory
# build-torch-device/backends) and the direct-call benchmark (bench/torch ->
# build-torch-bench/direct_bench). The two builds run side by side. Needs python3 with torch,
# cmake, a C++ compiler (ninja if present) and device-dist/include/rapidjson (package.sh).
# Exits 2, saying why, when torch's cmake prefix or rapidjson is missing; 1 when a build fails
# (its log is printed).
set -uo pipefail
cd "$(dirname "$0")/../.."

prefix="$(python3 -c 'import os, torch; p = torch.utils.cmake_prefix_path; print(p if os.path.isdir(os.path.join(p, "Torch")) else "")' 2>/dev/null)"
if [ -z "$prefix" ]; then
  echo "build_torch.sh: no torch cmake prefix: python3 -c 'import torch; torch.utils.cmake_prefix_path' failed or has no Torch/ config (is the torch wheel installed for python3?)" >&2
  exit 2
fi
extra_inc="$PWD/device-dist/include"
if [ ! -f "$extra_inc/rapidjson/document.h" ]; then
  echo "build_torch.sh: $extra_inc/rapidjson/document.h is missing: run scripts/device/package.sh (it copies rapidjson) and carry device-dist" >&2
  exit 2
fi
command -v cmake >/dev/null || { echo "build_torch.sh: cmake is not installed" >&2; exit 2; }
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
# torch's CMake config looks for the CUDA toolkit (nvcc) and the GPU architectures.
if [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
  export CUDACXX="${CUDACXX:-/usr/local/cuda/bin/nvcc}"
fi
export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
echo "build_torch.sh: torch $(python3 -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)' 2>/dev/null) at $prefix"

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
t0=$(date +%s)
( cmake -S src/backends/pytorch -B build-torch-device "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$prefix" -DVRAMD_EXTRA_INCLUDE_DIRS="$extra_inc" &&
  cmake --build build-torch-device ) > "$logs/backend.log" 2>&1 &
backend_pid=$!
( cmake -S bench/torch -B build-torch-bench "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$prefix" &&
  cmake --build build-torch-bench ) > "$logs/bench.log" 2>&1 &
bench_pid=$!
rc=0
wait "$backend_pid" || rc=1
backend_rc=$rc
wait "$bench_pid" || rc=1
echo "build_torch.sh: builds took $(( $(date +%s) - t0 ))s"
for name in backend bench; do
  echo "# build_torch.sh: $name build log"
  if [ "$rc" -ne 0 ]; then cat "$logs/$name.log"; else grep -E 'warning|CUDA|Torch|torch|Linking' "$logs/$name.log" | tail -20; fi
done
lib=build-torch-device/backends/pytorch/libvramd_pytorch.so
if [ "$backend_rc" -ne 0 ] || [ ! -f "$lib" ]; then
  echo "build_torch.sh: FAILED to build $lib" >&2; rc=1
fi
if [ ! -x build-torch-bench/direct_bench ]; then
  echo "build_torch.sh: FAILED to build build-torch-bench/direct_bench" >&2; rc=1
fi
[ "$rc" -eq 0 ] && echo "build_torch.sh: built $lib and build-torch-bench/direct_bench"
exit "$rc"
