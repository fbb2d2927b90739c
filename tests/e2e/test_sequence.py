"""Sequence batching (issue 16, item 2) against the real binary, with python models as Triton
users write them: requests that share a correlation ID (HTTP `sequence_id`, `sequence_start`,
`sequence_end`) run in order on one instance with the control inputs START / END / READY /
CORRID filled in by the server, and implicit state (`state [...]`) kept by the server between
them, starting from its initial_state. Both strategies (direct, oldest with a backlog past
max_candidate_sequences), string and integer correlation IDs, idle-out with the sequence's
ledger owner released and reported, every request error Triton gives, and an unload with live
sequences that leaves no owner and no leak."""

import concurrent.futures
import struct
import time

import numpy as np
import pytest

from e2e_helpers import PYTHON_BACKEND_DIR, skip_module_without_python_backend, wait_for
from v2client import Input

skip_module_without_python_backend()
BACKENDS = ["--backend-directory", str(PYTHON_BACKEND_DIR)]

# Echoes the control inputs it was given and adds INPUT to the implicit state.
ACCUMULATE = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            def get(name):
                t = pb_utils.get_input_tensor_by_name(request, name)
                return None if t is None else t.as_numpy()
            x = get("INPUT")
            state = get("STATE_IN")
            total = (state + x).astype(np.float32)
            controls = np.array([[get("START")[0][0], get("END")[0][0], get("READY")[0][0]]],
                                dtype=np.int32)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT", total),
                pb_utils.Tensor("CONTROLS", controls),
                pb_utils.Tensor("CORRID_SEEN", get("CORRID").astype(np.uint64)),
                pb_utils.Tensor("STATE_OUT", total),
            ]))
        return responses
'''

ACCUMULATE_CONFIG = '''name: "{name}"
backend: "python"
max_batch_size: 4
input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT" data_type: TYPE_FP32 dims: [ 1 ] }},
         {{ name: "CONTROLS" data_type: TYPE_INT32 dims: [ 3 ] }},
         {{ name: "CORRID_SEEN" data_type: TYPE_UINT64 dims: [ 1 ] }} ]
