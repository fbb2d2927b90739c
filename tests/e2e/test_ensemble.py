"""Ensembles (issue 16, item 1) against the real binary: `platform: "ensemble"` with
`ensemble_scheduling`, the steps run through the runtime's request path as a graph. A diamond
(one step feeding two that run side by side, both feeding a fourth), the step models' own
statistics, concurrent requests, a step failing at run time, explicit mode loading an
ensemble's steps with it, and every ensemble error at load named."""

import concurrent.futures
import json
import shutil
import time

import numpy as np
import pytest

from e2e_helpers import FIXTURE_REPO
from v2client import Input

IDENTITY = '''name: "{name}"
backend: "identity"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 2 }} ]
'''

# IN -> first -> a; a -> left -> b and a -> right -> c (side by side); (b, c) -> add_sub.
DIAMOND = '''name: "diamond"
platform: "ensemble"
max_batch_size: 8
instance_group [ { kind: KIND_GPU count: 4 } ]  # ignored, as Triton does for an ensemble
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "SUM" data_type: TYPE_FP32 dims: [ 16 ] },
         { name: "DIFF" data_type: TYPE_FP32 dims: [ 16 ] } ]
ensemble_scheduling { step [
  { model_name: "ens_first" model_version: -1
    input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "a" } },
  { model_name: "add_sub" model_version: -1
    input_map { key: "INPUT0" value: "b" } input_map { key: "INPUT1" value: "c" }
    output_map { key: "OUTPUT0" value: "SUM" } output_map { key: "OUTPUT1" value: "DIFF" } },
  { model_name: "ens_left" model_version: -1
    input_map { key: "INPUT0" value: "a" } output_map { key: "OUTPUT0" value: "b" } },
  { model_name: "ens_right" model_version: 1
    input_map { key: "INPUT0" value: "a" } output_map { key: "OUTPUT0" value: "c" } }
] }
'''


def write(repo, name, text):
    (repo / name / "1").mkdir(parents=True, exist_ok=True)
    (repo / name / "config.pbtxt").write_text(text)


def make_repo(root):
    for name in ("ens_first", "ens_left", "ens_right"):
        write(root, name, IDENTITY.format(name=name))
    shutil.copytree(FIXTURE_REPO / "add_sub", root / "add_sub")
    write(root, "diamond", DIAMOND)
    return root


@pytest.fixture(scope="module")
def server(start_server, tmp_path_factory):
    repo = make_repo(tmp_path_factory.mktemp("ensemble-repo"))
    return start_server([repo], [], name="ensemble",
                        ready_models=["diamond", "ens_first", "ens_left", "ens_right", "add_sub"])


def run_diamond(c, x):
    return c.infer("diamond", [Input("IN", "FP32", x)])


def inference_count(c, model):
    r = c.get("/v2/models/%s/stats" % model)
    assert r.status == 200, r
    return r.json()["model_stats"][0]["inference_stats"]["success"]["count"]


def test_diamond_runs_every_step_once_per_request(server):
    c = server.client()
    x = np.arange(32, dtype=np.float32).reshape(2, 16)
    before = {m: inference_count(c, m) for m in ("ens_first", "ens_left", "ens_right", "add_sub")}
    out = run_diamond(c, x)
    np.testing.assert_array_equal(out.outputs["SUM"], 2 * x)
    np.testing.assert_array_equal(out.outputs["DIFF"], np.zeros_like(x))
    assert out.outputs["SUM"].shape == (2, 16)
    # Each step model counts its own request (its statistics are its own, as in Triton).
    for m, n in before.items():
        assert inference_count(c, m) == n + 1, m
    meta = c.get("/v2/models/diamond").json()
    assert meta["platform"] == "ensemble"
    assert [i["name"] for i in meta["inputs"]] == ["IN"]
    config = c.get("/v2/models/diamond/config").json()
    steps = config["ensemble_scheduling"]["step"]
    assert [s["model_name"] for s in steps] == ["ens_first", "add_sub", "ens_left", "ens_right"]


