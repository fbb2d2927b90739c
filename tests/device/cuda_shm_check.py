#!/usr/bin/env python3
"""Triton's CUDA shared memory on the GPU machine (issue 15): a client's cudaMalloc buffers,
registered by their cudaIpcMemHandle, carry an mlp model's input and output with no copy
through the host, and each region is a client owner in /v2/memory until unregistered.

  cuda_shm_check.py --vramd BIN/vramd --make-model scripts/make_mlp_model.py [--requests N]

The client side is Triton's (tritonclient.utils.cuda_shared_memory does the same): libcudart
through ctypes, cudaMalloc, cudaIpcGetMemHandle, the handle base64 in the register body. The
server's copy counters (vramd_copy_bytes_total on /metrics, memory::CopyBytes) show the
crossings: through CUDA shared memory no byte goes host to device or back; through the request
body the input goes up and the output comes down (the control). Prints PASS/FAIL and FIGURE
lines; exits 1 on any failure.
"""
import argparse
import base64
import ctypes
import glob
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import numpy as np

from device_checks import check, failures, http, copied


def load_cudart():
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = sorted(glob.glob(os.path.join(here, "..", "..", "device-dist", "lib", "libcudart.so*")))
    candidates += sorted(glob.glob("/usr/local/cuda/lib64/libcudart.so*"))
    try:
        import nvidia  # torch's wheels
        for p in list(getattr(nvidia, "__path__", [])):
            candidates += sorted(glob.glob(os.path.join(p, "*", "lib", "libcudart.so*")))
    except ImportError:
        pass
    for c in candidates:
        try:
            return ctypes.CDLL(c), c
        except OSError:
            continue
    raise SystemExit("FAIL no libcudart found (%s)" % candidates)


