#!/usr/bin/env bash
# What one request costs vramd's front end and scheduler alone, at concurrency 1: the built-in
# identity model (examples/models/identity_fp32) over HTTP with the binary tensor extension,
# with a 64-byte and a 150 KB tensor (the size of the pytorch benchmark's input), once with
# glibc's malloc defaults (VRAMD_KEEP_MALLOC_DEFAULTS=1) and once with vramd's own thresholds
# (vramd_main.cc, TuneMalloc). Prints infer_load's JSON lines, labelled, then the ratio of
# requests/s tuned / defaults for each size.
#   bash bench/identity_roundtrip.sh VRAMD INFER_LOAD [OUTDIR]
set -uo pipefail
vramd=$1 load=$2 out=${3:-/tmp/vramd-roundtrip}
py=${PYTHON:-python3}
mkdir -p "$out"
# A binary-extension body: the JSON header, then the raw FP32 values; prints the header length.
make_body() {
  $py - "$1" "$2" <<'PY'
import json, struct, sys
n, path = int(sys.argv[1]), sys.argv[2]
header = json.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [n],
                                 "parameters": {"binary_data_size": 4 * n}}],
                     "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]}).encode()
with open(path, "wb") as f:
    f.write(header + struct.pack("<%df" % n, *([0.5] * n)))
print(len(header))
PY
}
small_hl=$(make_body 16 "$out/small.bin") || exit 1
large_hl=$(make_body 37632 "$out/large.bin") || exit 1
port=18591
declare -A rps
for malloc in defaults tuned; do
  keep=0
  [ "$malloc" = defaults ] && keep=1
  VRAMD_KEEP_MALLOC_DEFAULTS=$keep "$vramd" serve --http-port $port --grpc-port 0 --no-allow-metrics \
    --model-repository examples/models > "$out/server-$malloc.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do curl -sf localhost:$port/v2/models/identity_fp32/ready > /dev/null && break; sleep 0.2; done
  for body in small large; do
    hl=${body}_hl
    line=$("$load" --port $port --model identity_fp32 --body-file "$out/$body.bin" \
      --header-length "${!hl}" --concurrency 1 --duration 3 --warmup 1)
    echo "malloc=$malloc body=$body: $line"
    rps[$malloc.$body]=$(echo "$line" | sed -E 's/.*"rps":([0-9.]+).*/\1/')
  done
  kill -TERM $pid; wait $pid
done
for body in small large; do
  echo "ratio tuned/defaults body=$body: $($py -c "import sys; print('%.3f' % (float(sys.argv[2]) / float(sys.argv[1])))" "${rps[defaults.$body]}" "${rps[tuned.$body]}")"
done
