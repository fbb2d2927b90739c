-- wrk script: POST the body in $BENCH_BODY_FILE with $BENCH_CONTENT_TYPE on every request,
-- and print one machine-readable line at the end:
--   RESULT requests=<n> duration_s=<s> rps=<r> p50_us=<u> p90_us=<u> p99_us=<u> max_us=<u>
--          non2xx=<n> connect_errors=<n> read_errors=<n> write_errors=<n> timeouts=<n>
-- Used by bench/http_vs_nginx.sh for both servers, so they get byte-identical requests.

local path = os.getenv("BENCH_BODY_FILE")
assert(path, "BENCH_BODY_FILE is not set")
local f = assert(io.open(path, "rb"))
local body = f:read("*a")
f:close()

wrk.method = "POST"
wrk.body = body
wrk.headers["Content-Type"] = os.getenv("BENCH_CONTENT_TYPE") or "application/json"

function done(summary, latency, requests)
  local seconds = summary.duration / 1e6
  local e = summary.errors
  io.write(string.format(
    "RESULT requests=%d duration_s=%.3f rps=%.1f p50_us=%d p90_us=%d p99_us=%d max_us=%d " ..
    "non2xx=%d connect_errors=%d read_errors=%d write_errors=%d timeouts=%d\n",
    summary.requests, seconds, summary.requests / seconds,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max,
    e.status, e.connect, e.read, e.write, e.timeout))
end
