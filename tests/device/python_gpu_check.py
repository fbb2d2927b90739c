#!/usr/bin/env python3
"""The python backend's memory hooks on a GPU (src/backends/python/torch_ledger.h,
numpy_ledger.h): what CI (no GPU, torch 1.13 without MemPool) cannot check. Run on the device
by scripts/device/run.sh (STEPS=python) against a server with the python backend; prints
PASS/FAIL/FIGURE lines and exits 1 on any FAIL.

  python3 tests/device/python_gpu_check.py --vramd device-dist/bin/vramd \
      --backend-directory <dir holding python/libvramd_python.so>

The models are model.py files written here (torch on cuda:0, KIND_GPU):
  - py_torch (2 instances, on the shared legacy stream): 16 MiB of weights made in initialize;
    each execute makes 8 MiB of temporaries and answers x @ w.T. Checks: each instance's weights
    are in the ledger on cuda:0 under that instance (its MemPool's segments); answers equal torch's own; 40 requests
    later the instances' cuda:0 bytes are what they were after warm-up, torch's
    memory_allocated (reported by the model) too (the temporaries were freed), no request owner
    is left and nothing is filed as a leak; unload leaves no bytes under the model (dropping the
    pool returns its segments);
  - py_torch_stream: py_torch with a stream per instance (the default, set "on"): its executes
    run on a CUDA stream per instance (the model reports torch's current stream), its weights
    are still in the ledger, it answers the same, also after an unload and a load;
  - py_torch_leaky: the same (a stream per instance), keeping a 16 MiB tensor per request in
    self.history (the planted leak): the growth warning names the model and its instance, and
    the instance's cuda:0 bytes rose by at least 16 MiB per request;
  - py_torch_quota: py_torch_leaky under vramd.memory_quota "cuda:0=96MiB": after a few kept
    tensors a request fails with torch's out-of-memory error naming the quota, py_torch serves
    on beside it, and /v2/memory shows the quota on cuda:0 with its refusals;
  - py_torch_off: py_torch with VRAMD_PYTHON_LEDGER_TORCH "off": torch's default pool takes its
    memory outside vramd's pools, and that shows under its instance as measured native memory
    (native_measured_bytes, src/memory/native_memory.h); it still answers;
  - py_torch_stub: py_torch_stream hosted in a stub: its torch memory comes from the server's
    pools by CUDA IPC (weights in the ledger per instance, flat over 40 requests), the host is
    listed under the model with NVML's figure for its pid, a SIGKILLed host is replaced and its
    GPU memory freed, unload leaves nothing;
  - py_bls_gpu / py_bls_gpu_stub: BLS to py_torch with a torch cuda tensor as input
    (Tensor.from_dlpack), in-process and from a stub: the answer is torch's;
  - py_numpy_leaky (KIND_CPU): numpy arrays kept in self.history are leaks naming their requests
    (the numpy handler built against this machine's numpy, 2.x: numpy/_core/include);
  - py_gpu_caller -> py_gpu_echo (FORCE_CPU_ONLY_INPUT_TENSORS "no"): GPU tensors through the
    request path. A torch cuda tensor passed by BLS reaches the called model on the GPU at the
    caller's own address (no copy), and its cuda output comes back on the GPU (Triton's default
    preferred memory, and TRITONSERVER_MEMORY_GPU) or in host memory (TRITONSERVER_MEMORY_CPU),
    correct each way; over HTTP py_gpu_echo's cuda output arrives as numbers; the same with
    the called model in a stub (py_gpu_echo_stub) and with the caller in a stub
    (py_gpu_caller_stub, to either): GPU tensors cross processes by CUDA IPC, never through
    host memory; nothing is left in the ledger or filed as a leak.
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

FAILED = []
MIB = 1 << 20
GROWTH_REQUESTS = 8  # --memory-growth-requests


def say(kind, text):
    print("%s %s" % (kind, text), flush=True)
    if kind == "FAIL":
        FAILED.append(text)


def check(ok, text):
    say("PASS" if ok else "FAIL", text)
    return ok


TORCH_MODEL = '''import json

import numpy as np
import torch
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.device = torch.device("cuda:%s" % args["model_instance_device_id"])
        params = json.loads(args["model_config"]).get("parameters", {})
        self.leak = params.get("LEAK", {}).get("string_value") == "yes"
        g = torch.Generator().manual_seed(0)
        self.w = torch.randn(4096, 1024, generator=g).to(self.device)  # 16 MiB
        self.history = []

    def execute(self, requests):
        responses = []
        with torch.inference_mode():
            for request in requests:
                x = torch.from_numpy(
                    pb_utils.get_input_tensor_by_name(request, "X").as_numpy()).to(self.device)
                scratch = torch.empty(2 * 1024 * 1024, device=self.device)  # 8 MiB
                scratch.fill_(1.0)
                y = x @ self.w.T + (scratch.sum() - scratch.numel())
                if self.leak:
                    self.history.append(torch.ones(4 * 1024 * 1024, device=self.device))
                del scratch
                allocated = torch.cuda.memory_allocated(self.device)
                stream = torch.cuda.current_stream(self.device).stream_id
                responses.append(pb_utils.InferenceResponse([
                    pb_utils.Tensor("Y", y.cpu().numpy()),
                    pb_utils.Tensor("ALLOCATED", np.array([allocated], dtype=np.int64)),
                    pb_utils.Tensor("STREAM", np.array([stream], dtype=np.int64))]))
        return responses
'''

TORCH_CONFIG = '''name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ -1, 1024 ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ -1, 4096 ] }},
         {{ name: "ALLOCATED" data_type: TYPE_INT64 dims: [ 1 ] }},
         {{ name: "STREAM" data_type: TYPE_INT64 dims: [ 1 ] }} ]
instance_group [ {{ kind: KIND_GPU count: {count} gpus: [ 0 ] }} ]
parameters [ {{ key: "LEAK" value: {{ string_value: "{leak}" }} }},
             {{ key: "VRAMD_PYTHON_LEDGER_TORCH" value: {{ string_value: "{ledger}" }} }},
             {{ key: "VRAMD_PYTHON_TORCH_INSTANCE_STREAM" value: {{ string_value: "{stream}" }} }},
             {{ key: "VRAMD_PYTHON_HOSTING" value: {{ string_value: "{hosting}" }} }}{extra} ]
'''

BLS_GPU_MODEL = '''import torch
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.device = torch.device("cuda:%s" % args["model_instance_device_id"])

    def execute(self, requests):
        responses = []
        for request in requests:
            x = torch.from_numpy(
                pb_utils.get_input_tensor_by_name(request, "X").as_numpy()).to(self.device)
            called = pb_utils.InferenceRequest(
                model_name="py_torch", inputs=[pb_utils.Tensor.from_dlpack("X", x)],
                requested_output_names=["Y"]).exec()
            if called.has_error():
                raise pb_utils.TritonModelException(called.error().message())
            y = pb_utils.get_output_tensor_by_name(called, "Y").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", y)]))
        return responses
'''

BLS_GPU_CONFIG = '''name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ -1, 1024 ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ -1, 4096 ] }} ]
instance_group [ {{ kind: KIND_GPU count: 1 gpus: [ 0 ] }} ]
parameters [ {{ key: "VRAMD_PYTHON_HOSTING" value: {{ string_value: "{hosting}" }} }} ]
'''

NUMPY_MODEL = '''import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.history = []

    def execute(self, requests):
        responses = []
        for request in requests:
            v = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            out = np.full(64 * 1024, v, dtype=np.float32)
            self.history.append(out)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out)]))
        return responses
'''

NUMPY_CONFIG = '''name: "py_numpy_leaky"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
'''


GPU_ECHO_MODEL = '''import numpy as np
import torch
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.device = torch.device("cuda:%s" % args["model_instance_device_id"])

    def execute(self, requests):
        responses = []
        for request in requests:
            t = pb_utils.get_input_tensor_by_name(request, "X")
            if t.is_cpu():
                x, ptr = torch.from_numpy(t.as_numpy()).to(self.device), -1
            else:
                x = torch.utils.dlpack.from_dlpack(t.to_dlpack())
                ptr = x.data_ptr()
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor.from_dlpack("Y", x * 2),
                pb_utils.Tensor("PTR", np.array([ptr], np.int64)),
                pb_utils.Tensor("INPUT_ON_CPU", np.array([int(t.is_cpu())], np.int32))]))
        return responses
'''

GPU_ECHO_CONFIG = '''name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ -1, 1024 ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ -1, 1024 ] }},
         {{ name: "PTR" data_type: TYPE_INT64 dims: [ 1 ] }},
         {{ name: "INPUT_ON_CPU" data_type: TYPE_INT32 dims: [ 1 ] }} ]
instance_group [ {{ kind: KIND_GPU count: 2 gpus: [ 0 ] }} ]
parameters [ {{ key: "FORCE_CPU_ONLY_INPUT_TENSORS" value: {{ string_value: "no" }} }},
             {{ key: "VRAMD_PYTHON_HOSTING" value: {{ string_value: "{hosting}" }} }} ]
'''

GPU_CALLER_MODEL = '''import json

import numpy as np
import torch
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.device = torch.device("cuda:%s" % args["model_instance_device_id"])

    def execute(self, requests):
        responses = []
        for request in requests:
            x = torch.from_numpy(
                pb_utils.get_input_tensor_by_name(request, "X").as_numpy()).to(self.device)
            x = x + 0  # made on this instance's stream, as a model's activations are
            target = json.loads(request.parameters()).get("target", "py_gpu_echo")
            result = {"x_ptr": x.data_ptr()}
            for how, memory in (("default", None),
                                ("gpu", pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_GPU, 0)),
                                ("cpu", pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_CPU, 0))):
                extra = {} if memory is None else {"preferred_memory": memory}
                answer = pb_utils.InferenceRequest(
                    model_name=target, inputs=[pb_utils.Tensor.from_dlpack("X", x)],
                    requested_output_names=["Y", "PTR", "INPUT_ON_CPU"], **extra).exec()
                if answer.has_error():
                    raise pb_utils.TritonModelException(answer.error().message())
                y = pb_utils.get_output_tensor_by_name(answer, "Y")
                if y.is_cpu():
                    got = torch.from_numpy(y.as_numpy()).to(self.device)
                else:
                    got = torch.utils.dlpack.from_dlpack(y.to_dlpack())
                result[how] = {
                    "y_on_cpu": y.is_cpu(),
                    "y_equal": bool(torch.equal(got, x * 2)),
                    "callee_ptr": int(pb_utils.get_output_tensor_by_name(answer, "PTR").as_numpy()[0]),
                    "callee_input_on_cpu": int(pb_utils.get_output_tensor_by_name(
                        answer, "INPUT_ON_CPU").as_numpy()[0])}
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor(
                "RESULT", np.array([json.dumps(result).encode()], dtype=np.object_))]))
        return responses
'''

GPU_CALLER_CONFIG = '''name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ -1, 1024 ] }} ]
output [ {{ name: "RESULT" data_type: TYPE_STRING dims: [ 1 ] }} ]
instance_group [ {{ kind: KIND_GPU count: 1 gpus: [ 0 ] }} ]
parameters [ {{ key: "VRAMD_PYTHON_HOSTING" value: {{ string_value: "{hosting}" }} }} ]
'''


# A stateful model on the GPU (issue 16, sequence batching): implicit state kept by the server
# between the requests of a sequence, the model computing on cuda:0 with torch and returning its
# state output as a cuda tensor (docs/sequences.md: the state comes to the host between requests).
SEQ_CONFIG = '''name: "py_torch_seq"
backend: "python"
max_batch_size: 4
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { kind: KIND_GPU count: 1 gpus: [ 0 ] } ]
sequence_batching {
  control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ]
  state [ { input_name: "S_IN" output_name: "S_OUT" data_type: TYPE_FP32 dims: [ 4 ]
            initial_state [ { name: "zeros" data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } ] } ]
}
'''

SEQ_MODEL = '''import torch
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = torch.from_numpy(pb_utils.get_input_tensor_by_name(request, "X").as_numpy()).cuda()
            s = torch.from_numpy(pb_utils.get_input_tensor_by_name(request, "S_IN").as_numpy()).cuda()
            total = (s + x).contiguous()
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor.from_dlpack("Y", torch.utils.dlpack.to_dlpack(total)),
                pb_utils.Tensor.from_dlpack("S_OUT", torch.utils.dlpack.to_dlpack(total.clone())),
            ]))
        return responses
'''


def write(repo, name, config, model):
    os.makedirs(os.path.join(repo, name, "1"), exist_ok=True)
    with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
        f.write(config)
    with open(os.path.join(repo, name, "1", "model.py"), "w") as f:
        f.write(model)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, vramd, backend_dir, repo, log_path):
        self.port = free_port()
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(
            [vramd, "serve", "--model-repository", repo, "--backend-directory", backend_dir,
             "--model-control-mode", "explicit", "--http-port", str(self.port), "--grpc-port", "0",
             "--metrics-port", "0", "--memory-growth-requests", str(GROWTH_REQUESTS)],
            stdout=self.log, stderr=subprocess.STDOUT)
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

    def call(self, method, path, body=None, timeout=300):
        data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (self.port, path), data=data,
                                     method=method)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def infer(self, model, name, array, datatype):
        body = {"inputs": [{"name": name, "datatype": datatype, "shape": list(array.shape),
                            "data": array.reshape(-1).tolist()}]}
        status, r = self.call("POST", "/v2/models/%s/infer" % model, body)
        if status != 200:
            raise RuntimeError("%s: HTTP %d %s" % (model, status, r))
        return {o["name"]: np.array(o["data"]).reshape(o["shape"]) for o in r["outputs"]}

    def memory(self):
        return self.call("GET", "/v2/memory")[1]

    def text(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

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


def instances(report, model):
    """{instance path: cuda:0 bytes of its subtree (self and requests)}."""
    prefix = "server/model:%s/version:1/instance:" % model
    out = {}
    for n in walk(report["owners"]):
        if n["path"].startswith(prefix):
            key = prefix + n["path"][len(prefix):].split("/")[0]
            out[key] = out.get(key, 0) + n.get("by_device", {}).get("cuda:0", 0)
    return out


def model_live(report, model):
    return sum(n["live_bytes"] for n in walk(report["owners"])
               if n["path"].startswith("server/model:%s/" % model))


def leaks_of(report, model):
    return [l for l in report["leaks"] if l["owner"].startswith("server/model:%s/" % model)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vramd", required=True)
    ap.add_argument("--backend-directory", required=True)
    ap.add_argument("--log", default=os.path.join(tempfile.gettempdir(), "python_gpu_check.log"))
    args = ap.parse_args()
    if not torch.cuda.is_available():
        say("FAIL", "torch %s here has no CUDA" % torch.__version__)
        return 1
    say("#", "torch %s, numpy %s (headers %s)" % (torch.__version__, np.__version__,
                                                  np.get_include()))
    if not check(hasattr(torch.cuda, "MemPool")
                 and hasattr(torch._C, "_cuda_beginAllocateCurrentThreadToPool"),
                 "torch %s has torch.cuda.MemPool and _cuda_beginAllocateCurrentThreadToPool"
                 % torch.__version__):
        return 1

    repo = tempfile.mkdtemp(prefix="python-gpu-")
    def torch_model(name, count, leak, ledger, stream, hosting="in_process", extra=""):
        write(repo, name, TORCH_CONFIG.format(name=name, count=count, leak=leak, ledger=ledger,
                                              stream=stream, hosting=hosting, extra=extra),
              TORCH_MODEL)

    torch_model("py_torch", 2, "no", "on", "off")
    torch_model("py_torch_stream", 2, "no", "on", "on")
    torch_model("py_torch_leaky", 1, "yes", "on", "on")
    # The planted leak under a quota (docs/memory.md, "Quotas"): 16 MiB of weights, 8 MiB of
    # scratch and 16 MiB kept per request against 96 MiB.
    torch_model("py_torch_quota", 1, "yes", "on", "on",
                extra=', { key: "vramd.memory_quota" value: { string_value: "cuda:0=96MiB" } }')
    torch_model("py_torch_off", 1, "no", "off", "off")
    torch_model("py_torch_stub", 2, "no", "on", "on", hosting="stub")
    for name, hosting in (("py_bls_gpu", "in_process"), ("py_bls_gpu_stub", "stub")):
        write(repo, name, BLS_GPU_CONFIG.format(name=name, hosting=hosting), BLS_GPU_MODEL)
    write(repo, "py_numpy_leaky", NUMPY_CONFIG, NUMPY_MODEL)
    write(repo, "py_gpu_echo", GPU_ECHO_CONFIG.format(name="py_gpu_echo", hosting="in_process"),
          GPU_ECHO_MODEL)
    write(repo, "py_gpu_echo_stub", GPU_ECHO_CONFIG.format(name="py_gpu_echo_stub",
                                                           hosting="stub"), GPU_ECHO_MODEL)
    write(repo, "py_gpu_caller", GPU_CALLER_CONFIG.format(name="py_gpu_caller",
                                                          hosting="in_process"), GPU_CALLER_MODEL)
    write(repo, "py_gpu_caller_stub", GPU_CALLER_CONFIG.format(name="py_gpu_caller_stub",
                                                               hosting="stub"), GPU_CALLER_MODEL)
    write(repo, "py_torch_seq", SEQ_CONFIG, SEQ_MODEL)
    g = torch.Generator().manual_seed(0)
    w = torch.randn(4096, 1024, generator=g).cuda()
    x = np.random.default_rng(1).standard_normal((3, 1024)).astype(np.float32)
    want = (torch.from_numpy(x).cuda() @ w.T).cpu().numpy()

    server = Server(args.vramd, args.backend_directory, repo, args.log)
    try:
        for m in ("py_torch", "py_torch_stream", "py_torch_leaky", "py_torch_quota", "py_torch_off",
                  "py_numpy_leaky", "py_torch_stub", "py_bls_gpu", "py_bls_gpu_stub",
                  "py_gpu_echo", "py_gpu_echo_stub", "py_gpu_caller", "py_gpu_caller_stub",
                  "py_torch_seq"):
            status, body = server.call("POST", "/v2/repository/models/%s/load" % m)
            if not check(status == 200, "load %s (%s)" % (m, body)):
                print(server.text()[-4000:])
                return 1

        # 1. The weights, per instance, on cuda:0.
        report = server.memory()
        loaded = instances(report, "py_torch")
        say("FIGURE", "python_torch_instance_cuda_bytes_after_load %d bytes" %
            min(loaded.values() or [0]))
        check(len(loaded) == 2 and all(v >= 16 * MIB for v in loaded.values()),
              "py_torch: each of its 2 instances holds its 16 MiB of weights on cuda:0 in the "
              "ledger: %s" % loaded)

        # 2. Answers, then 40 requests: flat.
        out = server.infer("py_torch", "X", x, "FP32")
        check(np.allclose(out["Y"], want, rtol=1e-3, atol=1e-3),
              "py_torch answers x @ w.T as torch does on cuda:0 (max diff %.2e)" %
              float(np.abs(out["Y"] - want).max()))
        for _ in range(8):  # warm-up: both instances, the pools' segments made
            server.infer("py_torch", "X", x, "FP32")
        warm = instances(server.memory(), "py_torch")
        allocated = []
        for _ in range(40):
            allocated.append(int(server.infer("py_torch", "X", x, "FP32")["ALLOCATED"][0]))
        report = server.memory()
        after = instances(report, "py_torch")
        check(after == warm, "py_torch: 40 requests later its instances' cuda:0 bytes are as "
              "after warm-up (%s -> %s)" % (warm, after))
        check(len(set(allocated[-20:])) <= 2,
              "py_torch: torch.cuda.memory_allocated is flat over the requests (the 8 MiB "
              "temporaries were freed): %s" % sorted(set(allocated)))
        requests_left = [n["path"] for n in walk(report["owners"])
                         if n["path"].startswith("server/model:py_torch/") and
                         n["kind"] == "request"]
        check(not requests_left, "py_torch: no request owner left (%s)" % requests_left[:3])
        check(not leaks_of(report, "py_torch"),
              "py_torch: nothing filed as a leak (%s)" % leaks_of(report, "py_torch")[:2])

        # 2b. A CUDA stream per instance (VRAMD_PYTHON_TORCH_INSTANCE_STREAM on): execute runs on
        # the instance's own stream, and the pool still takes its memory.
        loaded = instances(server.memory(), "py_torch_stream")
        legacy, outs = set(), []
        for _ in range(24):
            outs.append(server.infer("py_torch_stream", "X", x, "FP32"))
            legacy.add(int(server.infer("py_torch", "X", x, "FP32")["STREAM"][0]))
        streams = {int(o["STREAM"][0]) for o in outs}
        check(len(loaded) == 2 and all(v >= 16 * MIB for v in loaded.values())
              and all(np.allclose(o["Y"], want, rtol=1e-3, atol=1e-3) for o in outs),
              "py_torch_stream: 2 instances with their weights in the ledger (%s) answer as torch "
              "does" % loaded)
        check(0 not in streams and 1 <= len(streams) <= 2 and legacy == {0},
              "py_torch_stream runs on streams of its own (%s), py_torch on the legacy default "
              "stream (%s)" % (sorted(streams), sorted(legacy)))
        check(not leaks_of(server.memory(), "py_torch_stream"),
              "py_torch_stream: nothing filed as a leak")

        # 3. The planted leak.
        before = instances(server.memory(), "py_torch_leaky")
        n = 3 * GROWTH_REQUESTS
        for _ in range(n):
            server.infer("py_torch_leaky", "X", x, "FP32")
        grown = instances(server.memory(), "py_torch_leaky")
        rise = sum(grown.values()) - sum(before.values())
        say("FIGURE", "python_torch_leak_rise_per_request %d bytes" % (rise // n))
        check(rise >= n * 16 * MIB, "py_torch_leaky: its instance's cuda:0 bytes rose by %d MiB "
              "over %d requests (>= 16 MiB each)" % (rise // MIB, n))
        line = None
        deadline = time.time() + 10
        while time.time() < deadline and line is None:
            line = re.search(r"memory growth: server/model:py_torch_leaky/version:1/instance:"
                             r"\S+ rose on \d+ consecutive requests[^\n]*", server.text())
            time.sleep(0.2)
        check(line is not None, "py_torch_leaky: the growth warning names the model and instance"
              + (": " + line.group(0) if line else ""))
        check(not re.search(r"memory growth: server/model:py_torch/", server.text()),
              "py_torch: no growth warning")

        # 3b. The leak under a quota: torch's memory through the ledger is held to it. The
        # request past it fails alone, with torch's out-of-memory error naming the quota, and the
        # model beside it goes on serving.
        served, refused = 0, None
        for _ in range(12):
            status, body = server.call("POST", "/v2/models/py_torch_quota/infer", {
                "inputs": [{"name": "X", "datatype": "FP32", "shape": list(x.shape),
                            "data": x.reshape(-1).tolist()}]})
            if status != 200:
                refused = (status, body)
                break
            served += 1
        message = (refused[1] or {}).get("error", "") if refused else ""
        say("#", "py_torch_quota: %d requests served, then %s" % (served, refused))
        check(refused is not None and 1 <= served <= 4 and
              "memory quota of server/model:py_torch_quota/version:1" in message and
              "on cuda:0" in message,
              "py_torch_quota: after %d kept tensors a request fails naming the quota: %s"
              % (served, message[:400]))
        out = server.infer("py_torch", "X", x, "FP32")
        check(np.allclose(out["Y"], want, rtol=1e-3, atol=1e-3),
              "py_torch still answers beside the model past its quota")
        report = server.memory()
        quota = next((n.get("quota") for n in walk(report["owners"])
                      if n["path"] == "server/model:py_torch_quota/version:1"), None)
        check(bool(quota) and quota[0]["device"] == "cuda:0" and
              quota[0]["used_bytes"] <= 96 * MIB and quota[0]["refusals"] >= 1,
              "py_torch_quota: /v2/memory shows its quota on cuda:0 (%s)" % quota)

        # 4. Off: torch's own pool.
        out = server.infer("py_torch_off", "X", x, "FP32")
        off = instances(server.memory(), "py_torch_off")
        # torch's own pool takes its memory with cudaMalloc, outside vramd's pools: the server
        # measures that growth (src/memory/native_memory.h) and charges it to the instance.
        report = server.memory()
        native = sum(d.get("native_measured_bytes", 0) for d in report.get("devices", [])
                     if d.get("device") == "cuda:0")
        check(np.allclose(out["Y"], want, rtol=1e-3, atol=1e-3)
              and MIB <= sum(off.values()) <= native,
              "py_torch_off (VRAMD_PYTHON_LEDGER_TORCH off) answers, and what torch's own pool "
              "took shows under its instance as measured native memory: %s (native on cuda:0: "
              "%d bytes)" % (off, native))

        # 5. numpy (this machine's numpy): kept arrays are leaks naming their requests.
        for v in range(5):
            server.infer("py_numpy_leaky", "IN", np.array([v], dtype=np.int32), "INT32")
        leaks = [l for l in leaks_of(server.memory(), "py_numpy_leaky")
                 if "/request:" in l["owner"] and l["bytes"] >= 256 * 1024]
        check(len(leaks) >= 5, "py_numpy_leaky: 5 kept arrays filed as leaks naming their "
              "requests (%s)" % [l["owner"] for l in leaks[:2]])

        # 5b. A stub (VRAMD_PYTHON_HOSTING stub): torch's memory in the host comes from the
        # server's pools by CUDA IPC, so each instance's weights are in the ledger as in-process;
        # the host's own context shows under the model by NVML per PID; a killed host's memory
        # is freed with it.
        report = server.memory()
        stub = instances(report, "py_torch_stub")
        say("FIGURE", "python_torch_stub_instance_cuda_bytes_after_load %d bytes"
            % min(stub.values() or [0]))
        outs = [server.infer("py_torch_stub", "X", x, "FP32") for _ in range(8)]
        check(len(stub) == 2 and all(v >= 16 * MIB for v in stub.values())
              and all(np.allclose(o["Y"], want, rtol=1e-3, atol=1e-3) for o in outs),
              "py_torch_stub: its 2 instances' weights are in the ledger on cuda:0 (%s; CUDA IPC "
              "from the server's pools) and it answers as torch does" % stub)
        warm = instances(server.memory(), "py_torch_stub")
        for _ in range(40):
            server.infer("py_torch_stub", "X", x, "FP32")
        after = instances(server.memory(), "py_torch_stub")
        check(after == warm, "py_torch_stub: 40 requests later its instances' cuda:0 bytes are "
              "as after warm-up (%s -> %s)" % (warm, after))

        def hosts(report, model):
            return [h for d in report.get("devices", []) if d.get("device") == "cuda:0"
                    for h in d.get("hosted_processes", [])
                    if h.get("owner") == "server/model:%s/version:1" % model]

        listed = hosts(server.memory(), "py_torch_stub")
        for h in listed:
            say("FIGURE", "python_torch_stub_host_nvml_used %d bytes (pid %d)"
                % (h["used_bytes"], h["pid"]))
        check(len(listed) == 1 and listed[0]["used_bytes"] >= 100 * MIB,
              "py_torch_stub: its host shows under the model with NVML's figure for its pid "
              "(%s)" % listed)
        live_before = model_live(server.memory(), "py_torch_stub")
        if listed:
            os.kill(listed[0]["pid"], signal.SIGKILL)
            deadline = time.time() + 120
            again = None
            while time.time() < deadline and again is None:
                time.sleep(0.5)
                try:
                    again = server.infer("py_torch_stub", "X", x, "FP32")
                except RuntimeError:
                    pass
            report = server.memory()
            relisted = hosts(report, "py_torch_stub")
            live_after = model_live(report, "py_torch_stub")
            check(again is not None and np.allclose(again["Y"], want, rtol=1e-3, atol=1e-3)
                  and len(relisted) == 1 and relisted[0]["pid"] != listed[0]["pid"]
                  and live_after <= live_before * 1.1 and not leaks_of(report, "py_torch_stub"),
                  "py_torch_stub: its host killed (SIGKILL), a new one serves (pid %s -> %s) and "
                  "the dead host's GPU memory was freed with it: the model holds %d MiB, "
                  "%d before" % (listed[0]["pid"], relisted[0]["pid"] if relisted else None,
                                 live_after // MIB, live_before // MIB))

        # 5c. BLS with a GPU tensor (pb_utils.Tensor.from_dlpack of a torch cuda tensor), from
        # in-process and from a stub: the server copies it to host for the called model.
        for m in ("py_bls_gpu", "py_bls_gpu_stub"):
            try:
                out = server.infer(m, "X", x, "FP32")
                ok = np.allclose(out["Y"], want, rtol=1e-3, atol=1e-3)
                detail = "max diff %.2e" % float(np.abs(out["Y"] - want).max())
            except RuntimeError as e:
                ok, detail = False, str(e)[:300]
            check(ok, "%s: BLS to py_torch with a cuda tensor input answers as torch does (%s)"
                  % (m, detail))

        # 5d. GPU tensors through the request path (BLS in-process): no copy in, outputs on the
        # GPU unless the caller prefers the CPU; over HTTP the cuda output comes as numbers.
        def caller_results(target, n, caller="py_gpu_caller"):
            """`caller`'s JSON RESULT for n requests calling `target`, or {"error": ...}."""
            body = {"inputs": [{"name": "X", "datatype": "FP32", "shape": list(x.shape),
                                "data": x.reshape(-1).tolist()}],
                    "parameters": {"target": target}}
            out = []
            for _ in range(n):
                status, r = server.call("POST", "/v2/models/%s/infer" % caller, body,
                                        timeout=60)
                out.append(json.loads(r["outputs"][0]["data"][0]) if status == 200
                           else {"error": r})
            return out

        results = caller_results("py_gpu_echo", 20)
        first = results[0]
        say("#", "py_gpu_caller: %s" % json.dumps(first)[:600])
        ok = all("error" not in r for r in results)
        check(ok and all(r["default"]["callee_input_on_cpu"] == 0
                         and r["default"]["callee_ptr"] == r["x_ptr"] for r in results),
              "BLS with a cuda tensor: the called model (FORCE_CPU_ONLY_INPUT_TENSORS no) gets it "
              "on the GPU at the caller's own address, no copy (%s)"
              % [(r.get("x_ptr"), r.get("default", {}).get("callee_ptr")) for r in results[:2]])
        check(ok and all(not r["default"]["y_on_cpu"] and r["default"]["y_equal"]
                         and not r["gpu"]["y_on_cpu"] and r["gpu"]["y_equal"] for r in results),
              "BLS: the called model's cuda output comes back on the GPU, correct (Triton's "
              "default preferred memory and TRITONSERVER_MEMORY_GPU)")
        check(ok and all(r["cpu"]["y_on_cpu"] and r["cpu"]["y_equal"] for r in results),
              "BLS with TRITONSERVER_MEMORY_CPU: the output comes in host memory, correct")
        out = server.infer("py_gpu_echo", "X", x, "FP32")
        # JSON carries the float32 values in decimal: equal to float32 precision.
        check(np.allclose(out["Y"], x * 2, rtol=1e-6, atol=0)
              and int(out["INPUT_ON_CPU"][0]) == 1,
              "py_gpu_echo over HTTP: its cuda output arrives as numbers (x * 2; max diff "
              "%.2e), its input came in host memory (INPUT_ON_CPU %d)"
              % (float(np.abs(out["Y"] - x * 2).max()), int(out["INPUT_ON_CPU"][0])))
        # The same with the called model in a stub: the GPU input crosses to its host by CUDA
        # IPC, its cuda output back as memory of vramd's pool the host filled (no host copy).
        hosted = caller_results("py_gpu_echo_stub", 10)
        say("#", "py_gpu_caller -> py_gpu_echo_stub: %s" % json.dumps(hosted[0])[:600])
        ok = all("error" not in r for r in hosted)
        check(ok and all(r["default"]["callee_input_on_cpu"] == 0
                         and r["cpu"]["callee_input_on_cpu"] == 0 for r in hosted),
              "BLS to a model in a stub: the cuda tensor reaches its host on the GPU (CUDA IPC)")
        check(ok and all(not r["default"]["y_on_cpu"] and r["default"]["y_equal"]
                         and not r["gpu"]["y_on_cpu"] and r["gpu"]["y_equal"]
                         and r["cpu"]["y_on_cpu"] and r["cpu"]["y_equal"] for r in hosted),
              "BLS to a model in a stub: its cuda output comes back on the GPU (default, "
              "TRITONSERVER_MEMORY_GPU) or in host memory (TRITONSERVER_MEMORY_CPU), correct")
        out = server.infer("py_gpu_echo_stub", "X", x, "FP32")
        check(np.allclose(out["Y"], x * 2, rtol=1e-6, atol=0),
              "py_gpu_echo_stub over HTTP answers x * 2")
        # 5e. The caller itself in a stub: its cuda tensor reaches the called model on the GPU (by
        # reference into vramd's pool, where the stub's torch memory comes from, or by the
        # host's CUDA IPC export), and the cuda output comes back to the stub on the GPU (vramd's
        # export of it, kept until the stub lets go): no byte through host memory either way.
        for target in ("py_gpu_echo", "py_gpu_echo_stub"):
            hosted = caller_results(target, 10, caller="py_gpu_caller_stub")
            say("#", "py_gpu_caller_stub -> %s: %s" % (target, json.dumps(hosted[0])[:600]))
            ok = all("error" not in r for r in hosted)
            check(ok and all(r[how]["callee_input_on_cpu"] == 0 for r in hosted
                             for how in ("default", "gpu", "cpu")),
                  "BLS from a stub to %s: the caller's cuda tensor reaches it on the GPU, not "
                  "through host memory" % target)
            check(ok and all(not r["default"]["y_on_cpu"] and r["default"]["y_equal"]
                             and not r["gpu"]["y_on_cpu"] and r["gpu"]["y_equal"]
                             and r["cpu"]["y_on_cpu"] and r["cpu"]["y_equal"] for r in hosted),
                  "BLS from a stub to %s: the cuda output comes back on the GPU (default, "
                  "TRITONSERVER_MEMORY_GPU) or in host memory (TRITONSERVER_MEMORY_CPU), "
                  "correct" % target)
        report = server.memory()
        models = ("py_gpu_echo", "py_gpu_echo_stub", "py_gpu_caller", "py_gpu_caller_stub")
        left = [n["path"] for n in walk(report["owners"]) if n["kind"] == "request"
                and any(n["path"].startswith("server/model:%s/" % m) for m in models)]
        leaked = [l for m in models for l in leaks_of(report, m)]
        check(not left and not leaked,
              "GPU tensors through BLS leave no request owner and no leak (%s %s)"
              % (left[:3], leaked[:3]))

        # 6. Unload: the pools return their segments. py_torch_stream is loaded again first (its
        # instances take the streams the first ones left) and must answer the same.
        server.call("POST", "/v2/repository/models/py_torch_stream/unload")
        status, body = server.call("POST", "/v2/repository/models/py_torch_stream/load")
        again = server.infer("py_torch_stream", "X", x, "FP32") if status == 200 else None
        check(again is not None and np.allclose(again["Y"], want, rtol=1e-3, atol=1e-3)
              and int(again["STREAM"][0]) != 0,
              "py_torch_stream unloaded and loaded again answers on a stream of its own (%s)"
              % (body if status != 200 else int(again["STREAM"][0])))
        unloaded = ("py_torch", "py_torch_leaky", "py_torch_quota", "py_torch_stream",
                    "py_torch_stub")
        for m in unloaded:
            server.call("POST", "/v2/repository/models/%s/unload" % m)
        deadline = time.time() + 30
        while time.time() < deadline:
            report = server.memory()
            if all(model_live(report, m) == 0 for m in unloaded):
                break
            time.sleep(0.5)
        check(model_live(report, "py_torch_stream") == 0
              and not leaks_of(report, "py_torch_stream"),
              "py_torch_stream unloaded: no bytes under it, no leak (%d bytes)" %
              model_live(report, "py_torch_stream"))
        check(model_live(report, "py_torch") == 0 and not leaks_of(report, "py_torch"),
              "py_torch unloaded: no bytes under it, no leak (%d bytes)" %
              model_live(report, "py_torch"))
        check(model_live(report, "py_torch_stub") == 0 and not hosts(report, "py_torch_stub"),
              "py_torch_stub unloaded: no bytes under it, its host no longer listed (%d bytes)"
              % model_live(report, "py_torch_stub"))
        check(model_live(report, "py_torch_leaky") == 0,
              "py_torch_leaky unloaded: its history went with the instance (%d bytes)" %
              model_live(report, "py_torch_leaky"))
        for u in report.get("unattributed", []):
            if u.get("device") == "cuda:0":
                say("FIGURE", "python_gpu_check_unattributed_cuda0 %s bytes" % u.get("bytes"))
        check(server.proc.poll() is None, "the server is still up")
        # Sequences on the GPU: the state accumulates, is charged to the sequence, and goes
        # with its end.
        def seq_step(value, start=False, end=False):
            body = {"inputs": [{"name": "X", "datatype": "FP32", "shape": [1, 4],
                                "data": [value] * 4}],
                    "parameters": {"sequence_id": 77, "sequence_start": start,
                                   "sequence_end": end}}
            status, r = server.call("POST", "/v2/models/py_torch_seq/infer", body)
            if status != 200:
                raise RuntimeError("py_torch_seq: HTTP %d %s" % (status, r))
            return {o["name"]: o["data"] for o in r["outputs"]}
        got = [seq_step(1.0, start=True)["Y"][0], seq_step(2.0)["Y"][0]]
        owners = [n for n in walk(server.memory()["owners"])
                  if n.get("kind") == "sequence" and "/model:py_torch_seq/" in n["path"]]
        check(len(owners) == 1 and owners[0]["live_bytes"] == 16,
              "py_torch_seq: the live sequence is a ledger owner holding its 16-byte state: %s"
              % [(n["path"], n["live_bytes"]) for n in owners])
        last = seq_step(3.0, end=True)
        got.append(last["Y"][0])
        check(got == [1.0, 3.0, 6.0] and "S_OUT" not in last,
              "py_torch_seq: a KIND_GPU torch model's implicit state accumulates over its "
              "sequence, and the state output stays the server's: %s" % got)
        deadline = time.time() + 10
        while time.time() < deadline and any(
                n.get("kind") == "sequence" for n in walk(server.memory()["owners"])):
            time.sleep(0.05)
        report = server.memory()
        check(not any(n.get("kind") == "sequence" for n in walk(report["owners"]))
              and not leaks_of(report, "py_torch_seq"),
              "py_torch_seq: the ended sequence's owner is closed, with no leak")
    finally:
        code = server.stop()
        if FAILED:
            print("--- server log (tail)")
            print(open(args.log, errors="replace").read()[-6000:])
    check(code == 0, "vramd exited cleanly (%s)" % code)
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
