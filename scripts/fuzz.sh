#!/usr/bin/env bash
# Builds and runs the libFuzzer targets of tests/fuzz (docs/fuzzing.md).
#
#   scripts/fuzz.sh build                  configure and build them (clang, ASan+UBSan) in build-fuzz
#   scripts/fuzz.sh short [TARGET...]      CI: replay each target's seeds and past failures, then
#                                          fuzz it for VRAMD_FUZZ_SECONDS (25) seconds
#   scripts/fuzz.sh long TARGET [ARGS...]  a campaign: one process at nice 19, -max_total_time=3600
#                                          unless ARGS say otherwise (e.g. -runs=10000000); the
#                                          grown corpus is kept in <build>/fuzz-work/TARGET
#   scripts/fuzz.sh merge TARGET           add to tests/fuzz/corpus/TARGET the inputs of the grown
#                                          corpus that reach coverage the seeds do not (-merge=1)
#   scripts/fuzz.sh list                   the targets
#   scripts/fuzz.sh max-len TARGET         the -max_len its campaigns use (0: libFuzzer's default)
#
# Each run prints one line: executions, exec/s, coverage (libFuzzer's cov: and ft:), and fails
# (exit 1) on a crash, a leak, a timeout or a failed check, leaving the input in
# <build>/fuzz-artifacts/TARGET/. Reproduce one with: <build>/fuzz/TARGET_fuzzer FILE
#
# Environment: VRAMD_FUZZ_BUILD_DIR (build-fuzz; scripts/test.sh points it at its build-asan,
# which has the targets too), VRAMD_FUZZ_SECONDS (25), VRAMD_BUILD_LOCK (below).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build_dir="${VRAMD_FUZZ_BUILD_DIR:-build-fuzz}"
seconds="${VRAMD_FUZZ_SECONDS:-25}"
fuzz_src=tests/fuzz
# VRAMD_BUILD_LOCK: a file to flock(1) around configuring and building (a machine whose
# builders take turns); unset, nothing is locked.
locked() {
  if [ -n "${VRAMD_BUILD_LOCK:-}" ]; then flock "$VRAMD_BUILD_LOCK" "$@"; else "$@"; fi
}

