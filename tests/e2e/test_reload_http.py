"""Reloads over HTTP, end to end, in --model-control-mode explicit:

  - POST /v2/repository/models/{m}/load with {"parameters": {"config": "<JSON ModelConfig>"}}:
    the override takes effect (version_policy, backend parameters); malformed or unusable
    overrides, bad `file:` parameters and overrides naming another model are refused with the
    reason, and the serving versions serve on; a model loaded from `file:` parameters alone;
  - POST /v2/repository/index rows: Triton's "state" with vramd's "lifecycle" and "reason";
  - GET /v2/repository/models/{m}/lifecycle;
  - --model-load-thread-count, --reload-headroom-mib, --reload-unavailable-wait-ms;
  - ~20 reloads alternating two versions under concurrent inference: no request fails, and each
    response's model_version is the version whose weights computed its output.

The versioned model is an "affine" mlp model (e2e_helpers.write_affine_model): version v
answers INPUT0 + 100 * v, so an answer says which version computed it.
"""

import base64
import glob
import json
import os
import shutil
import tempfile
import threading
import time

import numpy as np
import pytest

from e2e_helpers import (FIXTURE_REPO, affine_infer, in_background, index_rows, load_model,
                         model_config, model_lifecycle, repository_index, wait_for,
                         write_affine_model)
from v2client import InferResult, Input

# Triton's index state for each of vramd's lifecycle states.
TRITON_STATE = {"unloaded": "UNAVAILABLE", "loading": "LOADING", "ready": "READY",
                "draining": "UNLOADING", "unloading": "UNLOADING", "failed": "UNAVAILABLE"}


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    write_affine_model(root / "affine", [1, 2])  # latest 1: version 2 serves
    for m in ("identity_fp32", "identity_int32", "broken_syntax"):
        shutil.copytree(FIXTURE_REPO / m, root / m)
    return root


def start_explicit(start_server, repo, name, load=("affine",), extra=()):
    args = ["--model-control-mode", "explicit"]
    for m in load:
        args += ["--load-model", m]
    return start_server([repo], args + list(extra), name=name, ready_models=list(load))


def ready_status(c, model, version=None):
    path = "/v2/models/%s" % model
    if version is not None:
        path += "/versions/%s" % version
    return c.get(path + "/ready").status


def with_policy(config, versions):
    config = dict(config)
    config["version_policy"] = {"specific": {"versions": list(versions)}}
    return config


def infer_fp32_seconds(c, model="identity_fp32"):
    data = np.array([1.5, -2.0], dtype=np.float32)
    start = time.monotonic()
    out = c.infer(model, [Input("INPUT0", "FP32", data)])
    elapsed = time.monotonic() - start
    np.testing.assert_array_equal(out.outputs["OUTPUT0"], data)
    return elapsed


def check_row(row):
    """Every index row carries Triton's state, vramd's lifecycle and a reason, consistently."""
    for key in ("name", "state", "lifecycle", "reason"):
        assert key in row, row
    assert isinstance(row["reason"], str), row
    assert row["lifecycle"] in TRITON_STATE, row
    assert row["state"] == TRITON_STATE[row["lifecycle"]], row
    return row


# ------------------------------------------------------------------------------------------------
# Config override


