"""The VMM pool and sleeping in place, as CI can see them (docs/memory.md, "The VMM pool" and
"Sleeping in place"; issue 17, items 4 and 5).

With --device-pool=vmm the CPU's pool runs the VMM policy over mmap (a page given back has no
access, so memory used after it went back crashes the server instead of passing): a python
model with numpy weights (host memory in the ledger, numpy_ledger.h) and an mlp model serve from
it, the mlp model sleeps and wakes with answers unchanged, and trims give whole free granules
back. Sleeping in place gives back GPU memory only, so on a machine without a GPU a python model
cannot sleep, and says why. The in-place round trip of a torch model.py on a GPU (NVML's drop,
the wake's time, answers bit for bit) is tests/device/sleep_in_place_gpu_check.py, run by
scripts/device/run.sh (STEPS=python PYTHON_PARTS=inplace)."""

import subprocess

import numpy as np
import pytest

from e2e_helpers import (PYTHON_BACKEND_DIR, VRAMD_BIN, index_rows, safetensors_bytes,
                         skip_module_without_python_backend, wait_for)
from v2client import InferResult, Input

skip_module_without_python_backend()

ROWS, COLS = 2048, 1024  # float32 weights of 8 MiB
WEIGHT_BYTES = ROWS * COLS * 4
GRANULE = 2 << 20

CONFIG = '''name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ 4, {rows} ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ 4, {cols} ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
{extra}
'''

MODEL = '''import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        rng = np.random.default_rng({seed})
        self.w = rng.standard_normal(({rows}, {cols})).astype(np.float32)
        self.b = rng.standard_normal({cols}).astype(np.float32)

    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            y = (x @ self.w + self.b).astype(np.float32)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", y)]))
        return out
'''

X = np.random.default_rng(5).standard_normal((4, ROWS)).astype(np.float32)


def add_model(repo, name, seed, extra=""):
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(
        CONFIG.format(name=name, rows=ROWS, cols=COLS, extra=extra))
    (repo / name / "1" / "model.py").write_text(MODEL.format(seed=seed, rows=ROWS, cols=COLS))


def parameter(key, value):
    return 'parameters { key: "%s" value { string_value: "%s" } }' % (key, value)


def infer(client, model):
    r = client.infer_raw(model, [Input("X", "FP32", X, binary=True)])
    assert r.status == 200, "infer %s: HTTP %d %r" % (model, r.status, r.body[:500])
    return InferResult(r).outputs["Y"]


def post(client, model, action, body=b""):
    return client.post("/v2/repository/models/%s/%s" % (model, action), body,
                       {"Content-Type": "application/json"})


def cpu_pool(client):
    pools = [p for p in client.get("/v2/memory").json()["pools"] if p["device"] == "cpu"]
    assert len(pools) == 1, pools
    return pools[0]


def sleep_state(client, model):
    rows = index_rows(client, model)
    assert len(rows) == 1, rows
    return rows[0]["sleep"]


MLP_WIDTH = 512


def add_mlp(repo, name):
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text("""name: "%s"
backend: "mlp"
max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ %d ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ %d ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
""" % (name, MLP_WIDTH, MLP_WIDTH))
    rng = np.random.default_rng(4)
    (repo / name / "1" / "model.safetensors").write_bytes(safetensors_bytes([
        ("layers.0.weight", rng.standard_normal((MLP_WIDTH, MLP_WIDTH)).astype(np.float32)),
        ("layers.0.bias", rng.standard_normal(MLP_WIDTH).astype(np.float32))]))


def mlp_infer(client, x):
    r = client.infer_raw("mlp", [Input("INPUT0", "FP32", x, binary=True)])
    assert r.status == 200, r.body[:300]
    return InferResult(r).outputs["OUTPUT0"]


@pytest.fixture(scope="module")
def vmm_server(start_server, tmp_path_factory):
    repo = tmp_path_factory.mktemp("vmm-repo")
    add_model(repo, "weights", seed=1)
    add_mlp(repo, "mlp")
    bad = tmp_path_factory.mktemp("vmm-bad-repo")
    add_model(bad, "napper", seed=2, extra=parameter("vramd.sleep_after_idle", "1s"))
    return start_server([repo, bad], ["--backend-directory", str(PYTHON_BACKEND_DIR),
                                      "--device-pool", "vmm"],
                        name="vmm", ready_models=["weights", "mlp"])


def test_models_serve_from_the_vmm_pool(vmm_server):
    client = vmm_server.client()
    try:
        pool = cpu_pool(client)
        assert pool["kind"] == "vmm" and pool["decommit_granularity"] == GRANULE, pool
        expected = None
        for _ in range(20):
            y = infer(client, "weights")
            if expected is None:
                expected = y
                assert y.shape == (4, COLS)
            assert y.tobytes() == expected.tobytes()
        # numpy's float32 matmul, as the model computed it: the weights were read right.
        rng = np.random.default_rng(1)
        w = rng.standard_normal((ROWS, COLS)).astype(np.float32)
        b = rng.standard_normal(COLS).astype(np.float32)
        np.testing.assert_allclose(expected, X @ w + b, rtol=1e-4, atol=1e-3)
        x = np.random.default_rng(8).standard_normal((3, MLP_WIDTH)).astype(np.float32)
        before = mlp_infer(client, x)

        # The mlp backend's own sleep, on the VMM pool: its weights go, the pool is trimmed.
        r = post(client, "mlp", "sleep")
        assert r.status == 200, r.body
        assert sleep_state(client, "mlp") == "asleep"
        # The trim after a sleep gave back every whole free granule, in segments still in use
        # too (as holes): none is left cached.
        asleep = cpu_pool(client)
        assert asleep["remappable_free_bytes"] == 0, asleep
        assert mlp_infer(client, x).tobytes() == before.tobytes()  # a request wakes it
        assert sleep_state(client, "mlp") == "awake"
    finally:
        client.close()


def test_a_python_model_on_the_cpu_cannot_sleep_in_place_and_says_why(vmm_server):
    client = vmm_server.client()
    try:
        r = post(client, "weights", "sleep")
        assert r.status == 501, (r.status, r.body)
        assert b"sleeps in place" in r.body and b"no GPU instance" in r.body, r.body
        assert infer(client, "weights").shape == (4, COLS)
        # A config that asks for sleeping fails its load, saying why.
        rows = wait_for(lambda: [row for row in index_rows(client, "napper")
                                 if row.get("state") == "UNAVAILABLE"],
                        timeout=30, what="napper's load to fail")
        assert "no GPU instance" in rows[0].get("reason", ""), rows
    finally:
        client.close()


def test_an_unknown_device_pool_is_refused_at_start(tmp_path):
    done = subprocess.run([str(VRAMD_BIN), "serve", "--model-repository", str(tmp_path),
                           "--device-pool", "paged"], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert 'unknown device pool "paged"' in done.stderr + done.stdout
    assert '"caching" or "vmm"' in done.stderr + done.stdout
