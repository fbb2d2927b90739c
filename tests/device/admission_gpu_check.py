#!/usr/bin/env python3
"""Memory-aware admission on the GPU machine (issue 17, item 2): three KIND_GPU TorchScript
models whose executions each make a large intermediate tensor (16 MiB a sample: batch 8 makes
about 256 MiB with what LibTorch keeps beside it), four instances each, under a device budget
that holds the models and only a few such executions at once. Clients at three times the
instances (closed loop, infer_load) for --seconds:
  - with admission (the default): no request fails for memory (no budget refusal, no pool
    out-of-memory); only bounded admission timeouts may fail, and they are counted; p99 and
    req/s per model are reported;
  - the same load with --memory-admission=false for a third of the time: the budget refuses
    executions (the load does exceed the budget, so the first run shows something).

With --mode free (no budget), the same three models on the device's real free memory: the
server runs with --memory-admission-device-free, and a filler process takes all the GPU's free
memory but --headroom-mib once the models are warm, so that the burst's executions do not all
fit at once. With admission no request fails for memory (no pool out-of-memory); without it
(a third of the time) the pool runs out (the load is real).

  admission_gpu_check.py --vramd BIN/vramd --infer-load BIN/infer_load \
      --backend-dir build-torch-device/backends [--seconds 60] [--mode budget|free]

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

from device_checks import check, failures

MODELS = ["wide_a", "wide_b", "wide_c"]
INSTANCES = 4
BATCH = 8
WIDTH, FAN = 1024, 4096  # the intermediate: [batch, WIDTH, FAN] floats


DEVICE = "cuda:0"  # --device: "cpu" tries the script on a machine without a GPU
KIND = "KIND_GPU"


def write_models(repo):
    import torch

    class Wide(torch.nn.Module):
        def __init__(self, seed: int):
            super().__init__()
            g = torch.Generator().manual_seed(seed)
            self.w = torch.nn.Parameter(torch.randn(1, WIDTH, FAN, generator=g) / FAN)

        def forward(self, x: torch.Tensor):
            return torch.relu(x.unsqueeze(2) * self.w).sum(dim=2)

    for i, name in enumerate(MODELS):
        os.makedirs(os.path.join(repo, name, "1"))
        torch.jit.script(Wide(i + 1).eval()).save(os.path.join(repo, name, "1", "model.pt"))
        with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
            f.write("""name: "%s"