instance_group [ {{ kind: KIND_CPU count: {instances} }} ]
sequence_batching {{
  max_sequence_idle_microseconds: {idle_us}
  control_input [
    {{ name: "START" control [ {{ kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "END" control [ {{ kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "READY" control [ {{ kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "CORRID" control [ {{ kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 }} ] }}
  ]
  state [ {{
    input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_FP32 dims: [ 1 ]
    initial_state [ {{ name: "hundred" data_type: TYPE_FP32 dims: [ 1 ] data_file: "hundred" }} ]
  }} ]
  {strategy}
}}
{warmup}
'''

# A warmup sample as Triton users write them for sequence models, control input included: each
# element runs as a sequence of its own through the sequence batcher before the model is READY.
WARMUP = '''model_warmup [ {{ name: "w" batch_size: 2
  inputs {{ key: "INPUT" value {{ data_type: TYPE_FP32 dims: [ 1 ] zero_data: true }} }}
  inputs {{ key: "START" value {{ data_type: TYPE_INT32 dims: [ 1 ] zero_data: true }} }} }} ]'''

# Oldest strategy, string correlation IDs, a model that keeps no state of its own: it answers
# INPUT * 2 and the ID it was told, and records the order it saw requests in per ID.
DOUBLE = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            corrid = pb_utils.get_input_tensor_by_name(request, "CORRID").as_numpy()
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT", (x * 2).astype(np.float32)),
                pb_utils.Tensor("CORRID_SEEN", corrid.astype(np.object_)),
                pb_utils.Tensor("BATCH", np.array([[len(requests)]], dtype=np.int32)),
            ]))
        return responses
'''

DOUBLE_CONFIG = '''name: "seq_oldest"
backend: "python"
max_batch_size: 4
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 1 ] },
         { name: "CORRID_SEEN" data_type: TYPE_STRING dims: [ 1 ] },
         { name: "BATCH" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
sequence_batching {
  max_sequence_idle_microseconds: 30000000
  oldest { max_candidate_sequences: 2 max_queue_delay_microseconds: 0 }
  control_input [
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING } ] }
  ]
}
'''


# A sequence through an ensemble reaches its stateful step with the client's ID and flags.
ENSEMBLE_CONFIG = '''name: "seq_ensemble"
platform: "ensemble"
max_batch_size: 4
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
ensemble_scheduling { step [
  { model_name: "seq_direct" model_version: -1
    input_map { key: "INPUT" value: "IN" } output_map { key: "OUTPUT" value: "OUT" } }
] }
'''


def write_model(repo, name, config, source):
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(config)
    (repo / name / "1" / "model.py").write_text(source)


@pytest.fixture(scope="module")
def server(start_server, tmp_path_factory):
    repo = tmp_path_factory.mktemp("sequence-repo")
    models = {
        "seq_direct": dict(instances=2, idle_us=30000000, strategy="", warmup=""),
        "seq_idle": dict(instances=1, idle_us=300000, strategy="", warmup=""),
        "seq_acc_oldest": dict(instances=1, idle_us=30000000,
                               strategy="oldest { max_candidate_sequences: 4 }",
                               warmup=WARMUP.replace("{{", "{").replace("}}", "}")),
    }
    for name, params in models.items():
        write_model(repo, name, ACCUMULATE_CONFIG.format(name=name, **params), ACCUMULATE)
        (repo / name / "initial_state").mkdir()
        (repo / name / "initial_state" / "hundred").write_bytes(struct.pack("<f", 100.0))
    write_model(repo, "seq_oldest", DOUBLE_CONFIG, DOUBLE)
    (repo / "seq_ensemble" / "1").mkdir(parents=True)
    (repo / "seq_ensemble" / "config.pbtxt").write_text(ENSEMBLE_CONFIG)
    return start_server([repo], BACKENDS, name="sequence",
                        ready_models=list(models) + ["seq_oldest", "seq_ensemble"])


def step(c, model, seq_id, value, start=False, end=False, expect=200, extra_params=None):
    params = {"sequence_id": seq_id}
    if start:
        params["sequence_start"] = True
    if end:
        params["sequence_end"] = True
    params.update(extra_params or {})
    r = c.infer_raw(model, [Input("INPUT", "FP32", np.array([[value]], dtype=np.float32))],
                    parameters=params)
    assert r.status == expect, (r.status, r.body[:400])
    return r


def outputs(r):
    return {o["name"]: o["data"] for o in r.json()["outputs"]}


def walk(node):
    yield node
    for child in node.get("children", []):
        yield from walk(child)


def sequence_owners(c, model):
    report = c.get("/v2/memory").json()
    return {n["path"].rsplit("/", 1)[-1]: n for n in walk(report["owners"])
            if "/model:%s/" % model in n["path"] and n["kind"] == "sequence"}


def test_a_sequence_accumulates_its_implicit_state_from_the_initial_state(server):
    c = server.client()
    r = step(c, "seq_direct", 11, 1.0, start=True)
    out = outputs(r)
    assert out["OUTPUT"] == [101.0]  # the initial_state data_file holds 100
    assert out["CONTROLS"] == [1, 0, 1]  # START, not END, READY
    assert out["CORRID_SEEN"] == [11]
    assert "STATE_OUT" not in out  # the state is the server's, not the client's
    assert outputs(step(c, "seq_direct", 11, 2.0))["OUTPUT"] == [103.0]
    assert outputs(step(c, "seq_direct", 11, 3.0))["CONTROLS"] == [0, 0, 1]
    last = outputs(step(c, "seq_direct", 11, 4.0, end=True))
    assert last["OUTPUT"] == [110.0] and last["CONTROLS"] == [0, 1, 1]
    # Ended: the ID may start again, from the initial state.
    assert outputs(step(c, "seq_direct", 11, 5.0, start=True, end=True))["OUTPUT"] == [105.0]


def test_a_sequence_through_an_ensemble_keeps_its_steps_state(server):
    c = server.client()
    got = []
    for i, value in enumerate((1.0, 2.0, 3.0)):
        r = c.infer_raw("seq_ensemble", [Input("IN", "FP32", np.array([[value]], np.float32))],
                        parameters={"sequence_id": 13, "sequence_start": i == 0,
                                    "sequence_end": i == 2})
        assert r.status == 200, r.body[:300]
        got.append(outputs(r)["OUT"][0])
    assert got == [101.0, 103.0, 106.0]
    r = c.infer_raw("seq_ensemble", [Input("IN", "FP32", np.array([[1.0]], np.float32))])
    assert r.status == 400
    assert "must specify a non-zero or non-empty correlation ID" in r.error_message()


def test_a_client_that_names_its_outputs_still_keeps_the_state(server):
    c = server.client()
    for i, value in enumerate((1.0, 2.0, 3.0)):
        params = {"sequence_id": 12, "sequence_start": i == 0, "sequence_end": i == 2}
        r = c.infer_raw("seq_direct", [Input("INPUT", "FP32", np.array([[value]], np.float32))],
                        outputs=["OUTPUT"], parameters=params)
        assert r.status == 200, r.body[:300]
        assert [o["name"] for o in r.json()["outputs"]] == ["OUTPUT"]
    assert r.json()["outputs"][0]["data"] == [106.0]


def test_concurrent_sequences_each_keep_their_own_state_and_order(server):
    ids = list(range(100, 116))  # more sequences than the 2 x 4 slots: the rest wait

    def run(seq_id):
        c = server.client()
        got = []
        for i in range(6):
            r = step(c, "seq_direct", seq_id, float(seq_id + i), start=i == 0, end=i == 5)
            got.append(outputs(r)["OUTPUT"][0])
        c.close()
        return got

    with concurrent.futures.ThreadPoolExecutor(len(ids)) as pool:
        results = dict(zip(ids, pool.map(run, ids)))
    for seq_id, got in results.items():
        expected = list(100.0 + np.cumsum([seq_id + i for i in range(6)]))
        assert got == expected, (seq_id, got)
    c = server.client()
    assert sequence_owners(c, "seq_direct") == {}, "ended sequences hold no owner"


def test_requests_a_sequence_model_refuses_name_why(server):
    c = server.client()
    x = [Input("INPUT", "FP32", np.array([[1.0]], dtype=np.float32))]
    r = c.infer_raw("seq_direct", x)
    assert r.status == 400
    assert r.error_message() == ("inference request to model 'seq_direct' must specify a "
                                 "non-zero or non-empty correlation ID")
    r = step(c, "seq_direct", 900, 1.0, expect=400)
    assert r.error_message() == ("inference request for sequence 900 to model 'seq_direct' must "
                                 "specify the START flag on the first request of the sequence")
    r = c.infer_raw("seq_direct", [Input("INPUT", "FP32", np.ones((2, 1), np.float32))],
                    parameters={"sequence_id": 901, "sequence_start": True})
    assert r.status == 400
    assert "must specify batch-size 1 due to requirements of sequence batcher" in r.error_message()
    r = step(c, "seq_direct", "text-id", 1.0, start=True, expect=400)
    assert "string correlation ID" in r.error_message() and "TYPE_UINT64" in r.error_message()
    # After END, only a new START continues the ID.
    step(c, "seq_direct", 902, 1.0, start=True, end=True)
    r = step(c, "seq_direct", 902, 1.0, expect=400)
    assert "must specify the START flag" in r.error_message()
    # Refusals are counted as failures.
    stats = c.get("/v2/models/seq_direct/stats").json()["model_stats"][0]["inference_stats"]
    assert stats["fail"]["count"] >= 5


def test_string_sequence_ids_over_grpc(server):
    # sequence_id as string_param reaches a model whose CORRID is TYPE_STRING; an integer ID
    # there is refused as over HTTP.
    grpc, pb, stub = grpc_stub(server)

    def request(seq_id, value, start=False, end=False):
        return grpc_step(pb, "seq_oldest", seq_id, value, start, end)

    def answer(response):
        raw = {o.name: response.raw_output_contents[i] for i, o in enumerate(response.outputs)}
        seen = raw["CORRID_SEEN"]
        return (float(np.frombuffer(raw["OUTPUT"], np.float32)[0]),
                seen[4:4 + struct.unpack("<I", seen[:4])[0]].decode())

    assert answer(stub.ModelInfer(request("grpc-\u00e9", 1.5, start=True), timeout=30)) == \
        (3.0, "grpc-\u00e9")
    assert answer(stub.ModelInfer(request("grpc-\u00e9", 4.0, end=True), timeout=30)) == \
        (8.0, "grpc-\u00e9")
    with pytest.raises(grpc.RpcError) as e:
        stub.ModelInfer(request(7, 1.0, start=True), timeout=30)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "integer correlation ID" in e.value.details() and "TYPE_STRING" in e.value.details()


def test_oldest_strategy_with_string_ids_backlogs_past_its_candidates(server):
    c = server.client()
    # Two candidate slots: A and B take them; C's START waits until one of them ends.
    for seq_id in ("A", "B"):
        out = outputs(step(c, "seq_oldest", seq_id, 1.0, start=True))
        assert out["CORRID_SEEN"] == [seq_id] and out["OUTPUT"] == [2.0]
    waiting = concurrent.futures.ThreadPoolExecutor(1).submit(
        lambda: step(server.client(), "seq_oldest", "C", 5.0, start=True))
    time.sleep(0.5)
    assert not waiting.done(), "C ran while A and B held both candidate slots"
    step(c, "seq_oldest", "A", 1.0, end=True)
    out = outputs(waiting.result(timeout=10))
    assert out["CORRID_SEEN"] == ["C"] and out["OUTPUT"] == [10.0]
    step(c, "seq_oldest", "B", 1.0, end=True)
    step(c, "seq_oldest", "C", 1.0, end=True)
    r = step(c, "seq_oldest", 7, 1.0, start=True, expect=400)
    assert "integer correlation ID" in r.error_message() and "TYPE_STRING" in r.error_message()


def test_oldest_strategy_batches_requests_of_different_sequences(server):
    c = server.client()
    # A slow first request keeps the instance busy while the others queue behind it.
    ids = ["b%d" % i for i in range(4)]

    def run(seq_id):
        cl = server.client()
        out = [outputs(step(cl, "seq_acc_oldest", 500 + int(seq_id[1:]), float(i),
                            start=i == 0, end=i == 2))
               for i in range(3)]
        cl.close()
        return out

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(run, ids))
    for out in results:
        assert [o["OUTPUT"][0] for o in out] == [100.0, 101.0, 103.0]
    assert sequence_owners(c, "seq_acc_oldest") == {}
    # The warmup's two sequences ran before any of these, and left nothing behind.
    stats = c.get("/v2/models/seq_acc_oldest/stats").json()["model_stats"][0]
    assert stats["inference_count"] == 2 + 4 * 3, stats


def metrics_text(server):
    import re
    import urllib.request
    m = re.search(r"metrics listening on [^ ]+:(\d+)", server.stderr_text())
    assert m, "no 'metrics listening on' line in the log"
    with urllib.request.urlopen("http://127.0.0.1:%s/metrics" % m.group(1), timeout=10) as r:
        return r.read().decode()


def test_an_idle_sequence_is_released_with_its_state_and_reported(server):
    c = server.client()
    step(c, "seq_idle", 7, 1.0, start=True)
    text = metrics_text(server)
    assert 'vramd_sequences_live{model="seq_idle",version="1"} 1' in text, text[-2000:]
    assert 'vramd_sequence_idle_releases_total{model="seq_idle",version="1"} 0' in text
    assert 'vramd_sequences_live{model="seq_oldest"' in text
    owners = sequence_owners(c, "seq_idle")
    assert list(owners) == ["sequence:sequence 7"], owners
    assert owners["sequence:sequence 7"]["live_bytes"] == 4  # one FP32 of state
    wait_for(lambda: sequence_owners(c, "seq_idle") == {}, timeout=10,
             what="the idle sequence's owner to close")
    r = step(c, "seq_idle", 7, 1.0, expect=400)
    assert "must specify the START flag" in r.error_message()
    wait_for(lambda: "sequence 7 idled out" in server.log(), timeout=5,
             what="the idle-out warning")
    report = c.get("/v2/memory").json()
    assert report["leaks"] == [], report["leaks"]
    text = metrics_text(server)
    assert 'vramd_sequences_live{model="seq_idle",version="1"} 0' in text
    assert 'vramd_sequence_idle_releases_total{model="seq_idle",version="1"} 1' in text


def test_unloading_a_model_with_live_sequences_leaves_no_owner_and_no_leak(start_server, tmp_path):
    repo = tmp_path / "repo"
    write_model(repo, "seq_unload", ACCUMULATE_CONFIG.format(
        name="seq_unload", instances=1, idle_us=30000000, strategy="", warmup=""), ACCUMULATE)
    (repo / "seq_unload" / "initial_state").mkdir()
    (repo / "seq_unload" / "initial_state" / "hundred").write_bytes(struct.pack("<f", 1.0))
    s = start_server([repo], BACKENDS + ["--model-control-mode", "explicit",
                                         "--load-model", "seq_unload"],
                     name="seq_unload", ready_models=["seq_unload"])
    c = s.client()
    for seq_id in (1, 2, 3):
        step(c, "seq_unload", seq_id, 1.0, start=True)
    assert len(sequence_owners(c, "seq_unload")) == 3
    assert c.post("/v2/repository/models/seq_unload/unload").status == 200
    wait_for(lambda: not any("model:seq_unload" in n["path"]
                             for n in walk(c.get("/v2/memory").json()["owners"])),
             timeout=15, what="seq_unload's owners to close")
    report = c.get("/v2/memory").json()
    assert report["leaks"] == [] and report["leaked_bytes_total"] == 0


IDENTITY_SEQUENCE = '''name: "seq_identity"
backend: "identity"
max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 2 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 2 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
parameters { key: "execute_delay_us" value: { string_value: "300000" } }
sequence_batching {
  control_input [
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY fp32_false_true: [ 0, 1 ] } ] }
  ]
}
'''


def test_direct_on_a_joined_batch_keeps_slots_with_uncounted_null_requests(start_server,
                                                                           tmp_path):
    # A built-in backend joins a batch into one tensor: sequence 1 holds slot 0 and is running
    # when sequences 2 and 3 start in slots 1 and 2, so their batch is [null, 2, 3]. Each gets
    # its own row back, and the null request is neither an inference nor a sample.
    repo = tmp_path / "repo"
    (repo / "seq_identity" / "1").mkdir(parents=True)
    (repo / "seq_identity" / "config.pbtxt").write_text(IDENTITY_SEQUENCE)
    s = start_server([repo], [], name="seq_identity", ready_models=["seq_identity"])

    def send(seq_id):
        x = np.array([[seq_id, -seq_id]], dtype=np.int32)
        r = s.client().infer("seq_identity", [Input("INPUT0", "INT32", x)],
                             parameters={"sequence_id": seq_id, "sequence_start": True,
                                         "sequence_end": True})
        return r.outputs["OUTPUT0"].tolist()

    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        first = pool.submit(send, 1)
        time.sleep(0.1)
        later = [pool.submit(send, 2), pool.submit(send, 3)]
        assert first.result() == [[1, -1]]
        assert [f.result() for f in later] == [[[2, -2]], [[3, -3]]]
    stats = s.client().get("/v2/models/seq_identity/stats").json()["model_stats"][0]
    assert stats["inference_count"] == 3, stats
    assert stats["execution_count"] == 2, stats
    assert stats["inference_stats"]["success"]["count"] == 3, stats


def grpc_stub(server):
    """The gRPC stub for `server`, or a skip naming what is missing."""
    from e2e_helpers import grpc_modules
    grpc, pb, pb_grpc = grpc_modules()
    channel = grpc.insecure_channel("127.0.0.1:%d" % server.grpc_port())
    grpc.channel_ready_future(channel).result(timeout=30)
    return grpc, pb, pb_grpc.GRPCInferenceServiceStub(channel)


def grpc_step(pb, model, seq_id, value, start=False, end=False, outputs=()):
    """One request of a sequence as tritonclient.grpc sends it: sequence_id (an int64 or a
    string), sequence_start and sequence_end parameters; its id names the sequence and value."""
    r = pb.ModelInferRequest(model_name=model, id="%s:%s" % (seq_id, value))
    if isinstance(seq_id, str):
        r.parameters["sequence_id"].string_param = seq_id
    else:
        r.parameters["sequence_id"].int64_param = seq_id
    r.parameters["sequence_start"].bool_param = start
    r.parameters["sequence_end"].bool_param = end
    r.inputs.add(name="INPUT", datatype="FP32", shape=[1, 1])
    r.raw_input_contents.append(np.array([[value]], np.float32).tobytes())
    for name in outputs:
        r.outputs.add(name=name)
    return r


def test_sequences_over_grpc_infer_and_stream(server):
    # As tritonclient.grpc sends them: sequence_id / sequence_start / sequence_end parameters,
    # through ModelInfer and through one ModelStreamInfer stream (the sequence stream example).
    grpc, pb, stub = grpc_stub(server)

    def request(seq_id, value, start=False, end=False):
        return grpc_step(pb, "seq_direct", seq_id, value, start, end, outputs=["OUTPUT"])

    def value(response):
        return float(np.frombuffer(response.raw_output_contents[0], np.float32)[0])

    assert value(stub.ModelInfer(request(31, 1.0, start=True), timeout=30)) == 101.0
    assert value(stub.ModelInfer(request(31, 2.0, end=True), timeout=30)) == 103.0
    # Two sequences interleaved on one stream, each keeping its own state.
    sends = [request(41, 1.0, start=True), request(42, 10.0, start=True), request(41, 2.0),
             request(42, 20.0), request(41, 3.0, end=True), request(42, 30.0, end=True)]
    got = list(stub.ModelStreamInfer(iter(sends), timeout=60))
    assert all(not g.error_message for g in got), [g.error_message for g in got]
    # Answers come as they finish: the two sequences' may interleave either way.
    answers = {g.infer_response.id: value(g.infer_response) for g in got}
    assert answers == {"41:1.0": 101.0, "41:2.0": 103.0, "41:3.0": 106.0,
                       "42:10.0": 110.0, "42:20.0": 130.0, "42:30.0": 160.0}
    with pytest.raises(grpc.RpcError) as e:
        stub.ModelInfer(request(43, 1.0), timeout=30)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "must specify the START flag" in e.value.details()
