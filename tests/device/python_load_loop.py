"""Starts vramd again and again on the torch model.py of bench/python/throughput_compare.py and
counts the starts that crash, keeping each crash's report (src/core/crash_report.h) and Python's
tracebacks (PYTHONFAULTHANDLER=1).

Why: on the H200 the server exited with SIGSEGV while loading that model in 2 of 3 benchmark runs
(2026-12-02), with nothing but the exit status to go on; there is no gdb on the GPU machine.

    python3 tests/device/python_load_loop.py --vramd <vramd> --backend-dir <dir> [--starts 6]
        [--instances 8] [--stream] [--with-identity] [--work DIR] [--out crashes.txt]

Each start loads torch_py (--instances GPU instances; with --stream also torch_py_stream, the
same model with a CUDA stream per instance, loading beside it; with --with-identity the python
identity models of throughput_compare.py too, as in the server that crashed in run 6), waits
until they are ready, checks one answer against make_model.py's reference and stops the server,
which must exit 0. Prints PASS when no start crashed, FAIL with the first report otherwise.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
# bench/torch has a throughput_compare.py of its own: bench/python goes first.
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench", "torch"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench", "python"))
from common import Vramd, figure, log, verdict  # noqa: E402
from throughput_compare import (IDENTITY_CONFIG, IDENTITY_MODEL, TORCH_MODEL,  # noqa: E402
                                check_binary, merged_backend_dir, write)


def make_repo(a, work):
    subprocess.run([a.python, os.path.join(HERE, "..", "..", "bench", "torch", "make_model.py"),
                    work, "--name", "torch_ts", "--arch", "resnet", "--image", "112",
                    "--width", "64", "--instances", str(a.instances), "--kind", "gpu",
                    "--max-batch-size", "0"], check=True, stdout=subprocess.DEVNULL, timeout=300)
    with open(os.path.join(work, "meta.json")) as f:
        meta = json.load(f)
    model_pt = os.path.join(work, "repo", "torch_ts", "1", "model.pt")
    repo = os.path.join(work, "repo_py")
    config = (meta["config"].replace('name: "torch_ts"', 'name: "torch_py"')
              .replace('platform: "pytorch_libtorch"', 'backend: "python"')
              + 'parameters { key: "torchscript" value { string_value: "%s" } }\n' % model_pt)
    write(os.path.join(repo, "torch_py", "config.pbtxt"), config)
    write(os.path.join(repo, "torch_py", "1", "model.py"), TORCH_MODEL)
    models = ["torch_py"]
    if a.stream:
        write(os.path.join(repo, "torch_py_stream", "config.pbtxt"),
              config.replace('name: "torch_py"', 'name: "torch_py_stream"')
              + 'parameters { key: "VRAMD_PYTHON_TORCH_INSTANCE_STREAM" '
                'value { string_value: "on" } }\n')
        write(os.path.join(repo, "torch_py_stream", "1", "model.py"), TORCH_MODEL)
        models.append("torch_py_stream")
    if a.with_identity:
        # As throughput_compare's first server: python identity models loading beside torch_py
        # (the server that crashed at start-up in run 6 of 2026-12-02).
        for name, count in (("identity_python", 2), ("identity_python_1", 1)):
            write(os.path.join(repo, name, "config.pbtxt"),
                  IDENTITY_CONFIG.format(name=name, backend="python", count=count))
            write(os.path.join(repo, name, "1", "model.py"), IDENTITY_MODEL)
            models.append(name)
    with open(meta["output_bin"], "rb") as f:
        ref = f.read()
    import struct
    want = struct.unpack("<%df" % (len(ref) // 4), ref)
    return repo, models, meta, want


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vramd", required=True)
    ap.add_argument("--backend-dir", action="append", required=True)
    ap.add_argument("--starts", type=int, default=6)
    ap.add_argument("--instances", type=int, default=8)
    ap.add_argument("--stream", action="store_true")
    ap.add_argument("--with-identity", action="store_true",
                    help="python identity models in the same repository, loading beside")
    ap.add_argument("--work", default=None)
    ap.add_argument("--out", default=None, help="where to write every crash's log")
    ap.add_argument("--python", default=sys.executable)
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="vramd-load-loop-")
    os.makedirs(work, exist_ok=True)
    backends = merged_backend_dir(a.backend_dir, work)
    repo, models, meta, want = make_repo(a, work)
    os.environ["PYTHONFAULTHANDLER"] = "1"  # the server's interpreter inherits it
    crashes, reports = 0, []
    for i in range(a.starts):
        log_path = os.path.join(work, f"start{i}.log")
        try:
            server = Vramd(a.vramd, [repo], log_path, backends, ["--exit-on-error"], timeout=300)
        except RuntimeError as e:
            crashes += 1
            reports.append(f"# start {i}: did not come up\n{e}\n")
            continue
        try:
            for m in models:
                server.ready(m, timeout=300)
                if m.startswith("torch_py"):
                    check_binary(server.port, m, meta["request_bin"], meta["header_length"],
                                 want_floats=want)
            code = server.stop()
            if code != 0:
                raise RuntimeError(f"exit {code} at stop")
            log(f"start {i}: {', '.join(models)} ready and answering; clean exit")
        except RuntimeError as e:
            crashes += 1
            if server.proc.poll() is None:
                server.stop()
            with open(log_path, errors="replace") as f:
                reports.append(f"# start {i}: {str(e)[:300]}\n{f.read()[-20000:]}\n")
    if a.out:
        with open(a.out, "w") as f:
            f.write("\n".join(reports) or "no crash\n")
    figure("python_torch_load_crashes", crashes, f"of {a.starts} starts")
    ok = verdict(crashes == 0, f"python torch model.py load loop: {crashes} of {a.starts} starts "
                               f"crashed ({', '.join(models)}, {a.instances} instances each)")
    if reports:
        print(reports[0][-6000:])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