platform: "pytorch_libtorch"
max_batch_size: %d
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ %d ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ %d ] } ]
instance_group [ { kind: %s count: %d } ]
""" % (name, BATCH, WIDTH, WIDTH, KIND, INSTANCES))


def get(url):
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.read().decode()


def metrics(port):
    text = get("http://127.0.0.1:%d/metrics" % (port + 2))

    def total(pattern):
        return sum(float(v) for v in re.findall(r"(?m)^%s (\S+)$" % pattern, text))
    return {
        "admission_timeouts": total(r'vramd_memory_admission_timeouts_total\{device="%s"\}' % DEVICE),
        "admission_waits": total(r'vramd_memory_admission_waits_total\{device="%s"\}' % DEVICE),
        "pool_oom": total(r'vramd_pool_out_of_memory_total\{device="%s"\}' % DEVICE),
        "failures": total(r'nv_inference_request_failure\{[^}]*\}'),
        "success": total(r'nv_inference_request_success\{[^}]*\}'),
    }


def budget_refusals(port):
    report = json.loads(get("http://127.0.0.1:%d/v2/memory" % port))
    return sum(q["refusals"] for q in report["owners"].get("quota", []))


def device_live(port):
    """What every owner holds on DEVICE."""
    report = json.loads(get("http://127.0.0.1:%d/v2/memory" % port))

    def walk(node):
        return node["by_device"].get(DEVICE, 0) + sum(walk(c) for c in node["children"])
    return walk(report["owners"])


class Server:
    def __init__(self, args, repo, port, extra, log_path):
        self.port = port
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(
            [args.vramd, "serve", "--model-repository", repo, "--backend-directory",
             args.backend_dir, "--http-port", str(port), "--grpc-port", str(port + 1),
             "--metrics-port", str(port + 2)] + extra, stdout=self.log, stderr=self.log)
        for _ in range(1200):
            try:
                if all(urllib.request.urlopen(
                        "http://127.0.0.1:%d/v2/models/%s/ready" % (port, m), timeout=5).status
                       == 200 for m in MODELS):
                    return
            except (urllib.error.URLError, ConnectionError):
                pass
            if self.proc.poll() is not None:
                raise RuntimeError("the server exited at start (%s)" % self.proc.returncode)
            time.sleep(0.1)
        raise RuntimeError("the models did not get ready")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def body_file(work):
    import numpy as np
    x = np.random.default_rng(1).uniform(-1, 1, (BATCH, WIDTH)).astype(np.float32)
    header = json.dumps({"inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [BATCH, WIDTH],
                                     "parameters": {"binary_data_size": x.nbytes}}],
                         "outputs": [{"name": "OUTPUT__0", "parameters": {"binary_data": True}}]})
    path = os.path.join(work, "body.bin")
    with open(path, "wb") as f:
        f.write(header.encode() + x.tobytes())
    return path, len(header)


def load(args, port, body, header_length, seconds, concurrency):
    procs = [subprocess.Popen([args.infer_load, "--model", m, "--body-file", body,
                               "--header-length", str(header_length), "--port", str(port),
                               "--concurrency", str(concurrency), "--duration", str(seconds),
                               "--warmup", "2", "--timeout", "60"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for m in MODELS]
    results = {}
    for m, p in zip(MODELS, procs):
        out, err = p.communicate(timeout=seconds + 120)
        line = out.strip().splitlines()[-1] if out.strip() else "{}"
        results[m] = json.loads(line)
        if err.strip():
            results[m]["first_error"] = err.strip()[:300]
    return results


def report_run(name, results, figures):
    """FIGURE lines of one run: each model's req/s and latencies, and the memory failures."""
    for m, r in results.items():
        if r.get("first_error"):
            print("# %s %s first error: %s" % (name, m, r["first_error"]))
        print("FIGURE admission_%s_%s_rps %.1f req/s (p50 %.1f ms, p99 %.1f ms, errors %d)"
              % (name, m, r.get("rps", 0), r.get("p50_ms", 0), r.get("p99_ms", 0),
                 r.get("errors", 0)), flush=True)
    if "budget_refusals" in figures:
        print("FIGURE admission_%s_budget_refusals %d" % (name, figures["budget_refusals"]))
    print("FIGURE admission_%s_pool_oom %d" % (name, figures["pool_oom"]))
    print("FIGURE admission_%s_admission_timeouts %d (waits %d)"
          % (name, figures["admission_timeouts"], figures["admission_waits"]))


FILLER = r"""
import sys, torch
headroom = int(sys.argv[1])
free, _ = torch.cuda.mem_get_info()
take = max(0, free - headroom)
hold = None
while hold is None:  # the driver keeps a little of what it calls free: step down to what it gives
    try:
        hold = torch.empty(take, dtype=torch.uint8, device="cuda")
    except torch.OutOfMemoryError:
        take -= 32 << 20
print("READY %d %d" % (free, take), flush=True)
sys.stdin.read()
"""


