#!/usr/bin/env python3
"""Peak memory of the server while it answers one large JSON (non-binary) infer response.

  bench/json_reply_memory.py [--vramd BIN] [--mib 21] [--rounds 3]

Starts vramd on a scratch repository holding one identity FP32 model, sends an FP32 tensor of
--mib MiB (random normal values, so each element prints as ~11-13 characters: 21 MiB in gives
a JSON reply of about 64 MiB) in binary form, and asks for the output as JSON. Before each request the kernel's peak-RSS mark is reset
(writing 5 to /proc/<pid>/clear_refs); after the whole response has been read, VmHWM minus the
VmRSS just before the request is the peak growth it caused. Prints one line per round and the
worst; --json prints the figures as JSON instead. The e2e test tests/e2e/test_json_reply_memory.py
calls measure() with a bound.
"""
import argparse
import http.client
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = "identity_fp32"
CONFIG = """
name: "identity_fp32"
backend: "identity"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""
LISTEN_RE = re.compile(r"HTTP listening on [^\s:]+:(\d+)")


def status_kib(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError("no %s in /proc/%d/status" % (field, pid))


def reset_peak(pid):
    with open("/proc/%d/clear_refs" % pid, "w") as f:
        f.write("5")


def infer_body(values):
    raw = values.astype("<f4").tobytes()
    header = json.dumps({
        "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [int(values.size)],
                    "parameters": {"binary_data_size": len(raw)}}],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": False}}],
    }).encode()
    return header + raw, {"Content-Type": "application/octet-stream",
                          "Inference-Header-Content-Length": str(len(header))}


def check_reply(reply, values):
    """Raises unless `reply` is the identity's JSON answer holding exactly `values`. The data
    array is parsed by numpy, not json (16M Python floats would take GBs here)."""
    start = reply.index(b'"data":[') + len(b'"data":[')
    end = reply.index(b"]", start)
    envelope = json.loads(reply[:start] + reply[end:])
    out = envelope["outputs"][0]
    if out["name"] != "OUTPUT0" or out["shape"] != [int(values.size)]:
        raise RuntimeError("unexpected output %r" % (out,))
    got = np.fromstring(reply[start:end].decode("ascii"), dtype=np.float64, sep=",")
    if not np.array_equal(got.astype(np.float32), values):
        raise RuntimeError("the JSON output differs from the input")


def measure(pid, port, mib=21, rounds=3, seed=0):
    """Sends `rounds` requests of `mib` MiB to MODEL on 127.0.0.1:`port` served by process
    `pid`; returns a list of dicts {input_bytes, json_bytes, rss_before_kib, peak_growth_kib}."""
    values = np.random.default_rng(seed).standard_normal(mib * (1 << 20) // 4, dtype=np.float32)
    body, headers = infer_body(values)
    results = []
    checked = None  # the first reply, once check_reply has found it right
    for _ in range(rounds):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        try:
            conn.connect()
            before = status_kib(pid, "VmRSS")
            reset_peak(pid)
            conn.request("POST", "/v2/models/%s/infer" % MODEL, body=body, headers=headers)
            r = conn.getresponse()
            reply = r.read()
            if r.status != 200:
                raise RuntimeError("HTTP %d: %r" % (r.status, reply[:300]))
            if r.getheader("Inference-Header-Content-Length") is not None:
                raise RuntimeError("the output came back binary, not JSON")
            # The server may still be freeing; the peak mark is what matters.
            peak = status_kib(pid, "VmHWM")
        finally:
            conn.close()
        # Parsing millions of numbers takes longer than the request: each reply is parsed once
        # unless it is byte for byte the one already checked.
        if checked is None or reply != checked:
            check_reply(reply, values)
        if checked is None:
            checked = reply
        results.append({"input_bytes": len(body), "json_bytes": len(reply),
                        "rss_before_kib": before, "peak_growth_kib": peak - before})
        del reply
    return results


def start_vramd(binary, repo):
    """Starts `binary` on `repo`, logging to <repo>/vramd.log; returns (process, port) once
    MODEL is ready."""
    log_path = os.path.join(repo, "vramd.log")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [binary, "serve", "--model-repository", repo, "--http-port", "0", "--grpc-port", "0", "--http-address",
             "127.0.0.1", "--no-allow-metrics", "--http-thread-count", "2",
             "--http-max-input-size", str(1 << 30)],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        with open(log_path, errors="replace") as f:
            m = LISTEN_RE.search(f.read())
        if m:
            port = int(m.group(1))
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                conn.request("GET", "/v2/models/%s/ready" % MODEL)
                ready = conn.getresponse().status == 200
                conn.close()
                if ready:
                    return proc, port
            except OSError:
                pass
        time.sleep(0.05)
    proc.kill()
    with open(log_path, errors="replace") as f:
        raise RuntimeError("vramd did not serve %s:\n%s" % (MODEL, f.read()[-4000:]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--vramd", default=os.environ.get(
        "VRAMD_BIN", os.path.join(ROOT, "build", "src", "cli", "vramd")))
    ap.add_argument("--mib", type=int, default=21)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as repo:
        os.makedirs(os.path.join(repo, MODEL, "1"))
        with open(os.path.join(repo, MODEL, "config.pbtxt"), "w") as f:
            f.write(CONFIG)
        proc, port = start_vramd(args.vramd, repo)
        try:
            results = measure(proc.pid, port, args.mib, args.rounds)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    if args.json:
        print(json.dumps(results))
        return 0
    mib = 1 << 20
    for i, r in enumerate(results):
        print("round %d: input %.1f MiB, JSON reply %.1f MiB, RSS before %.1f MiB, "
              "peak growth %.1f MiB (%.2fx the JSON)" % (
                  i, r["input_bytes"] / mib, r["json_bytes"] / mib, r["rss_before_kib"] / 1024,
                  r["peak_growth_kib"] / 1024, r["peak_growth_kib"] * 1024 / r["json_bytes"]))
    worst = max(results, key=lambda r: r["peak_growth_kib"])
    print("worst: peak growth %.1f MiB for a %.1f MiB JSON reply" % (
        worst["peak_growth_kib"] / 1024, worst["json_bytes"] / mib))
    return 0


if __name__ == "__main__":
    sys.exit(main())
