#!/usr/bin/env python3
"""Issue 14's throughput targets: the python backend against vramd's own backends, one server,
one run, each pair measured back to back.

  throughput_compare.py --vramd BIN --infer-load BIN --backend-dir DIR
                        [--work DIR] [--out F] [--server-log F] [--duration 3] [--warmup 1]
                        [--identity-concurrency 1,16] [--identity-instances 2]
                        [--identity-variant KEY=VALUE[,KEY=VALUE]]...
                        [--identity-hosting stub|process_per_instance]... [--identity-batching]
                        [--identity-extra-instances N]... [--identity-rounds 1]
                        [--torch] [--torch-concurrency 1,4,8,16,32] [--torch-instances 8]
                        [--torch-variant KEY=VALUE[,KEY=VALUE]]...
                        [--arch resnet --image 112 --width 64] [--kind gpu|cpu]
                        [--identity-target 0.50] [--torch-target 0.80]

1. identity: `identity_builtin` (backend "identity", linked into vramd) and `identity_python` (a
   Triton model.py returning its input: pb_utils.Tensor("OUTPUT0", in.as_numpy())), both FP32
   [-1], --identity-instances KIND_CPU instances each, no batching; infer_load with c keep-alive
   connections (Triton's binary tensor extension both ways, 16 floats) at each c, the built-in
   first then the python model, then the same model.py with one instance (identity_python_1:
   a GIL-bound model gains nothing from a second in-process instance; its own figures). Ratio
   python / built-in at each c; PASS when every ratio is at least --identity-target.
   --identity-variant KEY=VALUE[,...] (repeatable) runs the round again in a server started with
   that environment (e.g. VRAMD_INSTANCE_IDLE_SPIN_US=50), reported as its own figures.
   --identity-hosting MODE (repeatable) adds the same model.py hosted out of process
   (identity_python_<mode>: VRAMD_PYTHON_HOSTING=MODE, --identity-instances instances) to the
   round: its own figures, not judged (the target is about the default, in-process hosting).
   --identity-batching adds both again with Triton's dynamic batcher (max_batch_size 32,
   requests [1, 16]; the python one with one instance): python batched over built-in batched,
   and over the unbatched built-in; reported, not judged.
   --identity-rounds N runs the round N times in the one server and judges the median ratio.
   --identity-extra-instances N (repeatable) adds the model.py with N instances (its own figures).
   Each series also reports the server's CPU microseconds per request by thread group
   (/proc/PID/task: instance threads, HTTP threads, ...), which tells the thread that saturates.
2. --torch: bench/torch/make_model.py's TorchScript model (a ResNet-18-like net by default)
   served twice, each in a server of its own (two LibTorch users in one process crashed a
   server at start-up): `torch_ts` by the pytorch backend, and `torch_py` by a model.py that
   torch.jit.load's the same file onto its instance's device and runs forward under
   torch.inference_mode (input via as_numpy -> torch.from_numpy -> .to(device); output .cpu()),
   both --torch-instances instances of --kind. The ratio at saturation is max over c of
   torch_py's req/s over max over c of torch_ts's; PASS when at least --torch-target. Needs the
   pytorch backend in --backend-dir (build-torch-device/backends on the GPU machine) and the
   python backend (build-python-device/backends or <build>/backends), so --backend-dir may be
   given twice: the first that has a backend wins, per backend (vramd takes one directory, so
   the script links both into one under --work).
   --torch-variant KEY=VALUE[,...] (repeatable): the same model.py with these model parameters
   (e.g. VRAMD_PYTHON_TORCH_INSTANCE_STREAM=on, VRAMD_PYTHON_LEDGER_TORCH=off,
   VRAMD_PYTHON_HOSTING=process_per_instance; the key instances=N sets the instance count
   instead), each in a server of its own after the default, reported as its own figures, not
   judged.

Every answer is checked once before load (identity: equal to the input; torch: both models
against make_model.py's CPU reference). A series that fails is reported as failed, never
replaced by another mode's figures.
"""
import argparse
import json
import os
import re
import statistics
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "torch"))
from common import Vramd, call, figure, infer_load, log, update_json, verdict  # noqa: E402

IDENTITY_CONFIG = '''name: "{name}"
backend: "{backend}"
max_batch_size: {max_batch_size}
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
instance_group [ {{ kind: KIND_CPU count: {count} }} ]
{batching}'''


