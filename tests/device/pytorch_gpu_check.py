#!/usr/bin/env python3
"""The pytorch backend on a GPU: what CI (no GPU, CPU-only LibTorch) cannot check, run on the
device by scripts/device/run.sh. Prints PASS/FAIL/FIGURE lines; exits 1 on any FAIL.

  python3 tests/device/pytorch_gpu_check.py --vramd device-dist/bin/vramd \
      --backend-directory build-torch-device/backends

Checks, with KIND_GPU models made here by torch:
  - answers equal torch's own on the same GPU (an MLP, two instances, batched requests);
  - the module's weights are in the ledger on cuda:0, charged to the version;
  - an exception in forward() on the GPU is an error response, and the model keeps serving;
  - unload leaves no leak and no bytes under the model, and 5 load/unload cycles do not grow
    the process's NVML figure; `unattributed` before and after is printed, and after each
    unload it is under 8 MiB: what LibTorch keeps (kernels loaded into the context, pooled
    handles) is charged to server/backend:pytorch (src/memory/native_memory.h)."""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from typing import List

import torch

FAILED = []


def say(kind, text):
    print("%s %s" % (kind, text), flush=True)
    if kind == "FAIL":
        FAILED.append(text)


def check(ok, text):
    say("PASS" if ok else "FAIL", text)
    return ok


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(256, 1024)
        self.b = torch.nn.Linear(1024, 256)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


class Thrower(torch.nn.Module):
    def forward(self, x):
        if bool((x < 0).any()):
            raise RuntimeError("negative values are not allowed")
        return x * 2.0


class Mixed(torch.nn.Module):
    """Two inputs and four outputs of four types and odd sizes, copied to and from the GPU at
    batch sizes that grow and shrink."""

    def forward(self, a: torch.Tensor, b: torch.Tensor):
        return a * 2.0, b + 1, a.sum(1) > 0, a.double() / 3.0


class Tagged(torch.nn.Module):
    """TYPE_STRING in and out (List[str]) next to a tensor on the GPU: the strings stay on the
    host, the tensor goes to the device."""

    def forward(self, words: List[str], x: torch.Tensor):
        return [w + "@" + str(x.device.type) for w in words], x * 3.0


KIND = "KIND_GPU"
TYPES = {torch.float32: ("TYPE_FP32", "FP32"), torch.int64: ("TYPE_INT64", "INT64"),
         torch.bool: ("TYPE_BOOL", "BOOL"), torch.float64: ("TYPE_FP64", "FP64"),
         "string": ("TYPE_STRING", "BYTES")}


def write_model(repo, name, module, inputs, outputs, max_batch_size, count):
    d = os.path.join(repo, name)
    os.makedirs(os.path.join(d, "1"), exist_ok=True)
    torch.jit.save(module, os.path.join(d, "1", "model.pt"))
    # (name, dims) or (name, dims, torch dtype); FP32 when not given.
    t = lambda n, dims, dtype=torch.float32: '{ name: "%s" data_type: %s dims: [ %s ] }' % (
        n, TYPES[dtype][0], ", ".join(map(str, dims)))
    with open(os.path.join(d, "config.pbtxt"), "w") as f:
        f.write('platform: "pytorch_libtorch"\nmax_batch_size: %d\ninput [ %s ]\noutput [ %s ]\n'
                'instance_group [ { kind: %s count: %d } ]\n' % (
                    max_batch_size, ", ".join(t(*i) for i in inputs),
                    ", ".join(t(*o) for o in outputs), KIND, count))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, vramd, backend_dir, repo, log_path):
        self.port = free_port()
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(
            [vramd, "serve", "--model-repository", repo, "--backend-directory", backend_dir,
             "--model-control-mode", "explicit", "--http-port", str(self.port), "--grpc-port", "0",
             "--metrics-port", "0"], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if self.call("GET", "/v2/health/live")[0] == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError("vramd exited with %s" % self.proc.returncode)
            time.sleep(0.2)
        raise RuntimeError("vramd did not come up")

    def call(self, method, path, body=None, timeout=120):
        data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (self.port, path), data=data,
                                     method=method)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def infer(self, model, tensors):
        def one(name, t):
            if isinstance(t, list):  # strings
                return {"name": name, "datatype": "BYTES", "shape": [len(t), 1], "data": t}
            return {"name": name, "datatype": TYPES[t.dtype][1], "shape": list(t.shape),
                    "data": t.reshape(-1).tolist()}
        body = {"inputs": [one(n, t) for n, t in tensors]}
        return self.call("POST", "/v2/models/%s/infer" % model, body)

    def memory(self):
        return self.call("GET", "/v2/memory")[1]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()
        return self.proc.returncode


