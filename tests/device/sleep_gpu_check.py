#!/usr/bin/env python3
"""Sleeping models on the GPU machine (issue 17, item 4): for KIND_GPU mlp models of each size
given (default 1 GiB and 8 GiB of weights), in one server and one run:
  - the cold load: unload, then load again (the file is in the page cache, so this is the
    fastest a load gets), timed around POST .../load;
  - sleep at level 1 (weights to pinned host memory): NVML's figure for the server's process
    falls by about the weights, the ledger shows them under cuda_host;
  - wake, timed around POST .../wake, and the server's own figure of the wake
    (vramd_model_last_wake_seconds): the answers after it equal the answers before, bit for
    bit, and the wake's copy rate is compared with pinned host-to-device copies of the same
    size made by torch in this run;
  - a request to a sleeping model wakes it (its latency reported);
  - sleep at level 2 (nothing kept) and the wake that reads the file again;
  - with --torch-backend-dir, the same for a KIND_GPU TorchScript model (the pytorch backend):
    its parameters leave the device asleep and come back with the same answers.
Targets (the issue's): wake at least 10x faster than the cold load, and the wake's copy rate at
least 80% of pinned H2D.

  sleep_gpu_check.py --vramd BIN/vramd --make-model scripts/make_mlp_model.py [--sizes 1GiB,8GiB]

Prints PASS/FAIL and FIGURE lines; exits 1 on any failure.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import numpy as np

from device_checks import check, failures, http

WIDTH_IN, WIDTH_OUT, BATCH = 1024, 64, 4


def timed(method, url, doc=None):
    start = time.perf_counter()
    status, body = http(method, url, doc)
    return status, body, time.perf_counter() - start


TORCH_WIDTH = 4096


def write_torch_model(repo, mib):
    """A KIND_GPU TorchScript stack of 4096 x 4096 linear layers, about `mib` MiB of weights."""
    import torch
    layers = max(1, mib * (1 << 20) // (TORCH_WIDTH * TORCH_WIDTH * 4))
    torch.manual_seed(9)
    stack = []
    for _ in range(layers):
        stack += [torch.nn.Linear(TORCH_WIDTH, TORCH_WIDTH), torch.nn.ReLU()]
    module = torch.jit.script(torch.nn.Sequential(*stack).eval())
    name = "sleepy_torch"
    os.makedirs(os.path.join(repo, name, "1"))
    module.save(os.path.join(repo, name, "1", "model.pt"))
    with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
        f.write("""name: "%s"
platform: "pytorch_libtorch"
max_batch_size: %d
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ %d ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ %d ] } ]
instance_group [ { kind: KIND_GPU count: 2 } ]
""" % (name, BATCH, TORCH_WIDTH, TORCH_WIDTH))
    return name


def infer(base, model, x):
    input_name = "INPUT__0" if model == "sleepy_torch" else "INPUT0"
    st, body = http("POST", "%s/v2/models/%s/infer" % (base, model),
                    {"inputs": [{"name": input_name, "datatype": "FP32", "shape": list(x.shape),
                                 "data": x.ravel().tolist()}]})
    if st != 200:
        raise RuntimeError("%s: %d %s" % (model, st, body[:300]))
    out = json.loads(body)["outputs"][0]
    return np.asarray(out["data"], dtype=np.float32).reshape(out["shape"])


def metric(metrics_url, name, model):
    with urllib.request.urlopen(metrics_url, timeout=10) as r:
        text = r.read().decode()
    m = re.search(r'^%s\{model="%s",version="1"\} (\S+)$' % (name, model), text, re.M)
    return float(m.group(1)) if m else None


def nvml_process_bytes(pid):
    import pynvml
    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if p.pid == pid:
                return int(p.usedGpuMemory or 0)
        return 0
    finally:
        pynvml.nvmlShutdown()


def version_bytes(base, model):
    """{device: live bytes} under version 1 of `model` (/v2/memory)."""
    st, body = http("GET", base + "/v2/memory")
    stack = [json.loads(body)["owners"]]
    while stack:
        node = stack.pop()
        if node["path"].endswith("model:%s/version:1" % model):
            total = {}

            def add(n):
                for d, b in n["by_device"].items():
                    total[d] = total.get(d, 0) + b
                for c in n["children"]:
                    add(c)
            add(node)
            return total
        stack.extend(node["children"])
    return {}


def pinned_h2d_gbps(nbytes):
    """torch's pinned host-to-device copy of `nbytes`, best of 5 (GB/s)."""
    import torch
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    best = None
    for _ in range(5):
        torch.cuda.synchronize()
        start = time.perf_counter()
        dev.copy_(host, non_blocking=True)
        torch.cuda.synchronize()
        s = time.perf_counter() - start
        best = s if best is None else min(best, s)
    del host, dev
    torch.cuda.empty_cache()
    return nbytes / best / 1e9