def identity_config(name, backend, count, batched=False):
    """--identity-batching's models (batched) have Triton's dynamic batcher: the python model's
    execute then gets the list of requests the batcher formed, each its own [1, 16] tensor."""
    return IDENTITY_CONFIG.format(name=name, backend=backend, count=count,
                                  max_batch_size=32 if batched else 0,
                                  batching="dynamic_batching { }\n" if batched else "")


IDENTITY_MODEL = '''import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x)]))
        return responses
'''

TORCH_MODEL = '''import json

import torch
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        kind = args["model_instance_kind"]
        self.device = torch.device(
            f"cuda:{args['model_instance_device_id']}" if kind == "GPU" else "cpu")
        path = json.loads(args["model_config"])["parameters"]["torchscript"]["string_value"]
        self.module = torch.jit.load(path, map_location=self.device).eval()

    def execute(self, requests):
        responses = []
        with torch.inference_mode():
            for request in requests:
                x = pb_utils.get_input_tensor_by_name(request, "INPUT__0").as_numpy()
                y = self.module(torch.from_numpy(x).to(self.device, non_blocking=False))
                out = y.to("cpu").numpy()
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT__0", out)]))
        return responses
'''


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def merged_backend_dir(dirs, work):
    """One backend directory holding each backend found in `dirs` (first wins)."""
    out = os.path.join(work, "backends")
    os.makedirs(out, exist_ok=True)
    for d in dirs:
        for name in sorted(os.listdir(d)):
            src = os.path.abspath(os.path.join(d, name))
            dst = os.path.join(out, name)
            if os.path.isdir(src) and not os.path.exists(dst):
                os.symlink(src, dst)
    return out


def identity_body(work, n=16, batched=False):
    values = [float(i) * 0.5 for i in range(n)]
    raw = struct.pack("<%df" % n, *values)
    header = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, n] if batched else [n],
                                     "datatype": "FP32",
                                     "parameters": {"binary_data_size": len(raw)}}],
                         "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]},
                        separators=(",", ":")).encode()
    path = os.path.join(work, "identity_request%s.bin" % ("_batched" if batched else ""))
    with open(path, "wb") as f:
        f.write(header + raw)
    return path, len(header), raw


