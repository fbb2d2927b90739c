#!/usr/bin/env python3
"""Issue 6, part B: throughput of a TorchScript model served by vramd over HTTP against calling
the same module directly from C++ (the floor), at concurrency 1 2 4 8 16 32.

  throughput_compare.py --vramd BIN --infer-load BIN --direct-bench BIN --backend-dir DIR
                        [--work DIR] [--out F] [--server-log F] [--concurrency 1,2,4,8,16,32]
                        [--duration 3] [--warmup 1] [--instances 16] [--body binary|json]
                        [--arch resnet --image 112 --width 64] [--device cuda:0 --kind gpu]
                        [--target 0.90]

The model (bench/torch/make_model.py): a ResNet-18-like conv net in torch.nn (torchvision is not
needed), batch 1, 3x112x112 FP32 in, 1000 FP32 out, ~14 GFLOP and ~45 launches of real kernels
per forward: some hundreds of microseconds of GPU time on an H200, with a 147 KiB request and a
4 KiB answer. So the GPU does real work per call and what separates the two sides is the serving
path (HTTP, parsing, scheduling, the backend's copies), not Python. The request uses Triton's
binary tensor extension both ways (--body json sends plain JSON instead).

  direct: bench/torch/direct_bench: c threads, each its own CUDA stream, each iteration copies the
          input host->device (pinned), runs forward() under c10::InferenceMode, copies the output
          back to host and syncs its stream; the threads share the module. Its output is first
          checked against the CPU reference make_model.py wrote.
  vramd:  one server (--model-control-mode none) with the model at --instances KIND_GPU instances
          (default 16, so that up to 16 requests execute at once), max_batch_size 8 without
          dynamic batching (each request runs alone, as the direct loop does); bench/infer_load
          with c keep-alive connections, closed loop. One answer is checked against the same
          reference first.

The two run one after the other (never together), the direct one first. For each c it prints
req/s of both; the ratio at saturation is max over c of vramd's req/s over max over c of the
direct req/s, PASS when >= --target. Writes all numbers under "throughput" in --out.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (HERE, Vramd, call, figure, infer_load, log, spawn, stop, update_json,  # noqa: E402
                    verdict)


def read_floats(path):
    with open(path, "rb") as f:
        data = f.read()
    return list(struct.unpack("<%df" % (len(data) // 4), data))


def check_answer(port, meta, body_kind):
    """One request through vramd; its output against the CPU reference (2% of max magnitude)."""
    model = meta["name"]
    if body_kind == "binary":
        with open(meta["request_bin"], "rb") as f:
            body = f.read()
        status, resp, headers = call(port, "POST", f"/v2/models/{model}/infer", body=body,
                                     headers={"Inference-Header-Content-Length":
                                              str(meta["header_length"]),
                                              "Content-Type": "application/octet-stream"},
                                     timeout=120)
    else:
        with open(meta["request_json"], "rb") as f:
            body = f.read()
        status, resp, headers = call(port, "POST", f"/v2/models/{model}/infer", body=body,
                                     timeout=120)
    if status != 200:
        raise RuntimeError(f"vramd answered {status}: {resp[:1000]!r}")
    hl = {k.lower(): v for k, v in headers.items()}.get("inference-header-content-length")
    if hl is not None:
        hl = int(hl)
        head = json.loads(resp[:hl])
        out = head["outputs"][0]
        raw = resp[hl:hl + int(out["parameters"]["binary_data_size"])]
        got = list(struct.unpack("<%df" % (len(raw) // 4), raw))
    else:
        head = json.loads(resp)
        out = head["outputs"][0]
        got = out["data"]
    want = read_floats(meta["output_bin"])
    if len(got) != len(want):
        raise RuntimeError(f"vramd output has {len(got)} values, the reference {len(want)}")
    err = max(abs(x - y) for x, y in zip(got, want))
    mag = max(abs(y) for y in want)
    return {"max_abs_err": err, "max_abs_ref": mag, "ok": err <= 0.02 * max(mag, 1e-6),
            "shape": out.get("shape")}


def run_direct(a, meta):
    shape = ",".join(str(d) for d in meta["input_shape"])
    cmd = [a.direct_bench, "--model", meta["model_pt"], "--input", meta["input_bin"],
           "--shape", shape, "--device", a.device, "--concurrency", a.concurrency_s,
           "--duration", str(a.duration), "--warmup", str(a.warmup),
           "--reference", meta["output_bin"]] + a.direct_arg
    log("running:", " ".join(cmd))
    p = spawn(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    budget = len(a.concurrency) * (a.duration + a.warmup + 5) + 120
    try:
        out, err = p.communicate(timeout=budget)
    except subprocess.TimeoutExpired:
        stop(p)
        raise RuntimeError(f"direct_bench did not finish in {budget:.0f}s")
    stop(p)
    rows, check = [], None
    for line in out.decode().splitlines():
        if not line.startswith("{"):
            continue
        d = json.loads(line)
        if "check" in d:
            check = d
        else:
            rows.append(d)
    if p.returncode != 0 or len(rows) != len(a.concurrency):
        raise RuntimeError(f"direct_bench exit {p.returncode}, {len(rows)} results: "
                           f"{err.decode(errors='replace')[-2000:]} {out.decode()[-1000:]}")
    return rows, check


def run_vramd(a, meta):
    server = Vramd(a.vramd, [meta["repository"]], a.server_log, a.backend_dir,
                   ["--exit-on-error"] + a.vramd_arg)
    rows = []
    try:
        server.ready(meta["name"], timeout=180)
        check = check_answer(server.port, meta, a.body)
        log("vramd answer check:", check)
        if a.body == "binary":
            body, hlen = meta["request_bin"], meta["header_length"]
        else:
            body, hlen = meta["request_json"], 0
        for c in a.concurrency:
            r = infer_load(a.infer_load, server.port, meta["name"], body, hlen, c, a.duration,
                           a.warmup)
            r["mode"] = "vramd"
            rows.append(r)
            log(f"vramd c={c}: {r['rps']:.0f} req/s p50 {r['p50_ms']:.3f} ms "
                f"p99 {r['p99_ms']:.3f} ms errors {r['errors']}")
    finally:
        code = server.stop()
        log(f"vramd exit code {code}")
    return rows, check


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vramd", required=True)
    ap.add_argument("--infer-load", required=True)
    ap.add_argument("--direct-bench", required=True)
    ap.add_argument("--backend-dir", required=True)
    ap.add_argument("--work", default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--server-log", default=None)
    ap.add_argument("--concurrency", default="1,2,4,8,16,32")
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--instances", type=int, default=16)
    ap.add_argument("--max-batch-size", type=int, default=8)
    ap.add_argument("--body", choices=("binary", "json"), default="binary")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--arch", default="resnet")
    ap.add_argument("--image", type=int, default=112)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--kind", default="gpu")
    ap.add_argument("--target", type=float, default=0.90)
    ap.add_argument("--vramd-arg", action="append", default=[], help="extra vramd serve argument")
    ap.add_argument("--direct-arg", action="append", default=[], help="extra direct_bench argument")
    ap.add_argument("--skip", default="", help="comma list: direct,vramd")
    a = ap.parse_args()
    a.concurrency_s = a.concurrency
    a.concurrency = [int(c) for c in a.concurrency.split(",")]
    skip = set(filter(None, a.skip.split(",")))
    work = a.work or tempfile.mkdtemp(prefix="vramd-torch-tput-")
    os.makedirs(work, exist_ok=True)
    a.server_log = a.server_log or os.path.join(work, "server.log")

    subprocess.run([a.python, os.path.join(HERE, "make_model.py"), work, "--name", "torch_tput",
                    "--arch", a.arch, "--image", str(a.image), "--width", str(a.width),
                    "--instances", str(a.instances), "--kind", a.kind,
                    "--max-batch-size", str(a.max_batch_size)],
                   check=True, stdout=subprocess.DEVNULL, timeout=300)
    with open(os.path.join(work, "meta.json")) as f:
        meta = json.load(f)

    result = {"model": {k: meta[k] for k in ("name", "arch", "image", "width", "input_shape",
                                             "output_shape", "parameters", "torch_version",
                                             "header_length")},
              "concurrency": a.concurrency, "duration_s": a.duration, "warmup_s": a.warmup,
              "vramd_instances": a.instances, "body": a.body, "target": a.target}
    ok = True

    def save():
        update_json(a.out, "throughput", result)

    if "direct" not in skip:
        try:
            t0 = time.time()
            result["direct"], result["direct_check"] = run_direct(a, meta)
            result["direct_seconds"] = round(time.time() - t0, 1)
            if result["direct_check"] and result["direct_check"].get("check") != "pass":
                ok &= verdict(False, f"direct_bench output vs reference: {result['direct_check']}")
        except Exception as e:  # noqa: BLE001
            log(f"direct series failed: {e}")
            result["direct_error"] = str(e)[:2000]
            ok = False
        save()
    if "vramd" not in skip:
        try:
            t0 = time.time()
            result["vramd"], result["vramd_check"] = run_vramd(a, meta)
            result["vramd_seconds"] = round(time.time() - t0, 1)
            ok &= verdict(result["vramd_check"]["ok"],
                          f"pytorch vramd answer matches the CPU reference (max abs err "
                          f"{result['vramd_check']['max_abs_err']:.3g}, max |ref| "
                          f"{result['vramd_check']['max_abs_ref']:.3g})")
            errors = sum(r.get("errors", 0) for r in result["vramd"])
            ok &= verdict(errors == 0, f"pytorch vramd throughput run: {errors} failed requests")
        except Exception as e:  # noqa: BLE001
            log(f"vramd series failed: {e}")
            result["vramd_error"] = str(e)[:2000]
            ok = False
        save()

    by_c = {}
    for mode in ("direct", "vramd"):
        for r in result.get(mode, []):
            by_c.setdefault(r["concurrency"], {})[mode] = r["rps"]
            figure(f"pytorch_{mode}_rps_c{r['concurrency']}", float(r["rps"]), "req/s")
    for c in sorted(by_c):
        d, v = by_c[c].get("direct"), by_c[c].get("vramd")
        line = f"# c={c}: direct {d if d is not None else 'n/a'} req/s, vramd " \
               f"{v if v is not None else 'n/a'} req/s"
        if d and v is not None:
            line += f", ratio {v / d:.3f}"
        print(line, flush=True)
    if result.get("direct") and result.get("vramd"):
        dmax = max(r["rps"] for r in result["direct"])
        vmax = max(r["rps"] for r in result["vramd"])
        ratio = vmax / dmax if dmax else 0.0
        result.update({"direct_max_rps": dmax, "vramd_max_rps": vmax, "ratio_at_saturation": ratio})
        figure("pytorch_direct_max_rps", float(dmax), "req/s")
        figure("pytorch_vramd_max_rps", float(vmax), "req/s")
        figure("pytorch_vramd_vs_direct_ratio_at_saturation", ratio, "ratio")
        ok &= verdict(ratio >= a.target, f"pytorch vramd/direct throughput at saturation "
                      f"{ratio:.3f} >= {a.target:.2f}")
    else:
        ok &= verdict(False, "pytorch throughput comparison incomplete")
    result["ok"] = bool(ok)
    save()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
