#!/usr/bin/env python3
"""A python model asleep in place on the GPU (issue 17, items 4 and 5; docs/memory.md, "Sleeping
in place"): vramd started with --device-pool=vmm; a KIND_GPU model.py whose initialize loads
SIZE of torch weights from a file in its version directory onto cuda:0 (they reach vramd's pool
through the python backend's torch MemPool, torch_ledger.h). For each size, in one server:
  - the cold load: unload, then load again, timed around POST .../load (the weights file is in
    the page cache: the fastest a load gets);
  - sleep: NVML's figure for the server's process falls by at least 90% of the weights, the
    ledger shows the version's cuda:0 bytes gone and the same bytes under cuda_host;
  - wake, timed around POST .../wake and by vramd_model_last_wake_seconds: NVML comes back, and
    the answers after it equal the answers before, bit for bit (the tensors kept their
    addresses: torch never knew);
  - the wake's copy rate against torch's pinned host-to-device copy of the same size, measured
    in this script;
  - a request to a sleeping model wakes it (its latency reported).
Targets, as for the built-in backends: wake at least 10x faster than the cold load, copy at 80%
of pinned H2D (reported; a python model's cold load is torch.load, not vramd's loader).

  sleep_in_place_gpu_check.py --vramd BIN/vramd --backend-directory DIR [--sizes 1GiB,4GiB]
"""
import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sleep_gpu_check import nvml_process_bytes, parse_size, pinned_h2d_gbps, version_bytes  # noqa: E402

FAILED = []
WIDTH = 4096  # a layer is WIDTH x WIDTH floats: 64 MiB


def say(kind, text):
    print("%s %s" % (kind, text), flush=True)
    if kind == "FAIL":
        FAILED.append(text)


def check(ok, text):
    say("PASS" if ok else "FAIL", text)
    return ok


MODEL = '''import os

import torch
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        device = torch.device("cuda:%s" % args["model_instance_device_id"])
        path = os.path.join(args["model_repository"], args["model_version"], "weights.pt")
        self.layers = torch.load(path, map_location=device)
        torch.cuda.synchronize(device)
        self.device = device

    def execute(self, requests):
        responses = []
        with torch.inference_mode():
            for request in requests:
                x = torch.from_numpy(
                    pb_utils.get_input_tensor_by_name(request, "X").as_numpy()).to(self.device)
                for w in self.layers:
                    x = torch.tanh(x @ w)
                responses.append(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("Y", x.cpu().numpy())]))
        return responses
'''

CONFIG = '''name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ 2, {width} ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ 2, {width} ] }} ]
instance_group [ {{ kind: KIND_GPU count: 1 gpus: [ 0 ] }} ]
'''