class Cuda:
    """The few runtime calls a Triton client makes for CUDA shared memory."""

    H2D, D2H = 1, 2

    def __init__(self):
        self.lib, self.path = load_cudart()
        self.lib.cudaGetErrorString.restype = ctypes.c_char_p

    def _ok(self, err, call):
        if err != 0:
            raise RuntimeError("%s: %s" % (call, self.lib.cudaGetErrorString(err).decode()))

    def malloc(self, size):
        p = ctypes.c_void_p()
        self._ok(self.lib.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(size)), "cudaMalloc")
        return p

    def free(self, p):
        self._ok(self.lib.cudaFree(p), "cudaFree")

    def ipc_handle(self, p):
        handle = (ctypes.c_char * 64)()
        self._ok(self.lib.cudaIpcGetMemHandle(handle, p), "cudaIpcGetMemHandle")
        return bytes(handle)

    def upload(self, p, array):
        data = np.ascontiguousarray(array)
        self._ok(self.lib.cudaMemcpy(p, data.ctypes.data_as(ctypes.c_void_p),
                                     ctypes.c_size_t(data.nbytes), self.H2D), "cudaMemcpy H2D")

    def download(self, p, nbytes, dtype):
        out = np.empty(nbytes // np.dtype(dtype).itemsize, dtype=dtype)
        self._ok(self.lib.cudaMemcpy(out.ctypes.data_as(ctypes.c_void_p), p,
                                     ctypes.c_size_t(nbytes), self.D2H), "cudaMemcpy D2H")
        return out


def walk(node):
    yield node
    for child in node.get("children", []):
        yield from walk(child)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vramd", required=True)
    ap.add_argument("--make-model", required=True)
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--port", type=int, default=18100)
    args = ap.parse_args()

    cuda = Cuda()
    print("# libcudart: %s" % cuda.path)
    work = tempfile.mkdtemp()
    model = os.path.join(work, "repo", "mlp_gpu")
    subprocess.run([sys.executable, args.make_model, "model", model, "--inputs", "1024",
                    "--hidden", "2048,2048", "--outputs", "512", "--kind", "gpu",
                    "--instances", "2", "--max-batch-size", str(args.batch), "--name", "mlp_gpu"],
                   check=True, stdout=subprocess.DEVNULL)
    # The built-in identity: it answers with its input's own memory, so a GPU input stays on
    # the GPU and an output placed over part of it in one region is a copy between
    # overlapping ranges (memory::CopyBytes splits it or stages it through the host).
    ident = os.path.join(work, "repo", "ident")
    os.makedirs(os.path.join(ident, "1"))
    with open(os.path.join(ident, "config.pbtxt"), "w") as f:
        f.write('name: "ident"\nbackend: "identity"\nmax_batch_size: 0\n'
                'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
                'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
                'instance_group [ { kind: KIND_CPU count: 1 } ]\n')
    ref_path = os.path.join(work, "ref.json")
    subprocess.run([sys.executable, args.make_model, "reference", model, ref_path,
                    "--batch", str(args.batch)], check=True)
    ref = json.load(open(ref_path))
    x = np.asarray(ref["input"], dtype=np.float32)
    want = np.asarray(ref["output"], dtype=np.float64)

    base = "http://127.0.0.1:%d" % args.port
    metrics = "http://127.0.0.1:%d/metrics" % (args.port + 2)
    log = open(os.path.join(work, "server.log"), "w")
    server = subprocess.Popen([args.vramd, "serve", "--model-repository", os.path.dirname(model),
                               "--http-port", str(args.port), "--grpc-port", str(args.port + 1),
                               "--metrics-port", str(args.port + 2)], stdout=log, stderr=log)
    try:
        for _ in range(300):
            try:
                if (http("GET", base + "/v2/models/mlp_gpu/ready")[0] == 200 and
                        http("GET", base + "/v2/models/ident/ready")[0] == 200):
                    break
            except urllib.error.URLError:  # not listening yet
                pass
            if server.poll() is not None:
                check(False, "the server exited at start (%s)" % server.returncode)
                raise SystemExit(1)
            time.sleep(0.1)
        else:
            check(False, "the server did not get ready")
            raise SystemExit(1)

        in_bytes, out_bytes = x.nbytes, args.batch * 512 * 4
        d_in, d_out = cuda.malloc(in_bytes), cuda.malloc(out_bytes)
        cuda.upload(d_in, x)
        memory = json.loads(http("GET", base + "/v2/memory")[1])
        used_before = memory["devices"][0].get("process_used_bytes")
        unattributed_before = memory["devices"][0].get("unattributed_bytes")
        for name, p, size in (("in", d_in, in_bytes), ("out", d_out, out_bytes)):
            st, body = http("POST", base + "/v2/cudasharedmemory/region/%s/register" % name,
                            {"raw_handle": {"b64": base64.b64encode(cuda.ipc_handle(p)).decode()},
                             "device_id": 0, "byte_size": size})
            check(st == 200, "register CUDA region '%s' (%d bytes): %d %s" % (name, size, st, body[:200]))
        st, body = http("POST", base + "/v2/cudasharedmemory/region/big/register",
                        {"raw_handle": {"b64": base64.b64encode(cuda.ipc_handle(d_in)).decode()},
                         "device_id": 0, "byte_size": in_bytes * 4 + (1 << 22)})
        check(st == 400 and b"beyond the" in body,
              "a byte_size past the allocation is refused: %d %s" % (st, body[:200]))
        status = json.loads(http("GET", base + "/v2/cudasharedmemory/status")[1])
        check(sorted((r["name"], r["device_id"], r["byte_size"]) for r in status) ==
              [("in", 0, in_bytes), ("out", 0, out_bytes)], "status lists both regions: %s" % status)
        memory = json.loads(http("GET", base + "/v2/memory")[1])
        owners = {n["path"]: n for n in walk(memory["owners"])}
        shown = owners.get("server/scope:client-cudashm:in", {})
        check(shown.get("by_device", {}).get("cuda:0") == in_bytes,
              "region 'in' is a client owner on cuda:0 in /v2/memory: %s" % shown)
        used_after = memory["devices"][0].get("process_used_bytes")
        if used_before is not None and used_after is not None:
            print("FIGURE cuda_shm_nvml_process_delta_on_register %d bytes" % (used_after - used_before))
        print("# unattributed before / after registering: %s / %s" %
              (unattributed_before, memory["devices"][0].get("unattributed_bytes")))

        shm_body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": list(x.shape),
                                "parameters": {"shared_memory_region": "in",
                                               "shared_memory_byte_size": in_bytes}}],
                    "outputs": [{"name": "OUTPUT0",
                                 "parameters": {"shared_memory_region": "out",
                                                "shared_memory_byte_size": out_bytes}}]}
        # One request first, so that neither series pays the model's first execution (cuBLAS's
        # handle, the pool's first segments) in its timing.
        http("POST", base + "/v2/models/mlp_gpu/infer", shm_body)
        before = copied(metrics)
        statuses = set()
        start = time.perf_counter()
        for _ in range(args.requests):
            st, body = http("POST", base + "/v2/models/mlp_gpu/infer", shm_body)
            statuses.add(st)
        shm_s = time.perf_counter() - start
        after = copied(metrics)
        check(statuses == {200}, "%d requests through CUDA shared memory: %s %s" %
              (args.requests, statuses, body[:300]))
        got = cuda.download(d_out, out_bytes, np.float32).reshape(want.shape)
        err = float(np.max(np.abs(got - want) / np.maximum(1.0, np.abs(want))))
        print("FIGURE cuda_shm_mlp_max_rel_err_vs_numpy %.3g ratio" % err)
        check(err < 1e-3, "the output in the client's CUDA buffer matches numpy")
        delta = {k: after[k] - before[k] for k in after}
        print("FIGURE cuda_shm_copied_bytes h2d=%d d2h=%d d2d=%d (per request: in %d, out %d)" %
              (delta["h2d"], delta["d2h"], delta["d2d"], in_bytes, out_bytes))
        check(delta["h2d"] == 0 and delta["d2h"] == 0,
              "no byte crossed between host and GPU for CUDA shared memory: %s" % delta)
        # On the GPU: the input into the instance's activations, the result straight into the
        # client's region (the output buffer vramd gives the backend is the region itself).
        check(delta["d2d"] == args.requests * (in_bytes + out_bytes),
              "input and output were copied on the GPU only: d2d %d" % delta["d2d"])

        # The output placed over the input's own bytes (region "in", offset 0): still the
        # right result, and still no byte through the host (the output is made apart and
        # copied into the region on the GPU once the execution is done).
        in_place = json.loads(json.dumps(shm_body))
        in_place["outputs"][0]["parameters"]["shared_memory_region"] = "in"
        before = copied(metrics)
        st, body = http("POST", base + "/v2/models/mlp_gpu/infer", in_place)
        delta = {k: v - before[k] for k, v in copied(metrics).items()}
        got = cuda.download(d_in, out_bytes, np.float32).reshape(want.shape)
        err = float(np.max(np.abs(got - want) / np.maximum(1.0, np.abs(want))))
        check(st == 200 and err < 1e-3 and delta["h2d"] == 0 and delta["d2h"] == 0,
              "an output placed over its input in one CUDA region is right (%d, max rel err "
              "%.3g, copies %s)" % (st, err, delta))
        cuda.upload(d_in, x)  # the input again, for what follows

        # identity on a GPU input: the answer is the input's memory, so an output in another
        # region is one copy on the GPU, and one in the body one copy down.
        flat = x.ravel()
        n = out_bytes // 4
        def ident_body(offset, count, out_region, out_offset):
            doc = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [count],
                               "parameters": {"shared_memory_region": "in",
                                              "shared_memory_offset": offset * 4,
                                              "shared_memory_byte_size": count * 4}}],
                   "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]}
            if out_region is not None:
                doc["outputs"][0]["parameters"] = {"shared_memory_region": out_region,
                                                   "shared_memory_offset": out_offset * 4,
                                                   "shared_memory_byte_size": count * 4}
            return doc
        before = copied(metrics)
        st, body = http("POST", base + "/v2/models/ident/infer", ident_body(0, n, "out", 0))
        delta = {k: v - before[k] for k, v in copied(metrics).items()}
        got = cuda.download(d_out, n * 4, np.float32)
        check(st == 200 and np.array_equal(got, flat[:n]) and delta["h2d"] == 0 and
              delta["d2h"] == 0 and delta["d2d"] == n * 4,
              "identity from one CUDA region into another: one copy on the GPU (%d, copies %s)"
              % (st, delta))
        before = copied(metrics)
        st, body = http("POST", base + "/v2/models/ident/infer", ident_body(0, n, None, 0))
        delta = {k: v - before[k] for k, v in copied(metrics).items()}
        check(st == 200 and body.endswith(flat[:n].tobytes()) and delta["d2h"] == n * 4 and
              delta["h2d"] == 0, "identity from a CUDA region into the body: one copy down "
              "(%d, copies %s)" % (st, delta))
        # Placed over part of its own input: a quarter of the way up (four pieces on the GPU)
        # and 4 bytes down (staged through the host); each leaves what memmove would.
        for shift, through_host in ((n // 4, False), (-1, True)):
            cuda.upload(d_in, x)
            start = 1 if shift < 0 else 0
            before = copied(metrics)
            st, body = http("POST", base + "/v2/models/ident/infer",
                            ident_body(start, n, "in", start + shift))
            delta = {k: v - before[k] for k, v in copied(metrics).items()}
            got = cuda.download(d_in, in_bytes, np.float32)
            want_region = flat.copy()
            want_region[start + shift:start + shift + n] = flat[start:start + n]
            moved = (delta["h2d"] == delta["d2h"] == n * 4) if through_host else (
                delta["h2d"] == delta["d2h"] == 0 and delta["d2d"] == n * 4)
            check(st == 200 and np.array_equal(got, want_region) and moved,
                  "identity's output placed %d floats off its input in one CUDA region is "
                  "what memmove leaves (%d, copies %s)" % (shift, st, delta))
        cuda.upload(d_in, x)

        # The control: the same requests with the tensors in the body.
        body_doc = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": list(x.shape),
                                "data": x.ravel().tolist()}],
                    "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]}
        raw = json.dumps(body_doc).encode()
        before = copied(metrics)
        start = time.perf_counter()
        for _ in range(args.requests):
            http("POST", base + "/v2/models/mlp_gpu/infer", raw=raw)
        body_s = time.perf_counter() - start
        delta = {k: v - before[k] for k, v in copied(metrics).items()}
        check(delta["h2d"] == args.requests * in_bytes and delta["d2h"] == args.requests * out_bytes,
              "the control through the body crosses both ways: %s" % delta)
        print("FIGURE cuda_shm_vs_json_body_time %.2f ratio (%d requests: %.3f s vs %.3f s)" %
              (body_s / shm_s, args.requests, shm_s, body_s))

        for name in ("in", "out"):
            st, _ = http("POST", base + "/v2/cudasharedmemory/region/%s/unregister" % name)
            check(st == 200, "unregister '%s'" % name)
        memory = json.loads(http("GET", base + "/v2/memory")[1])
        left = [n["path"] for n in walk(memory["owners"]) if "client-cudashm" in n["path"]]
        check(not left, "no client-cudashm owner after unregistering: %s" % left)
        check(memory["leak_reports_total"] == 0, "no leak reports: %s" % memory["leaks"][:2])
        cuda.free(d_in)
        cuda.free(d_out)
    finally:
        server.terminate()
        code = server.wait(60)
        log.close()
        check(code == 0, "server exit code %s" % code)
        if failures:
            print(open(os.path.join(work, "server.log")).read()[-3000:])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
