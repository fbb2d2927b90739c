#!/usr/bin/env python3
"""What vramd's memory governance costs a request (issue 17): the same small model served in
process (bench/inprocess_infer, the runtime without HTTP) without a budget, and with a budget
too large to be reached (--memory-budget DEVICE=1TiB), which turns on the budget's quota check
on every allocation and memory-aware admission of every execution. Runs alternate (A B A B ...)
so that drift hits both; the figure is the difference of the medians of per-request time, in
ns, and the ratio of the req/s. A third series has the budget without admission (the quota
check alone). Until 2026-12-05 admission also took a governed model off the inline fast path,
which cost this model 26 us a request on the development machine (0.14 of its req/s); an
inline execution is now one that is admitted at once, and one that would wait goes to the
instance threads.

  governance_cost.py --inprocess BIN/inprocess_infer --device cpu|cuda:0 [--rounds 5]
                     [--duration 2] [--concurrency 1]

The model is the built-in mlp (16 -> 16 -> 16, batch 1) on a CPU or GPU instance. Prints FIGURE
lines and one JSON line.
"""
import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile

import numpy as np


def write_model(repo, kind):
    rng = np.random.default_rng(1)
    tensors = [("layers.0.weight", rng.standard_normal((16, 16)).astype(np.float32)),
               ("layers.0.bias", rng.standard_normal(16).astype(np.float32))]
    header, offset = {}, 0
    for name, a in tensors:
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    os.makedirs(os.path.join(repo, "tiny", "1"))
    with open(os.path.join(repo, "tiny", "1", "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(a.tobytes() for _, a in tensors))
    with open(os.path.join(repo, "tiny", "config.pbtxt"), "w") as f:
        f.write("""name: "tiny"
backend: "mlp"
max_batch_size: 1
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
instance_group [ { kind: %s count: 1 } ]
""" % kind)


def run(args, repo, inp, budget, admission=True):
    cmd = [args.inprocess, "--repository", repo, "--model", "tiny", "--input", inp,
           "--shape", "1,16", "--concurrency", str(args.concurrency), "--duration",
           str(args.duration), "--warmup", "0.5"]
    if budget:
        cmd += ["--memory-budget", "%s=1TiB" % args.device]
    if not admission:
        cmd += ["--memory-admission", "false"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise RuntimeError("inprocess_infer failed: %s" % out.stderr[-500:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--inprocess", required=True)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda:0"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--duration", type=float, default=2)
    ap.add_argument("--concurrency", type=int, default=1)
    args = ap.parse_args()
    work = tempfile.mkdtemp()
    repo = os.path.join(work, "repo")
    write_model(repo, "KIND_GPU" if args.device.startswith("cuda") else "KIND_CPU")
    inp = os.path.join(work, "input.bin")
    np.ones(16, dtype=np.float32).tofile(inp)
    plain, governed, budget_only = [], [], []
    for _ in range(args.rounds):
        plain.append(run(args, repo, inp, budget=False))
        budget_only.append(run(args, repo, inp, budget=True, admission=False))
        governed.append(run(args, repo, inp, budget=True))
    ns = lambda r: 1e9 * args.concurrency / r["rps"]
    plain_ns = statistics.median(ns(r) for r in plain)
    governed_ns = statistics.median(ns(r) for r in governed)
    budget_ns = statistics.median(ns(r) for r in budget_only)
    plain_rps = statistics.median(r["rps"] for r in plain)
    governed_rps = statistics.median(r["rps"] for r in governed)
    print("FIGURE governance_%s_plain_ns_per_request %.0f ns" % (args.device, plain_ns))
    print("FIGURE governance_%s_governed_ns_per_request %.0f ns" % (args.device, governed_ns))
    print("FIGURE governance_%s_budget_check_ns_per_request %.0f ns (budget alone - none)"
          % (args.device, budget_ns - plain_ns))
    print("FIGURE governance_%s_cost_ns_per_request %.0f ns (budget + admission - none)"
          % (args.device, governed_ns - plain_ns))
    print("FIGURE governance_%s_rps_ratio %.3f ratio (governed / plain)"
          % (args.device, governed_rps / plain_rps))
    print(json.dumps({"device": args.device, "concurrency": args.concurrency,
                      "plain_rps": [r["rps"] for r in plain],
                      "governed_rps": [r["rps"] for r in governed],
                      "budget_only_rps": [r["rps"] for r in budget_only],
                      "cost_ns": governed_ns - plain_ns}))


if __name__ == "__main__":
    sys.exit(main())