def write_model(repo, name, nbytes):
    layers = max(1, nbytes // (WIDTH * WIDTH * 4))
    os.makedirs(os.path.join(repo, name, "1"))
    with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
        f.write(CONFIG.format(name=name, width=WIDTH))
    with open(os.path.join(repo, name, "1", "model.py"), "w") as f:
        f.write(MODEL)
    g = torch.Generator().manual_seed(11)
    weights = [torch.randn(WIDTH, WIDTH, generator=g) / WIDTH ** 0.5 for _ in range(layers)]
    torch.save(weights, os.path.join(repo, name, "1", "weights.pt"))
    return layers * WIDTH * WIDTH * 4


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, vramd, backend_dir, repo, log_path, models, vmm=True):
        self.port, self.metrics_port = free_port(), free_port()
        self.log = open(log_path, "w")
        argv = [vramd, "serve", "--model-repository", repo, "--backend-directory", backend_dir,
                "--device-pool", "vmm" if vmm else "caching", "--model-control-mode", "explicit",
                "--http-port", str(self.port), "--grpc-port", "0",
                "--metrics-port", str(self.metrics_port)]
        for m in models:
            argv += ["--load-model", m]
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 300
        while time.time() < deadline:
            try:
                if all(self.call("GET", "/v2/models/%s/ready" % m)[0] == 200 for m in models):
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError("vramd exited with %s" % self.proc.returncode)
            time.sleep(0.2)
        raise RuntimeError("models did not become ready")

    def call(self, method, path, body=None, timeout=600):
        data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (self.port, path), data=data,
                                     method=method, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def timed(self, method, path, body=None):
        start = time.perf_counter()
        status, text = self.call(method, path, body)
        return status, text, time.perf_counter() - start

    def infer(self, model, x):
        status, body = self.call("POST", "/v2/models/%s/infer" % model, {
            "inputs": [{"name": "X", "datatype": "FP32", "shape": list(x.shape),
                        "data": x.ravel().tolist()}]})
        if status != 200:
            raise RuntimeError("%s: HTTP %d %s" % (model, status, body[:300]))
        out = json.loads(body)["outputs"][0]
        return np.asarray(out["data"], dtype=np.float32).reshape(out["shape"])

    def metric(self, name, model):
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.metrics_port,
                                    timeout=10) as r:
            text = r.read().decode()
        m = re.search(r'^%s\{model="%s",version="1"\} (\S+)$' % (name, model), text, re.M)
        return float(m.group(1)) if m else None

    def version_bytes(self, model):
        return version_bytes("http://127.0.0.1:%d" % self.port, model)

    def pools(self):
        return json.loads(self.call("GET", "/v2/memory")[1])["pools"]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vramd", required=True)
    ap.add_argument("--backend-directory", required=True)
    ap.add_argument("--sizes", default="1GiB,4GiB")
    ap.add_argument("--log", default=None)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="inplace-")
    repo = os.path.join(work, "models")
    sizes = [parse_size(s) for s in args.sizes.split(",") if s]
    names, weights = [], {}
    for size in sizes:
        name = "py_weights_%dmib" % (size >> 20)
        weights[name] = write_model(repo, name, size)
        names.append(name)
    x = np.random.default_rng(3).standard_normal((2, WIDTH)).astype(np.float32)
    server = Server(args.vramd, args.backend_directory, repo,
                    args.log or os.path.join(work, "server.log"), names)
    try:
        pool = [p for p in server.pools() if p["device"] == "cuda:0"]
        check(pool and pool[0]["kind"] == "vmm", "cuda:0's pool is a VMM pool (%s)" %
              (pool[0]["kind"] if pool else "none"))
        for name in names:
            nbytes = weights[name]
            gib = nbytes / (1 << 30)
            # The cold load, the model's own way (torch.load to cuda), file in the page cache.
            server.call("POST", "/v2/repository/models/%s/unload" % name)
            st, body, cold = server.timed("POST", "/v2/repository/models/%s/load" % name)
            check(st == 200, "%s: load again (HTTP %d %s)" % (name, st, body[:200]))
            before = server.infer(name, x)
            held = server.version_bytes(name)
            check(held.get("cuda:0", 0) >= nbytes,
                  "%s: the version holds its %.2f GiB on cuda:0 in the ledger (%s)" %
                  (name, gib, held))
            time.sleep(0.5)
            nvml_awake = nvml_process_bytes(server.proc.pid)

            st, body, slept = server.timed("POST", "/v2/repository/models/%s/sleep" % name)
            check(st == 200, "%s: sleep (HTTP %d %s)" % (name, st, body[:300]))
            time.sleep(0.5)
            nvml_asleep = nvml_process_bytes(server.proc.pid)
            asleep = server.version_bytes(name)
            freed = nvml_awake - nvml_asleep
            check(freed >= 0.9 * nbytes,
                  "%s: NVML's process figure fell by %.2f GiB of %.2f GiB of weights" %
                  (name, freed / (1 << 30), gib))
            check(held.get("cuda:0", 0) - asleep.get("cuda:0", 0) >= 0.99 * nbytes and
                  asleep.get("cuda_host", 0) >= nbytes,
                  "%s: the ledger moved the weights from cuda:0 to cuda_host (%s -> %s)" %
                  (name, held, asleep))

            st, body, woke = server.timed("POST", "/v2/repository/models/%s/wake" % name)
            check(st == 200, "%s: wake (HTTP %d %s)" % (name, st, body[:300]))
            own = server.metric("vramd_model_last_wake_seconds", name)
            time.sleep(0.5)
            nvml_back = nvml_process_bytes(server.proc.pid)
            check(nvml_back - nvml_asleep >= 0.9 * nbytes,
                  "%s: NVML's figure came back (+%.2f GiB)" %
                  (name, (nvml_back - nvml_asleep) / (1 << 30)))
            after = server.infer(name, x)
            check(after.tobytes() == before.tobytes(),
                  "%s: answers after the wake equal those before, bit for bit" % name)
            h2d = pinned_h2d_gbps(nbytes)
            wake_s = own if own else woke
            rate = nbytes / wake_s / 1e9
            say("FIGURE", "%s: %.2f GiB: cold load %.3f s, sleep %.3f s, wake %.3f s (HTTP) / "
                "%.3f s (vramd) -> %.1fx faster than the cold load; wake copy %.1f GB/s = %.2f "
                "of pinned H2D (%.1f GB/s)" % (name, gib, cold, slept, woke, wake_s,
                                              cold / wake_s, rate, rate / h2d, h2d))
            check(cold / wake_s >= 10, "%s: wake at least 10x faster than the cold load (%.1fx)"
                  % (name, cold / wake_s))
            check(rate / h2d >= 0.8, "%s: the wake's copy at least 80%% of pinned H2D (%.2f)"
                  % (name, rate / h2d))

            # A request wakes it.
            server.call("POST", "/v2/repository/models/%s/sleep" % name)
            start = time.perf_counter()
            woken = server.infer(name, x)
            first = time.perf_counter() - start
            check(woken.tobytes() == before.tobytes(),
                  "%s: a request to the sleeping model woke it and got the same answer" % name)
            start = time.perf_counter()
            server.infer(name, x)
            say("FIGURE", "%s: the request that woke it took %.3f s; the next %.3f s" %
                (name, first, time.perf_counter() - start))
            # Asleep again for the next size: its memory is not in the way.
            server.call("POST", "/v2/repository/models/%s/sleep" % name)
        for name in names:
            server.call("POST", "/v2/repository/models/%s/unload" % name)
        pool = [p for p in server.pools() if p["device"] == "cuda:0"]
        if pool:
            say("FIGURE", "cuda:0 VMM pool at the end: reserved %d, holes %d, decommits %d" %
                (pool[0]["reserved_bytes"], pool[0]["hole_bytes"], pool[0]["decommits"]))
    finally:
        code = server.stop()
        check(code == 0, "vramd exited cleanly (%s)" % code)

    # Without the VMM pool the same kind of model cannot sleep, and says what to do.
    small_repo = os.path.join(work, "small")
    write_model(small_repo, "py_small", 64 << 20)
    plain = Server(args.vramd, args.backend_directory, small_repo,
                   os.path.join(work, "plain.log"), ["py_small"], vmm=False)
    try:
        st, body = plain.call("POST", "/v2/repository/models/py_small/sleep")
        check(st == 501 and b"--device-pool=vmm" in body,
              "without --device-pool=vmm a sleep is refused naming the flag (HTTP %d %s)" %
              (st, body[:200]))
        plain.infer("py_small", x)
    finally:
        plain.stop()
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