def test_config_override_selects_versions(start_server, repo):
    s = start_explicit(start_server, repo, "override_versions")
    c = s.client()
    assert affine_infer(c, "affine")[0] == 2
    base = model_config(c, "affine")
    assert base["version_policy"] == {"latest": {"num_versions": 1}}

    r = load_model(c, "affine", with_policy(base, [1]))
    assert r.status == 200, r
    assert ready_status(c, "affine", 1) == 200
    assert ready_status(c, "affine", 2) != 200
    assert affine_infer(c, "affine")[0] == 1
    assert affine_infer(c, "affine", version=1)[0] == 1
    assert c.infer_raw("affine", [Input("INPUT0", "FP32", np.zeros((1, 4), np.float32))],
                       version=2).status in (400, 404, 503)
    assert model_config(c, "affine")["version_policy"] == {"specific": {"versions": [1]}}
    assert [(row["version"], row["state"]) for row in index_rows(c, "affine")] == [("1", "READY")]

    # Both versions: the highest serves requests without a version.
    r = load_model(c, "affine", with_policy(base, [1, 2]))
    assert r.status == 200, r
    assert affine_infer(c, "affine")[0] == 2
    assert affine_infer(c, "affine", version=1)[0] == 1
    assert [row["version"] for row in index_rows(c, "affine")] == ["1", "2"]

    # A load without an override goes back to config.pbtxt.
    r = load_model(c, "affine")
    assert r.status == 200, r
    assert model_config(c, "affine")["version_policy"] == {"latest": {"num_versions": 1}}
    assert ready_status(c, "affine", 1) != 200
    assert affine_infer(c, "affine")[0] == 2


def test_config_override_changes_backend_parameters(start_server, repo):
    s = start_explicit(start_server, repo, "override_params", load=("identity_fp32",))
    c = s.client()
    assert infer_fp32_seconds(c) < 0.25
    base = model_config(c, "identity_fp32")

    slow = dict(base, parameters={"execute_delay_us": {"string_value": "300000"}})
    r = load_model(c, "identity_fp32", slow)
    assert r.status == 200, r
    assert infer_fp32_seconds(c) >= 0.3
    assert model_config(c, "identity_fp32")["parameters"] == slow["parameters"]

    # An override the backend refuses: 400 naming the parameter; the loaded config serves on.
    bad = dict(base, parameters={"execute_delay_us": {"string_value": "soon"}})
    r = load_model(c, "identity_fp32", bad)
    assert r.status == 400, r
    assert "execute_delay_us" in r.error_message()
    assert model_config(c, "identity_fp32")["parameters"] == slow["parameters"]
    assert infer_fp32_seconds(c) >= 0.3
    life = model_lifecycle(c, "identity_fp32")
    assert life["state"] == "ready" and "execute_delay_us" in life["reason"], life
    assert life["last_load"]["ok"] is False and "execute_delay_us" in life["last_load"]["error"]
    row, = index_rows(c, "identity_fp32")
    assert (row["state"], row["lifecycle"]) == ("READY", "ready"), row
    assert "execute_delay_us" in row["reason"], row

    # Back to config.pbtxt: no delay.
    assert load_model(c, "identity_fp32").status == 200
    assert model_config(c, "identity_fp32")["parameters"] == {}
    assert infer_fp32_seconds(c) < 0.25


def test_config_override_errors(start_server, repo):
    s = start_explicit(start_server, repo, "override_errors")
    c = s.client()
    base = model_config(c, "affine")

    def refused(body_or_config, status=400, model="affine", raw=False):
        if raw:
            r = c.post("/v2/repository/models/%s/load" % model, body_or_config,
                       {"Content-Type": "application/json"})
        else:
            r = load_model(c, model, body_or_config)
        assert r.status == status, r
        return r.error_message()

    # Malformed JSON in the config string: 400 naming the parameter and where.
    msg = refused('{"name": "affine", "backend": ')
    assert "'config'" in msg and "JSON" in msg and "offset" in msg, msg
    # The parameter must be a string.
    msg = refused(json.dumps({"parameters": {"config": base}}).encode(), raw=True)
    assert "'config'" in msg and "string" in msg, msg
    # A value the proto does not declare: named by its field.
    cfg = json.loads(json.dumps(base))
    cfg["input"][0]["data_type"] = "TYPE_NOT_A_TYPE"
    msg = refused(cfg)
    assert "data_type" in msg and "TYPE_NOT_A_TYPE" in msg, msg
    # A well-formed config the server cannot use.
    cfg = dict(base, max_batch_size=-3)
    msg = refused(cfg)
    assert "max_batch_size" in msg, msg
    # Naming another model.
    msg = refused(dict(base, name="identity_int32"))
    assert "identity_int32" in msg, msg
    # Model files in the request (Triton's "file:<path>" parameters): each path stays inside
    # the model's directory, the bytes are base64, and they come with a config.
    for key, value, text in (("file:../model.safetensors", "AAAA", "'..'"),
                             ("file:/etc/passwd", "AAAA", "absolute"),
                             ("file:1//x", "AAAA", "empty component"),
                             ("file:1/model.safetensors", "A*AA", "not a base64 character")):
        body = json.dumps({"parameters": {"config": json.dumps(base), key: value}}).encode()
        msg = refused(body, raw=True)
        assert text in msg, (key, msg)
    body = json.dumps({"parameters": {"file:1/model.safetensors": "AAAA"}}).encode()
    msg = refused(body, raw=True)
    assert "need a 'config' parameter" in msg, msg
    # An unknown model, override or not: 404 naming it.
    unnamed = {k: v for k, v in base.items() if k != "name"}
    msg = refused(unnamed, status=404, model="no_such_model")
    assert "no_such_model" in msg, msg

    # None of it disturbed the serving version.
    assert affine_infer(c, "affine")[0] == 2
    assert model_config(c, "affine") == base
    assert model_lifecycle(c, "affine")["state"] == "ready"