def check_binary(port, model, body_path, hlen, want_raw=None, want_floats=None, tol=0.02):
    with open(body_path, "rb") as f:
        body = f.read()
    status, resp, headers = call(port, "POST", f"/v2/models/{model}/infer", body=body,
                                 headers={"Inference-Header-Content-Length": str(hlen)},
                                 timeout=120)
    if status != 200:
        raise RuntimeError(f"{model} answered {status}: {resp[:1000]!r}")
    hl = int({k.lower(): v for k, v in headers.items()}["inference-header-content-length"])
    out = json.loads(resp[:hl])["outputs"][0]
    raw = resp[hl:hl + int(out["parameters"]["binary_data_size"])]
    if want_raw is not None and raw != want_raw:
        raise RuntimeError(f"{model}: the output differs from the input")
    if want_floats is not None:
        got = struct.unpack("<%df" % (len(raw) // 4), raw)
        err = max(abs(x - y) for x, y in zip(got, want_floats))
        mag = max(abs(y) for y in want_floats)
        if len(got) != len(want_floats) or err > tol * max(mag, 1e-6):
            raise RuntimeError(f"{model}: max abs error {err} against a reference of {mag}")


def thread_cpu(pid):
    """CPU seconds of each thread of `pid`, summed by thread name with its "#N" suffix and
    trailing digits removed (instance threads are "<model>#<i>", cut to 15 characters)."""
    hz = os.sysconf("SC_CLK_TCK")
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # ended meanwhile
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        group = re.sub(r"(#\d*|\d+)$", "", name) or name
        out[group] = out.get(group, 0.0) + (int(fields[11]) + int(fields[12])) / hz
    return out


def series(a, server, model, body, hlen, concurrency):
    """infer_load at each concurrency; each row also has the server's CPU microseconds per
    request by thread group (whole run, warmup included), to tell which thread saturates."""
    rows = []
    for c in concurrency:
        before = thread_cpu(server.pid)
        r = infer_load(a.infer_load, server.port, model, body, hlen, c, a.duration, a.warmup)
        after = thread_cpu(server.pid)
        if r.get("errors"):
            raise RuntimeError(f"{model} c={c}: {r['errors']} errors: {r.get('stderr', '')}")
        n = max(1, round(r["rps"] * (a.duration + a.warmup)))
        cpu = {k: round((v - before.get(k, 0.0)) * 1e6 / n, 2) for k, v in after.items()
               if v - before.get(k, 0.0) > 0}
        r["server_cpu_us_per_request"] = dict(sorted(cpu.items(), key=lambda kv: -kv[1]))
        rows.append(r)
        top = ", ".join(f"{k} {v}" for k, v in list(r["server_cpu_us_per_request"].items())[:4])
        log(f"{model} c={c}: {r['rps']:.0f} req/s p50 {r['p50_ms']:.3f} ms p99 {r['p99_ms']:.3f} ms"
            f" (server CPU us/request: {top})")
    return rows


def identity_round(a, server, body, hlen, raw, conc):
    """The identity series on `server`: built-in, python with --identity-instances instances,
    python with one (a GIL-bound model gains nothing from a second in-process instance)."""
    ident = {"concurrency": conc, "instances": a.identity_instances}
    hosted = ["identity_python_" + mode for mode in a.identity_hosting]
    try:
        for model in ["identity_builtin", "identity_python", "identity_python_1"] + hosted:
            server.ready(model, timeout=120)
            check_binary(server.port, model, body, hlen, want_raw=raw)
        rows_b = series(a, server, "identity_builtin", body, hlen, conc)
        rows_p = series(a, server, "identity_python", body, hlen, conc)
        rows_1 = series(a, server, "identity_python_1", body, hlen, conc)
        ident["builtin_rps"] = [r["rps"] for r in rows_b]
        ident["python_rps"] = [r["rps"] for r in rows_p]
        ident["python_one_instance_rps"] = [r["rps"] for r in rows_1]
        ident["ratio"] = [p / b for p, b in zip(ident["python_rps"], ident["builtin_rps"])]
        ident["ratio_one_instance"] = [p / b for p, b in zip(ident["python_one_instance_rps"],
                                                             ident["builtin_rps"])]
        for n in a.identity_extra_instances:
            model = f"identity_python_{n}"
            server.ready(model, timeout=120)
            check_binary(server.port, model, body, hlen, want_raw=raw)
            rows = series(a, server, model, body, hlen, conc)
            ident[f"python_{n}_instances_rps"] = [r["rps"] for r in rows]
            ident[f"ratio_{n}_instances"] = [r["rps"] / b for r, b in zip(rows, ident["builtin_rps"])]
        ident["server_cpu_us_per_request"] = {
            name: [r["server_cpu_us_per_request"] for r in rows]
            for name, rows in (("builtin", rows_b), ("python", rows_p), ("python_1", rows_1))}
        for mode, model in zip(a.identity_hosting, hosted):
            rows = series(a, server, model, body, hlen, conc)
            ident[f"python_{mode}_rps"] = [r["rps"] for r in rows]
            ident[f"ratio_{mode}"] = [r["rps"] / b for r, b in zip(rows, ident["builtin_rps"])]
        if a.identity_batching:
            bbody, bhlen, _ = identity_body(a.work, batched=True)
            for model in ("identity_builtin_batched", "identity_python_batched"):
                server.ready(model, timeout=120)
                check_binary(server.port, model, bbody, bhlen, want_raw=raw)
            rows_bb = series(a, server, "identity_builtin_batched", bbody, bhlen, conc)
            rows_pb = series(a, server, "identity_python_batched", bbody, bhlen, conc)
            ident["builtin_batched_rps"] = [r["rps"] for r in rows_bb]
            ident["python_batched_rps"] = [r["rps"] for r in rows_pb]
            ident["ratio_batched"] = [p / b for p, b in zip(ident["python_batched_rps"],
                                                            ident["builtin_batched_rps"])]
            ident["ratio_batched_vs_builtin"] = [p / b for p, b in zip(ident["python_batched_rps"],
                                                                       ident["builtin_rps"])]
    except Exception as e:  # noqa: BLE001
        ident["error"] = str(e)[:2000]
    return ident


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vramd", required=True)
    ap.add_argument("--infer-load", required=True)
    ap.add_argument("--backend-dir", action="append", required=True)
    ap.add_argument("--work", default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--server-log", default=None)
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--identity-concurrency", default="1,16")
    ap.add_argument("--identity-instances", type=int, default=2)
    ap.add_argument("--identity-target", type=float, default=0.50)
    ap.add_argument("--identity-variant", action="append", default=[],
                    help="KEY=VALUE[,KEY=VALUE]: the identity round again in a server with "
                         "this environment, reported as its own figures")
    ap.add_argument("--identity-rounds", type=int, default=1,
                    help="the identity round this many times; judged on the median ratio")
    ap.add_argument("--identity-extra-instances", type=int, action="append", default=[],
                    help="the identity model.py with this many instances as well, its own figures")
    ap.add_argument("--identity-batching", action="store_true",
                    help="both identity models again with dynamic batching (the python one with "
                         "one instance), their own figures")
    ap.add_argument("--torch", action="store_true")
    ap.add_argument("--torch-concurrency", default="1,4,8,16,32")
    ap.add_argument("--torch-instances", type=int, default=8)
    ap.add_argument("--torch-target", type=float, default=0.80)
    ap.add_argument("--identity-hosting", action="append", default=[],
                    choices=["stub", "process_per_instance"],
                    help="the identity model.py hosted so as well, its own figures")
    ap.add_argument("--torch-variant", action="append", default=[],
                    help="KEY=VALUE[,KEY=VALUE]: the torch model.py with these model "
                         "parameters, in a server of its own, its own figures")
    ap.add_argument("--arch", default="resnet")
    ap.add_argument("--image", type=int, default=112)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--kind", default="gpu")
    ap.add_argument("--python", default=sys.executable)
    a = ap.parse_args()
    work = a.work = a.work or tempfile.mkdtemp(prefix="vramd-python-tput-")
    os.makedirs(work, exist_ok=True)
    a.server_log = a.server_log or os.path.join(work, "server.log")
    backends = merged_backend_dir(a.backend_dir, work)
    repo = os.path.join(work, "repo")
    os.makedirs(repo, exist_ok=True)
    # The identity models in a repository of their own, so a variant server can serve just them.
    id_repo = os.path.join(work, "repo_identity")
    for name, backend, count in (("identity_builtin", "identity", a.identity_instances),
                                 ("identity_python", "python", a.identity_instances),
                                 ("identity_python_1", "python", 1)):
        write(os.path.join(id_repo, name, "config.pbtxt"),
              identity_config(name, backend, count))
        os.makedirs(os.path.join(id_repo, name, "1"), exist_ok=True)
    for mode in a.identity_hosting:
        name = "identity_python_" + mode
        write(os.path.join(id_repo, name, "config.pbtxt"),
              identity_config(name, "python", a.identity_instances)
              + 'parameters { key: "VRAMD_PYTHON_HOSTING" value { string_value: "%s" } }\n'
              % mode)
    batched = []
    if a.identity_batching:
        for name, backend, count in (("identity_builtin_batched", "identity", a.identity_instances),
                                     ("identity_python_batched", "python", 1)):
            write(os.path.join(id_repo, name, "config.pbtxt"),
                  identity_config(name, backend, count, batched=True))
            os.makedirs(os.path.join(id_repo, name, "1"), exist_ok=True)
        batched = ["identity_python_batched"]
    for n in a.identity_extra_instances:
        write(os.path.join(id_repo, f"identity_python_{n}", "config.pbtxt"),
              identity_config(f"identity_python_{n}", "python", n))
    extra = [f"identity_python_{n}" for n in a.identity_extra_instances]
    for name in ["identity_python", "identity_python_1"] + batched + extra + [
            "identity_python_" + m for m in a.identity_hosting]:
        write(os.path.join(id_repo, name, "1", "model.py"), IDENTITY_MODEL)
    meta = None
    if a.torch:
        subprocess.run([a.python, os.path.join(HERE, "..", "torch", "make_model.py"), work,
                        "--name", "torch_ts", "--arch", a.arch, "--image", str(a.image),
                        "--width", str(a.width), "--instances", str(a.torch_instances),
                        "--kind", a.kind, "--max-batch-size", "0"],
                       check=True, stdout=subprocess.DEVNULL, timeout=300)
        with open(os.path.join(work, "meta.json")) as f:
            meta = json.load(f)
        # The TorchScript model is served by a server of its own: two LibTorch users in one
        # process (the pytorch backend swaps LibTorch's CUDA allocator for its own, the python
        # model's torch may already be allocating) crashed a server at start-up on the H200.
        ts_repo = os.path.join(work, "repo_ts")
        os.makedirs(ts_repo, exist_ok=True)
        os.rename(os.path.join(work, "repo", "torch_ts"), os.path.join(ts_repo, "torch_ts"))
        ts_config = meta["config"]
        py_config = (ts_config.replace('name: "torch_ts"', 'name: "torch_py"')
                     .replace('platform: "pytorch_libtorch"', 'backend: "python"')
                     + 'parameters { key: "torchscript" value { string_value: "%s" } }\n'
                     % os.path.join(ts_repo, "torch_ts", "1", "model.pt"))
        write(os.path.join(repo, "torch_py", "config.pbtxt"), py_config)
        write(os.path.join(repo, "torch_py", "1", "model.py"), TORCH_MODEL)
    # The same model.py with other model parameters, each in a repository (and later a
    # server) of its own; its own series, never the default's figure.
    torch_variants = []
    for i, variant in enumerate(a.torch_variant if a.torch else []):
        params = dict(kv.split("=", 1) for kv in variant.split(","))
        name = f"torch_py_v{i}"
        variant_repo = os.path.join(work, f"repo_{name}")
        config = py_config.replace('name: "torch_py"', f'name: "{name}"')
        if "instances" in params:  # the bench's own key: the instance count, not a parameter
            config = config.replace(f"count: {a.torch_instances}", f"count: {params['instances']}")
            assert f"count: {params['instances']}" in config, config
        write(os.path.join(variant_repo, name, "config.pbtxt"),
              config + "".join('parameters { key: "%s" value { string_value: "%s" } }\n' % kv
                               for kv in params.items() if kv[0] != "instances"))
        write(os.path.join(variant_repo, name, "1", "model.py"), TORCH_MODEL)
        torch_variants.append((name, variant_repo, params))

    result = {"duration_s": a.duration, "warmup_s": a.warmup, "machine": os.uname().nodename}
    ok = True
    tc = [int(c) for c in a.torch_concurrency.split(",")]
    tor = {"concurrency": tc, "instances": a.torch_instances, "kind": a.kind, "arch": a.arch,
           "servers": "torch_py with the identity models; torch_ts in a server of its own"}
    want = None
    if meta is not None:
        with open(meta["output_bin"], "rb") as f:
            ref = f.read()
        want = struct.unpack("<%df" % (len(ref) // 4), ref)
    body, hlen, raw = identity_body(work)
    conc = [int(c) for c in a.identity_concurrency.split(",")]
    server = Vramd(a.vramd, [id_repo, repo], a.server_log, backends, ["--exit-on-error"])
    try:
        # --identity-rounds N: the round N times in this server, back to back; the verdict is
        # on the median of the rounds' ratios at each c (each round's own figures printed too),
        # since the machine's speed drifts by more than the pairing within a round removes
        # (run 18 on the H200: 0.462 and 0.535 at c=16 in two rounds of one server).
        rounds = [identity_round(a, server, body, hlen, raw, conc)
                  for _ in range(max(1, a.identity_rounds))]
        ident = next((r for r in rounds if "error" in r), rounds[0])
        if len(rounds) > 1 and "error" not in ident:
            ident = dict(rounds[0])
            ident["rounds"] = rounds
            for key in [k for k in rounds[0] if k.startswith("ratio")]:
                ident[key] = [statistics.median(r[key][i] for r in rounds)
                              for i in range(len(conc))]
            for i, r in enumerate(rounds):
                for c, x in zip(conc, r["ratio"]):
                    figure(f"python_identity_vs_builtin_round{i + 1}_c{c}", x, "ratio")
        if "error" in ident:
            ok &= verdict(False, f"identity series failed: {ident['error']}")
        else:
            for c, r in zip(conc, ident["ratio"]):
                figure(f"python_identity_vs_builtin_c{c}", r, "ratio")
                ok &= verdict(r >= a.identity_target,
                              f"python identity at c={c}: {r:.3f} of the built-in identity "
                              f"(>= {a.identity_target})"
                              + (f", median of {len(rounds)} rounds" if len(rounds) > 1 else ""))
            for c, r in zip(conc, ident["ratio_one_instance"]):
                figure(f"python_identity_one_instance_vs_builtin_c{c}", r, "ratio")
            for n in a.identity_extra_instances:
                for c, r in zip(conc, ident[f"ratio_{n}_instances"]):
                    figure(f"python_identity_{n}_instances_vs_builtin_c{c}", r, "ratio")
            for mode in a.identity_hosting:
                for c, r in zip(conc, ident[f"ratio_{mode}"]):
                    figure(f"python_identity_{mode}_vs_builtin_c{c}", r, "ratio")
            for key in ("ratio_batched", "ratio_batched_vs_builtin"):
                for c, r in zip(conc, ident.get(key, [])):
                    figure(f"python_identity_{key[6:]}_c{c}", r, "ratio")
        result["identity"] = ident
        update_json(a.out, "python_throughput", result)

        if meta is not None:
            tor["python_rps"] = None
            try:
                server.ready("torch_py", timeout=300)
                check_binary(server.port, "torch_py", meta["request_bin"], meta["header_length"],
                             want_floats=want)
                rows_q = series(a, server, "torch_py", meta["request_bin"], meta["header_length"], tc)
                tor["python_rps"] = [r["rps"] for r in rows_q]
            except Exception as e:  # noqa: BLE001
                tor["error"] = str(e)[:2000]
    finally:
        code = server.stop()
        log(f"vramd exit code {code}")
    for name, variant_repo, params in torch_variants:
        entry = {"parameters": params}
        tor.setdefault("variants", []).append(entry)
        try:
            vs = Vramd(a.vramd, [variant_repo], a.server_log, backends, ["--exit-on-error"])
            try:
                vs.ready(name, timeout=300)
                check_binary(vs.port, name, meta["request_bin"], meta["header_length"],
                             want_floats=want)
                rows_v = series(a, vs, name, meta["request_bin"], meta["header_length"], tc)
                entry["python_rps"] = [r["rps"] for r in rows_v]
            finally:
                vs.stop()
        except Exception as e:  # noqa: BLE001
            entry["error"] = str(e)[:2000]
    # Variants: the identity round again, in a server started with other environment settings
    # (e.g. VRAMD_INSTANCE_IDLE_SPIN_US=50), each reported as its own figures, never the
    # headline's.
    for variant in a.identity_variant:
        env = dict(kv.split("=", 1) for kv in variant.split(","))
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            vs = Vramd(a.vramd, [id_repo], a.server_log, backends, ["--exit-on-error"])
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        try:
            vi = identity_round(a, vs, body, hlen, raw, conc)
        finally:
            vs.stop()
        vi["env"] = env
        result.setdefault("identity_variants", []).append(vi)
        tag = "_".join(f"{k}_{v}" for k, v in env.items()).lower()
        for key in ["ratio", "ratio_one_instance"] + [
                f"ratio_{n}_instances" for n in a.identity_extra_instances]:
            for c, r in zip(conc, vi.get(key, [])):
                figure(f"python_identity_{tag}_{key}_c{c}", r, "ratio")
        update_json(a.out, "python_throughput", result)
    if meta is not None:
        ts = Vramd(a.vramd, [ts_repo], a.server_log, backends, ["--exit-on-error"])
        try:
            ts.ready("torch_ts", timeout=300)
            check_binary(ts.port, "torch_ts", meta["request_bin"], meta["header_length"],
                         want_floats=want)
            rows_t = series(a, ts, "torch_ts", meta["request_bin"], meta["header_length"], tc)
            tor["torchscript_rps"] = [r["rps"] for r in rows_t]
        except Exception as e:  # noqa: BLE001
            tor["torchscript_error"] = str(e)[:2000]
        finally:
            ts.stop()
        if tor.get("python_rps") and tor.get("torchscript_rps"):
            ratio = max(tor["python_rps"]) / max(tor["torchscript_rps"])
            tor["ratio_at_saturation"] = ratio
            figure("python_torch_vs_torchscript_saturation", ratio, "ratio")
            ok &= verdict(ratio >= a.torch_target,
                          f"torch model.py at saturation: {ratio:.3f} of the TorchScript model "
                          f"through the pytorch backend (>= {a.torch_target})")
        else:
            ok &= verdict(False, f"torch series failed: {tor.get('error') or tor.get('torchscript_error')}")
        for entry in tor.get("variants", []):
            if not (entry.get("python_rps") and tor.get("torchscript_rps")):
                continue
            ratio = max(entry["python_rps"]) / max(tor["torchscript_rps"])
            entry["ratio_at_saturation"] = ratio
            tag = "_".join(f"{k}_{v}" for k, v in entry["parameters"].items()).lower()
            # Reported, not judged: the default (above) is what the target is about.
            figure(f"python_torch_{tag}_vs_torchscript_saturation", ratio, "ratio")
        result["torch"] = tor
    result["ok"] = bool(ok)
    update_json(a.out, "python_throughput", result)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
