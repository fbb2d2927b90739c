#!/usr/bin/env bash
# Builds vramd here (Release, with CUDA) for the GPU machine and gathers what must travel into
# device-dist/ (git-ignored; name it in the device tool's `carry`):
#   device-dist/bin/   vramd, vramctl, vramd_backend_host, the GPU tests and the benchmarks
#   device-dist/lib/   the shared libraries they need that are not part of glibc
#   device-dist/include/rapidjson/   headers for building the pytorch backend on the device
# Then, on the device: scripts/device/run.sh (see there).
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -x /usr/local/cuda/bin/nvcc ] || { echo "package.sh: /usr/local/cuda is needed to build for the GPU" >&2; exit 1; }
# The python backend links a libpython, so it is built on the device against its Python
# (scripts/device/build_python.sh), not here against Debian's 3.11.
# VRAMD_PACKAGE_BUILD_DIR=DIR gathers from an existing Release build with CUDA (a developer's
# build/, say) instead of building build-device: a second full build takes the 2-core machine
# most of an hour. Its unit tests are left out (they would crowd the carry limit).
build_dir="${VRAMD_PACKAGE_BUILD_DIR:-build-device}"
if [ -z "${VRAMD_PACKAGE_BUILD_DIR:-}" ]; then
  VRAMD_BUILD_DIR=build-device VRAMD_BUILD_TYPE=Release bash scripts/build.sh \
    -DVRAMD_BUILD_PYTHON_BACKEND=OFF
else
  grep -q -- '-DVRAMD_WITH_CUDA=1' "$build_dir/build.ninja" || {
    echo "package.sh: $build_dir is not a build with CUDA" >&2; exit 1; }
fi

rm -rf device-dist
mkdir -p device-dist/bin device-dist/lib
binaries=("$build_dir"/src/cli/vramd "$build_dir"/src/cli/vramctl)
# GPU tests, plus the unit tests (run.sh runs those with a GPU part; they skip it without one).
unit_tests="$build_dir"/tests/vramd_unit_tests
[ -n "${VRAMD_PACKAGE_BUILD_DIR:-}" ] && unit_tests=
for f in "$build_dir"/tests/gpu_*_test $unit_tests "$build_dir"/bench/*_bench; do
  [ -x "$f" ] && binaries+=("$f")
done
# The HTTP load generator of the pytorch benchmarks (not a Google Benchmark binary).
for tool in infer_load grpc_infer_load inprocess_infer pool_replay fragmentation_replay; do
  [ -x "$build_dir"/bench/$tool ] || { echo "package.sh: $build_dir/bench/$tool was not built" >&2; exit 1; }
  binaries+=("$build_dir"/bench/$tool)
done
# The out-of-process backend host (docs/remote-backends.md): the python backend's stub modes.
[ -x "$build_dir"/backends/vramd_backend_host ] || { echo "package.sh: $build_dir/backends/vramd_backend_host was not built" >&2; exit 1; }
binaries+=("$build_dir"/backends/vramd_backend_host)
cp "${binaries[@]}" device-dist/bin/
# The unit tests' line tables (tests/CMakeLists.txt) would take room the carry limit needs.
[ -f device-dist/bin/vramd_unit_tests ] && strip --strip-debug device-dist/bin/vramd_unit_tests
# Headers the pytorch backend needs when it is built on the device (scripts/device/build_torch.sh).
mkdir -p device-dist/include
cp -r /usr/include/rapidjson device-dist/include/
# Every library a binary needs except glibc's own (those must come from the machine itself),
# cuBLAS (hundreds of MiB: run.sh finds the machine's own) and OpenBLAS with its Fortran runtime
# (about 40 MiB; the GPU machine has a system OpenBLAS where the binaries look), which would
# crowd the 64 MiB the device tool carries.
for b in "${binaries[@]}"; do
  ldd "$b" | awk '/=> \//{print $3}'
done | sort -u | grep -v -E '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*)\.so|/libcublas(Lt)?\.so|/lib(openblas|gfortran|quadmath)[^/]*\.so' \
  | while read -r lib; do cp -L "$lib" device-dist/lib/; done
# A RelWithDebInfo build's line tables and symbols are most of its size, and the carry takes 64
# MiB with the working tree (.dynsym stays: backends link against vramd's exported symbols).
strip --strip-unneeded device-dist/bin/* 2>/dev/null || true
strip --strip-debug device-dist/lib/* 2>/dev/null || true
echo "device-dist: $(ls device-dist/bin | wc -l) binaries, $(ls device-dist/lib | wc -l) libraries, $(du -sh device-dist | cut -f1)"