# ------------------------------------------------------------------------------------------------
# Index rows and the lifecycle endpoint


def slow_warmup_config(base, delay_us):
    """`base` (identity_fp32's config) with an execute delay and one warmup sample, so that its
    load takes at least delay_us."""
    cfg = json.loads(json.dumps(base))
    cfg["parameters"] = {"execute_delay_us": {"string_value": str(delay_us)}}
    cfg["model_warmup"] = [{"name": "w", "batch_size": 1, "inputs": {
        "INPUT0": {"data_type": "TYPE_FP32", "dims": [2], "zero_data": True}}}]
    return cfg


def test_a_slow_load_does_not_hold_the_http_thread(start_server, repo):
    """With one HTTP thread, a load that takes 1.5 s (its warmup) still lets other requests
    through: load and unload run on the server's control threads, not on the I/O thread."""
    s = start_explicit(start_server, repo, "control_threads", load=("identity_fp32",),
                       extra=["--http-thread-count", "1"])
    c = s.client()
    c2 = s.client(timeout=60)
    slow = slow_warmup_config(model_config(c, "identity_fp32"), 1500000)
    t, res = in_background(lambda: load_model(c2, "identity_fp32", slow))
    wait_for(lambda: model_lifecycle(c, "identity_fp32")["state"] == "loading", 5.0,
             interval=0.02, what="identity_fp32 loading")
    start = time.monotonic()
    assert c.get("/v2/health/live").status == 200
    assert ready_status(c, "identity_fp32") == 200  # the old version still serves
    assert time.monotonic() - start < 0.5, "a request waited for the load"
    t.join(30)
    assert res.get("value") is not None and res["value"].status == 200, res


