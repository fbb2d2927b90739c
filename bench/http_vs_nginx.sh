#!/usr/bin/env bash
# HTTP front-end overhead: vramd serving add_sub (JSON, 2 x [1,16] FP32) against nginx serving
# a static file of the same bytes, both driven by wrk over keep-alive loopback connections.
#
#   bench/http_vs_nginx.sh [duration] [connections]      e.g. bench/http_vs_nginx.sh 30s 64
#
# Defaults: 10s, 16 connections. Environment knobs:
#   VRAMD_BIN       server binary (default <repo>/build/src/cli/vramd)
#   SERVER_THREADS  vramd --http-thread-count and nginx worker_processes (default 1)
#   WRK_THREADS     wrk -t (default 1; connections are spread over them)
#   ROUNDS          measured rounds per server, alternating vramd/nginx; the round with the
#                   median requests/s is reported (default 1)
#   WARMUP          wrk duration before measuring each server (default 2s)
#   SERVER_CPUS / WRK_CPUS  taskset CPU lists; by default, on >= 2 CPUs, servers get CPU 0 and
#                   wrk the rest, so the load generator does not steal the server's core.
#                   Set both to "" to disable pinning.
#   TARGET_RATIO    the goal for vramd rps / nginx rps (default 0.5)
#   ENFORCE=1       exit 3 when the ratio is below TARGET_RATIO (default: report only)
#
# What nginx does: the request is the same POST (same path, headers and JSON body, produced by
# bench/post_body.lua). nginx's static module refuses POST with 405, so the location turns that
# 405 into an internal redirect that serves the file with 200 (`error_page 405 =200 $uri`). The
# file is vramd's own response to the benchmark request, so both servers send identical bodies.
# nginx thus reads the same request bytes and writes the same response bytes, but does no JSON
# parsing, validation or compute: the ratio is the cost of vramd's whole request path compared
# with a near-zero-work HTTP server.
set -euo pipefail

DURATION="${1:-10s}"
CONNECTIONS="${2:-16}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
VRAMD_BIN="${VRAMD_BIN:-$ROOT/build/src/cli/vramd}"
SERVER_THREADS="${SERVER_THREADS:-1}"
WRK_THREADS="${WRK_THREADS:-1}"
ROUNDS="${ROUNDS:-1}"
WARMUP="${WARMUP:-2s}"
TARGET_RATIO="${TARGET_RATIO:-0.5}"
NCPU="$(nproc)"
if [ "$NCPU" -ge 2 ]; then
  SERVER_CPUS="${SERVER_CPUS-0}"
  WRK_CPUS="${WRK_CPUS-1-$((NCPU - 1))}"
else
  SERVER_CPUS="${SERVER_CPUS-}"
  WRK_CPUS="${WRK_CPUS-}"
fi
MODEL_REPO="$ROOT/examples/models"
URL_PATH="/v2/models/add_sub/infer"

die() { echo "http_vs_nginx: $*" >&2; exit 1; }
for tool in wrk nginx curl; do command -v "$tool" >/dev/null || die "$tool is not installed"; done
[ -x "$VRAMD_BIN" ] || die "vramd binary not found at $VRAMD_BIN (set VRAMD_BIN)"
[ -f "$MODEL_REPO/add_sub/config.pbtxt" ] || die "$MODEL_REPO/add_sub/config.pbtxt is missing"
[ "$CONNECTIONS" -ge "$WRK_THREADS" ] || die "connections ($CONNECTIONS) < WRK_THREADS ($WRK_THREADS)"

pin() {  # pin <cpus> <command...>: runs the command in the foreground
  local cpus="$1"; shift
  if [ -n "$cpus" ] && command -v taskset >/dev/null; then taskset -c "$cpus" "$@"; else "$@"; fi
}
# For background servers: a prefix rather than a function, so that $! is the server's own pid
# (taskset execs the command) and signals reach it.
pin_prefix() {
  if [ -n "$1" ] && command -v taskset >/dev/null; then echo "taskset -c $1"; fi
}

