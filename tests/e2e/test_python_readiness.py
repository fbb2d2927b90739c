"""A Python model's readiness (is_ready) and config auto-completion (auto_complete_config), end
to end, with Triton's rules (/work/shared/reference/python-backend.md part 1.2; python_backend's
user model readiness: kUserModelReadinessTimeoutMs = 5000):

- GET /v2/models/{m}/ready asks every instance's is_ready(): absent or True is 200; False, a
  raise, a value that is not a bool and no answer within 5 s are 400 (Triton's not ready);
  async def is_ready works; a probe of a slow model waits at most 5 s and holds no I/O thread;
  a probe during a round in flight waits for that round (is_ready is not called again);
- auto_complete_config completes a config.pbtxt without inputs/outputs (the model then loads and
  serves, batched), a return that is not a pb_utils.ModelConfig fails the load with Triton's
  text, a ValueError of pb_utils.ModelConfig fails it with its message; module-level code runs
  again for the load (Triton runs auto-complete in a process of its own);
- --disable-auto-complete-config takes config.pbtxt as written.

The repository is a copy of python_readiness_models in a temp dir (the models write marker
files). Needs libvramd_python.so (as test_python_backend.py finds it).
"""

import pathlib
import shutil
import threading
import time

import numpy as np
import pytest

from e2e_helpers import (PYTHON_BACKEND_DIR, model_config, model_lifecycle,
                         skip_module_without_python_backend, wait_for)
from v2client import Input, InferResult, build_infer_body

HERE = pathlib.Path(__file__).resolve().parent
MODELS = HERE / "python_readiness_models"
BACKEND_DIR = PYTHON_BACKEND_DIR
skip_module_without_python_backend()

NOT_READY = {"rd_false", "rd_raise", "rd_nonbool", "rd_slow"}
FAIL_TO_LOAD = {"ac_wrong_type", "ac_raise"}
ALL_MODELS = sorted(p.name for p in MODELS.iterdir() if (p / "config.pbtxt").is_file())
READY = [m for m in ALL_MODELS if m not in NOT_READY | FAIL_TO_LOAD]


