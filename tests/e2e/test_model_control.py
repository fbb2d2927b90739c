"""Model control end to end: --model-control-mode explicit with --load-model, POST
/v2/repository/models/{m}/load and /unload, the index after unload, `vramctl load|unload`, and
mode none refusing both."""

import json
import shutil
import subprocess

import numpy as np
import pytest

from e2e_helpers import FIXTURE_REPO, VRAMD_BIN
from v2client import Input

VRAMCTL_BIN = VRAMD_BIN.parent / "vramctl"
MODELS = ("identity_fp32", "identity_int32")


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    for m in MODELS:
        shutil.copytree(FIXTURE_REPO / m, root / m)
    return root


def index(c):
    r = c.post("/v2/repository/index", b"{}", {"Content-Type": "application/json"})
    assert r.status == 200, r
    return {row["name"]: row for row in r.json()}


def infer_int32(c):
    data = np.array([1, 2, 3], dtype=np.int32)
    out = c.infer("identity_int32", [Input("INPUT0", "INT32", data)])
    np.testing.assert_array_equal(out.outputs["OUTPUT0"], data)


def vramctl(server, *args):
    return subprocess.run([str(VRAMCTL_BIN), *args, "--url",
                           "http://%s:%d" % (server.host, server.port)],
                          capture_output=True, text=True, timeout=60)


def test_explicit_mode_loads_and_unloads(start_server, repo):
    s = start_server([repo], ["--model-control-mode", "explicit", "--load-model", "identity_fp32"],
                     name="explicit", ready_models=["identity_fp32"])
    c = s.client()
    assert c.get("/v2/models/identity_fp32/ready").status == 200
    assert c.get("/v2/models/identity_int32/ready").status in (400, 404)
    assert c.get("/v2/health/ready").status == 200  # models not loaded do not count

    r = c.post("/v2/repository/models/identity_int32/load")
    assert r.status == 200, r
    assert r.body == b""
    assert c.get("/v2/models/identity_int32/ready").status == 200
    infer_int32(c)

    r = c.post("/v2/repository/models/identity_int32/unload", b"{}")
    assert r.status == 200, r
    assert c.get("/v2/models/identity_int32/ready").status in (400, 404)
    row = index(c)["identity_int32"]
    assert row["state"] == "UNAVAILABLE" and row["reason"] == "unloaded", row
    assert index(c)["identity_fp32"]["state"] == "READY"
    assert c.get("/v2/health/ready").status == 200

    # Unloading what is not loaded is a success, as in Triton.
    assert c.post("/v2/repository/models/identity_int32/unload").status == 200
    # Unknown model: 404 naming it.
    r = c.post("/v2/repository/models/no_such_model/load")
    assert r.status == 404, r
    assert "no_such_model" in r.error_message()
    # An override leaves out what the model's files (here its config.pbtxt) tell, as Triton's
    # auto-complete fills it in: an empty one loads the model as it is.
    body = json.dumps({"parameters": {"config": "{}"}}).encode()
    assert c.post("/v2/repository/models/identity_int32/load", body).status == 200
    infer_int32(c)
    # It is validated as a config.pbtxt would be.
    body = json.dumps({"parameters": {"config": '{"backend": "no_such_backend"}'}}).encode()
    r = c.post("/v2/repository/models/identity_int32/load", body)
    assert r.status in (400, 404), r
    assert "backend 'no_such_backend'" in r.error_message()
    infer_int32(c)  # the serving version serves on
    # Reloading a loaded model works and it keeps serving.
    assert c.post("/v2/repository/models/identity_fp32/load").status == 200
    assert c.get("/v2/models/identity_fp32/ready").status == 200


def test_explicit_mode_reports_a_broken_reload_and_keeps_serving(start_server, repo):
    s = start_server([repo], ["--model-control-mode", "explicit", "--load-model", "*"],
                     name="explicit_star", ready_models=list(MODELS))
    c = s.client()
    (repo / "identity_int32" / "config.pbtxt").write_text('backend: "identity"\ninput [ {\n')
    r = c.post("/v2/repository/models/identity_int32/load")
    assert r.status == 400, r
    assert "config.pbtxt:" in r.error_message()
    infer_int32(c)  # the old version still serves


