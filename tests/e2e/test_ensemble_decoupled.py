"""Ensembles with a decoupled step (issue 16, item 1), the shape of a streaming LLM pipeline
(preprocess -> decoupled generator -> postprocess): each response of the decoupled step is
carried through the rest of the graph on its own and becomes one response of the (decoupled)
ensemble, over a gRPC stream as tritonclient streams it. A side branch that does not come after
the decoupled step runs once, and its output reaches every response, also when it finishes
after the decoupled step's responses. An ensemble that is not decoupled but has a decoupled
step fails to load, saying why."""

import json
import pathlib
import shutil

import numpy as np
import pytest

from e2e_helpers import PYTHON_BACKEND_DIR, skip_module_without_python_backend
from test_sequence import grpc_stub

skip_module_without_python_backend()

PYTHON_MODELS = pathlib.Path(__file__).resolve().parent / "python_models"

IDENTITY = '''name: "{name}"
backend: "identity"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] }} ]
parameters {{ key: "execute_delay_us" value: {{ string_value: "{delay_us}" }} }}
'''

POST_CONFIG = '''name: "ens_post"
backend: "python"
max_batch_size: 0
input [ { name: "TOK" data_type: TYPE_INT32 dims: [ 1 ] },
        { name: "SIDE" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
'''

POST = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            tok = pb_utils.get_input_tensor_by_name(r, "TOK").as_numpy()
            side = pb_utils.get_input_tensor_by_name(r, "SIDE").as_numpy()
            out.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", (tok * 10 + side).astype(np.int32))]))
        return out
'''

# N -> pre -> a; a -> py_decoupled (COUNT) -> tok (N responses); a -> side (slow) -> b;
# (tok, b) -> post -> OUT = tok * 10 + N.
STREAM_ENSEMBLE = '''name: "{name}"
platform: "ensemble"
max_batch_size: 0
{policy}
input [ {{ name: "N" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
ensemble_scheduling {{ step [
  {{ model_name: "ens_pre" model_version: -1
    input_map {{ key: "INPUT0" value: "N" }} output_map {{ key: "OUTPUT0" value: "a" }} }},
  {{ model_name: "py_decoupled" model_version: -1
    input_map {{ key: "COUNT" value: "a" }} output_map {{ key: "OUT" value: "tok" }} }},
  {{ model_name: "ens_side" model_version: -1
    input_map {{ key: "INPUT0" value: "a" }} output_map {{ key: "OUTPUT0" value: "b" }} }},
  {{ model_name: "ens_post" model_version: -1
    input_map {{ key: "TOK" value: "tok" }} input_map {{ key: "SIDE" value: "b" }}
    output_map {{ key: "OUT" value: "OUT" }} }}
] }}
'''


def write(repo, name, config, source=None):
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(config)
    if source is not None:
        (repo / name / "1" / "model.py").write_text(source)


@pytest.fixture(scope="module")
def server(start_server, tmp_path_factory):
    repo = tmp_path_factory.mktemp("ensemble-decoupled-repo")
    write(repo, "ens_pre", IDENTITY.format(name="ens_pre", delay_us=0))
    write(repo, "ens_side", IDENTITY.format(name="ens_side", delay_us=300000))
    write(repo, "ens_post", POST_CONFIG, POST)
    shutil.copytree(PYTHON_MODELS / "py_decoupled", repo / "py_decoupled")
    write(repo, "stream_ens", STREAM_ENSEMBLE.format(
        name="stream_ens", policy="model_transaction_policy { decoupled: true }"))
    models = ["ens_pre", "ens_side", "ens_post", "py_decoupled", "stream_ens"]
    return start_server([repo], ["--backend-directory", str(PYTHON_BACKEND_DIR),
                                 "--model-control-mode", "explicit"]
                        + sum((["--load-model", m] for m in models), []),
                        name="ensemble_decoupled", ready_models=models)


def stream_request(pb, n, final_flag=False):
    r = pb.ModelInferRequest(model_name="stream_ens", id="n%d" % n)
    r.inputs.add(name="N", datatype="INT32", shape=[1])
    r.raw_input_contents.append(np.array([n], dtype=np.int32).tobytes())
    if final_flag:
        r.parameters["triton_enable_empty_final_response"].bool_param = True
    return r


def test_each_response_of_the_decoupled_step_is_one_response_of_the_ensemble(server):
    grpc, pb, stub = grpc_stub(server)
    got = list(stub.ModelStreamInfer(iter([stream_request(pb, 3, final_flag=True)]), timeout=60))
    assert all(not g.error_message for g in got), [g.error_message for g in got]
    values = [int(np.frombuffer(g.infer_response.raw_output_contents[0], np.int32)[0])
              for g in got if g.infer_response.raw_output_contents]
    # The side branch (300 ms) finished after every token: it reached all three lines.
    assert sorted(values) == [3, 13, 23], values
    finals = [g for g in got if g.infer_response.parameters["triton_final_response"].bool_param]
    assert len(finals) == 1 and not finals[0].infer_response.raw_output_contents
    assert got[-1] is finals[0]


def inference_count(server, model):
    r = server.client().get("/v2/models/%s/stats" % model)
    return r.json()["model_stats"][0]["inference_count"]


def test_zero_responses_and_several_requests_on_one_stream(server):
    grpc, pb, stub = grpc_stub(server)
    before = {m: inference_count(server, m) for m in ("ens_side", "ens_post")}
    got = list(stub.ModelStreamInfer(iter([stream_request(pb, 0), stream_request(pb, 2),
                                           stream_request(pb, 1)]), timeout=60))
    by_id = {}
    for g in got:
        assert not g.error_message, g.error_message
        by_id.setdefault(g.infer_response.id, []).append(
            int(np.frombuffer(g.infer_response.raw_output_contents[0], np.int32)[0]))
    assert {k: sorted(v) for k, v in by_id.items()} == {"n2": [2, 12], "n1": [1]}, by_id
    # The side branch ran once per request, the step after the decoupled one once per response.
    assert inference_count(server, "ens_side") - before["ens_side"] == 3
    assert inference_count(server, "ens_post") - before["ens_post"] == 3


def test_a_decoupled_step_needs_a_decoupled_ensemble(server):
    override = {
        "name": "stream_ens", "platform": "ensemble", "max_batch_size": 0,
        "input": [{"name": "N", "data_type": "TYPE_INT32", "dims": [1]}],
        "output": [{"name": "OUT", "data_type": "TYPE_INT32", "dims": [1]}],
        "ensemble_scheduling": {"step": [
            {"model_name": "py_decoupled", "model_version": -1,
             "input_map": {"COUNT": "N"}, "output_map": {"OUT": "OUT"}}]}}
    body = json.dumps({"parameters": {"config": json.dumps(override)}}).encode()
    r = server.client().post("/v2/repository/models/stream_ens/load", body)
    assert r.status == 400, r
    assert ("step 0 ('py_decoupled') is decoupled (it may send any number of responses), so "
            "the ensemble must be decoupled too") in r.error_message(), r.error_message()