def test_one_output_asked_for(server):
    c = server.client()
    x = np.ones((1, 16), dtype=np.float32)
    body = {"inputs": [{"name": "IN", "datatype": "FP32", "shape": [1, 16],
                        "data": x.ravel().tolist()}],
            "outputs": [{"name": "DIFF"}]}
    r = c.post("/v2/models/diamond/infer", json.dumps(body).encode(),
               {"Content-Type": "application/json"})
    assert r.status == 200, r
    assert [o["name"] for o in r.json()["outputs"]] == ["DIFF"]


def test_concurrent_requests_each_get_their_own_answer(server):
    def one(i):
        c = server.client()
        x = np.full((1 + i % 4, 16), float(i), dtype=np.float32)
        out = run_diamond(c, x)
        return np.array_equal(out.outputs["SUM"], 2 * x)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        assert all(pool.map(one, range(200)))


def test_a_request_the_ensemble_refuses_names_its_input(server):
    c = server.client()
    r = c.post("/v2/models/diamond/infer", json.dumps(
        {"inputs": [{"name": "IN", "datatype": "FP32", "shape": [1, 3], "data": [1, 2, 3]}]}
    ).encode(), {"Content-Type": "application/json"})
    assert r.status == 400 and "IN" in r.error_message(), r


def test_explicit_mode_loads_the_steps_with_the_ensemble_and_a_missing_step_fails_requests(
        start_server, tmp_path):
    repo = make_repo(tmp_path / "repo")
    s = start_server([repo], ["--model-control-mode", "explicit", "--load-model", "diamond"],
                     name="ensemble-explicit", ready_models=["diamond"])
    c = s.client()
    for m in ("ens_first", "ens_left", "ens_right", "add_sub"):
        assert c.get("/v2/models/%s/ready" % m).status == 200, m
    x = np.ones((1, 16), dtype=np.float32)
    np.testing.assert_array_equal(run_diamond(c, x).outputs["SUM"], 2 * x)
    # A step unloaded under the ensemble: its requests fail naming the step, and nothing hangs.
    assert c.post("/v2/repository/models/ens_right/unload").status == 200
    r = c.post("/v2/models/diamond/infer", json.dumps(
        {"inputs": [{"name": "IN", "datatype": "FP32", "shape": [1, 16], "data": [1.0] * 16}]}
    ).encode(), {"Content-Type": "application/json"})
    assert r.status in (400, 404, 503), r
    assert "ensemble 'diamond': step 3 ('ens_right')" in r.error_message(), r.error_message()
    # Loading the ensemble again brings the step back.
    assert c.post("/v2/repository/models/diamond/load").status == 200
    assert c.get("/v2/models/ens_right/ready").status == 200
    np.testing.assert_array_equal(run_diamond(c, x).outputs["SUM"], 2 * x)
    # Triton's unload_dependents: the step goes, and the ensemble that uses it with it.
    r = c.post("/v2/repository/models/ens_left/unload",
               json.dumps({"parameters": {"unload_dependents": True}}).encode())
    assert r.status == 200, r
    assert c.get("/v2/models/ens_left/ready").status != 200
    assert c.get("/v2/models/diamond/ready").status != 200
    assert c.get("/v2/models/ens_right/ready").status == 200  # not a dependent
    r = c.post("/v2/repository/models/ens_right/unload",
               json.dumps({"parameters": {"unload_dependents": "yes"}}).encode())
    assert r.status == 400 and "must be a boolean" in r.error_message(), r


def broken(steps, inputs='{ name: "IN" data_type: TYPE_FP32 dims: [ 16 ] }',
           outputs='{ name: "OUT" data_type: TYPE_FP32 dims: [ 16 ] }', extra=""):
    return ('platform: "ensemble"\nmax_batch_size: 8\ninput [ %s ]\noutput [ %s ]\n%s'
            'ensemble_scheduling { step [ %s ] }\n' % (inputs, outputs, extra, ", ".join(steps)))


def step(model, ins, outs, version=-1):
    return ('{ model_name: "%s" model_version: %d %s %s }' % (
        model, version,
        " ".join('input_map { key: "%s" value: "%s" }' % kv for kv in ins),
        " ".join('output_map { key: "%s" value: "%s" }' % kv for kv in outs)))


