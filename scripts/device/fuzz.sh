#!/usr/bin/env bash
# Runs on the GPU machine (device tool, carry ["fuzz-dist"] from package_fuzz.sh): fuzz campaigns
# with libFuzzer's parallel workers, one target after another, each on every core but one, so a campaign
# of 10 M executions takes minutes. The GPU is not used; the machine's cores are.
#   FUZZ_TARGETS   targets in order (default: all in the package)
#   FUZZ_RUNS      executions per campaign, summed over the workers (default 10000000)
#   FUZZ_SECONDS   a campaign's time limit, whichever comes first (default 540: one call's 600 s)
#   FUZZ_MODE      jobs (default): independent worker processes, each running its share of the
#                  executions on the campaign's shared corpus, which each reloads as the others
#                  grow it; fork: libFuzzer's -fork, short jobs that restart every few seconds
#                  (faster for the parsers on the H200 machine, 1.6-2.3x; slower for targets that
#                  build a model repository at start-up and spend a short job doing that)
# Writes $OUT/summary.txt (one line per campaign: executions, seconds, exec/s, coverage, result),
# $OUT/<target>.log (the workers' start and worker 0's last lines) and, on a failure, the first
# failing worker's log as $OUT/<target>-failure.log and the input as $OUT/<target>-crash-*
# (reproduce here: build-fuzz/fuzz/<target>_fuzzer FILE).
# Seeds, dictionaries and past failures come from tests/fuzz, as scripts/fuzz.sh uses them.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-/tmp/vramd-fuzz-out}"
mkdir -p "$OUT"
pkg=$(mktemp -d)
tar -C "$pkg" -xzf fuzz-dist/fuzz.tar.gz
export LD_LIBRARY_PATH="$pkg/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export ASAN_OPTIONS="symbolize=1:detect_leaks=1"
workers=$(( $(nproc) > 2 ? $(nproc) - 1 : 1 ))
runs="${FUZZ_RUNS:-10000000}"
seconds="${FUZZ_SECONDS:-540}"
targets="${FUZZ_TARGETS:-$(cd "$pkg/bin" && ls | sed 's/_fuzzer$//')}"
summary="$OUT/summary.txt"
echo "# fuzz campaigns $(date -u +%FT%TZ) on $(nproc) cores ($workers workers), commit $(cut -c1-12 "$pkg/commit")" | tee -a "$summary"
status=0
for t in $targets; do
  if [ "${FUZZ_MODE:-jobs}" = fork ]; then
    opts=(-fork="$workers" -runs="$runs")
  else
    opts=(-jobs="$workers" -workers="$workers" -runs="$(( (runs + workers - 1) / workers ))")
  fi
  opts+=(-max_total_time="$seconds" -timeout=60 -rss_limit_mb=4096 -print_final_stats=1
         -artifact_prefix="$OUT/$t-")
  [ -f "tests/fuzz/dict/$t.dict" ] && opts+=(-dict="$PWD/tests/fuzz/dict/$t.dict")
  len=$(bash scripts/fuzz.sh max-len "$t")
  [ "$len" != 0 ] && opts+=(-max_len="$len")
  work=$(mktemp -d)
  mkdir -p "$work/corpus"
  seeds=("$PWD/tests/fuzz/corpus/$t")
  [ -d "tests/fuzz/regressions/$t" ] && seeds+=("$PWD/tests/fuzz/regressions/$t")
  start=$(date +%s)
  (cd "$work" && "$pkg/bin/${t}_fuzzer" "${opts[@]}" "$work/corpus" "${seeds[@]}") > "$work/main.log" 2>&1
  took=$(( $(date +%s) - start ))
  if [ "${FUZZ_MODE:-jobs}" = fork ]; then
    # The parent's status lines count every job's executions: "#<executions>: cov: ...".
    last=$(grep -E '^#[0-9]+:' "$work/main.log" | tail -1)
    execs=$(echo "$last" | sed -E 's/^#([0-9]+):.*/\1/')
    execs=${execs:-0}
    finished=$workers
    cov=$(echo "$last" | grep -o 'cov: [0-9]* ft: [0-9]*')
    cp "$work/main.log" "$work/fuzz-0.log"
  else
    # Each worker's log is fuzz-<job>.log; its final stats say how many inputs it ran.
    execs=$(cat "$work"/fuzz-*.log 2>/dev/null | grep -o 'stat::number_of_executed_units: *[0-9]*' \
            | awk '{s += $2} END {print s + 0}')
    finished=$(grep -l 'stat::number_of_executed_units' "$work"/fuzz-*.log 2>/dev/null | wc -l)
    cov=$(grep -h -o 'cov: [0-9]* ft: [0-9]*' "$work"/fuzz-*.log 2>/dev/null | sort -t' ' -k2n | tail -1)
  fi
  result=ok
  if grep -l -E '^==[0-9]+== ?ERROR|^SUMMARY: |fuzz check failed|Test unit written' "$work"/fuzz-*.log \
       > "$work/failed" 2>/dev/null; then
    result="FAILED in $(wc -l < "$work/failed") worker(s)"; status=1
    # The first failing worker's report, whole.
    cp "$(head -1 "$work/failed")" "$OUT/$t-failure.log"
  elif [ "$finished" -ne "$workers" ]; then
    result="INCOMPLETE: $finished of $workers workers reported"; status=1
  fi
  { grep -v -E '^(INFO: -fork=|FORK: )' "$work/main.log"; tail -n 5 "$work"/fuzz-0.log; } | grep -v '  NEW_FUNC' | tail -c 1000000 > "$OUT/$t.log"
  printf '%-16s %10s execs %5s s %8s exec/s  %s  %s\n' "$t" "$execs" "$took" \
    "$(( execs / (took > 0 ? took : 1) ))" "${cov:-cov: ?}" "$result" | tee -a "$summary"
  rm -rf "$work"
done
exit $status
