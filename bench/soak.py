#!/usr/bin/env python3
"""Soak: vramd at saturation for a long time, with a reload every minute and bad requests mixed
in, sampling what would show a leak. Issue 12's record: an hour, flat within 1% after warm-up.

  soak.py --vramd BIN --infer-load BIN [--repository DIR] [--model add_sub] [--body FILE]
          [--duration 3600] [--warmup 300] [--reload-every 60] [--sample-every 10]
          [--concurrency 16] [--tolerance 0.01] [--out DIR]

What runs at once:
  - infer_load (bench/infer_load.cc) with --concurrency keep-alive clients on --model for the
    whole run; every non-200 answer is an error (a reload must not fail a request);
  - a reload of --model every --reload-every seconds (POST .../load of the loaded model, which
    loads a new copy, switches and retires the old one: docs/model-control.md);
  - one client cycling through malformed requests (bad JSON, wrong shapes, unknown models,
    smuggling framing, huge declared bodies, a 70 KB trailer, a deep JSON body) about 20 a
    second; each must be answered with a 4xx/5xx or a close, never kill the server;
  - every --sample-every seconds: the server's RSS, open fds, threads and, where NVML is
    available, its GPU memory (NVML's per-process figure from GET /v2/memory).

Flatness: after --warmup, the median of the first third of the samples and of the last third
are compared; each series must move by at most --tolerance (1%) of the first one. For fds and
threads, which are small integers, the bound is max(1% of the value, 2): a keep-alive client
that reconnects, or the reload's load thread, is not growth. Also reported: min and max after
warm-up. A short run (--duration 120 --warmup 30) exercises the script; only the hour counts.

Writes DIR/samples.csv and DIR/summary.json, prints the summary; exit status 0 only when every
series is flat, no valid request failed and the server exited cleanly on SIGTERM.
"""
import argparse
import csv
import http.client
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ADD_SUB_BODY = json.dumps({"inputs": [
    {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": list(range(16))},
    {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16], "data": [1] * 16}]})