FIRST = step("ens_first", [("INPUT0", "IN")], [("OUTPUT0", "OUT")])
LOAD_ERRORS = {
    "unknown_tensor": (broken([step("ens_first", [("INPUT0", "nowhere")], [("OUTPUT0", "OUT")])]),
                       "step 0 ('ens_first') reads tensor 'nowhere' (for its input 'INPUT0'), "
                       "which is neither an ensemble input nor written by any step"),
    "output_not_written": (broken([step("ens_first", [("INPUT0", "IN")], [("OUTPUT0", "x")]),
                                   step("ens_left", [("INPUT0", "x")], [("OUTPUT0", "y")])]),
                           "ensemble output 'OUT' is written by no step"),
    "input_not_read": (broken([FIRST], inputs='{ name: "IN" data_type: TYPE_FP32 dims: [ 16 ] },'
                                              '{ name: "SPARE" data_type: TYPE_FP32 dims: [ 16 ] }'),
                       "ensemble input 'SPARE' is read by no step"),
    "written_twice": (broken([FIRST, step("ens_left", [("INPUT0", "IN")], [("OUTPUT0", "OUT")])]),
                      "tensor 'OUT' is written by both step 0 ('ens_first') and step 1 "
                      "('ens_left')"),
    "cycle": (broken([FIRST, step("ens_left", [("INPUT0", "q")], [("OUTPUT0", "p")]),
                      step("ens_right", [("INPUT0", "p")], [("OUTPUT0", "q")])]),
              "the steps form a cycle: step 1 ('ens_left'), step 2 ('ens_right') wait on each "
              "other's outputs"),
    "type_mismatch": (broken([FIRST], inputs='{ name: "IN" data_type: TYPE_INT32 dims: [ 16 ] }'),
                      "tensor 'IN' is TYPE_FP32 for the model's input 'INPUT0' and TYPE_INT32 as "
                      "ensemble input 'IN'"),
    "shape_mismatch": (broken([FIRST], outputs='{ name: "OUT" data_type: TYPE_FP32 dims: [ 8 ] }'),
                       "tensor 'OUT' has shape [-1,16] for the model's output 'OUTPUT0' and "
                       "[-1,8] as ensemble output 'OUT'"),
    "unknown_model": (broken([step("no_such_model", [("INPUT0", "IN")], [("OUTPUT0", "OUT")])]),
                      "its step model 'no_such_model' did not load: no model repository holds a "
                      "model of that name"),
    "not_an_input": (broken([step("ens_first", [("INPUT9", "IN")], [("OUTPUT0", "OUT")])]),
                     "input_map names 'INPUT9', which is not an input of model 'ens_first'"),
    "batch_too_big": (broken([FIRST]).replace("max_batch_size: 8", "max_batch_size: 16"),
                      "the ensemble's max_batch_size is 16, and the model's is 8"),
    "no_steps": ('platform: "ensemble"\ninput [ { name: "IN" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
                 'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 16 ] } ]\n',
                 "platform \"ensemble\" needs ensemble_scheduling with at least one step"),
}


def test_ensemble_errors_at_load_name_what_is_wrong(start_server, tmp_path):
    repo = make_repo(tmp_path / "repo")
    for name, (text, _) in LOAD_ERRORS.items():
        write(repo, "bad_" + name, text)
    s = start_server([repo], ["--model-control-mode", "explicit", "--load-model", "diamond"],
                     name="ensemble-errors", ready_models=["diamond"])
    c = s.client()
    for name, (_, why) in LOAD_ERRORS.items():
        r = c.post("/v2/repository/models/bad_%s/load" % name)
        assert r.status in (400, 404, 503), (name, r)
        msg = r.error_message()
        assert why in msg, (name, msg)
        assert msg.startswith("failed to load 'bad_%s': " % name), msg
        assert msg.count("failed to load") == 1, msg
    # The good ensemble serves on.
    x = np.ones((1, 16), dtype=np.float32)
    np.testing.assert_array_equal(run_diamond(c, x).outputs["SUM"], 2 * x)


