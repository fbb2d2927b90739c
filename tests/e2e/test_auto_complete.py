"""Auto-complete as Triton's default (issue 16, item 3), against the real binary: a config
without backend or platform takes it from the model's file; a model without config.pbtxt loads
where its backend tells the inputs and outputs (python's auto_complete_config) and otherwise
fails saying so; --disable-auto-complete-config and --strict-model-config=true turn it off; and
a load's config override fills what it leaves out as Triton's does, so Triton's
simple_http_model_control.py sequence (an override of only max_batch_size) works."""

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from e2e_helpers import FIXTURE_REPO, PYTHON_BACKEND_DIR, PYTHON_LIBRARY, SOURCE_DIR
from v2client import Input

PY_MODELS = SOURCE_DIR / "tests" / "e2e" / "python_readiness_models"
MAKE_MLP = SOURCE_DIR / "scripts" / "make_mlp_model.py"


def make_mlp(path, name):
    subprocess.run([sys.executable, str(MAKE_MLP), "model", str(path), "--inputs", "8",
                    "--hidden", "16", "--outputs", "4", "--name", name, "--kind", "cpu"],
                   check=True, stdout=subprocess.DEVNULL)


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    # An mlp whose config names no backend: model.safetensors says mlp.
    make_mlp(root / "mlp_nobackend", "mlp_nobackend")
    cfg = root / "mlp_nobackend" / "config.pbtxt"
    lines = [l for l in cfg.read_text().splitlines() if not l.strip().startswith("backend")]
    cfg.write_text("\n".join(lines) + "\n")
    # An mlp without config.pbtxt: the mlp backend cannot tell its inputs from its file.
    make_mlp(root / "mlp_noconfig", "mlp_noconfig")
    (root / "mlp_noconfig" / "config.pbtxt").unlink()
    # A folder of nothing a backend knows.
    (root / "empty_model" / "1").mkdir(parents=True)
    # add_sub as Triton's example names it.
    shutil.copytree(FIXTURE_REPO / "add_sub", root / "simple")
    (root / "simple" / "config.pbtxt").write_text(
        (root / "simple" / "config.pbtxt").read_text().replace('name: "add_sub"', 'name: "simple"'))
    return root


def test_backend_from_files_and_a_missing_config(start_server, repo):
    s = start_server([repo], ["--model-control-mode", "explicit"], name="autocomplete")
    c = s.client()
    assert c.post("/v2/repository/models/mlp_nobackend/load").status == 200
    assert c.get("/v2/models/mlp_nobackend/config").json()["backend"] == "mlp"
    out = c.infer("mlp_nobackend", [Input("INPUT0", "FP32", np.ones((1, 8), dtype=np.float32))])
    assert out.outputs["OUTPUT0"].shape == (1, 4)

    r = c.post("/v2/repository/models/mlp_noconfig/load")
    assert r.status == 400, r
    assert ("model 'mlp_noconfig' has no config.pbtxt, and backend 'mlp' could not tell its "
            "inputs and outputs from its files; write a config.pbtxt") in r.error_message()
    r = c.post("/v2/repository/models/empty_model/load")
    assert r.status == 400, r
    assert "no file in its version folders tells its backend" in r.error_message()


@pytest.mark.skipif(not PYTHON_LIBRARY.is_file(), reason="needs the python backend")
def test_a_python_model_without_config_completes_itself(start_server, tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(PY_MODELS / "ac_complete", repo / "py_noconfig")
    (repo / "py_noconfig" / "config.pbtxt").unlink()
    s = start_server([repo], ["--backend-directory", str(PYTHON_BACKEND_DIR)],
                     name="autocomplete-py", ready_models=["py_noconfig"])
    c = s.client()
    config = c.get("/v2/models/py_noconfig/config").json()
    assert config["backend"] == "python" and config["max_batch_size"] == 8
    assert [i["name"] for i in config["input"]] == ["INPUT0"]
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(c.infer("py_noconfig", [Input("INPUT0", "FP32", x)])
                                  .outputs["OUTPUT0"], 2 * x)


@pytest.mark.parametrize("flags", [["--disable-auto-complete-config"],
                                   ["--strict-model-config", "true"]])
def test_auto_complete_off(start_server, repo, flags):
    s = start_server([repo], ["--model-control-mode", "explicit"] + flags, name="strict")
    c = s.client()
    r = c.post("/v2/repository/models/mlp_noconfig/load")
    assert r.status == 400, r
    assert "config.pbtxt does not exist (auto-complete is off" in r.error_message()
    r = c.post("/v2/repository/models/mlp_nobackend/load")
    assert r.status in (400, 404), r
    assert "sets neither 'backend' nor 'platform'" in r.error_message()


def test_simple_http_model_control_sequence(start_server, repo):
    # Triton's client example, step by step, with add_sub as its "simple".
    s = start_server([repo], ["--model-control-mode", "explicit"], name="model-control-example")
    c = s.client()
    assert c.post("/v2/repository/models/simple/load").status == 200
    assert c.get("/v2/models/simple/ready").status == 200
    # The wrong format: the config is an object, not a string holding JSON.
    r = c.post("/v2/repository/models/simple/load",
               json.dumps({"parameters": {"config": {"max_batch_size": "16"}}}).encode())
    assert r.status == 400 and "failed to load" in r.error_message(), r
    # The right one: only max_batch_size; the rest as the model has it.
    r = c.post("/v2/repository/models/simple/load",
               json.dumps({"parameters": {"config": '{"max_batch_size":"16"}'}}).encode())
    assert r.status == 200, r
    config = c.get("/v2/models/simple/config").json()
    assert config["max_batch_size"] == 16 and config["backend"] == "add_sub"
    x = np.ones((12, 16), dtype=np.float32)
    out = c.infer("simple", [Input("INPUT0", "FP32", x), Input("INPUT1", "FP32", x)])
    np.testing.assert_array_equal(out.outputs["OUTPUT0"], 2 * x)
    assert c.post("/v2/repository/models/simple/unload").status == 200
    assert c.get("/v2/models/simple/ready").status != 200
    r = c.post("/v2/repository/models/wrong_model_name/load")
    assert "failed to load" in r.error_message()