targets() {
  for f in "$fuzz_src"/*_fuzzer.cc; do basename "$f" _fuzzer.cc; done
}

# Inputs as large as these targets' interesting cases: HTTP trailers and buffers past 64 KiB,
# JSON nested 100k deep. The others stay at libFuzzer's default (their longest seed, >= 4096).
max_len() {
  case "$1" in
    http_request | repository_api | config_json) echo 140000 ;;
    *) echo 0 ;;
  esac
}

build() {
  if [ ! -f "$build_dir/CMakeCache.txt" ]; then
    command -v clang++-14 >/dev/null || bash scripts/install-deps.sh
    locked cmake -S . -B "$build_dir" -G Ninja \
      -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_BUILD_TYPE=Sanitize \
      -DVRAMD_FUZZ=ON -DVRAMD_BUILD_TESTS=OFF -DVRAMD_BUILD_BENCH=OFF \
      -DVRAMD_BUILD_PYTORCH_BACKEND=OFF >/dev/null
  fi
  locked cmake --build "$build_dir" --target vramd_fuzz_targets --parallel "$(nproc)"
}

# The options every run shares. Leaks are errors (libFuzzer checks after each input that
# allocated more than it freed); a slow input is one that takes more than 60 s.
common_options() {
  local t=$1
  local opts=(-timeout=60 -rss_limit_mb=4096 -print_final_stats=1
              -artifact_prefix="$root/$build_dir/fuzz-artifacts/$t/")
  [ -f "$fuzz_src/dict/$t.dict" ] && opts+=(-dict="$fuzz_src/dict/$t.dict")
  local len
  len=$(max_len "$t")
  [ "$len" != 0 ] && opts+=(-max_len="$len")
  printf '%s\n' "${opts[@]}"
}

# One line from a libFuzzer log: executions, exec/s, the last coverage figures.
summarize() {
  local t=$1 log=$2
  local execs rate cov
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | tail -1 | awk '{print $2}')
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | tail -1 | awk '{print $2}')
  cov=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$log" | tail -1)
  printf '%-16s %10s execs %7s exec/s  %s\n' "$t" "${execs:-?}" "${rate:-?}" "${cov:-cov: ?}"
}

# run TARGET LOG ARGS...: the target with the common options; fails with the log's end.
run() {
  local t=$1 log=$2
  shift 2
  local bin="$build_dir/fuzz/${t}_fuzzer"
  mkdir -p "$build_dir/fuzz-artifacts/$t"
  local opts
  mapfile -t opts < <(common_options "$t")
  if ! "$bin" "${opts[@]}" "$@" >"$log" 2>&1; then
    echo "FAILED: $t (log $log)" >&2
    grep -E 'ERROR|SUMMARY|fuzz check failed|Test unit written|^#[0-9]+ +(NEW|DONE)' "$log" |
      tail -20 >&2 || tail -40 "$log" >&2
    return 1
  fi
}

short() {
  local list=("$@")
  [ ${#list[@]} -eq 0 ] && mapfile -t list < <(targets)
  build
  local failed=0
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  for t in "${list[@]}"; do
    local replay=("$fuzz_src/corpus/$t")
    [ -d "$fuzz_src/regressions/$t" ] && replay+=("$fuzz_src/regressions/$t")
    if ! run "$t" "$work/$t.replay.log" -runs=0 "${replay[@]}"; then
      failed=1
      continue
    fi
    # New inputs go to the scratch folder (the first), not into the committed seeds.
    mkdir -p "$work/$t"
    if run "$t" "$work/$t.log" -max_total_time="$seconds" "$work/$t" "$fuzz_src/corpus/$t"; then
      summarize "$t" "$work/$t.log"
    else
      failed=1
    fi
  done
  return $failed
}

long() {
  local t=$1
  shift
  build
  local work="$build_dir/fuzz-work/$t" logs="$build_dir/fuzz-logs"
  mkdir -p "$work" "$logs"
  local log
  log="$logs/$t-$(date -u +%Y%m%dT%H%M%SZ).log"
  local limits=("$@")
  [ ${#limits[@]} -eq 0 ] && limits=(-max_total_time=3600)
  echo "$(date -u +%FT%TZ) $t: ${limits[*]} on $(nproc) cores of $(uname -n); log $log"
  local status=0
  # One process (no -jobs or -fork, which would start more), at the lowest priority.
  nice -n 19 "$0" _run "$t" "$log" "${limits[@]}" "$work" "$fuzz_src/corpus/$t" || status=$?
  summarize "$t" "$log"
  return $status
}

merge() {
  local t=$1
  build
  "$build_dir/fuzz/${t}_fuzzer" -merge=1 -max_len=1048576 "$fuzz_src/corpus/$t" \
    "$build_dir/fuzz-work/$t"
}

main() {
  case "${1:-}" in
    build) build ;;
    short) shift; short "$@" ;;
    long) [ $# -ge 2 ] || { echo "usage: $0 long TARGET [libFuzzer args]" >&2; exit 2; }; shift; long "$@" ;;
    merge) [ $# -eq 2 ] || { echo "usage: $0 merge TARGET" >&2; exit 2; }; merge "$2" ;;
    list) targets ;;
    max-len) [ $# -eq 2 ] || { echo "usage: $0 max-len TARGET" >&2; exit 2; }; max_len "$2" ;;
    _run) shift; local t=$1 log=$2; shift 2; run "$t" "$log" "$@" ;;  # long's niced child
    *) sed -n '2,20p' "$0" >&2; exit 2 ;;
  esac
}

# On one line, so that bash has read all it runs before it starts: a campaign lasts hours, and
# editing this file meanwhile must not change what the running copy reads next.
main "$@"; exit $?
