#!/usr/bin/env bash
# What TLS costs on gRPC: the same vramd served plaintext and with --grpc-use-ssl, alternated
# ROUNDS times, each measured with gRPC's own C++ client (grpc_infer_load --library-client,
# --tls-root for TLS): 16-element tensors at c=1 and c=16, 4 MiB at c=1. Prints one line per
# run (mode, elements, concurrency, grpc_infer_load's JSON) and the mean ratio per series.
#   bench/grpc_tls_cost.sh [VRAMD [GRPC_INFER_LOAD [ROUNDS]]]   (defaults: build/...)
# Not a target (docs/benchmarks.md, "What TLS costs on gRPC"). Needs the openssl command.
set -euo pipefail
cd "$(dirname "$0")/.."
vramd="${1:-build/src/cli/vramd}"
load="${2:-build/bench/grpc_infer_load}"
rounds="${3:-3}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A CA and a certificate for localhost it signed.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$work/ca.key" \
  -out "$work/ca.crt" -days 1 -subj "/CN=vramd bench CA" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$work/server.key" \
  -out "$work/server.csr" -subj "/CN=localhost" 2>/dev/null
echo "subjectAltName=DNS:localhost" > "$work/ext"
openssl x509 -req -in "$work/server.csr" -CA "$work/ca.crt" -CAkey "$work/ca.key" \
  -CAcreateserial -out "$work/server.crt" -days 1 -extfile "$work/ext" 2>/dev/null
mkdir -p "$work/repo/identity_grpc/1"
cat > "$work/repo/identity_grpc/config.pbtxt" <<'CONFIG'
name: "identity_grpc"
backend: "identity"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
instance_group [ { kind: KIND_CPU count: 2 } ]
CONFIG

run() {  # MODE ELEMENTS CONCURRENCY
  local server=() client=()
  if [ "$1" = tls ]; then
    server=(--grpc-use-ssl=true --grpc-server-cert "$work/server.crt" --grpc-server-key "$work/server.key")
    client=(--tls-root "$work/ca.crt")
  fi
  "$vramd" serve --model-repository "$work/repo" --http-port 0 --grpc-port 0 --metrics-port 0 \
    "${server[@]}" > "$work/vramd.log" 2>&1 &
  local pid=$! port=""
  for _ in $(seq 100); do
    port=$(sed -n 's/.*gRPC listening on [^ ]*:\([0-9]*\).*/\1/p' "$work/vramd.log")
    grep -q "HTTP listening" "$work/vramd.log" && [ -n "$port" ] && break
    sleep 0.1
  done
  local result
  result=$("$load" --model identity_grpc --host localhost --port "$port" --elements "$2" \
    --concurrency "$3" --duration 4 --warmup 1 --library-client "${client[@]}" | tail -1)
  kill "$pid"
  wait "$pid" || true
  echo "$1 $2 $3 $result"
}

for _ in $(seq "$rounds"); do
  for series in "16 1" "16 16" "1048576 1"; do
    # shellcheck disable=SC2086
    run plain $series
    # shellcheck disable=SC2086
    run tls $series
  done
done | tee "$work/runs.txt"
/usr/bin/python3 - "$work/runs.txt" <<'PY'
import json, sys, collections
rps = collections.defaultdict(list)
for line in open(sys.argv[1]):
    mode, elements, c, doc = line.split(" ", 3)
    rps[(elements, c, mode)].append(json.loads(doc)["rps"])
for elements, c in sorted({(e, c) for e, c, _ in rps}, key=lambda k: (int(k[0]), int(k[1]))):
    plain, tls = rps[(elements, c, "plain")], rps[(elements, c, "tls")]
    mean = lambda v: sum(v) / len(v)
    print("FIGURE grpc_tls_over_plaintext_%s_elements_c%s %.3f ratio (plaintext %.1f, TLS %.1f req/s)"
          % (elements, c, mean(tls) / mean(plain), mean(plain), mean(tls)))
PY