def test_index_rows_carry_state_lifecycle_and_reason(start_server, repo):
    # Three requests run at once below (an infer, an unload, the index): each holds an HTTP
    # thread while it waits, so the server needs more than the 2 a 2-core machine defaults to.
    s = start_explicit(start_server, repo, "index_rows", load=("identity_fp32",),
                       extra=["--http-thread-count", "4"])
    c = s.client()
    c2 = s.client()
    c3 = s.client()

    row, = index_rows(c, "identity_fp32")
    assert check_row(row) == {"name": "identity_fp32", "version": "1", "state": "READY",
                              "lifecycle": "ready", "reason": ""}

    # failed: a model whose config does not parse.
    assert load_model(c, "broken_syntax").status == 400
    row, = index_rows(c, "broken_syntax")
    check_row(row)
    assert row["lifecycle"] == "failed" and "config.pbtxt:" in row["reason"], row

    # loading: a load whose warmup takes 1.5 s.
    base = model_config(c, "identity_fp32")
    slow = slow_warmup_config(dict(base, name="identity_int32"), 1500000)
    slow["input"][0]["data_type"] = slow["output"][0]["data_type"] = "TYPE_INT32"
    slow["model_warmup"][0]["inputs"]["INPUT0"]["data_type"] = "TYPE_INT32"
    t, res = in_background(lambda: load_model(c2, "identity_int32", slow))
    rows = wait_for(lambda: [r for r in index_rows(c, "identity_int32")
                             if r["lifecycle"] == "loading"], 5.0, interval=0.02,
                    what="a LOADING row for identity_int32")
    assert check_row(rows[0])["state"] == "LOADING" and rows[0].get("version") == "1", rows
    life = model_lifecycle(c, "identity_int32")
    assert life["state"] == "loading" and life["serving"] == [], life
    assert ready_status(c, "identity_int32") != 200
    t.join(30)
    assert res.get("value") is not None and res["value"].status == 200, res
    row, = index_rows(c, "identity_int32")
    assert check_row(row)["lifecycle"] == "ready", row
    phases = {p["name"]: p["seconds"] for p in model_lifecycle(c, "identity_int32")
              ["last_load"]["phases"]}
    assert phases.get("warmup", 0) >= 1.4, phases

    # draining / unloading: an unload while a 1.5-s request runs; the request completes.
    data = np.array([4, 5], dtype=np.int32)
    t_req, req = in_background(lambda: c3.infer("identity_int32", [Input("INPUT0", "INT32",
                                                                           data)]))
    time.sleep(0.3)  # the request is executing
    t_unl, unl = in_background(lambda: c2.post("/v2/repository/models/identity_int32/unload"))
    rows = wait_for(lambda: [r for r in index_rows(c, "identity_int32")
                             if r["state"] == "UNLOADING"], 5.0, interval=0.02,
                    what="an UNLOADING row for identity_int32")
    assert check_row(rows[0])["lifecycle"] in ("draining", "unloading"), rows
    t_req.join(30)
    t_unl.join(30)
    assert "error" not in req, req
    np.testing.assert_array_equal(req["value"].outputs["OUTPUT0"], data)
    assert unl.get("value") is not None and unl["value"].status == 200, unl

    # unloaded
    row, = index_rows(c, "identity_int32")
    assert check_row(row) == {"name": "identity_int32", "state": "UNAVAILABLE",
                              "lifecycle": "unloaded", "reason": "unloaded"}, row
    states = [(h["from"], h["to"]) for h in model_lifecycle(c, "identity_int32")["history"]]
    assert states == [("unloaded", "loading"), ("loading", "ready"), ("ready", "draining"),
                      ("draining", "unloading"), ("unloading", "unloaded")], states

    for row in repository_index(c):
        check_row(row)
    # ready: true lists only ready rows.
    assert [r["name"] for r in repository_index(c, ready=True)] == ["identity_fp32"]