def parse_size(text):
    units = {"MiB": 1 << 20, "GiB": 1 << 30}
    for u, m in units.items():
        if text.endswith(u):
            return int(float(text[:-len(u)]) * m)
    return int(text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vramd", required=True)
    ap.add_argument("--make-model", required=True)
    ap.add_argument("--sizes", default="1GiB,8GiB")
    ap.add_argument("--port", type=int, default=18300)
    ap.add_argument("--torch-backend-dir", help="a directory with pytorch/libvramd_pytorch.so")
    ap.add_argument("--torch-mib", type=int, default=512)
    args = ap.parse_args()

    work = tempfile.mkdtemp()
    repo = os.path.join(work, "repo")
    sizes = [size for size in args.sizes.split(",") if size]
    names = []
    for i, size in enumerate(sizes):
        name = "sleepy_%s" % size.lower()
        names.append(name)
        start = time.perf_counter()
        subprocess.run([sys.executable, args.make_model, "model", os.path.join(repo, name),
                        "--inputs", str(WIDTH_IN), "--target-bytes", size, "--outputs",
                        str(WIDTH_OUT), "--kind", "gpu", "--instances", "1",
                        "--max-batch-size", str(BATCH), "--name", name, "--seed", str(i + 1)],
                       check=True, stdout=subprocess.DEVNULL)
        print("# wrote %s in %.1f s" % (name, time.perf_counter() - start), flush=True)
    # A small model loads first, so the CUDA context exists before any timed load.
    subprocess.run([sys.executable, args.make_model, "model", os.path.join(repo, "warm"),
                    "--inputs", "16", "--hidden", "16", "--outputs", "16", "--kind", "gpu",
                    "--name", "warm"], check=True, stdout=subprocess.DEVNULL)

    torch_name = None
    if args.torch_backend_dir:
        torch_name = write_torch_model(repo, args.torch_mib)
        names.append(torch_name)
        sizes.append("%dMiB" % args.torch_mib)

    base = "http://127.0.0.1:%d" % args.port
    metrics = "http://127.0.0.1:%d/metrics" % (args.port + 2)
    log_path = os.path.join(work, "server.log")
    log = open(log_path, "w")
    backend_dir = ["--backend-directory", args.torch_backend_dir] if args.torch_backend_dir else []
    server = subprocess.Popen([args.vramd, "serve", "--model-repository", repo] + backend_dir +
                              ["--model-control-mode", "explicit", "--load-model", "warm",
                               "--http-port", str(args.port), "--grpc-port", str(args.port + 1),
                               "--metrics-port", str(args.port + 2)], stdout=log, stderr=log)
    try:
        for _ in range(600):
            try:
                if http("GET", base + "/v2/models/warm/ready")[0] == 200:
                    break
            except urllib.error.URLError:
                pass
            if server.poll() is not None:
                check(False, "the server exited at start (%s)" % server.returncode)
                raise SystemExit(1)
            time.sleep(0.1)
        rng = np.random.default_rng(5)
        for name, size in zip(names, sizes):
            nbytes = parse_size(size)
            width = TORCH_WIDTH if name == torch_name else WIDTH_IN
            x = rng.uniform(-1, 1, (BATCH, width)).astype(np.float32)
            st, body, _ = timed("POST", "%s/v2/repository/models/%s/load" % (base, name))
            check(st == 200, "%s loads (%s)" % (name, body[:200]))
            http("POST", "%s/v2/repository/models/%s/unload" % (base, name))
            st, body, cold_s = timed("POST", "%s/v2/repository/models/%s/load" % (base, name))
            check(st == 200, "%s loads again (%s)" % (name, body[:200]))
            print("FIGURE sleep_%s_cold_load_seconds %.3f s" % (name, cold_s), flush=True)
            before = infer(base, name, x)
            held = version_bytes(base, name)
            nvml_awake = nvml_process_bytes(server.pid)

            st, body, sleep_s = timed("POST", "%s/v2/repository/models/%s/sleep" % (base, name),
                                      {"parameters": {"level": 1}})
            check(st == 200, "%s sleeps at level 1 (%s)" % (name, body[:200]))
            print("FIGURE sleep_%s_sleep_seconds %.3f s" % (name, sleep_s), flush=True)
            asleep = version_bytes(base, name)
            nvml_asleep = nvml_process_bytes(server.pid)
            freed = nvml_awake - nvml_asleep
            print("FIGURE sleep_%s_nvml_freed_bytes %d bytes (weights %d)" % (name, freed, nbytes))
            check(freed >= 0.95 * nbytes,
                  "%s asleep: NVML's process figure fell by the weights (%.2f GiB of %.2f)"
                  % (name, freed / 2**30, nbytes / 2**30))
            check(asleep.get("cuda:0", 0) < held.get("cuda:0", 0) - 0.95 * nbytes
                  and asleep.get("cuda_host", 0) >= 0.95 * nbytes,
                  "%s asleep: the ledger shows the weights moved from cuda:0 to cuda_host (%s -> %s)"
                  % (name, held, asleep))

            st, body, wake_s = timed("POST", "%s/v2/repository/models/%s/wake" % (base, name))
            check(st == 200, "%s wakes (%s)" % (name, body[:200]))
            server_wake_s = metric(metrics, "vramd_model_last_wake_seconds", name) or wake_s
            after = infer(base, name, x)
            check(np.array_equal(after, before), "%s answers after the wake as before" % name)
            pinned = pinned_h2d_gbps(nbytes)
            wake_gbps = nbytes / server_wake_s / 1e9
            print("FIGURE sleep_%s_wake_seconds %.4f s (HTTP round trip %.4f s)"
                  % (name, server_wake_s, wake_s))
            print("FIGURE sleep_%s_pinned_h2d_gbps %.2f GB/s" % (name, pinned))
            print("FIGURE sleep_%s_wake_copy_vs_pinned_h2d %.3f ratio" % (name, wake_gbps / pinned))
            print("FIGURE sleep_%s_cold_load_over_wake %.1f ratio" % (name, cold_s / wake_s))
            check(cold_s / wake_s >= 10,
                  "%s: wake %.3f s is at least 10x faster than the cold load %.3f s"
                  % (name, wake_s, cold_s))
            check(wake_gbps >= 0.8 * pinned,
                  "%s: the wake's copy (%.1f GB/s) is at least 80%% of pinned H2D (%.1f GB/s)"
                  % (name, wake_gbps, pinned))

            # A request to a sleeping model wakes it.
            http("POST", "%s/v2/repository/models/%s/sleep" % (base, name))
            start = time.perf_counter()
            woken = infer(base, name, x)
            print("FIGURE sleep_%s_first_request_asleep_seconds %.4f s"
                  % (name, time.perf_counter() - start))
            check(np.array_equal(woken, before), "%s: a request wakes it and gets its answer" % name)

            # Level 2: nothing kept; the wake reads the file again.
            st, body, deep_s = timed("POST", "%s/v2/repository/models/%s/sleep" % (base, name),
                                     {"parameters": {"level": 2}})
            check(st == 200 and version_bytes(base, name).get("cuda_host", 0) < nbytes / 100,
                  "%s sleeps at level 2 and keeps no host copy" % name)
            st, body, deep_wake_s = timed("POST", "%s/v2/repository/models/%s/wake" % (base, name))
            check(st == 200 and np.array_equal(infer(base, name, x), before),
                  "%s wakes from level 2 with the same answers" % name)
            print("FIGURE sleep_%s_level2_sleep_seconds %.3f s" % (name, deep_s))
            print("FIGURE sleep_%s_level2_wake_seconds %.3f s (cold load %.3f s)"
                  % (name, deep_wake_s, cold_s))
            http("POST", "%s/v2/repository/models/%s/unload" % (base, name))
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()
        with open(log_path) as f:
            tail = f.read()[-3000:]
        print("# server log (tail)\n" + tail)
    print("%d failure(s)" % len(failures))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