def copy_repo(tmp_path_factory, name):
    dst = tmp_path_factory.mktemp(name) / "models"
    shutil.copytree(MODELS, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dst


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return copy_repo(tmp_path_factory, "readiness-repo")


@pytest.fixture(scope="module")
def rd_server(start_server, repo):
    return start_server([repo], ["--backend-directory", str(BACKEND_DIR),
                                 "--model-control-mode", "explicit", "--load-model", "*",
                                 "--http-thread-count", "2"],
                        name="readiness", ready_models=READY)


@pytest.fixture
def client(rd_server):
    c = rd_server.client()
    yield c
    c.close()


def ready_status(client, model):
    return client.get("/v2/models/%s/ready" % model).status


def failed_lifecycle(client, model):
    """The lifecycle of `model` once its load has failed."""
    return wait_for(lambda: (lambda life: life if life["state"] == "failed" else None)(
        model_lifecycle(client, model)), 30.0, what="model '%s' failing to load" % model)


@pytest.mark.parametrize("model", ["rd_plain", "rd_async", "rd_toggle", "ac_complete"])
def test_ready_models_answer_200(client, model):
    assert ready_status(client, model) == 200
    assert client.get("/v2/models/%s/versions/1/ready" % model).status == 200


@pytest.mark.parametrize("model", ["rd_false", "rd_raise", "rd_nonbool"])
def test_not_ready_answers_400_and_the_log_says_why(client, rd_server, model):
    assert ready_status(client, model) == 400
    assert client.get("/v2/models/%s/versions/1/ready" % model).status == 400
    why = {"rd_false": "is_ready() returned False",
           "rd_raise": "the database is unreachable",
           "rd_nonbool": "is_ready() must return a boolean value"}[model]
    deadline = time.monotonic() + 5
    while why not in rd_server.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "model '%s' version 1 is not ready" % model in rd_server.log()
    assert why in rd_server.log()
    # Still loaded: the index shows it READY (lifecycle), and it serves requests.
    assert model_lifecycle(client, model)["state"] == "ready"


def test_readiness_follows_the_model(client, repo):
    flag = repo / "rd_toggle" / "NOT_READY"
    flag.write_text("")
    try:
        assert ready_status(client, "rd_toggle") == 400
    finally:
        flag.unlink()
    assert ready_status(client, "rd_toggle") == 200


def test_unknown_model_is_still_404(client):
    assert ready_status(client, "no_such_model") == 404


def test_a_slow_is_ready_is_not_ready_after_5_s_and_holds_no_io_thread(rd_server, repo):
    calls = repo / "rd_slow" / "CALLS"
    # The server's start-up wait asked nothing of rd_slow; let any earlier round finish.
    before = calls.read_text().count("call") if calls.exists() else 0
    results = {}

    def probe(key):
        c = rd_server.client(timeout=30)
        start = time.monotonic()
        results[key] = (c.get("/v2/models/rd_slow/ready").status, time.monotonic() - start)
        c.close()

    first = threading.Thread(target=probe, args=("first",))
    first.start()
    time.sleep(1.0)
    second = threading.Thread(target=probe, args=("second",))
    second.start()
    # Meanwhile the HTTP threads (2) answer everything else at once.
    c = rd_server.client(timeout=5)
    for _ in range(5):
        start = time.monotonic()
        assert c.get("/v2/health/live").status == 200
        assert c.get("/v2/models/rd_plain/ready").status == 200
        assert time.monotonic() - start < 1.0
    c.close()
    first.join()
    second.join()
    status, took = results["first"]
    assert status == 400
    assert 4.5 <= took < 7.5, took
    status, took = results["second"]
    assert status == 400
    assert 4.5 <= took < 7.5, took
    # One call: the second question waited for the round in flight instead of asking again.
    assert calls.read_text().count("call") - before == 1


def test_auto_complete_fills_inputs_outputs_batching_and_serves(client, repo):
    config = model_config(client, "ac_complete")
    assert config["max_batch_size"] == 8
    assert [i["name"] for i in config["input"]] == ["INPUT0"]
    assert config["input"][0]["data_type"] == "TYPE_FP32"
    assert config["input"][0]["dims"] == [4]
    assert [o["name"] for o in config["output"]] == ["OUTPUT0"]
    assert "dynamic_batching" in config
    data = np.arange(8, dtype=np.float32).reshape(2, 4)
    body, headers = build_infer_body([Input("INPUT0", "FP32", data, binary=True)])
    r = client.post("/v2/models/ac_complete/infer", body, headers)
    assert r.status == 200, r
    np.testing.assert_array_equal(InferResult(r).outputs["OUTPUT0"], data * 2)
    # Module-level code ran twice: for auto-complete, then for the load.
    assert (repo / "ac_complete" / "IMPORTS").read_text().count("import") == 2


def test_auto_complete_returning_a_wrong_type_fails_the_load(client):
    life = failed_lifecycle(client, "ac_wrong_type")
    assert "auto_complete_config function in model 'ac_wrong_type' must return a valid " \
           "pb.ModelConfig object." in life["reason"], life
    assert ready_status(client, "ac_wrong_type") == 400


def test_auto_complete_raising_fails_the_load_with_its_error(client):
    life = failed_lifecycle(client, "ac_raise")
    assert "model 'ac_raise': auto-completing its config" in life["reason"], life
    assert "input 'INPUT0' in auto-complete-config function for model 'ac_raise' is missing " \
           "'dims' property." in life["reason"], life


# Triton's --strict-model-config=true means the same (src/cli/triton_flags.h).
@pytest.mark.parametrize("flag", ["--disable-auto-complete-config", "--strict-model-config=true"])
def test_disable_auto_complete_config_takes_config_pbtxt_as_written(start_server,
                                                                    tmp_path_factory, flag):
    repo = copy_repo(tmp_path_factory, "no-autocomplete-repo")
    s = start_server([repo], ["--backend-directory", str(BACKEND_DIR),
                              "--model-control-mode", "explicit",
                              "--load-model", "ac_wrong_type", "--load-model", "ac_complete",
                              flag],
                     name="no-autocomplete", ready_models=["ac_wrong_type"])
    c = s.client()
    try:
        # Not called: its complete config.pbtxt loads although auto_complete_config is wrong.
        assert ready_status(c, "ac_wrong_type") == 200
        # The incomplete one stays incomplete and its model refuses it, naming what is missing.
        life = failed_lifecycle(c, "ac_complete")
        assert "has no output 'OUTPUT0'" in life["reason"], life
        assert ready_status(c, "ac_complete") == 400
        assert (repo / "ac_complete" / "IMPORTS").read_text().count("import") == 1
    finally:
        c.close()
