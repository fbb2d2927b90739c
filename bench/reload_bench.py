#!/usr/bin/env python3
"""Reloads a large `mlp` model on a GPU over and over while clients call it, and reports what
the issue asks for: failed requests (none allowed), whether every response came from exactly one
version, NVML's process figure after the first and after the last cycle (within 1%), and where a
reload's time goes (file_read, host_stage, h2d, instances, warmup, switch, retire_old) with the
h2d phase's rate against the pinned host-to-device rate measured in the same run.

  reload_bench.py --vramd BIN --pinned-gbps X [--cycles 100] [--target-bytes 1GiB]
                  [--clients 4] [--gpus 0[,1...]] [--out result.json]

With --gpus listing several GPUs (issue 19) the model has an instance on each, its weights read
once and copied GPU to GPU, and every figure and check holds for each GPU.

Needs numpy (scripts/make_mlp_model.py writes the model) and a GPU; run by
scripts/device/run.sh. Versions 1 and 2 hold different weights; each cycle reloads the model
with a config override whose version_policy selects the other one, so every reload reads its
weight file (from the page cache after the first cycles), stages it, copies it to the GPU,
warms up and switches. Exit status 0 only when every target holds.
"""
import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = "reload_mlp"


def call(port, method, path, body=None, timeout=600):
    conn = http.client.HTTPConnection("localhost", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def make_repository(repo, target_bytes, inputs, outputs, kind, gpus):
    model_dir = os.path.join(repo, MODEL)
    for version, seed in ((1, 1), (2, 2)):
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts/make_mlp_model.py"), "model",
                        model_dir, "--inputs", str(inputs), "--target-bytes", target_bytes,
                        "--outputs", str(outputs), "--kind", kind, "--instances", "1",
                        "--max-batch-size", "8", "--name", MODEL, "--version", str(version),
                        "--seed", str(seed)], check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(model_dir, "config.pbtxt")) as f:
        config = f.read()
    # One warmup sample, so the warmup phase is part of every reload as in production.
    config += ('\nmodel_warmup [ { name: "one" batch_size: 1 inputs { key: "INPUT0" value: '
               '{ data_type: TYPE_FP32 dims: [ %d ] zero_data: true } } } ]\n' % inputs)
    config += 'version_policy: { specific: { versions: [ 1 ] } }\n'
    if kind == "gpu":
        config = config[:config.index("instance_group")] + (
            "instance_group [ { count: 1 kind: KIND_GPU gpus: [ %s ] } ]\n" %
            ", ".join(str(g) for g in gpus)) + config[config.index("\n]", config.index(
                "instance_group")) + 3:]
    with open(os.path.join(model_dir, "config.pbtxt"), "w") as f:
        f.write(config)
    return model_dir


def gpu_figures(port, gpus, key="nvml_process_used_bytes"):
    """{gpu: figure} from /v2/memory's unattributed rows: NVML's for this process, or the
    context's baseline (what NVML said right after vramd made the context)."""
    status, body = call(port, "GET", "/v2/memory")
    rows = json.loads(body).get("unattributed", []) if status == 200 else []
    by_device = {d.get("device"): d.get(key) for d in rows}
    return {g: by_device.get("cuda:%d" % g) for g in gpus}


