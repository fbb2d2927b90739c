"""The python backend's GIL hand-over between instance threads (src/backends/python/gil_turn.h)
with its spin forced on, as it is by default on machines of 8 or more hardware threads (CI's 2
cores have it off, so without this test CI would never run it).

Two models in one server with VRAMD_PYTHON_GIL_SPIN_US=200: `turn_add` (3 instances, a short
execute: the spin's case) and `turn_sleep` (2 instances whose execute releases the GIL in
time.sleep while the backend's word still says it is held: the "holder past the budget" case,
where a waiting thread must fall back to CPython's wait). 8 clients send 1,600 requests to both
at once; every answer must be its own request's, nothing may hang, and the server must stay up
and count every request.
"""

import concurrent.futures
import json
import time

import numpy as np
import pytest

from e2e_helpers import PYTHON_BACKEND_DIR, skip_module_without_python_backend
from v2client import Input

skip_module_without_python_backend()

CONFIG = '''name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
instance_group [ {{ kind: KIND_CPU count: {count} }} ]
'''

MODEL = '''import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if {sleep}:
                time.sleep({sleep})  # releases the GIL inside an execute
            out = pb_utils.Tensor("OUT", (x + {add}).astype(np.int32))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
'''

MODELS = {"turn_add": dict(count=3, sleep=0, add=1),
          "turn_sleep": dict(count=2, sleep=0.001, add=1000)}


@pytest.fixture(scope="module")
def server(start_server, tmp_path_factory):
    repo = tmp_path_factory.mktemp("gil-turn") / "models"
    for name, spec in MODELS.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(CONFIG.format(name=name, count=spec["count"]))
        (repo / name / "1" / "model.py").write_text(
            MODEL.format(sleep=spec["sleep"], add=spec["add"]))
    mp = pytest.MonkeyPatch()
    mp.setenv("VRAMD_PYTHON_GIL_SPIN_US", "200")  # inherited by the server process
    try:
        s = start_server([repo], ["--backend-directory", str(PYTHON_BACKEND_DIR),
                                  "--http-thread-count", "8"], name="gil-turn")
    finally:
        mp.undo()
    yield s


def test_answers_under_contention_with_the_spin_on(server):
    threads, per_thread = 8, 200

    def worker(t):
        client = server.client()
        wrong = []
        try:
            for i in range(per_thread):
                v = t * per_thread + i
                model = "turn_sleep" if i % 4 == 0 else "turn_add"
                got = client.infer(model, [Input("IN", "INT32", np.array([v], dtype=np.int32), binary=True)])
                want = v + MODELS[model]["add"]
                if got.outputs["OUT"].reshape(-1).tolist() != [want]:
                    wrong.append((model, v, got.outputs["OUT"].tolist()))
        finally:
            client.close()
        return wrong

    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        wrong = [w for ws in pool.map(worker, range(threads)) for w in ws]
    elapsed = time.monotonic() - t0
    assert not wrong, wrong[:5]
    # 400 sleeps of 1 ms over 2 instances and 1,200 short requests: a hang or a lost GIL would
    # show as a timeout long before this.
    assert elapsed < 60, "1,600 requests took %.1f s" % elapsed
    assert server.alive()
    client = server.client()
    try:
        for model, n in (("turn_add", threads * per_thread * 3 // 4),
                         ("turn_sleep", threads * per_thread // 4)):
            r = client.get("/v2/models/%s/stats" % model)
            assert r.status == 200, r.body[:300]
            stats = json.loads(r.body)["model_stats"][0]["inference_stats"]
            assert stats["success"]["count"] == n, (model, stats)
            assert stats["fail"]["count"] == 0, (model, stats)
    finally:
        client.close()