TMP="$(mktemp -d -t vramd-bench.XXXXXX)"
chmod 755 "$TMP"  # nginx workers may run as another user when started by root
VRAMD_PID=""
NGINX_PID=""
cleanup() {
  [ -n "$VRAMD_PID" ] && kill -TERM "$VRAMD_PID" 2>/dev/null && wait "$VRAMD_PID" 2>/dev/null || true
  [ -n "$NGINX_PID" ] && kill -TERM "$NGINX_PID" 2>/dev/null && wait "$NGINX_PID" 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the request: add_sub with batch 1, two [1,16] FP32 tensors as JSON ---------------------------
in0="" in1=""
for i in $(seq 0 15); do
  in0+="${in0:+,}$i.5"
  in1+="${in1:+,}$((i * 3)).25"
done
BODY_FILE="$TMP/request.json"
printf '{"id":"bench","inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"FP32","data":[%s]},{"name":"INPUT1","shape":[1,16],"datatype":"FP32","data":[%s]}]}' \
  "$in0" "$in1" >"$BODY_FILE"

# --- vramd ----------------------------------------------------------------------------------------
$(pin_prefix "$SERVER_CPUS") "$VRAMD_BIN" serve --model-repository "$MODEL_REPO" --http-port 0 --grpc-port 0 \
  --http-address 127.0.0.1 --metrics-port 0 --http-thread-count "$SERVER_THREADS" >"$TMP/vramd.log" 2>&1 &
VRAMD_PID=$!
VRAMD_PORT=""
for _ in $(seq 1 300); do
  VRAMD_PORT="$(grep -oE 'HTTP listening on [^ ]+:[0-9]+' "$TMP/vramd.log" | head -1 | grep -oE '[0-9]+$' || true)"
  [ -n "$VRAMD_PORT" ] && break
  kill -0 "$VRAMD_PID" 2>/dev/null || { cat "$TMP/vramd.log" >&2; die "vramd exited at start-up"; }
  sleep 0.1
done
[ -n "$VRAMD_PORT" ] || { cat "$TMP/vramd.log" >&2; die "vramd never logged 'HTTP listening on'"; }
for _ in $(seq 1 300); do
  curl -fsS -o /dev/null "http://127.0.0.1:$VRAMD_PORT/v2/models/add_sub/ready" 2>/dev/null && break
  sleep 0.1
done
VRAMD_URL="http://127.0.0.1:$VRAMD_PORT$URL_PATH"

# vramd's answer becomes nginx's file: identical response bytes.
mkdir -p "$TMP/www$(dirname "$URL_PATH")"
RESPONSE_FILE="$TMP/www$URL_PATH"
code="$(curl -sS -o "$RESPONSE_FILE" -w '%{http_code}' -H 'Content-Type: application/json' \
  --data-binary "@$BODY_FILE" "$VRAMD_URL")"
[ "$code" = 200 ] || { cat "$RESPONSE_FILE" >&2; die "vramd answered the benchmark request with HTTP $code"; }
grep -q '"OUTPUT0"' "$RESPONSE_FILE" || die "vramd's response has no OUTPUT0: $(cat "$RESPONSE_FILE")"
RESPONSE_BYTES="$(wc -c <"$RESPONSE_FILE")"

# --- nginx ----------------------------------------------------------------------------------------
NGINX_PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
mkdir -p "$TMP/nginx/logs" "$TMP/nginx/tmp"
cat >"$TMP/nginx/nginx.conf" <<EOF
daemon off;
master_process on;
user $(id -un) $(id -gn);
worker_processes $SERVER_THREADS;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx/logs/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  # The fastest static set-up for a small file measured here: no sendfile (a plain write beats
  # it for ~400 bytes) and the file's descriptor cached (no open/stat/close per request).
  sendfile off;
  open_file_cache max=16 inactive=600s;
  open_file_cache_valid 600s;
  tcp_nodelay on;
  keepalive_timeout 120s;
  keepalive_requests 100000000;
  client_body_temp_path $TMP/nginx/tmp/body;
  proxy_temp_path $TMP/nginx/tmp/proxy;
  fastcgi_temp_path $TMP/nginx/tmp/fastcgi;
  uwsgi_temp_path $TMP/nginx/tmp/uwsgi;
  scgi_temp_path $TMP/nginx/tmp/scgi;
  server {
    listen 127.0.0.1:$NGINX_PORT;
    root $TMP/www;
    location = $URL_PATH {
      default_type application/json;
      # The static module answers POST with 405; serve the file instead (internal GET).
      error_page 405 =200 \$uri;
    }
  }
}
EOF
$(pin_prefix "$SERVER_CPUS") nginx -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" -e "$TMP/nginx/logs/error.log" \
  2>>"$TMP/nginx/logs/error.log" &
NGINX_PID=$!
NGINX_URL="http://127.0.0.1:$NGINX_PORT$URL_PATH"
for _ in $(seq 1 100); do
  curl -fsS -o /dev/null -X POST --data-binary "@$BODY_FILE" "$NGINX_URL" 2>/dev/null && break
  kill -0 "$NGINX_PID" 2>/dev/null || { cat "$TMP/nginx/logs/error.log" >&2; die "nginx exited at start-up"; }
  sleep 0.1
