#!/usr/bin/env bash
# Install, build, and run the whole test suite (unit tests and end-to-end tests); then the
# sanitizer job and a short run of each fuzz target (docs/fuzzing.md).
# VRAMD_TEST_SANITIZERS=0 stops after the ordinary suite (a quicker local run).
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase's time, printed as it ends (docs/benchmarks.md, "CI time", keeps them).
phase_start=$SECONDS
phase() { echo "[test.sh] $1: $((SECONDS - phase_start)) s"; phase_start=$SECONDS; }
# gold links a test binary in half the time of the default linker (bfd) and comes with the same
# binutils; CI links some fifty binaries in each of its two builds.
link_flags=(-DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=gold -DCMAKE_SHARED_LINKER_FLAGS=-fuse-ld=gold
            -DCMAKE_MODULE_LINKER_FLAGS=-fuse-ld=gold)
# Both builds compile each target's sources in batches of 8 (cmake/unity.cmake): the heavy
# headers every file includes (Asio, Beast, fmt, protobuf, gtest) are parsed and instantiated
# once per batch. CI builds from scratch, so a batch recompiled for a one-file change costs
# nothing here; developers' own builds stay one file at a time.
link_flags+=(-DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=8)
# The unit tests are built and run once: in the sanitizer job below, which checks strictly more
# (every unit test under ASan+UBSan). This build (gcc, release flags, CUDA where present) runs the
# end-to-end tests against the release binary and the ledger under ThreadSanitizer. Without the
# sanitizer job (VRAMD_TEST_SANITIZERS=0) the unit tests run here.
sanitizers="${VRAMD_TEST_SANITIZERS:-1}"
unit_here=ON
[ "$sanitizers" = 0 ] || unit_here=OFF
# -O1, without debug info (a fifth of the compile time): backtraces name functions through the
# exported symbols, which is all a test reads, and -O1 compiles in 0.7 of -O2's time (24 s
# against 34 s for a batch of the server's files); the tests look at behaviour, not speed, which
# the benchmarks measure on -O2 builds (scripts/device/package.sh, README).
VRAMD_BUILD_TYPE=Release bash scripts/build.sh "${link_flags[@]}" \
  -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" -DCMAKE_C_FLAGS_RELEASE="-O1 -DNDEBUG" \
  -DVRAMD_BUILD_UNIT_TESTS="$unit_here"
phase "packages and the ordinary build"
ctest --test-dir "${VRAMD_BUILD_DIR:-build}" --output-on-failure --parallel "$(nproc)"
phase "the ordinary build's tests"

[ "$sanitizers" = 0 ] && exit 0

# The sanitizer job: one clang build in build-asan with AddressSanitizer and
# UndefinedBehaviorSanitizer (every report fatal) and the fuzz targets' coverage, holding vramd,
# every unit test and the fuzz targets; then
#   - every unit test and the end-to-end tests (against the ASan+UBSan vramd), as above;
#   - each fuzz target: its seeds and past failures replayed, then 10 s of fuzzing (the long
#     campaigns are run apart: docs/benchmarks.md#fuzzing).
# Why all of it fits: clang at -O0 with line tables only (CMAKE_BUILD_TYPE=Sanitize with
# VRAMD_SANITIZE_OPTIMIZE=-O0: half the time of -O1 under the sanitizers) compiles faster than the
# ordinary build, one tree serves the tests and the fuzz targets, and the unit tests run as four
# gtest shards, not one instrumented process per test (tests/CMakeLists.txt); so the job costs a
# build of about the ordinary one's time (less the pytorch backend and the benchmarks, which it
# leaves out), a suite that runs ~2x slower, and a minute of fuzzing.
# Measured: docs/benchmarks.md, "CI time". Left out: the pytorch backend (LibTorch
# itself is not instrumented, and the backend is the slowest file to compile), the python
# backend (libpython and numpy are not instrumented, and the embedded interpreter's
# process-lifetime allocations would read as leaks; the ordinary build runs its tests, and the
# runtime's request-list path it uses is unit-tested here) and CUDA (no GPU in CI; nvcc takes no
# sanitizer flags).
# ThreadSanitizer stays in the ordinary build (ledger_tsan_test): it cannot be combined with ASan.
asan_dir=build-asan
cmake -S . -B "$asan_dir" -G Ninja -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
  -DCMAKE_BUILD_TYPE=Sanitize -DVRAMD_SANITIZE=address,undefined -DVRAMD_FUZZ=ON \
  -DVRAMD_THREAD_SAFETY_ANALYSIS=ON \
  -DVRAMD_BUILD_BENCH=OFF -DVRAMD_BUILD_PYTORCH_BACKEND=OFF -DVRAMD_BUILD_PYTHON_BACKEND=OFF \
  -DVRAMD_BUILD_UNIT_TESTS=ON -DVRAMD_UNIT_TEST_SHARDS=4 -DVRAMD_SANITIZE_OPTIMIZE=-O0 \
  "${link_flags[@]}"
cmake --build "$asan_dir" --parallel "$(nproc)"
phase "the sanitizer build"
# That build ran clang's thread-safety analysis over all it compiled (cmake/thread_safety.cmake);
# what it leaves out (the benchmarks, the pytorch backend, CUDA-only files) the analysis reads
# with clang -fsyntax-only, using the ordinary build's compile commands. No include cycle
# between folders of src/ either.
python3 scripts/thread_safety_check.py "${VRAMD_BUILD_DIR:-build}" "$asan_dir"
python3 scripts/include_cycles.py
phase "thread-safety and include checks"
# Leaks fail a test like any other report. An allocation too large to make returns null, as
# malloc does, rather than stopping the program: vramd answers that as ResourceExhausted, and
# tests check it does. Deselected from the e2e tests: those that bound the server's RSS, which
# under ASan measures its allocator (red zones, the quarantine of freed blocks), not vramd.
# The fuzz replays run in scripts/fuzz.sh below, not twice.
export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1:print_summary=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
PYTEST_ADDOPTS="-k 'not test_large_json_reply_peak_memory and not test_a_stream_nobody_reads_does_not_grow_the_server'" \
  ctest --test-dir "$asan_dir" --output-on-failure --parallel "$(nproc)" -E '_replay$'
phase "the sanitizer build's tests"
VRAMD_FUZZ_BUILD_DIR="$asan_dir" VRAMD_FUZZ_SECONDS="${VRAMD_FUZZ_SECONDS:-10}" bash scripts/fuzz.sh short
phase "fuzzing"