def test_lifecycle_endpoint(start_server, repo):
    s = start_explicit(start_server, repo, "lifecycle")
    c = s.client()
    before_ms = time.time() * 1000

    life = model_lifecycle(c, "affine")
    assert life["name"] == "affine" and life["state"] == "ready" and life["reason"] == ""
    assert life["serving"] == ["2"]
    assert [(h["from"], h["to"]) for h in life["history"]] == [("unloaded", "loading"),
                                                               ("loading", "ready")], life
    for h in life["history"]:
        assert isinstance(h["reason"], str) and isinstance(h["at_ms"], int), h
    first = life["last_load"]
    assert first["ok"] is True and first["error"] == "" and first["versions"] == ["2"], first
    assert first["policy"] == "availability_preserving" and first["policy_reason"], first
    assert first["predicted_bytes"].get("cpu", 0) > 0, first
    assert isinstance(first["predicted_from"], str) and first["predicted_from"], first
    assert first["measured_bytes"].get("cpu", 0) > 0, first

    # A reload to version 1: the history grows, the report is the new load's.
    base = model_config(c, "affine")
    assert load_model(c, "affine", with_policy(base, [1])).status == 200
    life = model_lifecycle(c, "affine")
    assert life["serving"] == ["1"] and life["state"] == "ready", life
    assert [(h["from"], h["to"]) for h in life["history"][2:]] == [("ready", "loading"),
                                                                   ("loading", "ready")], life
    assert all(b["at_ms"] >= a["at_ms"] for a, b in zip(life["history"], life["history"][1:]))
    load = life["last_load"]
    assert load["ok"] is True and load["versions"] == ["1"], load
    assert load["policy"] in ("availability_preserving", "resource_preserving"), load
    assert isinstance(load["policy_reason"], str) and load["policy_reason"], load
    assert "measured" in load["predicted_from"], load  # the last load measured the model
    assert load["predicted_bytes"] == first["measured_bytes"], (load, first)
    assert load["measured_bytes"].get("cpu", 0) > 0, load
    names = [p["name"] for p in load["phases"]]
    assert "file_read" in names and "switch" in names, names
    for p in load["phases"]:
        assert isinstance(p["seconds"], (int, float)) and p["seconds"] >= 0, p
        assert isinstance(p["bytes"], int) and p["bytes"] >= 0, p
    assert load["total_seconds"] > 0, load
    assert load["total_seconds"] >= max(p["seconds"] for p in load["phases"]), load
    assert before_ms - 60000 <= load["finished_ms"] <= time.time() * 1000 + 1000, load

    # A model of the repository that was never loaded: unloaded, as the index lists it.
    never = model_lifecycle(c, "identity_int32")
    assert never["state"] == "unloaded" and never["reason"] == "not loaded", never
    assert never["history"] == [] and never["last_load"] is None, never
    row, = index_rows(c, "identity_int32")
    assert row["lifecycle"] == "unloaded" and row["reason"] == "not loaded", row

    # Unknown model: 404 naming it.
    r = c.get("/v2/repository/models/no_such_model/lifecycle")
    assert r.status == 404, r
    assert "no_such_model" in r.error_message()
    r = c.post("/v2/repository/models/affine/lifecycle", b"{}")
    assert r.status == 405, r


# ------------------------------------------------------------------------------------------------
# Reload under load


HUGE_HEADROOM_MIB = str(1 << 24)  # 16 TiB: no new version "fits beside" the old




@pytest.mark.parametrize("policy,headroom", [
    ("availability_preserving", "0"),
    ("resource_preserving", HUGE_HEADROOM_MIB),
])
def test_reloads_under_concurrent_inference(start_server, repo, policy, headroom):
    """~20 reloads alternating versions 1 and 2 (config override, version_policy specific)
    while client threads infer by name without a version. --reload-headroom-mib decides the
    policy "auto" picks; both must lose no request."""
    s = start_explicit(start_server, repo, "reload_" + policy[:5], extra=[
        "--http-thread-count", "6", "--model-load-thread-count", "2",
        "--reload-headroom-mib", headroom, "--reload-unavailable-wait-ms", "3000"])
    c = s.client()
    base = model_config(c, "affine")
    stop = threading.Event()
    seen = {1: 0, 2: 0}
    failures = []
    lock = threading.Lock()

    def client_loop(seed):
        cc = s.client()
        i = 0
        while not stop.is_set():
            try:
                v, _, _ = affine_infer(cc, "affine", rows=1 + i % 3, seed=seed * 100000 + i)
                with lock:
                    seen[v] = seen.get(v, 0) + 1
            except BaseException as e:  # noqa: BLE001
                with lock:
                    failures.append(repr(e)[:500])
            i += 1
        cc.close()

    threads = [threading.Thread(target=client_loop, args=(k,), daemon=True) for k in range(3)]
    for t in threads:
        t.start()
    reloads = 20
    try:
        wait_for(lambda: sum(seen.values()) + len(failures) >= 10, 10.0,
                 what="the clients to get going")
        for i in range(reloads):
            version = 1 if i % 2 == 0 else 2
            r = load_model(c, "affine", with_policy(base, [version]))
            assert r.status == 200, r
            # Once the load has answered, the new version serves every new request.
            assert affine_infer(c, "affine")[0] == version
            time.sleep(0.05)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not failures, "%d failed requests, e.g. %s" % (len(failures), failures[:5])
    assert seen[1] > 0 and seen[2] > 0, seen
    assert sum(seen.values()) >= 100, seen
    life = model_lifecycle(c, "affine")
    assert life["state"] == "ready" and life["serving"] == ["2"], life
    load = life["last_load"]
    assert load["ok"] and load["policy"] == policy, load
    if policy == "resource_preserving":
        assert "drain_unload" in [p["name"] for p in load["phases"]], load
    s.assert_no_crash_markers()


