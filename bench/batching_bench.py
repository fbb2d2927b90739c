#!/usr/bin/python3
"""Dynamic batching benchmark: throughput of a model whose cost per execution does not depend
on the batch size, with and without dynamic batching, at concurrency 1 to 64.

    bench/batching_bench.py [--seconds 2] [--warmup 0.5] [--delay-us 2000]
                            [--queue-delay-us 1000] [--concurrency 1,2,4,8,16,32,64]

Starts vramd (VRAMD_BIN, default build/src/cli/vramd) with --http-port 0 --metrics-port 0 on a
temporary repository holding two identity models with execute_delay_us (every execution sleeps
that long, whatever its batch size; src/backends/identity/identity_backend.h), max_batch_size
64 and one instance each:
  - fixed_nobatch: no dynamic_batching (one request per execution);
  - fixed_batch:   dynamic_batching { max_queue_delay_microseconds: --queue-delay-us }.
For each model and concurrency c, c client threads (python3 stdlib, one keep-alive
http.client connection each) send the same small JSON request ([1,16] FP32) back to back;
after a warm-up, completed requests are counted for --seconds. Prints a table, then the
ratios, each against a baseline measured in this same run:
  - batched@32 / batched@1   (target >= 10: batching turns concurrency into throughput);
  - batched@32 / unbatched@32 (what batching buys at the same load).
Exits 1 if the first target is missed (with --enforce), 2 on a request error or a server that
does not start.
"""

import argparse
import http.client
import json
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
LISTEN_RE = re.compile(r"HTTP listening on (\[[^\]]+\]|[^\s:]+):(\d+)")
TARGET = 10.0

CONFIG = """
name: "{name}"
backend: "identity"
max_batch_size: 64
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
parameters {{ key: "execute_delay_us" value {{ string_value: "{delay_us}" }} }}
{batching}
"""

BODY = json.dumps({
    "inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32",
                "data": [float(i) for i in range(16)]}],
}).encode()


def write_repository(root, delay_us, queue_delay_us):
    models = {
        "fixed_nobatch": "",
        "fixed_batch": "dynamic_batching { max_queue_delay_microseconds: %d }" % queue_delay_us,
    }
    for name, batching in models.items():
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(
            CONFIG.format(name=name, delay_us=delay_us, batching=batching))
    return list(models)


def start_server(binary, repo, log_path):
    log = open(log_path, "wb")
    proc = subprocess.Popen(
        [binary, "serve", "--model-repository", str(repo), "--http-address", "127.0.0.1",
         "--http-port", "0", "--metrics-port", "0", "--grpc-port", "0"],
        stdout=subprocess.DEVNULL, stderr=log, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        m = LISTEN_RE.search(pathlib.Path(log_path).read_text(errors="replace"))
        if m:
            return proc, int(m.group(2))
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    sys.stderr.write(pathlib.Path(log_path).read_text(errors="replace"))
    raise SystemExit("vramd did not start (no 'HTTP listening on' line)")


def connect(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.connect()
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return conn


def infer(conn, model):
    conn.request("POST", "/v2/models/%s/infer" % model, body=BODY,
                 headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read()
    if r.status != 200:
        raise RuntimeError("HTTP %d: %r" % (r.status, data[:300]))
    return data


def wait_ready(port, models):
    conn = connect(port)
    try:
        for m in models:
            for _ in range(600):
                conn.request("GET", "/v2/models/%s/ready" % m)
                r = conn.getresponse()
                r.read()
                if r.status == 200:
                    break
                time.sleep(0.1)
            else:
                raise SystemExit("model %s never became ready" % m)
        out = json.loads(infer(conn, models[0]))
        assert out["outputs"][0]["data"] == [float(i) for i in range(16)], out
    finally:
        conn.close()


def measure(port, model, concurrency, seconds, warmup):
    """Requests/s and mean latency (ms) of `concurrency` closed-loop clients."""
    stop = threading.Event()
    start = threading.Barrier(concurrency + 1)
    window = {}
    done = [[] for _ in range(concurrency)]  # (completion time, latency) per client
    errors = []

    def client(i):
        conn = connect(port)
        try:
            start.wait()
            while not stop.is_set():
                t0 = time.perf_counter()
                infer(conn, model)
                t1 = time.perf_counter()
                done[i].append((t1, t1 - t0))
        except Exception as e:  # noqa: BLE001
            errors.append(e)
            stop.set()
        finally:
            conn.close()

    threads = [threading.Thread(target=client, args=(i,), daemon=True)
               for i in range(concurrency)]
    for t in threads:
        t.start()
    start.wait()
    time.sleep(warmup)
    window["begin"] = time.perf_counter()
    time.sleep(seconds)
    window["end"] = time.perf_counter()
    stop.set()
    for t in threads:
        t.join()
    if errors:
        raise SystemExit("request failed: %s" % errors[0])
    in_window = [lat for per in done for (t, lat) in per
                 if window["begin"] <= t < window["end"]]
    elapsed = window["end"] - window["begin"]
    mean_ms = 1000.0 * sum(in_window) / len(in_window) if in_window else float("nan")
    return len(in_window) / elapsed, mean_ms


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--warmup", type=float, default=0.5)
    p.add_argument("--delay-us", type=int, default=2000)
    p.add_argument("--queue-delay-us", type=int, default=1000)
    p.add_argument("--concurrency", default="1,2,4,8,16,32,64")
    p.add_argument("--enforce", action="store_true", help="exit 1 when the target is missed")
    args = p.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    for needed in (1, 32):
        if needed not in levels:
            levels.append(needed)
    levels.sort()

    binary = os.environ.get("VRAMD_BIN", str(ROOT / "build" / "src" / "cli" / "vramd"))
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="vramd-batching-bench-"))
    try:
        models = write_repository(tmp / "repo", args.delay_us, args.queue_delay_us)
        proc, port = start_server(binary, tmp / "repo", tmp / "vramd.stderr.log")
        try:
            wait_ready(port, models)
            print("vramd %s, port %d; execute_delay_us %d, max_batch_size 64, 1 instance; "
                  "fixed_batch max_queue_delay_microseconds %d; %.1f s per point after %.1f s "
                  "warm-up" % (binary, port, args.delay_us, args.queue_delay_us, args.seconds,
                               args.warmup))
            results = {}
            print("%11s | %22s | %22s | %9s" % ("concurrency", "fixed_nobatch req/s (ms)",
                                                "fixed_batch req/s (ms)", "batch/no"))
            for c in levels:
                row = {}
                for m in ("fixed_nobatch", "fixed_batch"):
                    row[m] = measure(port, m, c, args.seconds, args.warmup)
                results[c] = row
                nb, b = row["fixed_nobatch"], row["fixed_batch"]
                print("%11d | %12.1f (%7.2f) | %12.1f (%7.2f) | %8.2fx"
                      % (c, nb[0], nb[1], b[0], b[1], b[0] / nb[0]), flush=True)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    b1 = results[1]["fixed_batch"][0]
    b32 = results[32]["fixed_batch"][0]
    nb32 = results[32]["fixed_nobatch"][0]
    scaling = b32 / b1
    met = scaling >= TARGET
    print("RATIO batched@32 / batched@1 = %.1f / %.1f = %.2f  (target >= %.0f: %s)"
          % (b32, b1, scaling, TARGET, "met" if met else "MISSED"))
    print("RATIO batched@32 / unbatched@32 = %.1f / %.1f = %.2f" % (b32, nb32, b32 / nb32))
    return 1 if args.enforce and not met else 0


if __name__ == "__main__":
    sys.exit(main())
