#!/usr/bin/env python3
"""What tracing costs a request (issue 18): one vramd serving a 16-element identity model over
HTTP, driven by bench/infer_load, with three settings switched through the trace extension
(POST /v2/trace/setting) in the same server run, alternating (A B C A B C ...) so that drift
hits every series:
  off     trace_level OFF (the default): the request path reads one atomic flag
  rate1   trace_level TIMESTAMPS, trace_rate 1, every request traced and exported
  (the export goes to a collector this script runs: OTLP/HTTP JSON in opentelemetry mode, or
  Triton's trace file with --mode triton)
The baseline is "off" measured in the same run. Prints FIGURE lines (the ratio of each series'
median req/s to off's, and of vramd's own CPU time per request, read from /proc: on a machine
with few cores the collector and the load generator take CPU the server would serve with, and
the req/s ratio shows their cost too; the CPU ratio is the server's alone) and one JSON line. The issue's targets: off costs nothing measurable
(there is no "untraced build" to compare it with: the figure here is off against itself,
split in two halves of its rounds, which shows the noise a real cost would have to exceed),
and rate 1 costs at most 5% req/s.

  trace_overhead.py --vramd BIN/vramd --infer-load BIN/infer_load [--mode opentelemetry|triton]
                    [--rounds 6] [--duration 3] [--concurrency 4]
"""
import argparse
import http.client
import http.server
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

MODEL = """name: "echo"
backend: "identity"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
instance_group [ { kind: KIND_CPU count: 2 } ]
"""


class Sink:
    """A collector that accepts every OTLP POST and counts spans."""

    def __init__(self):
        self.spans = 0
        sink = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                # Counted, not parsed: on a 2-core machine a collector that parses every span
                # takes the CPU the server would serve with (tests/e2e/test_trace.py parses).
                body = self.rfile.read(int(self.headers["Content-Length"]))
                sink.spans += body.count(b'"spanId"')
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self):
        return "http://127.0.0.1:%d/v1/traces" % self.server.server_address[1]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, path, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    if r.status != 200:
        raise RuntimeError("%s: %d %s" % (path, r.status, data))


def cpu_seconds(pid):
    """User plus system CPU time of process `pid` and all its threads, in seconds."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vramd", required=True)
    ap.add_argument("--infer-load", required=True)
    ap.add_argument("--mode", default="opentelemetry", choices=["opentelemetry", "triton"])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--duration", type=float, default=3)
    ap.add_argument("--concurrency", type=int, default=4)
    args = ap.parse_args()

    work = tempfile.mkdtemp()
    os.makedirs(os.path.join(work, "repo", "echo", "1"))
    with open(os.path.join(work, "repo", "echo", "config.pbtxt"), "w") as f:
        f.write(MODEL)
    body = os.path.join(work, "body.json")
    with open(body, "w") as f:
        json.dump({"inputs": [{"name": "INPUT0", "shape": [16], "datatype": "FP32",
                               "data": list(range(16))}]}, f)
    sink = Sink()
    port = free_port()
    flags = ["--trace-config", "mode=" + args.mode]
    if args.mode == "opentelemetry":
        flags += ["--trace-config", "opentelemetry,url=" + sink.url,
                  "--trace-config", "opentelemetry,bsp_schedule_delay=200"]
    else:
        flags += ["--trace-config", "triton,file=" + os.path.join(work, "trace.json"),
                  "--trace-config", "triton,log-frequency=10000"]
    server = subprocess.Popen(
        [args.vramd, "serve", "--model-repository", os.path.join(work, "repo"),
         "--http-port", str(port), "--no-allow-grpc", "--no-allow-metrics"] + flags,
        stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "vramd.log"), "w"))
    try:
        deadline = time.time() + 60
        while True:
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                c.request("GET", "/v2/health/ready")
                if c.getresponse().status == 200:
                    break
            except OSError:
                pass
            if time.time() > deadline:
                raise RuntimeError("vramd did not get ready")
            time.sleep(0.1)
        settings = {"off": {"trace_level": ["OFF"]},
                    "rate1": {"trace_level": ["TIMESTAMPS"], "trace_rate": "1"}}
        rps = {name: [] for name in settings}
        p99 = {name: [] for name in settings}
        cpu_us = {name: [] for name in settings}
        for _ in range(args.rounds):
            for name, setting in settings.items():
                post(port, "/v2/trace/setting", setting)
                cpu_before = cpu_seconds(server.pid)
                out = subprocess.run(
                    [args.infer_load, "--port", str(port), "--model", "echo", "--body-file", body,
                     "--concurrency", str(args.concurrency), "--duration", str(args.duration),
                     "--warmup", "0.5"], capture_output=True, text=True, timeout=120)
                result = json.loads(out.stdout.strip().splitlines()[-1])
                if result["errors"]:
                    raise RuntimeError("%s: %d errors" % (name, result["errors"]))
                rps[name].append(result["rps"])
                p99[name].append(result["p99_ms"])
                # The CPU counted covers the 0.5 s warmup too: its requests are estimated at the
                # measured rate (the same for every series, so the ratio is unaffected).
                sent = result["requests"] * (args.duration + 0.5) / args.duration
                cpu_us[name].append((cpu_seconds(server.pid) - cpu_before) * 1e6 / sent)
    finally:
        server.terminate()
        server.wait(timeout=60)
    off = statistics.median(rps["off"])
    half = args.rounds // 2
    off_split = statistics.median(rps["off"][half:]) / statistics.median(rps["off"][:half])
    rate1 = statistics.median(rps["rate1"]) / off
    cpu_ratio = statistics.median(cpu_us["rate1"]) / statistics.median(cpu_us["off"])
    print("FIGURE tracing off, second half of rounds against first: %.3f (noise)" % off_split)
    print("FIGURE vramd CPU per request at rate 1 (%s) against off: %.3f (%.1f us against %.1f)"
          % (args.mode, cpu_ratio, statistics.median(cpu_us["rate1"]),
             statistics.median(cpu_us["off"])))
    print("FIGURE tracing at rate 1 (%s) against off: %.3f of req/s (target >= 0.95)"
          % (args.mode, rate1))
    if args.mode == "opentelemetry":
        print("FIGURE spans the collector received: %d" % sink.spans)
    print(json.dumps({"mode": args.mode, "concurrency": args.concurrency, "rounds": args.rounds,
                      "rps_off": rps["off"], "rps_rate1": rps["rate1"],
                      "p99_ms_off": p99["off"], "p99_ms_rate1": p99["rate1"],
                      "cpu_us_per_request_off": cpu_us["off"],
                      "cpu_us_per_request_rate1": cpu_us["rate1"], "cpu_ratio_rate1": cpu_ratio,
                      "ratio_rate1": rate1, "off_noise": off_split, "spans": sink.spans}))


if __name__ == "__main__":
    sys.exit(main())