def test_resource_preserving_reloads_while_a_request_is_being_parsed(start_server, repo):
    """A request finds its version, then spends a while parsing its 10-MB JSON body; meanwhile
    resource-preserving reloads retire that version again and again. The request must go to a
    new version (it may wait for one, up to the unavailable wait), and no reload may wait for
    the request."""
    wait_ms = 2000
    s = start_explicit(start_server, repo, "reload_parse", load=("identity_fp32",), extra=[
        "--http-thread-count", "4", "--reload-unavailable-wait-ms", str(wait_ms)])
    c = s.client()
    c2 = s.client(timeout=60)
    # The policy from the config (identity allocates nothing, so the headroom never decides).
    cfg = model_config(c, "identity_fp32")
    cfg["parameters"] = {"vramd.reload_policy": {"string_value": "resource_preserving"}}
    data = np.arange(1000000, dtype=np.float32)
    t, res = in_background(lambda: c2.infer_raw("identity_fp32", [Input("INPUT0", "FP32", data)],
                                               outputs=[("OUTPUT0", True)]))
    slowest, reloads = 0.0, 0
    while t.is_alive() and reloads < 500:
        start = time.monotonic()
        r = load_model(c, "identity_fp32", cfg)
        slowest = max(slowest, time.monotonic() - start)
        reloads += 1
        assert r.status == 200, r
        time.sleep(0.01)
    t.join(60)
    assert model_lifecycle(c, "identity_fp32")["last_load"]["policy"] == "resource_preserving"
    assert "error" not in res, res
    assert res["value"].status == 200, res["value"]
    np.testing.assert_array_equal(InferResult(res["value"]).outputs["OUTPUT0"], data)
    assert slowest < wait_ms / 1000.0 * 0.75, "a reload took %.1fs (of %d)" % (slowest, reloads)


def test_a_model_loads_from_the_files_in_the_request(start_server, repo):
    """Triton's "file:<path>" load parameters: a model no repository holds loads from the files
    the request carries (with its config), serves, and its directory of them is removed once it
    is unloaded."""
    s = start_explicit(start_server, repo, "load_files")
    c = s.client()
    name = "from_files_%d" % os.getpid()
    cfg = {"name": name, "backend": "identity", "max_batch_size": 0,
           "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
           "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}]}
    note = b"written by the load request\n"
    r = load_model(c, name, cfg, parameters={
        "file:1/notes/readme.txt": base64.b64encode(note).decode()})
    assert r.status == 200, r
    dirs = glob.glob(os.path.join(tempfile.gettempdir(), "vramd-model-files", name + ".*"))
    assert len(dirs) == 1, dirs
    with open(os.path.join(dirs[0], "1", "notes", "readme.txt"), "rb") as f:
        assert f.read() == note
    x = np.array([1.5, -2.0, 3.25], dtype=np.float32)
    out = c.infer(name, [Input("INPUT0", "FP32", x)]).outputs["OUTPUT0"]
    np.testing.assert_array_equal(out, x)
    assert model_lifecycle(c, name)["state"] == "ready"
    assert c.post("/v2/repository/models/%s/unload" % name, b"").status == 200
    wait_for(lambda: not os.path.exists(dirs[0]), 10, what="the model's files to be removed")
    s.assert_no_crash_markers()
