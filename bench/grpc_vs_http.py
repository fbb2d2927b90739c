#!/usr/bin/env python3
"""Issue 15's gRPC targets: the same model and payload over gRPC and over HTTP, one server, one
run, and a raw TCP baseline for large tensors.

  python3 bench/grpc_vs_http.py --vramd build/src/cli/vramd --infer-load build/bench/infer_load
      --grpc-load build/bench/grpc_infer_load [--duration 5] [--concurrency 1,16]
      [--large-concurrency 1,4] [--out results.json]

One vramd serves an identity FP32 model (the built-in identity backend, 2 KIND_CPU instances,
no batching). Then, each series at each concurrency, closed loop, measured after a warm-up:
  1. 16-element tensors: HTTP (infer_load, binary tensor data) and gRPC (grpc_infer_load,
     raw_input_contents), each client a thread and a connection per request in flight, each
     sending one prebuilt request (grpc_infer_load speaks HTTP/2 itself, as infer_load speaks
     HTTP/1.1). Target: gRPC req/s >= HTTP's. Printed beside, not judged: gRPC through gRPC's
     own C++ client library (--library-client), what a client built on it gets; and, with
     --streams K, gRPC with K calls in flight on each connection (c / K connections), as
     gRPC's clients multiplex a channel's concurrent calls where HTTP/1.1 needs a connection
     per request in flight.
  2. 4 MiB tensors (1,048,576 FP32): gRPC, and a raw loopback TCP echo of the same 4 MiB each
     way (grpc_infer_load --tcp-echo: the floor any protocol pays to move those bytes in and
     out). Target: gRPC >= 90% of the TCP echo's req/s. Printed beside: HTTP, and an echo that
     also copies each block once (--echo-copy), the floor for a server that needs the tensor
     in one piece: gRPC's reader hands a message over in 64 KiB slices, so its parse into one
     contiguous input is a copy (the identity model itself copies nothing: it answers with its
     input's memory).
  3. Beside both series, not judged: what gRPC's library itself allows (grpc_infer_load
     --library-server, a process of its own as vramd is): a server on the library, set up as
     vramd's, that answers every call at once with a prebuilt answer, neither parsing the
     request nor running a model, measured with the same client. No server on the library serves more; its ratio to HTTP (16
     elements) and to the TCP echo (4 MiB) is the most a target can ask of one. For 4 MiB it
     is also measured parsing each request (--parse), the copy a server needing the tensor in
     one piece makes.
Prints FIGURE lines, PASS/FAIL verdicts with the ratios, and one JSON document (--out).
"""

import argparse
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "torch"))
from common import Vramd, figure, infer_load, log, update_json, verdict  # noqa: E402

CONFIG = '''name: "identity_grpc"
backend: "identity"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
instance_group [ { kind: KIND_CPU count: 2 } ]
'''
LARGE = 1 << 20  # FP32 elements: 4 MiB


def http_body(work, n):
    header = json.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [n],
                                     "parameters": {"binary_data_size": 4 * n}}],
                         "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]})
    path = os.path.join(work, "body_%d" % n)
    with open(path, "wb") as f:
        f.write(header.encode())
        f.write(struct.pack("<%df" % n, *[float(i % 1000) for i in range(n)]))
    return path, len(header)


