#!/usr/bin/env python3
"""Placement and contexts on a GPU machine (issue 19):

1. A server whose models run on the CPU makes no CUDA context: NVML does not list it on any GPU,
   and /v2/memory says no context exists yet.
2. Loading an mlp with `count: 4 gpus: [0]` makes one context on GPU 0 (NVML lists the process
   once there), measured then; the instances are named as Triton names them (`<group>_<i>_gpu0`);
   the weights are on GPU 0 once, charged to the version, not once per instance; its answers
   equal the CPU model's with the same weights.
3. A group naming a GPU past those visible is refused naming the group and `gpus`.
   With two GPUs or more, 4 instances on each of GPUs 0 and 1: one context per GPU, the weights
   once per GPU, read once and copied GPU to GPU (vramd_copy_bytes_total d2d).
4. CUDA_VISIBLE_DEVICES is honoured: with it empty, a model with no instance_group (KIND_AUTO)
   runs on the CPU and no GPU gets a context; with it "0" the same model is on GPU 0.

  placement_gpu_check.py --vramd BIN/vramd --make-model scripts/make_mlp_model.py

Prints PASS/FAIL and FIGURE lines; exits 1 on any failure, 2 when no GPU is visible.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import numpy as np

from device_checks import check, copied, failures, http

WIDTH_IN, WIDTH_OUT, BATCH = 256, 64, 8


def gpu_pids():
    """{gpu index: [pids with a compute context]} as NVML lists them."""
    import pynvml
    pynvml.nvmlInit()
    try:
        out = {}
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            out[i] = [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)]
        return out
    finally:
        pynvml.nvmlShutdown()


def contexts_of(pid):
    return sorted(i for i, pids in gpu_pids().items() for p in pids if p == pid)


def owners(node, kind=None):
    found = [node] if kind is None or node.get("kind") == kind else []
    for c in node.get("children", []):
        found += owners(c, kind)
    return found


class Server:
    def __init__(self, vramd, repo, port, work, name, env=None, load=()):
        self.base = "http://127.0.0.1:%d" % port
        self.log_path = os.path.join(work, name + ".log")
        self.log = open(self.log_path, "w")
        argv = [vramd, "serve", "--model-repository", repo, "--http-port", str(port),
                "--grpc-port", str(port + 1), "--metrics-port", str(port + 2),
                "--model-control-mode", "explicit"]
        for m in load:
            argv += ["--load-model", m]
        full_env = dict(os.environ)
        full_env.update(env or {})
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=self.log, env=full_env)
        for _ in range(1200):
            try:
                if http("GET", self.base + "/v2/health/ready")[0] == 200:
                    return
            except urllib.error.URLError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        check(False, "%s did not get ready (exit %s)" % (name, self.proc.poll()))
        print(open(self.log_path).read()[-3000:])
        raise SystemExit(1)

    def memory(self):
        return json.loads(http("GET", self.base + "/v2/memory")[1])

    def infer(self, model, x):
        st, body = http("POST", "%s/v2/models/%s/infer" % (self.base, model),
                        {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": list(x.shape),
                                     "data": x.ravel().tolist()}]})
        if st != 200:
            raise RuntimeError("%s: %d %s" % (model, st, body[:300]))
        out = json.loads(body)["outputs"][0]
        return np.asarray(out["data"], dtype=np.float32).reshape(out["shape"])

    def stop(self):
        self.proc.terminate()
        code = self.proc.wait(60)
        self.log.close()
        check(code == 0, "%s exit code %s" % (os.path.basename(self.log_path), code))
        if failures:
            print(open(self.log_path).read()[-3000:])


def write_model(make_model, repo, name, kind, instances, target, config_tail=None):
    subprocess.run([sys.executable, make_model, "model", os.path.join(repo, name),
                    "--inputs", str(WIDTH_IN), "--target-bytes", target, "--outputs",
                    str(WIDTH_OUT), "--kind", kind, "--instances", str(instances),
                    "--max-batch-size", str(BATCH), "--name", name, "--seed", "7"],
                   check=True, stdout=subprocess.DEVNULL)
    if config_tail is not None:
        path = os.path.join(repo, name, "config.pbtxt")
        text = open(path).read()
        text = text[:text.index("instance_group")] + config_tail
        open(path, "w").write(text)


def two_gpus(s, weights, x, reference):
    """4 instances on each of GPUs 0 and 1: one context per GPU, the weights once per GPU (read
    from the file once, copied GPU to GPU), the instances alternating GPUs."""
    metrics = "%s:%d/metrics" % (s.base.rsplit(":", 1)[0], int(s.base.rsplit(":", 1)[1]) + 2)
    before = copied(metrics)["d2d"]
    start = time.perf_counter()
    st, body = http("POST", s.base + "/v2/repository/models/both_mlp/load")
    seconds = time.perf_counter() - start
    if not check(st == 200, "both_mlp (4 instances on each of GPUs 0 and 1) loads: %d %s"
                 % (st, body[:300])):
        return
    moved = copied(metrics)["d2d"] - before
    print("FIGURE placement_two_gpu_load_seconds %.2f s" % seconds)
    print("FIGURE placement_d2d_copied_mib %.1f MiB (%.1f GB/s over the whole load)"
          % (moved / 2**20, moved / seconds / 1e9))
    check(contexts_of(s.proc.pid) == [0, 1], "NVML lists the server once on each GPU")
    check(weights * 0.95 <= moved <= weights * 1.05,
          "the weights reached GPU 1 by one GPU-to-GPU copy (%d bytes)" % moved)
    memory = s.memory()
    model = [o for o in owners(memory["owners"], "model") if o["name"] == "both_mlp"][0]
    version = owners(model, "version")[0]
    for gpu in ("cuda:0", "cuda:1"):
        held = version["by_device"].get(gpu, 0)
        check(weights * 0.95 <= held <= weights * 1.5,
              "the weights are on %s once, charged to the version (%d bytes)" % (gpu, held))
    names = [o["name"] for o in owners(version, "instance")]
    check(names[:2] == ["both_mlp_0_0_gpu0", "both_mlp_0_0_gpu1"] and len(names) == 8,
          "instances alternate GPUs as Triton creates them: %s" % names)
    got = s.infer("both_mlp", x)
    err = float(np.max(np.abs(got - reference) / np.maximum(1.0, np.abs(reference))))
    check(err < 1e-3, "both_mlp answers as cpu_mlp (max relative error %.2g)" % err)
    st, _ = http("POST", s.base + "/v2/repository/models/both_mlp/unload")
    check(st == 200, "both_mlp unloads")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vramd", required=True)
    ap.add_argument("--make-model", required=True)
    ap.add_argument("--port", type=int, default=18300)
    ap.add_argument("--target", default="256MiB", help="the mlp's weights")
    args = ap.parse_args()
    try:
        visible = len(gpu_pids())
    except Exception as e:  # no driver, no NVML
        print("no GPU visible through NVML (%s): nothing to check here" % e)
        return 2
    print("FIGURE placement_visible_gpus %d count" % visible)

    work = tempfile.mkdtemp()
    repo = os.path.join(work, "repo")
    write_model(args.make_model, repo, "cpu_mlp", "cpu", 1, args.target)
    write_model(args.make_model, repo, "gpu_mlp", "gpu", 4, args.target,
                'instance_group [ { count: 4 kind: KIND_GPU gpus: [ 0 ] } ]\n')
    if visible >= 2:
        write_model(args.make_model, repo, "both_mlp", "gpu", 4, args.target,
                    'instance_group [ { count: 4 kind: KIND_GPU gpus: [ 0, 1 ] } ]\n')
    write_model(args.make_model, repo, "past_gpus", "gpu", 1, "1MiB",
                'instance_group [ { name: "far" kind: KIND_GPU gpus: [ %d ] } ]\n' % visible)
    write_model(args.make_model, repo, "auto_mlp", "gpu", 1, "1MiB", "")
    weights = os.path.getsize(os.path.join(repo, "gpu_mlp", "1", "model.safetensors"))
    rng = np.random.default_rng(11)
    x = rng.standard_normal((BATCH, WIDTH_IN)).astype(np.float32)

    # 1-3: one server.
    s = Server(args.vramd, repo, args.port, work, "server", load=["cpu_mlp"])
    try:
        reference = s.infer("cpu_mlp", x)
        gpus = contexts_of(s.proc.pid)
        check(gpus == [], "a server with only a CPU model has no CUDA context (NVML lists it on "
                          "GPUs %s)" % gpus)
        devices = s.memory().get("devices", [])
        reasons = [d.get("context_baseline_reason", "") for d in devices]
        check(devices and all("no CUDA context yet" in r for r in reasons),
              "/v2/memory says no GPU has a context yet: %s" % reasons)

        start = time.perf_counter()
        st, body = http("POST", s.base + "/v2/repository/models/gpu_mlp/load")
        print("FIGURE placement_gpu_load_seconds %.2f s" % (time.perf_counter() - start))
        if not check(st == 200, "gpu_mlp (4 instances on GPU 0) loads: %d %s" % (st, body[:300])):
            raise SystemExit(1)
        gpus = contexts_of(s.proc.pid)
        check(gpus == [0], "after it, NVML lists the server on GPU 0 alone, once: %s" % gpus)
        memory = s.memory()
        dev0 = [d for d in memory["devices"] if d["device"] == "cuda:0"][0]
        check(dev0.get("context_baseline_bytes") is not None,
              "GPU 0's context was measured when made: %.1f MiB" %
              ((dev0.get("context_baseline_bytes") or 0) / 2**20))
        model = [o for o in owners(memory["owners"], "model") if o["name"] == "gpu_mlp"][0]
        version = owners(model, "version")[0]
        names = sorted(o["name"] for o in owners(version, "instance"))
        check(names == ["gpu_mlp_0_%d_gpu0" % i for i in range(4)],
              "instances named as Triton names them: %s" % names)
        on_gpu = version["by_device"].get("cuda:0", 0)
        print("FIGURE placement_version_bytes_on_gpu0 %.1f MiB (weights file %.1f MiB, 4 instances)"
              % (on_gpu / 2**20, weights / 2**20))
        check(weights * 0.95 <= on_gpu <= weights * 1.5,
              "the weights are on GPU 0 once, charged to the version (%d bytes; file %d)"
              % (on_gpu, weights))
        got = s.infer("gpu_mlp", x)
        err = float(np.max(np.abs(got - reference) / np.maximum(1.0, np.abs(reference))))
        check(err < 1e-3, "gpu_mlp answers as cpu_mlp (max relative error %.2g)" % err)

        st, body = http("POST", s.base + "/v2/repository/models/past_gpus/load")
        msg = json.loads(body).get("error", "") if body else ""
        check(st == 400 and "instance_group 'far': gpus lists GPU %d, which this server does not "
              "see" % visible in msg, "a GPU past those visible is refused naming the field: %d %s"
              % (st, msg))
        check(contexts_of(s.proc.pid) == [0], "the refusal made no context anywhere")
        if visible >= 2:
            two_gpus(s, weights, x, reference)
        else:
            print("# one GPU: 4 instances on each of two GPUs are checked on a machine with two")
        check(s.memory().get("leak_reports_total", 0) == 0, "no leak reports")
    finally:
        s.stop()

    # 4: CUDA_VISIBLE_DEVICES.
    s = Server(args.vramd, repo, args.port + 10, work, "hidden", env={"CUDA_VISIBLE_DEVICES": ""},
               load=["auto_mlp"])
    try:
        memory = s.memory()
        names = [o["name"] for o in owners(memory["owners"], "instance")]
        check(names == ["auto_mlp_0_0"] and not memory["cuda"]["available"],
              "CUDA_VISIBLE_DEVICES='': KIND_AUTO runs on the CPU (%s; cuda: %s)"
              % (names, memory["cuda"]))
        check(contexts_of(s.proc.pid) == [], "and no GPU gets a context")
        s.infer("auto_mlp", x)
    finally:
        s.stop()
    s = Server(args.vramd, repo, args.port + 20, work, "gpu0", env={"CUDA_VISIBLE_DEVICES": "0"},
               load=["auto_mlp"])
    try:
        names = [o["name"] for o in owners(s.memory()["owners"], "instance")]
        check(names == ["auto_mlp_0_0_gpu0"],
              "CUDA_VISIBLE_DEVICES=0: KIND_AUTO runs on GPU 0 (%s)" % names)
        check(contexts_of(s.proc.pid) == [0], "with one context there")
        s.infer("auto_mlp", x)
    finally:
        s.stop()
    shutil.rmtree(work, ignore_errors=True)
    print("placement check: %d failure(s)" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