class Clients:
    """Threads that call the model (latest version) until stopped, and check every answer."""

    def __init__(self, port, count, inputs):
        self.port = port
        self.body = json.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32",
                                            "shape": [1, inputs],
                                            "data": [((i % 7) - 3) / 3.0 for i in range(inputs)]}]})
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.ok = 0
        self.failures = []
        self.by_version = {}  # version -> first output seen
        self.mismatches = 0
        self.threads = [threading.Thread(target=self.run, daemon=True) for _ in range(count)]

    def run(self):
        conn = http.client.HTTPConnection("localhost", self.port, timeout=120)
        while not self.stop.is_set():
            try:
                conn.request("POST", f"/v2/models/{MODEL}/infer", body=self.body,
                             headers={"Content-Type": "application/json"})
                r = conn.getresponse()
                data = r.read()
            except Exception as e:  # a dropped connection is a failed request too
                with self.lock:
                    self.failures.append(f"connection: {e!r}")
                conn.close()
                conn = http.client.HTTPConnection("localhost", self.port, timeout=120)
                continue
            with self.lock:
                if r.status != 200:
                    self.failures.append(f"{r.status} {data[:300]!r}")
                    continue
                answer = json.loads(data)
                version = answer["model_version"]
                out = answer["outputs"][0]["data"]
                first = self.by_version.setdefault(version, out)
                if any(abs(a - b) > 1e-4 * max(1.0, abs(b)) for a, b in zip(out, first)):
                    self.mismatches += 1
                self.ok += 1
        conn.close()

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vramd", required=True)
    ap.add_argument("--pinned-gbps", type=float, required=True,
                    help="pinned host-to-device rate measured in this run (h2d_bench)")
    ap.add_argument("--cycles", type=int, default=100)
    ap.add_argument("--target-bytes", default="1GiB")
    ap.add_argument("--inputs", type=int, default=1024)
    ap.add_argument("--outputs", type=int, default=16)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--port", type=int, default=18100)
    ap.add_argument("--out", default="")
    ap.add_argument("--server-log", default=os.devnull)
    ap.add_argument("--kind", default="gpu", help="cpu: try the script on a machine without GPU")
    ap.add_argument("--gpus", default="0", help="the GPUs the model's instances are on: 0,1")
    args = ap.parse_args()
    gpus = [int(g) for g in args.gpus.split(",")]

    repo = tempfile.mkdtemp(prefix="vramd-reload-")
    model_dir = make_repository(repo, args.target_bytes, args.inputs, args.outputs, args.kind,
                                gpus)
    weights = os.path.getsize(os.path.join(model_dir, "1", "model.safetensors"))
    log = open(args.server_log, "w")
    server = subprocess.Popen([args.vramd, "serve", "--model-repository", repo,
                               "--model-control-mode", "explicit",
                               "--http-port", str(args.port), "--metrics-port", "0", "--grpc-port", "0",
                               "--http-thread-count", str(args.clients + 4)],
                              stdout=log, stderr=subprocess.STDOUT)
    result = {"weights_bytes": weights, "cycles": args.cycles, "clients": args.clients,
              "pinned_gbps": args.pinned_gbps, "gpus": gpus}
    try:
        for _ in range(600):
            try:
                if call(args.port, "GET", "/v2/health/live", timeout=5)[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        else:
            raise SystemExit("the server did not start")
        status, answer = call(args.port, "POST", f"/v2/repository/models/{MODEL}/load", b"{}")
        if status != 200:
            raise SystemExit(f"the first load failed: {status} {answer[:500]!r}")
        # The process's figure with its CUDA context only: vramd makes the context at the first
        # load (not at start-up) and reads NVML right then, before anything allocates there.
        result["nvml_before_load"] = gpu_figures(args.port, gpus, "context_baseline_bytes")
        status, config_body = call(args.port, "GET", f"/v2/models/{MODEL}/config")
        config = json.loads(config_body)
        cycles = []
        nvml = []
        with Clients(args.port, args.clients, args.inputs) as clients:
            time.sleep(1.0)
            for cycle in range(args.cycles):
                version = 2 if cycle % 2 == 0 else 1
                config["version_policy"] = {"specific": {"versions": [version]}}
                body = json.dumps({"parameters": {"config": json.dumps(config)}})
                start = time.monotonic()
                status, answer = call(args.port, "POST", f"/v2/repository/models/{MODEL}/load",
                                      body.encode())
                wall = time.monotonic() - start
                if status != 200:
                    raise SystemExit(f"reload {cycle} failed: {status} {answer[:500]!r}")
                _, life = call(args.port, "GET", f"/v2/repository/models/{MODEL}/lifecycle")
                last = json.loads(life)["last_load"]
                phases = {p["name"]: p for p in last["phases"]}
                cycles.append({"wall_seconds": wall, "total_seconds": last["total_seconds"],
                               "policy": last["policy"], "phases": phases})
                nvml.append(gpu_figures(args.port, gpus))
            time.sleep(0.5)
        status, answer = call(args.port, "POST", f"/v2/repository/models/{MODEL}/unload", b"{}")
        result["unload_status"] = status
        time.sleep(0.5)
        result["nvml_after_unload"] = gpu_figures(args.port, gpus)
        before, after = result["nvml_before_load"], result["nvml_after_unload"]
        if all(before[g] is not None and after[g] is not None for g in gpus):
            # The largest over the GPUs: each must come back.
            result["nvml_after_unload_minus_before_load"] = max(after[g] - before[g] for g in gpus)
        _, memory = call(args.port, "GET", "/v2/memory")
        memory = json.loads(memory)
        result["ledger_leak_reports_total"] = memory.get("leak_reports_total")
        result["pools_reserved_after_unload"] = {
            p["device"]: p["reserved_bytes"] for p in memory.get("pools", [])}
        result["requests_ok"] = clients.ok
        result["requests_failed"] = len(clients.failures)
        result["failures_sample"] = clients.failures[:5]
        result["versions_seen"] = sorted(clients.by_version)
        result["responses_inconsistent_with_their_version"] = clients.mismatches
        outs = list(clients.by_version.values())
        result["versions_differ"] = len(outs) == 2 and outs[0] != outs[1]
        result["nvml_after_first_cycle"] = nvml[0]
        result["nvml_after_last_cycle"] = nvml[-1]
        if all(nvml[0][g] and nvml[-1][g] for g in gpus):
            # The largest drift over the GPUs, signed.
            drifts = [(nvml[-1][g] - nvml[0][g]) / nvml[0][g] for g in gpus]
            result["nvml_drift_ratio"] = max(drifts, key=abs)
        result["policies"] = sorted({c["policy"] for c in cycles})
        # Phases: medians over the cycles after the first two (page cache warm).
        steady = cycles[2:] or cycles
        names = []
        for c in steady:
            names += [n for n in c["phases"] if n not in names]
        result["phase_median_seconds"] = {
            n: statistics.median(c["phases"][n]["seconds"] for c in steady if n in c["phases"])
            for n in names}
        result["reload_median_seconds"] = statistics.median(c["total_seconds"] for c in steady)
        h2d = [c["phases"]["h2d"] for c in steady if "h2d" in c["phases"]]
        if h2d:
            rates = [p["bytes"] / p["seconds"] / 1e9 for p in h2d if p["seconds"] > 0]
            result["h2d_median_gbps"] = statistics.median(rates)
            result["h2d_vs_pinned_ratio"] = result["h2d_median_gbps"] / args.pinned_gbps
        d2d = [c["phases"]["d2d"] for c in steady if "d2d" in c["phases"]]
        if d2d:  # several GPUs: the weights' copies from the first GPU to the others
            result["d2d_median_gbps"] = statistics.median(
                p["bytes"] / p["seconds"] / 1e9 for p in d2d if p["seconds"] > 0)
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
        result["server_exit_code"] = server.returncode
        subprocess.run(["rm", "-rf", repo])

    checks = {
        "zero failed requests": result.get("requests_failed") == 0 and result.get("requests_ok", 0) > 0,
        "every response from exactly one version":
            result.get("responses_inconsistent_with_their_version") == 0
            and result.get("versions_seen") == ["1", "2"] and result.get("versions_differ"),
        "NVML after the last cycle within 1% of after the first":
            abs(result.get("nvml_drift_ratio", 1.0)) <= 0.01,
        "h2d phase at >= 80% of the pinned rate": result.get("h2d_vs_pinned_ratio", 0) >= 0.8,
        "server exits cleanly": result.get("server_exit_code") == 0,
        # What may stay after an unload: the kernel modules the model's first requests loaded
        # into the CUDA context (cuBLAS's GEMM kernels, the mlp kernels), which live as long as
        # the context. Nothing the pools or the ledger hold.
        "after the unload NVML within 64 MiB of before the first load, pools empty, no leak":
            result.get("unload_status") == 200
            and 0 <= result.get("nvml_after_unload_minus_before_load", 1 << 40) <= 64 << 20
            and not any(result.get("pools_reserved_after_unload", {"?": 1}).values())
            and result.get("ledger_leak_reports_total") == 0,
    }
    result["checks"] = checks
    text = json.dumps(result, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    print(text)
    for name, ok in checks.items():
        print(("PASS " if ok else "FAIL ") + "reload: " + name)
    if "nvml_drift_ratio" in result:
        print("FIGURE reload_nvml_drift_ratio %.5f ratio" % result["nvml_drift_ratio"])
    if "h2d_vs_pinned_ratio" in result:
        print("FIGURE reload_h2d_vs_pinned_ratio %.3f ratio" % result["h2d_vs_pinned_ratio"])
    print("FIGURE reload_median_seconds %.3f s" % result.get("reload_median_seconds", -1))
    if "d2d_median_gbps" in result:
        print("FIGURE reload_d2d_median_gbps %.1f GB/s (GPUs %s)" % (result["d2d_median_gbps"],
                                                                   args.gpus))
    if "nvml_after_unload_minus_before_load" in result:
        print("FIGURE unload_nvml_minus_before_load_mib %.1f MiB"
              % (result["nvml_after_unload_minus_before_load"] / 1048576))
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