def grpc_load(a, args, timeout):
    cmd = [a.grpc_load] + args + ["--duration", str(a.duration), "--warmup", str(a.warmup)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if not lines:
        raise RuntimeError("grpc_infer_load gave no result (exit %d): %s" % (p.returncode, p.stderr[-1000:]))
    res = json.loads(lines[-1])
    if p.stderr.strip():
        res["stderr"] = p.stderr[-500:]
    return res


class LibraryServer:
    """grpc_infer_load --library-server in a process of its own, as vramd runs in one; it
    serves until its standard input is closed."""

    def __init__(self, a, elements, parse=False):
        cmd = [a.grpc_load, "--library-server", "--elements", str(elements)]
        self.proc = subprocess.Popen(cmd + (["--parse"] if parse else []), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("{"):
            self.proc.kill()
            raise RuntimeError("grpc_infer_load --library-server did not start: %r" % line)
        self.port = json.loads(line)["port"]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def library_load(a, elements, concurrency, timeout, parse=False):
    """The default client's req/s against a LibraryServer, with the cores both kept busy."""
    with LibraryServer(a, elements, parse) as server:
        return with_cpu(server.proc.pid, lambda: grpc_load(
            a, ["--model", "identity", "--port", str(server.port), "--elements", str(elements),
                "--concurrency", str(concurrency)], timeout))


def cpu_seconds(pid):
    """User + system CPU seconds of a process so far (/proc/PID/stat)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def with_cpu(server_pid, run):
    """Runs run() (one load generator run) and adds to its result how many cores the server and
    the load generator kept busy on average: where the server has cores to spare and still
    answers fewer requests, it waits on something rather than computes."""
    s0, c0, t0 = cpu_seconds(server_pid), os.times(), time.monotonic()
    res = run()
    s1, c1, t1 = cpu_seconds(server_pid), os.times(), time.monotonic()
    wall = max(t1 - t0, 1e-9)
    res["server_cores"] = (s1 - s0) / wall
    res["client_cores"] = ((c1.children_user - c0.children_user) +
                           (c1.children_system - c0.children_system)) / wall
    return res


def share(r, base):
    """r's req/s as a share of base's (0 when base served none)."""
    return r["rps"] / base["rps"] if base["rps"] else 0.0


def cores(r):
    return "server %.1f / client %.1f cores" % (r["server_cores"], r["client_cores"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vramd", required=True)
    ap.add_argument("--infer-load", required=True)
    ap.add_argument("--grpc-load", required=True)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--concurrency", default="1,16")
    ap.add_argument("--large-concurrency", default="1,4")
    ap.add_argument("--streams", default="",
                    help="also measure gRPC with these many calls in flight per connection, "
                         "e.g. 4,16 (at each small-tensor concurrency they divide)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--server-arg", action="append", default=[],
                    help="one more argument for vramd (repeat), e.g. --grpc-infer-thread-count=8")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="vramd-grpc-bench-")
    repo = os.path.join(work, "repo")
    os.makedirs(os.path.join(repo, "identity_grpc", "1"))
    with open(os.path.join(repo, "identity_grpc", "config.pbtxt"), "w") as f:
        f.write(CONFIG)
    log_path = os.path.join(work, "server.log")
    server = Vramd(a.vramd, [repo], log_path, args=["--exit-on-error"] + a.server_arg)
    result = {"machine_cores": os.cpu_count()}
    ok = True
    try:
        server.ready("identity_grpc")
        with open(log_path) as f:
            grpc_port = int(re.findall(r"gRPC listening on \S+:(\d+)", f.read())[-1])
        timeout = a.duration + a.warmup + 120
        small_body, small_hlen = http_body(work, 16)
        small = {"concurrency": [], "http_rps": [], "grpc_rps": [], "ratio": [],
                 "grpc_library_rps": [], "library_server_rps": [], "library_server_ratio": []}
        for c in [int(x) for x in a.concurrency.split(",") if x]:
            h = with_cpu(server.pid, lambda: infer_load(
                a.infer_load, server.port, "identity_grpc", small_body, small_hlen, c, a.duration,
                a.warmup))
            g = with_cpu(server.pid, lambda: grpc_load(
                a, ["--model", "identity_grpc", "--port", str(grpc_port), "--elements", "16",
                    "--concurrency", str(c)], timeout))
            lib = grpc_load(a, ["--model", "identity_grpc", "--port", str(grpc_port),
                                "--elements", "16", "--concurrency", str(c), "--library-client"],
                            timeout)
            bare = library_load(a, 16, c, timeout)
            ratio = share(g, h)
            bare_ratio = share(bare, h)
            log(f"16 elements c={c}: gRPC's library answering with no work "
                f"{bare['rps']:.0f} req/s, {bare_ratio:.3f} of HTTP (errors {bare['errors']}; "
                f"busy: {cores(bare)}): no server on the library serves more")
            small["library_server_rps"].append(bare["rps"])
            small["library_server_ratio"].append(bare_ratio)
            figure(f"grpc_library_ceiling_vs_http_16_elements_c{c}", bare_ratio, "ratio")
            log(f"16 elements c={c}: HTTP {h['rps']:.0f} req/s, gRPC {g['rps']:.0f} req/s "
                f"(errors {h.get('errors', 0)} / {g['errors']}); gRPC through the gRPC library's "
                f"client {lib['rps']:.0f} req/s ({share(lib, h):.3f} of HTTP); "
                f"busy: HTTP {cores(h)}, gRPC {cores(g)}")
            small.setdefault("http_server_cores", []).append(h["server_cores"])
            small.setdefault("grpc_server_cores", []).append(g["server_cores"])
            small["grpc_library_rps"].append(lib["rps"])
            for k in [int(x) for x in a.streams.split(",") if x]:
                if k < 2 or c % k != 0:
                    continue
                m = with_cpu(server.pid, lambda: grpc_load(
                    a, ["--model", "identity_grpc", "--port", str(grpc_port), "--elements", "16",
                        "--concurrency", str(c), "--streams", str(k)], timeout))
                mux = share(m, h)
                log(f"16 elements c={c}: gRPC with {k} calls per connection "
                    f"({c // k} connections) {m['rps']:.0f} req/s, {mux:.3f} of HTTP "
                    f"(errors {m['errors']}); busy: {cores(m)}")
                small.setdefault("grpc_multiplexed", []).append(
                    {"concurrency": c, "streams": k, "rps": m["rps"], "ratio": mux,
                     "errors": m["errors"], "server_cores": m["server_cores"]})
                figure(f"grpc_multiplexed_{k}_vs_http_16_elements_c{c}", mux, "ratio")
            small["concurrency"].append(c)
            small["http_rps"].append(h["rps"])
            small["grpc_rps"].append(g["rps"])
            small["ratio"].append(ratio)
            figure(f"grpc_vs_http_16_elements_c{c}", ratio, "ratio")
            ok &= verdict(ratio >= 1.0 and g["errors"] == 0,
                          f"gRPC at c={c}, 16 FP32: {ratio:.3f} of HTTP's req/s (>= 1.0)")
        result["small"] = small

        large_body, large_hlen = http_body(work, LARGE)
        large = {"concurrency": [], "http_rps": [], "grpc_rps": [], "tcp_rps": [], "ratio_tcp": [],
                 "tcp_copy_rps": [], "ratio_tcp_copy": [], "library_server_rps": [],
                 "library_server_ratio_tcp": [], "library_server_parse_rps": [],
                 "library_server_parse_ratio_tcp": []}
        for c in [int(x) for x in a.large_concurrency.split(",") if x]:
            h = infer_load(a.infer_load, server.port, "identity_grpc", large_body, large_hlen, c,
                           a.duration, a.warmup)
            g = with_cpu(server.pid, lambda: grpc_load(
                a, ["--model", "identity_grpc", "--port", str(grpc_port), "--elements", str(LARGE),
                    "--concurrency", str(c)], timeout))
            t = grpc_load(a, ["--tcp-echo", "--elements", str(LARGE), "--concurrency", str(c)],
                          timeout)
            tc = grpc_load(a, ["--tcp-echo", "--echo-copy", "--elements", str(LARGE),
                               "--concurrency", str(c)], timeout)
            bare = library_load(a, LARGE, c, timeout)
            bare_parse = library_load(a, LARGE, c, timeout, parse=True)
            ratio = share(g, t)
            ratio_copy = share(g, tc)
            bare_ratio = share(bare, t)
            parse_ratio = share(bare_parse, t)
            log(f"4 MiB c={c}: gRPC's library answering with no work {bare['rps']:.1f} req/s, "
                f"{bare_ratio:.3f} of the TCP echo; parsing each request {bare_parse['rps']:.1f}, "
                f"{parse_ratio:.3f} (errors {bare['errors']} / {bare_parse['errors']})")
            large["library_server_rps"].append(bare["rps"])
            large["library_server_ratio_tcp"].append(bare_ratio)
            large["library_server_parse_rps"].append(bare_parse["rps"])
            large["library_server_parse_ratio_tcp"].append(parse_ratio)
            figure(f"grpc_library_ceiling_vs_tcp_4mib_c{c}", bare_ratio, "ratio")
            figure(f"grpc_library_parsing_vs_tcp_4mib_c{c}", parse_ratio, "ratio")
            log(f"4 MiB c={c}: HTTP {h['rps']:.1f}, gRPC {g['rps']:.1f}, TCP echo {t['rps']:.1f}, "
                f"TCP echo copying once {tc['rps']:.1f} req/s (gRPC {ratio_copy:.3f} of it); "
                f"busy: gRPC {cores(g)}")
            large["tcp_copy_rps"].append(tc["rps"])
            large["ratio_tcp_copy"].append(ratio_copy)
            large["concurrency"].append(c)
            large["http_rps"].append(h["rps"])
            large["grpc_rps"].append(g["rps"])
            large["tcp_rps"].append(t["rps"])
            large["ratio_tcp"].append(ratio)
            figure(f"grpc_vs_tcp_4mib_c{c}", ratio, "ratio")
            ok &= verdict(ratio >= 0.9 and g["errors"] == 0,
                          f"gRPC at c={c}, 4 MiB: {ratio:.3f} of a raw TCP echo's req/s (>= 0.9)")
        result["large"] = large
    finally:
        server.stop()
    result["ok"] = bool(ok)
    print(json.dumps(result))
    update_json(a.out, "grpc_vs_http", result)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