done
nginx_bytes="$(curl -sS -X POST -H 'Content-Type: application/json' --data-binary "@$BODY_FILE" "$NGINX_URL" | wc -c)"
[ "$nginx_bytes" = "$RESPONSE_BYTES" ] || die "nginx sent $nginx_bytes bytes, vramd $RESPONSE_BYTES"

# --- measure ---------------------------------------------------------------------------------------
export BENCH_BODY_FILE="$BODY_FILE" BENCH_CONTENT_TYPE="application/json"
run_wrk() {  # run_wrk <url> <duration> -> the RESULT line
  pin "$WRK_CPUS" wrk --latency -t "$WRK_THREADS" -c "$CONNECTIONS" -d "$2" \
    -s "$HERE/post_body.lua" "$1" >"$TMP/wrk.out" 2>&1 || { cat "$TMP/wrk.out" >&2; die "wrk failed"; }
  grep '^RESULT ' "$TMP/wrk.out" || { cat "$TMP/wrk.out" >&2; die "wrk printed no RESULT line"; }
}
field() { sed -E "s/.* $1=([^ ]+).*/\1/" <<<"$2"; }

echo "request: POST $URL_PATH, $(wc -c <"$BODY_FILE") bytes JSON; response: $RESPONSE_BYTES bytes JSON"
echo "wrk: $WRK_THREADS thread(s), $CONNECTIONS keep-alive connections, $DURATION x $ROUNDS round(s)," \
  "warm-up $WARMUP; server threads/workers: $SERVER_THREADS;" \
  "cpus: server=${SERVER_CPUS:-any} wrk=${WRK_CPUS:-any}"
run_wrk "$VRAMD_URL" "$WARMUP" >/dev/null
run_wrk "$NGINX_URL" "$WARMUP" >/dev/null
: >"$TMP/vramd.results"
: >"$TMP/nginx.results"
for r in $(seq 1 "$ROUNDS"); do
  run_wrk "$VRAMD_URL" "$DURATION" >>"$TMP/vramd.results"
  run_wrk "$NGINX_URL" "$DURATION" >>"$TMP/nginx.results"
done
median_line() {  # the RESULT line with the median rps
  awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^rps=/) { split($i, a, "="); print a[2] "\t" $0 } }' "$1" |
    sort -n | awk -v n="$(wc -l <"$1")" 'NR == int((n + 1) / 2) { sub(/^[^\t]*\t/, ""); print }'
}
V="$(median_line "$TMP/vramd.results")"
N="$(median_line "$TMP/nginx.results")"

kill -0 "$VRAMD_PID" 2>/dev/null || die "vramd died during the benchmark"
printf '\n%-7s %12s %10s %10s %10s %8s %8s\n' server "requests/s" "p50 ms" "p90 ms" "p99 ms" non2xx errors
for name in vramd nginx; do
  line="$V"; [ "$name" = nginx ] && line="$N"
  errs=$(( $(field connect_errors "$line") + $(field read_errors "$line") + $(field write_errors "$line") + $(field timeouts "$line") ))
  awk -v n="$name" -v rps="$(field rps "$line")" -v p50="$(field p50_us "$line")" \
      -v p90="$(field p90_us "$line")" -v p99="$(field p99_us "$line")" \
      -v bad="$(field non2xx "$line")" -v errs="$errs" \
      'BEGIN { printf "%-7s %12.0f %10.3f %10.3f %10.3f %8d %8d\n", n, rps, p50/1000, p90/1000, p99/1000, bad, errs }'
done
ratio="$(awk -v a="$(field rps "$V")" -v b="$(field rps "$N")" 'BEGIN { printf "%.3f", (b > 0 ? a / b : 0) }')"
verdict="$(awk -v r="$ratio" -v t="$TARGET_RATIO" 'BEGIN { print (r >= t ? "meets" : "BELOW") }')"
echo
echo "ratio vramd/nginx requests/s: $ratio ($verdict the target of $TARGET_RATIO)"

status=0
if [ "$(field non2xx "$V")" != 0 ] || [ "$(field non2xx "$N")" != 0 ]; then
  echo "warning: non-2xx responses during the run (see table)" >&2
  status=2
fi
if [ "${ENFORCE:-0}" = 1 ] && [ "$verdict" = BELOW ]; then status=3; fi
exit "$status"