def test_none_mode_refuses_load_and_unload(start_server, repo):
    s = start_server([repo], [], name="none_mode", ready_models=list(MODELS))
    c = s.client()
    for action in ("load", "unload"):
        r = c.post("/v2/repository/models/identity_int32/%s" % action)
        assert r.status == 400, r
        assert "not allowed" in r.error_message()
    assert c.get("/v2/models/identity_int32/ready").status == 200
    out = vramctl(s, "unload", "identity_int32")
    assert out.returncode == 1
    assert "not allowed" in out.stderr


def test_vramctl_load_and_unload(start_server, repo):
    s = start_server([repo], ["--model-control-mode", "explicit"], name="vramctl_control",
                     ready_models=[])
    c = s.client()
    out = vramctl(s, "load", "identity_int32")
    assert out.returncode == 0, out.stderr
    assert c.get("/v2/models/identity_int32/ready").status == 200
    infer_int32(c)
    out = vramctl(s, "unload", "identity_int32")
    assert out.returncode == 0, out.stderr
    assert c.get("/v2/models/identity_int32/ready").status in (400, 404)
    out = vramctl(s, "load", "no_such_model")
    assert out.returncode == 1
    assert "no_such_model" in out.stderr


SEQUENCE_CONFIG = '''name: "seq"
backend: "identity"
max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  control_input [ { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_FP32 } ] } ]
}
'''


def test_a_broken_sequence_batching_fails_to_load_naming_the_field(start_server, tmp_path):
    # Sequence batching is served (tests/e2e/test_sequence.py); what it cannot serve fails to
    # load with the reason, from a config.pbtxt and from an override alike.
    repo = tmp_path / "repo"
    (repo / "seq" / "1").mkdir(parents=True)
    (repo / "seq" / "config.pbtxt").write_text(SEQUENCE_CONFIG)
    shutil.copytree(FIXTURE_REPO / "identity_int32", repo / "identity_int32")
    s = start_server([repo], ["--model-control-mode", "explicit"], name="seq_refused",
                     ready_models=[])
    c = s.client()
    r = c.post("/v2/repository/models/seq/load")
    assert r.status == 400, r
    msg = r.error_message()
    assert msg.startswith("failed to load 'seq': %s: " % (repo / "seq" / "config.pbtxt")), msg
    assert msg.endswith("model 'seq': sequence_batching: control_input 'CORRID': "
                        "CONTROL_SEQUENCE_CORRID data_type is TYPE_FP32; it must be TYPE_UINT64, "
                        "TYPE_INT64, TYPE_UINT32, TYPE_INT32 or TYPE_STRING"), msg
    assert index(c)["seq"]["state"] == "UNAVAILABLE"
    # Through a config override the same, whichever spelling of the field.
    for key in ("sequence_batching", "sequenceBatching"):
        override = {"backend": "identity", key: {"iterative_sequence": True}}
        body = json.dumps({"parameters": {"config": json.dumps(override)}}).encode()
        r = c.post("/v2/repository/models/identity_int32/load", body)
        assert r.status == 400, r
        assert "iterative_sequence is not served" in r.error_message(), r.error_message()
        assert r.error_message().count("failed to load") == 1, r.error_message()
    # An override that is not JSON, or not a ModelConfig, fails in the same form as a load.
    for text, why in (("{not json", "not valid JSON"), ('{"max_batch_size": "x"}', "max_batch_size")):
        body = json.dumps({"parameters": {"config": text}}).encode()
        r = c.post("/v2/repository/models/identity_int32/load", body)
        assert r.status == 400, r
        assert r.error_message().startswith("failed to load 'identity_int32': parameter 'config': ")
        assert why in r.error_message() and r.error_message().count("failed to load") == 1
    # Other fields vramd does not act on are still skipped with a warning.
    body = json.dumps({"parameters": {"config": json.dumps(
        {"backend": "identity", "optimization": {"cuda": {"graphs": True}},
         "input": [{"name": "INPUT0", "data_type": "TYPE_INT32", "dims": [-1]}],
         "output": [{"name": "OUTPUT0", "data_type": "TYPE_INT32", "dims": [-1]}]})}}).encode()
    r = c.post("/v2/repository/models/identity_int32/load", body)
    assert r.status == 200, r