def bad_requests(model):
    """Raw requests a broken or hostile client sends; each (name, bytes)."""
    def post(path, body, extra=""):
        return ("POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n%s\r\n" %
                (path, len(body), extra)).encode() + body
    infer = "/v2/models/%s/infer" % model
    return [
        ("bad json", post(infer, b'{"inputs": [')),
        ("wrong shape", post(infer, json.dumps({"inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [1, 3], "data": [1, 2, 3]}]}).encode())),
        ("wrong type", post(infer, json.dumps({"inputs": [
            {"name": "INPUT0", "datatype": "INT8", "shape": [1], "data": [1]}]}).encode())),
        ("unknown model", post("/v2/models/no_such_model/infer", b"{}")),
        ("unknown version", post("/v2/models/%s/versions/999/infer" % model, b"{}")),
        ("binary size lie", post(infer, b'{"inputs":[{"name":"INPUT0","datatype":"FP32",'
                                 b'"shape":[1,16],"parameters":{"binary_data_size":64}}]}',
                                 "Inference-Header-Content-Length: 10\r\n")),
        ("te smuggling", ("POST %s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n"
                          "Content-Length: 2\r\n\r\n{}" % infer).encode()),
        ("huge declared body", ("POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
                                % (infer, 1 << 40)).encode()),
        ("huge trailer", ("POST /v2/repository/index HTTP/1.1\r\nHost: x\r\n"
                          "Transfer-Encoding: chunked\r\n\r\n1\r\n{\r\n0\r\nX-T: ").encode()
         + b"a" * 70000 + b"\r\n\r\n"),
        ("deep json", post("/v2/repository/index", b"[" * 200000)),
        ("garbage", b"\x00\x01\x02 not http at all\r\n\r\n"),
        ("bad method", b"BREW /v2 HTTP/1.1\r\nHost: x\r\n\r\n"),
    ]


def send_raw(port, data, timeout=5.0):
    """The status of the first answer, or 0 when the server closed without one."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
        buf = b""
        while b"\r\n" not in buf:
            try:
                chunk = s.recv(4096)
            except (ConnectionResetError, socket.timeout):
                return 0
            if not chunk:
                return 0
            buf += chunk
        parts = buf.split(b" ", 2)
        return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    finally:
        s.close()


def proc_sample(pid):
    with open("/proc/%d/status" % pid) as f:
        status = dict(line.split(":", 1) for line in f if ":" in line)
    return {
        "rss_kib": int(status["VmRSS"].split()[0]),
        "threads": int(status["Threads"]),
        "fds": len(os.listdir("/proc/%d/fd" % pid)),
    }


def gpu_used_bytes(port):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("GET", "/v2/memory")
        r = c.getresponse()
        doc = json.loads(r.read())
        c.close()
    except (OSError, ValueError):
        return None
    used = [d.get("process_used_bytes") for d in doc.get("devices", [])]
    used = [u for u in used if isinstance(u, int)]
    return sum(used) if used else None


def flatness(values, tolerance, floor):
    third = max(1, len(values) // 3)
    first, last = statistics.median(values[:third]), statistics.median(values[-third:])
    bound = max(abs(first) * tolerance, floor)
    return {"first_median": first, "last_median": last, "min": min(values), "max": max(values),
            "drift": (last - first) / first if first else 0.0, "bound": bound,
            "flat": abs(last - first) <= bound}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vramd", default=os.path.join(ROOT, "build/src/cli/vramd"))
    ap.add_argument("--infer-load", default=os.path.join(ROOT, "build/bench/infer_load"))
    ap.add_argument("--repository", default=os.path.join(ROOT, "examples/models"))
    ap.add_argument("--model", default="add_sub")
    ap.add_argument("--body", help="JSON infer body file (default: add_sub's)")
    ap.add_argument("--duration", type=float, default=3600)
    ap.add_argument("--warmup", type=float, default=300)
    ap.add_argument("--reload-every", type=float, default=60)
    ap.add_argument("--sample-every", type=float, default=10)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--tolerance", type=float, default=0.01)
    ap.add_argument("--bad-per-second", type=float, default=20)
    ap.add_argument("--server-args", default="", help="extra vramd flags, space-separated")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()

    out = a.out or tempfile.mkdtemp(prefix="vramd-soak-")
    os.makedirs(out, exist_ok=True)
    repo = os.path.join(out, "repository")
    shutil.rmtree(repo, ignore_errors=True)
    shutil.copytree(a.repository, repo)
    body_file = a.body
    if body_file is None:
        body_file = os.path.join(out, "body.json")
        with open(body_file, "w") as f:
            f.write(ADD_SUB_BODY)

    log = open(os.path.join(out, "server.log"), "wb")
    argv = [a.vramd, "serve", "--model-repository", repo, "--http-port", "0", "--grpc-port", "0",
            "--http-address", "127.0.0.1", "--metrics-port", "0",
            "--model-control-mode", "explicit", "--load-model", "*"] + a.server_args.split()
    server = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    port = None
    deadline = time.monotonic() + 120
    while port is None and time.monotonic() < deadline:
        if server.poll() is not None:
            sys.exit("vramd exited with %s at start-up (log: %s)" % (server.returncode, out))
        with open(os.path.join(out, "server.log"), errors="replace") as f:
            for line in f:
                if "HTTP listening on" in line:
                    port = int(line.rsplit(":", 1)[1])
        time.sleep(0.1)
    if port is None:
        server.kill()
        sys.exit("vramd did not listen within 120 s")
    while time.monotonic() < deadline:
        try:
            if send_raw(port, b"GET /v2/models/%s/ready HTTP/1.1\r\nHost: x\r\n\r\n"
                        % a.model.encode()) == 200:
                break
        except OSError:
            pass
        time.sleep(0.2)

    load = subprocess.Popen([a.infer_load, "--model", a.model, "--body-file", body_file,
                             "--port", str(port), "--concurrency", str(a.concurrency),
                             "--duration", str(a.duration), "--warmup", "0", "--timeout", "30"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stop = threading.Event()
    counts = {"reloads": 0, "reload_failures": [], "bad_sent": 0, "bad_statuses": {},
              "bad_unexpected": []}

    def reloader():
        while not stop.wait(a.reload_every):
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
                c.request("POST", "/v2/repository/models/%s/load" % a.model, b"",
                          {"Content-Type": "application/json"})
                r = c.getresponse()
                text = r.read()
                c.close()
                counts["reloads"] += 1
                if r.status != 200:
                    counts["reload_failures"].append("%d %r" % (r.status, text[:200]))
            except OSError as e:
                counts["reload_failures"].append(repr(e))

    def bad_client():
        requests = bad_requests(a.model)
        i = 0
        while not stop.wait(1.0 / a.bad_per_second):
            name, data = requests[i % len(requests)]
            i += 1
            try:
                status = send_raw(port, data)
            except OSError:
                status = 0
            counts["bad_sent"] += 1
            key = "%s:%d" % (name, status)
            counts["bad_statuses"][key] = counts["bad_statuses"].get(key, 0) + 1
            if status != 0 and not 400 <= status < 600:
                counts["bad_unexpected"].append(key)

    threads = [threading.Thread(target=reloader, daemon=True),
               threading.Thread(target=bad_client, daemon=True)]
    for t in threads:
        t.start()

    samples = []
    start = time.monotonic()
    died = None
    with open(os.path.join(out, "samples.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["t_s", "rss_kib", "fds", "threads", "gpu_used_bytes"])
        next_at = start
        while time.monotonic() - start < a.duration:
            next_at += a.sample_every
            time.sleep(max(0.0, next_at - time.monotonic()))
            if server.poll() is not None:
                died = server.returncode
                break
            s = proc_sample(server.pid)
            s["t_s"] = round(time.monotonic() - start, 1)
            s["gpu_used_bytes"] = gpu_used_bytes(port)
            samples.append(s)
            w.writerow([s["t_s"], s["rss_kib"], s["fds"], s["threads"], s["gpu_used_bytes"]])
            f.flush()
    stop.set()
    for t in threads:
        t.join(130)
    load_out, load_err = load.communicate(timeout=120)
    try:
        load_result = json.loads(load_out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        load_result = {"unparsed": load_out[-500:], "stderr": load_err[-500:]}

    exit_code = died
    if died is None:
        server.send_signal(signal.SIGTERM)
        try:
            exit_code = server.wait(60)
        except subprocess.TimeoutExpired:
            server.kill()
            exit_code = "did not exit within 60 s of SIGTERM"
    log.close()

    steady = [s for s in samples if s["t_s"] >= a.warmup]
    series = {}
    if len(steady) >= 3:
        series["rss_kib"] = flatness([s["rss_kib"] for s in steady], a.tolerance, 0)
        series["fds"] = flatness([s["fds"] for s in steady], a.tolerance, 2)
        series["threads"] = flatness([s["threads"] for s in steady], a.tolerance, 2)
        gpu = [s["gpu_used_bytes"] for s in steady if s["gpu_used_bytes"] is not None]
        if len(gpu) == len(steady):
            series["gpu_used_bytes"] = flatness(gpu, a.tolerance, 0)
    summary = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": "%s, %d CPUs" % (os.uname().nodename, os.cpu_count()),
        "command": " ".join(sys.argv),
        "duration_s": a.duration, "warmup_s": a.warmup, "samples": len(samples),
        "steady_samples": len(steady), "model": a.model, "concurrency": a.concurrency,
        "load": load_result, "reloads": counts["reloads"],
        "reload_failures": counts["reload_failures"][:10],
        "bad_requests_sent": counts["bad_sent"], "bad_statuses": counts["bad_statuses"],
        "bad_unexpected": counts["bad_unexpected"][:10],
        "gpu": "NVML per-process figure" if "gpu_used_bytes" in series else "not measured",
        "server_exit": exit_code, "series": series,
    }
    ok = (died is None and exit_code == 0 and len(steady) >= 3
          and all(v["flat"] for v in series.values())
          and isinstance(load_result.get("errors"), int) and load_result["errors"] == 0
          and not counts["reload_failures"] and not counts["bad_unexpected"])
    summary["ok"] = ok
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary, indent=1))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
