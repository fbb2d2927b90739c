#!/usr/bin/env python3
"""Issue 15's system shared memory target: a 64 MiB input through the built-in identity model,
sent in the HTTP request body (binary tensor data, the output back in the body) against placed
in a registered system shared-memory region (the output written into another), one server, one
run. Target: shared memory at least 5x the body's requests per second, end to end.

  python3 bench/shm_vs_body.py --vramd build/src/cli/vramd [--mib 64] [--rounds 10] [--out F]

Each round sends the same request, closed loop, one client; the first of each series is a
warm-up. Both series check the answer's bytes. Prints FIGURE lines, a PASS/FAIL verdict with the
ratio, and one JSON document (--out).
"""

import argparse
import http.client
import json
import os
import sys
import tempfile
import time
from multiprocessing import shared_memory

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "torch"))
from common import Vramd, figure, log, update_json, verdict  # noqa: E402

CONFIG = '''name: "identity_shm"
backend: "identity"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
'''


def post(conn, path, body, headers):
    conn.request("POST", path, body, headers)
    r = conn.getresponse()
    return r.status, r.read(), r.getheader("Inference-Header-Content-Length")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vramd", required=True)
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="vramd-shm-bench-")
    os.makedirs(os.path.join(work, "repo", "identity_shm", "1"))
    with open(os.path.join(work, "repo", "identity_shm", "config.pbtxt"), "w") as f:
        f.write(CONFIG)
    n = a.mib * (1 << 20) // 4
    x = (np.arange(n, dtype=np.float32) % 1000) * 0.5
    nbytes = x.nbytes
    server = Vramd(a.vramd, [os.path.join(work, "repo")], os.path.join(work, "server.log"),
                   args=["--http-max-input-size", str(2 * nbytes)])
    shm = shared_memory.SharedMemory(name="vramd_shm_bench_%d" % os.getpid(), create=True,
                                     size=2 * nbytes)
    result = {"mib": a.mib, "rounds": a.rounds}
    try:
        server.ready("identity_shm")
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=300)
        # The body series: binary input, binary output.
        header = json.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [n],
                                         "parameters": {"binary_data_size": nbytes}}],
                             "outputs": [{"name": "OUTPUT0",
                                          "parameters": {"binary_data": True}}]}).encode()
        body = header + x.tobytes()
        headers = {"Inference-Header-Content-Length": str(len(header)),
                   "Content-Type": "application/octet-stream"}
        times = []
        for i in range(a.rounds + 1):
            t0 = time.perf_counter()
            status, reply, hlen = post(conn, "/v2/models/identity_shm/infer", body, headers)
            dt = time.perf_counter() - t0
            assert status == 200, reply[:300]
            assert reply[int(hlen):] == body[len(header):], "the body series answered wrong bytes"
            if i > 0:
                times.append(dt)
        body_rps = len(times) / sum(times)
        # The shared-memory series: the input in one region, the output written into another.
        shm.buf[:nbytes] = x.tobytes()
        key = "/" + shm.name
        for name, offset in (("bench_in", 0), ("bench_out", nbytes)):
            status, reply, _ = post(conn, "/v2/systemsharedmemory/region/%s/register" % name,
                                    json.dumps({"key": key, "offset": offset,
                                                "byte_size": nbytes}).encode(),
                                    {"Content-Type": "application/json"})
            assert status == 200, reply
        request = json.dumps({
            "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [n],
                        "parameters": {"shared_memory_region": "bench_in",
                                       "shared_memory_byte_size": nbytes}}],
            "outputs": [{"name": "OUTPUT0",
                         "parameters": {"shared_memory_region": "bench_out",
                                        "shared_memory_byte_size": nbytes}}]}).encode()
        times = []
        for i in range(a.rounds + 1):
            shm.buf[nbytes:nbytes + 64] = b"\0" * 64
            t0 = time.perf_counter()
            status, reply, _ = post(conn, "/v2/models/identity_shm/infer", request,
                                    {"Content-Type": "application/json"})
            dt = time.perf_counter() - t0
            assert status == 200, reply[:300]
            if i > 0:
                times.append(dt)
        assert bytes(shm.buf[nbytes:2 * nbytes]) == x.tobytes(), "the shm series wrote wrong bytes"
        shm_rps = len(times) / sum(times)
        post(conn, "/v2/systemsharedmemory/unregister", b"", {})
        ratio = shm_rps / body_rps
        log(f"{a.mib} MiB: body {body_rps:.2f} req/s, shared memory {shm_rps:.2f} req/s")
        result.update({"body_rps": body_rps, "shm_rps": shm_rps, "ratio": ratio})
        figure(f"shm_vs_body_{a.mib}mib", ratio, "ratio")
        result["ok"] = verdict(ratio >= 5.0, f"system shared memory, {a.mib} MiB in and out: "
                                             f"{ratio:.2f}x the request body's req/s (>= 5)")
    finally:
        shm.close()
        shm.unlink()
        server.stop()
    print(json.dumps(result))
    update_json(a.out, "shm_vs_body", result)
    return 0 if result.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
