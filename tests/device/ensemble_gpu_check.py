#!/usr/bin/env python3
"""Ensembles on the GPU machine (issue 16, item 1): two KIND_GPU mlp models chained by an
ensemble hand their intermediate tensor to each other in device memory. Over N requests the
server's copy counters (vramd_copy_bytes_total on /metrics) show the client's input going up
once and the ensemble's output coming down once per request, and nothing of the intermediate
tensor crossing; the same two models called one after the other by the client (the control)
move the intermediate down and up again. The ensemble's answers equal the control's.

  ensemble_gpu_check.py --vramd BIN/vramd --make-model scripts/make_mlp_model.py [--requests N]

Prints PASS/FAIL and FIGURE lines; exits 1 on any failure. Runs on a machine without a GPU too
(then the models load on the CPU and the copy checks are skipped, saying so).
"""
import argparse
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

WIDTH_IN, WIDTH_MID, WIDTH_OUT, BATCH = 512, 256, 64, 16


def infer(base, model, name, x):
    st, body = http("POST", "%s/v2/models/%s/infer" % (base, model),
                    {"inputs": [{"name": name, "datatype": "FP32", "shape": list(x.shape),
                                 "data": x.ravel().tolist()}]})
    if st != 200:
        raise RuntimeError("%s: %d %s" % (model, st, body[:300]))
    out = json.loads(body)["outputs"][0]
    return np.asarray(out["data"], dtype=np.float32).reshape(out["shape"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vramd", required=True)
    ap.add_argument("--make-model", required=True)
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--port", type=int, default=18200)
    ap.add_argument("--kind", default="gpu")
    args = ap.parse_args()

    work = tempfile.mkdtemp()
    repo = os.path.join(work, "repo")
    for name, k, n, seed in (("mlp_a", WIDTH_IN, WIDTH_MID, 1), ("mlp_b", WIDTH_MID, WIDTH_OUT, 2)):
        subprocess.run([sys.executable, args.make_model, "model", os.path.join(repo, name),
                        "--inputs", str(k), "--hidden", "1024", "--outputs", str(n),
                        "--kind", args.kind, "--instances", "1", "--max-batch-size", str(BATCH),
                        "--name", name, "--seed", str(seed)], check=True,
                       stdout=subprocess.DEVNULL)
    os.makedirs(os.path.join(repo, "chain", "1"))
    with open(os.path.join(repo, "chain", "config.pbtxt"), "w") as f:
        f.write('''name: "chain"
platform: "ensemble"
max_batch_size: %d
input [ { name: "IN" data_type: TYPE_FP32 dims: [ %d ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ %d ] } ]
ensemble_scheduling { step [
  { model_name: "mlp_a" model_version: -1
    input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "mid" } },
  { model_name: "mlp_b" model_version: -1
    input_map { key: "INPUT0" value: "mid" } output_map { key: "OUTPUT0" value: "OUT" } }
] }
''' % (BATCH, WIDTH_IN, WIDTH_OUT))

    base = "http://127.0.0.1:%d" % args.port
    metrics = "http://127.0.0.1:%d/metrics" % (args.port + 2)
    log = open(os.path.join(work, "server.log"), "w")
    server = subprocess.Popen([args.vramd, "serve", "--model-repository", repo,
                               "--http-port", str(args.port), "--grpc-port", str(args.port + 1),
                               "--metrics-port", str(args.port + 2)], stdout=log, stderr=log)
    try:
        for _ in range(600):
            try:
                if http("GET", base + "/v2/models/chain/ready")[0] == 200:
                    break
            except urllib.error.URLError:
                pass
            if server.poll() is not None:
                check(False, "the server exited at start (%s)" % server.returncode)
                raise SystemExit(1)
            time.sleep(0.1)
        else:
            check(False, "the ensemble did not get ready")
            raise SystemExit(1)
        on_gpu = args.kind == "gpu"
        rng = np.random.default_rng(3)
        x = rng.standard_normal((BATCH, WIDTH_IN)).astype(np.float32)
        # One of each first: neither series pays a first execution in its figures.
        control = infer(base, "mlp_b", "INPUT0", infer(base, "mlp_a", "INPUT0", x))
        got = infer(base, "chain", "IN", x)
        err = float(np.max(np.abs(got - control) / np.maximum(1.0, np.abs(control))))
        print("FIGURE ensemble_gpu_max_rel_err_vs_two_calls %.3g ratio" % err)
        check(got.shape == (BATCH, WIDTH_OUT) and err < 1e-5,
              "the ensemble answers as the two models called one after the other")

        in_bytes, mid_bytes, out_bytes = x.nbytes, BATCH * WIDTH_MID * 4, BATCH * WIDTH_OUT * 4
        before = copied(metrics)
        start = time.perf_counter()
        for _ in range(args.requests):
            infer(base, "chain", "IN", x)
        ens_s = time.perf_counter() - start
        ens = {k: v - before[k] for k, v in copied(metrics).items()}
        before = copied(metrics)
        start = time.perf_counter()
        for _ in range(args.requests):
            infer(base, "mlp_b", "INPUT0", infer(base, "mlp_a", "INPUT0", x))
        two_s = time.perf_counter() - start
        two = {k: v - before[k] for k, v in copied(metrics).items()}
        n = args.requests
        print("FIGURE ensemble_gpu_copied_bytes h2d=%d d2h=%d d2d=%d (per request: in %d, mid %d, "
              "out %d)" % (ens["h2d"], ens["d2h"], ens["d2d"], in_bytes, mid_bytes, out_bytes))
        print("FIGURE two_calls_copied_bytes h2d=%d d2h=%d d2d=%d" % (two["h2d"], two["d2h"],
                                                                      two["d2d"]))
        print("FIGURE ensemble_vs_two_calls_time %.2f ratio (%d requests: %.3f s vs %.3f s)" %
              (two_s / ens_s, n, ens_s, two_s))
        if on_gpu:
            check(ens["h2d"] == n * in_bytes and ens["d2h"] == n * out_bytes,
                  "through the ensemble only the input goes up and the output comes down: %s" % ens)
            check(two["h2d"] == n * (in_bytes + mid_bytes) and
                  two["d2h"] == n * (mid_bytes + out_bytes),
                  "the control moves the intermediate down and up again: %s" % two)
        else:
            print("# no GPU: the copy checks are skipped (the models ran on the CPU)")
        memory = json.loads(http("GET", base + "/v2/memory")[1])
        check(memory.get("leak_reports_total", 0) == 0, "no leak reports")
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