def test_an_ensemble_added_with_its_steps_in_one_poll_loads_after_them(start_server, tmp_path):
    # A repository poll that finds the ensemble and its step models at once loads the steps
    # first (the ensemble checks their configs when it loads).
    import time
    repo = tmp_path / "repo"
    write(repo, "placeholder", IDENTITY.format(name="placeholder"))
    s = start_server([repo], ["--model-control-mode", "poll", "--repository-poll-secs", "1"],
                     name="ensemble-poll", ready_models=["placeholder"])
    # Published as a publisher should: copied under hidden names, then renamed, the ensemble
    # last, so whichever poll sees them, it never sees the ensemble without its steps.
    staging = make_repo(repo / ".staging")
    models = sorted(p.name for p in staging.iterdir() if p.name != "diamond") + ["diamond"]
    for model in models:
        (staging / model).rename(repo / model)
    c = s.client()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and c.get("/v2/models/diamond/ready").status != 200:
        time.sleep(0.2)
    assert c.get("/v2/models/diamond/ready").status == 200, c.post(
        "/v2/repository/index", b"{}").body
    x = np.ones((1, 16), dtype=np.float32)
    np.testing.assert_array_equal(run_diamond(c, x).outputs["SUM"], 2 * x)


MEM_STEP = '''name: "{name}"
backend: "identity"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
parameters {{ key: "execute_delay_us" value: {{ string_value: "{delay_us}" }} }}
'''

# The first step makes a tensor of its own (a sum: identity answers with its input's memory).
MEM_SUM = '''name: "mem_a"
backend: "add_sub"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ -1 ] } ]
'''

MEM_ENSEMBLE = '''name: "ens_mem"
platform: "ensemble"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
ensemble_scheduling { step [
  { model_name: "mem_a" model_version: -1
    input_map { key: "INPUT0" value: "IN" } input_map { key: "INPUT1" value: "IN" }
    output_map { key: "OUTPUT0" value: "mid" } },
  { model_name: "mem_slow" model_version: -1
    input_map { key: "INPUT0" value: "mid" } output_map { key: "OUTPUT0" value: "OUT" } }
] }
'''


def test_intermediate_tensors_are_charged_to_the_ensemble_request(start_server, tmp_path):
    # A 4 MiB tensor made by the first step (pooled host memory, in the ledger) belongs to the
    # ensemble's request while the second step runs on it, not to the first step's request,
    # which has answered; when the request is done nothing is left and nothing leaked.
    repo = tmp_path / "repo"
    write(repo, "mem_a", MEM_SUM)
    write(repo, "mem_slow", MEM_STEP.format(name="mem_slow", delay_us=800000))
    write(repo, "ens_mem", MEM_ENSEMBLE)
    s = start_server([repo], [], name="ensemble_memory",
                     ready_models=["mem_a", "mem_slow", "ens_mem"])
    x = np.arange(1 << 20, dtype=np.float32)

    def walk(node):
        yield node
        for child in node.get("children", []):
            yield from walk(child)

    def request_owners(report):
        return {n["path"]: n["live_bytes"] for n in walk(report["owners"])
                if n["kind"] == "request"}

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        # Binary both ways: 1M floats as JSON took the sanitizer build (-O0, CI's 2 cores shared
        # with the unit tests) past the loop's deadline before the second step began.
        running = pool.submit(lambda: s.client().infer(
            "ens_mem", [Input("IN", "FP32", x, binary=True)], request_id="big",
            binary_data_output=True))
        c = s.client()
        seen = {}
        deadline = time.monotonic() + 60
        # A move of a charge is not one step for a reader of the report: the new owner is
        # charged before the old one is let go (ledger.cc, Recharge), and a report taken in
        # between shows the tensor under both. So the report is read until the move is seen
        # done, as it must be long before the slow step's 800 ms are over.
        while not running.done() and time.monotonic() < deadline:
            owners = request_owners(c.get("/v2/memory").json())
            if any("/model:ens_mem/" in p for p in owners):
                seen = owners
                if all(b == 0 for p, b in owners.items() if "/model:mem_a/" in p):
                    break
        result = running.result(timeout=30)
    assert np.array_equal(result.outputs["OUT"], x + x)
    ensemble = {p: b for p, b in seen.items() if "/model:ens_mem/" in p}
    assert len(ensemble) == 1, seen
    path, held = next(iter(ensemble.items()))
    assert path.endswith("/request:big") and held >= x.nbytes, seen
    # The first step's request may still be open (its answer is in use), holding nothing.
    assert all(b == 0 for p, b in seen.items() if "/model:mem_a/" in p), seen
    report = c.get("/v2/memory").json()
    assert request_owners(report) == {}, request_owners(report)
    assert report["leaks"] == [] and report["leaked_bytes_total"] == 0