def walk(node):
    yield node
    for c in node.get("children", []):
        yield from walk(c)


def model_bytes(report, model, device=None):
    total = 0
    for n in walk(report["owners"]):
        if n["path"].startswith("server/model:%s/" % model):
            total += n["by_device"].get(device, 0) if device else n["live_bytes"]
    return total


def nvml_used(report):
    for u in report.get("unattributed", []):
        if u["device"] == "cuda:0":  # absent without a GPU: the NVML checks are skipped
            return u.get("nvml_process_used_bytes"), u.get("bytes")
    return None, None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vramd", required=True)
    ap.add_argument("--backend-directory", required=True)
    ap.add_argument("--kind", choices=["gpu", "cpu"], default="gpu",
                    help="cpu: the same checks on KIND_CPU, to try this script without a GPU")
    ap.add_argument("--log", default=os.path.join(tempfile.gettempdir(), "pytorch_gpu_check.log"))
    args = ap.parse_args()
    MiB = 1 << 20
    global KIND
    KIND = "KIND_GPU" if args.kind == "gpu" else "KIND_CPU"
    device = "cuda:0" if args.kind == "gpu" else "cpu"

    repo = tempfile.mkdtemp(prefix="pytorch-gpu-")
    torch.manual_seed(0)
    mlp = Mlp().eval()
    write_model(repo, "mlp_gpu", torch.jit.trace(mlp, torch.zeros(1, 256)),
                [("INPUT__0", [256])], [("OUTPUT__0", [256])], 8, 2)
    write_model(repo, "thrower_gpu", torch.jit.script(Thrower()),
                [("INPUT__0", [-1])], [("OUTPUT__0", [-1])], 0, 1)
    write_model(repo, "mixed_gpu", torch.jit.script(Mixed()),
                [("a", [-1], torch.float32), ("b", [5], torch.int64)],
                [("OUTPUT__0", [-1], torch.float32), ("OUTPUT__1", [5], torch.int64),
                 ("OUTPUT__2", [], torch.bool), ("OUTPUT__3", [-1], torch.float64)], 64, 2)
    write_model(repo, "tagged_gpu", torch.jit.script(Tagged()),
                [("words", [1], "string"), ("x", [2], torch.float32)],
                [("OUTPUT__0", [1], "string"), ("OUTPUT__1", [2], torch.float32)], 8, 1)
    weight_bytes = sum(p.numel() * 4 for p in mlp.parameters())
    reference = mlp.to(device)

    server = Server(args.vramd, args.backend_directory, repo, args.log)
    try:
        before = server.memory()
        used0, unattributed0 = nvml_used(before)
        say("FIGURE", "pytorch_gpu_unattributed_before_load_mib %.1f MiB" % ((unattributed0 or 0) / MiB))
        cycle_used = []
        for cycle in range(5):
            status, body = server.call("POST", "/v2/repository/models/mlp_gpu/load")
            if not check(status == 200, "cycle %d: mlp_gpu loads on KIND_GPU (%s)" % (cycle, body)):
                break
            loaded = server.memory()
            on_gpu = model_bytes(loaded, "mlp_gpu", device)
            if cycle == 0:
                check(on_gpu >= weight_bytes, "weights in the ledger on %s under the model: %d bytes >= %d" % (
                    device, on_gpu, weight_bytes))
            worst = 0.0
            for i in range(20):
                x = torch.randn(1 + i % 8, 256)
                status, body = server.infer("mlp_gpu", [("INPUT__0", x)])
                if status != 200:
                    check(False, "mlp_gpu infer: HTTP %d %s" % (status, body))
                    break
                got = torch.tensor(body["outputs"][0]["data"]).reshape(x.shape[0], 256)
                with torch.no_grad():
                    want = reference(x.to(device)).cpu()
                worst = max(worst, float(((got - want).abs() / want.abs().clamp(min=1.0)).max()))
            if cycle == 0:
                say("FIGURE", "pytorch_gpu_max_rel_err_vs_torch %.3g ratio" % worst)
                check(worst < 1e-3, "KIND_GPU answers equal torch's own on the GPU (max rel err "
                      "%.3g)" % worst)
                _, unattributed1 = nvml_used(server.memory())
                say("FIGURE", "pytorch_gpu_unattributed_loaded_mib %.1f MiB" % (
                    (unattributed1 or 0) / MiB))
            status, _ = server.call("POST", "/v2/repository/models/mlp_gpu/unload")
            check(status == 200, "cycle %d: unload" % cycle)
            time.sleep(0.5)
            after = server.memory()
            check(after["leaked_bytes_total"] == 0 and not after["leaks"] and
                  model_bytes(after, "mlp_gpu") == 0,
                  "cycle %d: after unload no leak and nothing left under the model" % cycle)
            cycle_used.append(nvml_used(after)[0])
            # What LibTorch keeps after the unload (kernels loaded into the context, pooled
            # handles) is the backend's residue, not unattributed (issue 17, item 6).
            _, un_after = nvml_used(after)
            if un_after is not None:
                residue = sum(n["live_bytes"] for n in walk(after["owners"])
                              if n["path"] == "server/backend:pytorch")
                if cycle == 0:
                    say("FIGURE", "pytorch_gpu_unattributed_after_unload_mib %.1f MiB" % (
                        un_after / MiB))
                    say("FIGURE", "pytorch_gpu_backend_residue_mib %.1f MiB" % (residue / MiB))
                check(abs(un_after) < 8 * MiB,
                      "cycle %d: after unload, unattributed %.1f MiB (under 8; the backend's "
                      "residue %.1f MiB)" % (cycle, un_after / MiB, residue / MiB))
        if used0 is not None and cycle_used and cycle_used[0] is not None:
            say("FIGURE", "pytorch_gpu_nvml_after_unload_vs_before_load_mib %.1f MiB" % (
                (cycle_used[-1] - used0) / MiB))
            growth = (cycle_used[-1] - cycle_used[0]) / MiB
            say("FIGURE", "pytorch_gpu_nvml_growth_cycle1_to_cycle5_mib %.1f MiB" % growth)
            check(abs(growth) <= 2.0, "5 load/unload cycles do not grow NVML (%.1f MiB)" % growth)

        status, body = server.call("POST", "/v2/repository/models/mixed_gpu/load")
        check(status == 200, "mixed_gpu loads (%s)" % body)
        mismatches = []
        for batch, width in [(1, 3), (2, 7), (64, 1000), (5, 33), (64, 4099), (1, 1)]:
            a = torch.randn(batch, width)
            b = torch.randint(-1000, 1000, (batch, 5))
            status, body = server.infer("mixed_gpu", [("a", a), ("b", b)])
            if status != 200:
                mismatches.append("batch %d width %d: HTTP %d %s" % (batch, width, status, body))
                continue
            got = {o["name"]: o for o in body["outputs"]}
            want = {"OUTPUT__0": a * 2.0, "OUTPUT__1": b + 1, "OUTPUT__2": a.sum(1) > 0,
                    "OUTPUT__3": a.double() / 3.0}
            for name, w in want.items():
                o = got.get(name)
                g = None if o is None else torch.tensor(o["data"], dtype=w.dtype).reshape(o["shape"])
                if g is None or g.shape != w.shape or not torch.allclose(
                        g.double(), w.double(), rtol=1e-6, atol=1e-6):
                    mismatches.append("batch %d width %d: %s differs" % (batch, width, name))
        check(not mismatches, "two inputs and four outputs of four types on the GPU, "
              "batches 1 to 64, equal torch's (%s)" % ("; ".join(mismatches[:3]) or "all equal"))
        server.call("POST", "/v2/repository/models/mixed_gpu/unload")

        status, body = server.call("POST", "/v2/repository/models/tagged_gpu/load")
        check(status == 200, "tagged_gpu loads (%s)" % body)
        words, x = ["a", "bc", ""], torch.randn(3, 2)
        status, body = server.infer("tagged_gpu", [("words", words), ("x", x)])
        got = {o["name"]: o for o in body.get("outputs", [])} if status == 200 else {}
        want_words = [w + "@" + device.split(":")[0] for w in words]
        check(status == 200 and got["OUTPUT__0"]["data"] == want_words and
              got["OUTPUT__0"]["shape"] == [3, 1] and
              torch.allclose(torch.tensor(got["OUTPUT__1"]["data"]).reshape(3, 2), x * 3.0),
              "TYPE_STRING in and out as List[str] next to a tensor on %s (%s)" % (
                  device, got.get("OUTPUT__0", body)))
        server.call("POST", "/v2/repository/models/tagged_gpu/unload")

        status, body = server.call("POST", "/v2/repository/models/thrower_gpu/load")
        check(status == 200, "thrower_gpu loads (%s)" % body)
        status, body = server.infer("thrower_gpu", [("INPUT__0", torch.tensor([1.0, -1.0]))])
        check(status >= 400 and "negative values are not allowed" in json.dumps(body),
              "an exception in forward() on the GPU is an error response (%d %s)" % (status, body))
        status, body = server.infer("thrower_gpu", [("INPUT__0", torch.tensor([1.0, 2.5]))])
        check(status == 200 and body["outputs"][0]["data"] == [2.0, 5.0],
              "the model keeps serving after the exception")
    finally:
        code = server.stop()
        check(code == 0, "vramd exits cleanly (code %s; log %s)" % (code, args.log))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
