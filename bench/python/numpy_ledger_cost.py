#!/usr/bin/env python3
"""What charging numpy's arrays to the ledger costs per allocation (numpy_ledger.h): one server,
three copies of a model.py whose execute times `count` np.empty(size) + free in a loop (the
time measured inside execute, so HTTP is left out): every array through the ledger
(VRAMD_PYTHON_LEDGER_NUMPY_MIN_BYTES "0"), the default (arrays under 512 bytes stay in malloc),
and VRAMD_PYTHON_LEDGER_NUMPY "off" (numpy's own allocator, with its small-block cache). Prints
the best of --rounds, in ns per allocation+free, for each size.

  numpy_ledger_cost.py --vramd BIN --backend-dir DIR [--sizes 16,256,4096,65536,1048576]
                       [--count 20000] [--rounds 5]
"""
import argparse
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "torch"))
from common import Vramd, call, log  # noqa: E402

CONFIG = '''name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "SIZE" data_type: TYPE_INT64 dims: [ 2 ] }} ]
output [ {{ name: "NS" data_type: TYPE_FP64 dims: [ 1 ] }} ]
parameters {{ key: "VRAMD_PYTHON_LEDGER_NUMPY" value: {{ string_value: "{ledger}" }} }}
{extra}'''

MODEL = '''import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            size, count = (int(v) for v in
                           pb_utils.get_input_tensor_by_name(request, "SIZE").as_numpy())
            empty = np.empty
            t0 = time.perf_counter_ns()
            for _ in range(count):
                empty(size, np.uint8)
            ns = (time.perf_counter_ns() - t0) / count
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("NS", np.array([ns], dtype=np.float64))]))
        return responses
'''


def measure(port, model, size, count):
    body = json.dumps({"inputs": [{"name": "SIZE", "datatype": "INT64", "shape": [2],
                                   "data": [size, count]}]})
    status, data, _ = call(port, "POST", "/v2/models/%s/infer" % model, body)
    if status != 200:
        raise RuntimeError("%s: HTTP %d %s" % (model, status, data[:300]))
    return json.loads(data)["outputs"][0]["data"][0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vramd", required=True)
    ap.add_argument("--backend-dir", required=True)
    ap.add_argument("--sizes", default="16,256,4096,65536,1048576")
    ap.add_argument("--count", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="vramd-numpy-ledger-")
    repo = os.path.join(work, "repo")
    models = (("alloc_all", "on", "0"), ("alloc_default", "on", None), ("alloc_plain", "off", None))
    for name, ledger, min_bytes in models:
        os.makedirs(os.path.join(repo, name, "1"))
        with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
            extra = ("" if min_bytes is None else
                     'parameters { key: "VRAMD_PYTHON_LEDGER_NUMPY_MIN_BYTES" '
                     'value: { string_value: "%s" } }\n' % min_bytes)
            f.write(CONFIG.format(name=name, ledger=ledger, extra=extra))
        with open(os.path.join(repo, name, "1", "model.py"), "w") as f:
            f.write(MODEL)
    server = Vramd(a.vramd, [repo], os.path.join(work, "vramd.log"), a.backend_dir)
    try:
        names = [m[0] for m in models]
        for m in names:
            server.ready(m)
        for size in (int(s) for s in a.sizes.split(",")):
            best = {}
            for m in names:
                measure(server.port, m, size, a.count)  # warm up
                best[m] = min(measure(server.port, m, size, a.count) for _ in range(a.rounds))
            print("size %8d B: every array in the ledger %5.0f ns, default %5.0f ns, numpy's "
                  "own %5.0f ns (per allocation+free)" % (
                      size, best["alloc_all"], best["alloc_default"], best["alloc_plain"]),
                  flush=True)
    finally:
        server.stop()
    log("log:", os.path.join(work, "vramd.log"))


if __name__ == "__main__":
    main()