class Filler:
    """A process holding all of the GPU's free memory but `headroom` bytes until stopped."""

    def __init__(self, headroom):
        self.proc = subprocess.Popen([sys.executable, "-c", FILLER, str(headroom)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().split()
        if not line or line[0] != "READY":
            raise RuntimeError("the filler did not start (%s)" % line)
        self.free_before, self.taken = int(line[1]), int(line[2])

    def stop(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def free_mode(args, work, repo, body, header_length, concurrency):
    """Admission against the device's free memory (no budget): with and without it, under a
    filler that leaves --headroom-mib free once the models are warm."""
    headroom = args.headroom_mib * (1 << 20)
    runs = {}
    for name, extra, seconds in (("free_admission", ["--memory-admission-device-free=true"],
                                  args.seconds),
                                 ("free_no_admission", ["--memory-admission=false"],
                                  max(10, args.seconds // 3))):
        server = Server(args, repo, args.port, extra, os.path.join(work, name + ".log"))
        filler = None
        try:
            # Warm (peaks learned) with one client a model, so that what the pool keeps cached
            # afterwards, which admission counts as free, is three executions' worth.
            load(args, args.port, body, header_length, 3, 1)
            filler = Filler(headroom)
            print("FIGURE admission_%s_filler_took_bytes %d bytes (free before %d)"
                  % (name, filler.taken, filler.free_before), flush=True)
            results = load(args, args.port, body, header_length, seconds, concurrency)
            figures = metrics(args.port)
        finally:
            if filler is not None:
                filler.stop()
            server.stop()
        runs[name] = (results, figures)
        report_run(name, results, figures)
    results, figures = runs["free_admission"]
    p99 = max(r.get("p99_ms", 0) for r in results.values())
    print("FIGURE admission_free_p99_ms %.1f ms (the slowest model's)" % p99)
    check(figures["pool_oom"] == 0,
          "against the device's free memory, no request failed for memory (pool OOM %d)"
          % figures["pool_oom"])
    errors = sum(r.get("errors", 0) for r in results.values())
    check(errors <= figures["admission_timeouts"],
          "against free memory, the only failures are admission timeouts (%d errors, %d timeouts)"
          % (errors, figures["admission_timeouts"]))
    check(figures["admission_waits"] > 0, "against free memory, executions did wait")
    check(all(r.get("requests", 0) > 0 for r in results.values()), "every model served")
    _, off = runs["free_no_admission"]
    check(off["pool_oom"] > 0,
          "without admission the same load runs the pool out of memory (%d): the load is real"
          % off["pool_oom"])
    print("%d failure(s)" % len(failures))
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vramd", required=True)
    ap.add_argument("--infer-load", required=True)
    ap.add_argument("--backend-dir", required=True)
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--headroom-mib", type=int, default=1024,
                    help="the budget: what the loaded, warmed-up models hold plus this")
    ap.add_argument("--port", type=int, default=18400)
    ap.add_argument("--device", default="cuda:0", choices=["cuda:0", "cpu"])
    ap.add_argument("--mode", default="budget", choices=["budget", "free"],
                    help="free: no budget; admitted against the GPU's free memory, which a "
                         "filler process holds down to --headroom-mib")
    args = ap.parse_args()
    global DEVICE, KIND
    DEVICE, KIND = args.device, ("KIND_GPU" if args.device == "cuda:0" else "KIND_CPU")

    work = tempfile.mkdtemp()
    repo = os.path.join(work, "repo")
    write_models(repo)
    print("# work directory (server logs): %s" % work, flush=True)
    body, header_length = body_file(work)
    concurrency = 3 * INSTANCES

    if args.mode == "free":
        sys.exit(free_mode(args, work, repo, body, header_length, concurrency))

    # 1. What the models hold once loaded and warmed up (no budget), for the budget.
    server = Server(args, repo, args.port, [], os.path.join(work, "baseline.log"))
    try:
        load(args, args.port, body, header_length, 3, INSTANCES)
        baseline = device_live(args.port)
    finally:
        server.stop()
    budget = baseline + args.headroom_mib * (1 << 20)
    print("FIGURE admission_baseline_bytes %d bytes (budget %d)" % (baseline, budget), flush=True)

    runs = {}
    for name, extra, seconds in (("admission", [], args.seconds),
                                 ("no_admission", ["--memory-admission=false"],
                                  max(10, args.seconds // 3))):
        server = Server(args, repo, args.port,
                        ["--memory-budget", "%s=%d" % (DEVICE, budget)] + extra,
                        os.path.join(work, name + ".log"))
        try:
            results = load(args, args.port, body, header_length, seconds, concurrency)
            figures = metrics(args.port)
            figures["budget_refusals"] = budget_refusals(args.port)
        finally:
            server.stop()
        runs[name] = (results, figures)
        report_run(name, results, figures)

    results, figures = runs["admission"]
    p99 = max(r.get("p99_ms", 0) for r in results.values())
    print("FIGURE admission_p99_ms %.1f ms (the slowest model's)" % p99)
    check(figures["budget_refusals"] == 0 and figures["pool_oom"] == 0,
          "with admission, no request failed for memory (budget refusals %d, pool OOM %d)"
          % (figures["budget_refusals"], figures["pool_oom"]))
    errors = sum(r.get("errors", 0) for r in results.values())
    check(errors <= figures["admission_timeouts"],
          "with admission, the only failures are admission timeouts (%d errors, %d timeouts)"
          % (errors, figures["admission_timeouts"]))
    check(figures["admission_waits"] > 0, "with admission, executions did wait for memory")
    check(all(r.get("requests", 0) > 0 for r in results.values()), "every model served")
    _, off = runs["no_admission"]
    check(off["budget_refusals"] > 0,
          "without admission the same load passes the budget (%d refusals): the load is real"
          % off["budget_refusals"])
    print("%d failure(s)" % len(failures))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
