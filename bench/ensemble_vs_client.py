#!/usr/bin/env python3
"""Issue 16's ensemble target: an ensemble of identity -> add_sub -> identity against the same
three calls made by a client in sequence, one server, one run.

  python3 bench/ensemble_vs_client.py --vramd build/src/cli/vramd --chain-load build/bench/chain_load
      [--concurrency 1,8] [--duration 5] [--warmup 1] [--out results.json]

One vramd (started without --exit-on-error, so that the step models are served whatever becomes
of the ensemble) serves a scratch repository:
  ens_identity_in, ens_identity_out  the built-in identity backend, FP32 [16], max_batch_size 8
  ens_add_sub                        the built-in add_sub backend, FP32 [16], max_batch_size 8,
                                     2 KIND_CPU instances (the quick start's add_sub)
  ens_chain                          platform "ensemble": ens_identity_in on INPUT0, ens_add_sub on
                                     that copy and INPUT1, ens_identity_out on the sum; outputs the
                                     sum (OUTPUT0) and the difference (OUTPUT1)
Then, at each concurrency, closed loop, measured after a warm-up (chain_load, a thread and a
keep-alive connection per client, binary tensor data both ways):
  1. client: three requests in sequence on one connection, each built from the previous
     answer's bytes (one iteration counts as one request);
  2. ensemble: one request to ens_chain.
Each chain_load run first checks one answer (OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 -
INPUT1). Target: at c=1, the ensemble's req/s >= 1.5x the client's; other concurrencies are
printed, not judged. Prints FIGURE lines (ensemble_vs_client_c<c>, the ratio), PASS/FAIL
verdicts, and one JSON document (--out, key "ensemble_vs_client"). Where ens_chain does not load
(vramd before ensemble support refuses its config), the client series is still measured and
the run fails with "FAIL ensemble model did not load: <the server's reason>".
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "torch"))
from common import Vramd, call, figure, log, spawn, stop, update_json, verdict  # noqa: E402
import common  # noqa: E402
from grpc_vs_http import cores, with_cpu  # noqa: E402

TARGET = 1.5  # the ensemble's req/s over the client's, at c=1
ENSEMBLE = "ens_chain"
STEPS = ["ens_identity_in", "ens_add_sub", "ens_identity_out"]

IDENTITY = '''name: "{name}"
backend: "identity"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] }} ]
'''

ADD_SUB = '''name: "ens_add_sub"
backend: "add_sub"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] }
]
instance_group [ { count: 2 kind: KIND_CPU } ]
'''

CHAIN = '''name: "ens_chain"
platform: "ensemble"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]
ensemble_scheduling { step [
  { model_name: "ens_identity_in" model_version: -1 input_map { key: "INPUT0" value: "INPUT0" } output_map { key: "OUTPUT0" value: "in_copy" } },
  { model_name: "ens_add_sub" model_version: -1 input_map { key: "INPUT0" value: "in_copy" } input_map { key: "INPUT1" value: "INPUT1" } output_map { key: "OUTPUT0" value: "sum" } output_map { key: "OUTPUT1" value: "OUTPUT1" } },
  { model_name: "ens_identity_out" model_version: -1 input_map { key: "INPUT0" value: "sum" } output_map { key: "OUTPUT0" value: "OUTPUT0" } }
] }
'''


def write_repository(repo):
    configs = {"ens_identity_in": IDENTITY.format(name="ens_identity_in"),
               "ens_identity_out": IDENTITY.format(name="ens_identity_out"),
               "ens_add_sub": ADD_SUB, ENSEMBLE: CHAIN}
    for name, text in configs.items():
        os.makedirs(os.path.join(repo, name, "1"))
        with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
            f.write(text)


def model_state(server, name, timeout=120.0):
    """Waits until the model is ready (returns None) or has failed to load (returns the
    server's reason); after timeout, returns what it last saw."""
    deadline = time.time() + timeout
    last = "not listed in the repository index"
    while time.time() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError("vramd exited:\n" + server.tail())
        try:
            status, _, _ = call(server.port, "GET", f"/v2/models/{name}/ready", timeout=5)
            if status == 200:
                return None
            status, body, _ = call(server.port, "POST", "/v2/repository/index", body=b"{}",
                                   timeout=5)
            if status == 200:
                for entry in json.loads(body):
                    if entry.get("name") != name:
                        continue
                    state, reason = entry.get("state", ""), entry.get("reason", "")
                    last = f"state {state}" + (f": {reason}" if reason else "")
                    if state == "UNAVAILABLE" and reason:
                        return reason
        except (OSError, ValueError):
            pass
        time.sleep(0.25)
    return f"not ready in {timeout:.0f}s ({last})"


def chain_load(a, port, mode, c):
    """One chain_load run; its JSON result (a dict), or raises RuntimeError with its stderr."""
    cmd = [a.chain_load, "--mode", mode, "--port", str(port), "--concurrency", str(c),
           "--duration", str(a.duration), "--warmup", str(a.warmup), "--timeout", "60"]
    cmd += ["--model", ENSEMBLE] if mode == "ensemble" else [
        "--first", STEPS[0], "--add-sub", STEPS[1], "--last", STEPS[2]]
    p = spawn(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = p.communicate(timeout=a.duration + a.warmup + 90)
    except subprocess.TimeoutExpired:
        stop(p)
        raise RuntimeError(f"chain_load --mode {mode} c={c} timed out")
    finally:
        if p in common._children:
            common._children.remove(p)
    lines = [l for l in out.decode().splitlines() if l.startswith("{")]
    if not lines:
        raise RuntimeError(f"chain_load --mode {mode} c={c} gave no result (exit {p.returncode}): "
                           + err.decode(errors="replace").strip()[-2000:])
    res = json.loads(lines[-1])
    if err.strip():
        res["stderr"] = err.decode(errors="replace")[-1000:]
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vramd", required=True)
    ap.add_argument("--chain-load", required=True)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--concurrency", default="1,8")
    ap.add_argument("--out", default=None)
    ap.add_argument("--server-arg", action="append", default=[],
                    help="one more argument for vramd (repeat)")
    a = ap.parse_args()
    concurrencies = [int(x) for x in a.concurrency.split(",") if x]
    work = tempfile.mkdtemp(prefix="vramd-ensemble-bench-")
    repo = os.path.join(work, "repo")
    write_repository(repo)
    log_path = os.path.join(work, "server.log")
    # No --exit-on-error: a server without ensemble support refuses ens_chain and must still
    # serve the three step models for the client series.
    server = Vramd(a.vramd, [repo], log_path, args=a.server_arg)
    result = {"machine_cores": os.cpu_count(), "target_ratio_c1": TARGET, "concurrency": [],
              "client_rps": [], "ensemble_rps": [], "ratio": [], "client_errors": [],
              "ensemble_errors": [], "client_p50_ms": [], "ensemble_p50_ms": [],
              "client_p99_ms": [], "ensemble_p99_ms": [], "client_server_cores": [],
              "ensemble_server_cores": []}
    ok = True
    try:
        for m in STEPS:
            reason = model_state(server, m)
            if reason is not None:
                raise RuntimeError(f"step model {m} did not load: {reason}")
        ensemble_error = model_state(server, ENSEMBLE)
        result["ensemble_loaded"] = ensemble_error is None
        result["ensemble_error"] = ensemble_error
        if ensemble_error is not None:
            log(f"{ENSEMBLE} did not load ({ensemble_error}); measuring the client series only")
        for c in concurrencies:
            result["concurrency"].append(c)
            try:
                cl = with_cpu(server.pid, lambda: chain_load(a, server.port, "client", c))
            except RuntimeError as e:
                cl = None
                ok &= verdict(False, f"client series c={c}: {e}")
            en = None
            if ensemble_error is None:
                try:
                    en = with_cpu(server.pid, lambda: chain_load(a, server.port, "ensemble", c))
                except RuntimeError as e:
                    ok &= verdict(False, f"ensemble series c={c}: {e}")
            for key, r in (("client", cl), ("ensemble", en)):
                result[f"{key}_rps"].append(r["rps"] if r else None)
                result[f"{key}_errors"].append(r["errors"] if r else None)
                result[f"{key}_p50_ms"].append(r["p50_ms"] if r else None)
                result[f"{key}_p99_ms"].append(r["p99_ms"] if r else None)
                result[f"{key}_server_cores"].append(r["server_cores"] if r else None)
            ratio = en["rps"] / cl["rps"] if en and cl and cl["rps"] else None
            result["ratio"].append(ratio)
            text = (f"c={c}: client (3 calls) "
                    + (f"{cl['rps']:.0f} req/s, p50 {cl['p50_ms']:.3f} ms, errors {cl['errors']}, "
                       f"{cores(cl)}" if cl else "failed")
                    + "; ensemble "
                    + (f"{en['rps']:.0f} req/s, p50 {en['p50_ms']:.3f} ms, errors {en['errors']}, "
                       f"{cores(en)}" if en else "not measured"))
            log(text)
            if ratio is None:
                continue
            figure(f"ensemble_vs_client_c{c}", ratio, "ratio")
            if c == 1:
                ok &= verdict(ratio >= TARGET and en["errors"] == 0 and cl["errors"] == 0,
                              f"ensemble at c=1: {ratio:.3f}x the client's req/s (>= {TARGET}; "
                              f"errors {en['errors']} / {cl['errors']})")
            else:
                print(f"ensemble at c={c}: {ratio:.3f}x the client's req/s (not judged)",
                      flush=True)
        if ensemble_error is not None:
            ok &= verdict(False, f"ensemble model did not load: {ensemble_error}")
    except RuntimeError as e:  # a step model that did not load, a server that died
        ok = verdict(False, str(e))
    finally:
        server.stop()
    result["ok"] = bool(ok)
    print(json.dumps(result))
    update_json(a.out, "ensemble_vs_client", result)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
