"""Triton's generate extension over HTTP (POST .../generate and .../generate_stream), request
parameters on infer, infer on a decoupled model, and what a client that leaves mid-request
does to the connection's state. Models are built-in identity ones; a decoupled python model's
streams are tested elsewhere (they need the python backend)."""

import http.client
import json
import socket
import time

import numpy as np
import pytest

from e2e_helpers import PYTHON_BACKEND_DIR, PYTHON_LIBRARY
from v2client import Input

IDENTITY = """
name: "{name}"
backend: "identity"
max_batch_size: {max_batch}
input [ {{ name: "{input}" data_type: {dtype} dims: [ {dims} ] }} ]
output [ {{ name: "{output}" data_type: {dtype} dims: [ {dims} ] }} ]
{extra}
"""

MODELS = {
    "fp32": dict(max_batch=0, input="INPUT0", output="OUTPUT0", dtype="TYPE_FP32", dims="-1",
                 extra=""),
    "batched": dict(max_batch=8, input="INPUT0", output="OUTPUT0", dtype="TYPE_FP32", dims="3",
                    extra=""),
    # LLM-style names: the identity backend pairs one input with one output by position.
    "text": dict(max_batch=0, input="text_input", output="text_output", dtype="TYPE_STRING",
                 dims="1", extra=""),
    "slow": dict(max_batch=0, input="INPUT0", output="OUTPUT0", dtype="TYPE_INT32", dims="-1",
                 extra='instance_group [ { kind: KIND_CPU count: 1 } ]\n'
                       'parameters { key: "execute_delay_us" value { string_value: "600000" } }'),
}

EVENT_STREAM = "text/event-stream; charset=utf-8"


@pytest.fixture(scope="module")
def gen_server(start_server, tmp_path_factory):
    repo = tmp_path_factory.mktemp("generate-repo")
    for name, fields in MODELS.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(IDENTITY.format(name=name, **fields))
    return start_server([repo], extra_args=["--http-thread-count", "2"], name="generate",
                        ready_models=list(MODELS))


def post(server, path, body, headers=None, timeout=30):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
    try:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        conn.request("POST", path, body=data, headers=headers or {})
        r = conn.getresponse()
        return r.status, dict((k.lower(), v) for k, v in r.getheaders()), r.read()
    finally:
        conn.close()


def events(body):
    """The data of each server-sent event, as JSON."""
    text = body.decode()
    assert text.endswith("\n\n"), repr(text)
    chunks = text[:-2].split("\n\n")
    out = []
    for c in chunks:
        assert c.startswith("data: "), repr(c)
        out.append(json.loads(c[len("data: "):]))
    return out


def test_generate_maps_members_to_inputs_and_outputs_to_members(gen_server):
    status, headers, body = post(gen_server, "/v2/models/fp32/generate",
                                 {"INPUT0": [1.5, 2, 3], "temperature": 0.7,
                                  "parameters": {"top_k": 3}})
    assert status == 200, body
    assert headers["content-type"] == "application/json"
    assert json.loads(body) == {"model_name": "fp32", "model_version": "1",
                                "OUTPUT0": [1.5, 2.0, 3.0]}


def test_a_one_element_output_is_a_scalar(gen_server):
    status, _, body = post(gen_server, "/v2/models/fp32/versions/1/generate", {"INPUT0": 4})
    assert status == 200, body
    assert json.loads(body)["OUTPUT0"] == 4.0
    status, _, body = post(gen_server, "/v2/models/text/generate", {"text_input": "héllo"})
    assert status == 200, body
    assert json.loads(body) == {"model_name": "text", "model_version": "1",
                                "text_output": "héllo"}


def test_a_batching_model_gets_a_batch_of_one(gen_server):
    status, _, body = post(gen_server, "/v2/models/batched/generate", {"INPUT0": [1, 2, 3]})
    assert status == 200, body
    assert json.loads(body)["OUTPUT0"] == [1.0, 2.0, 3.0]
    status, _, body = post(gen_server, "/v2/models/batched/generate", {"INPUT0": [1, 2]})
    assert status == 400, body
    assert "can not convert input 'INPUT0' to tensor with proper shape" in \
        json.loads(body)["error"]


def test_generate_stream_is_server_sent_events_chunked(gen_server):
    status, headers, body = post(gen_server, "/v2/models/text/generate_stream",
                                 {"text_input": "streamed"})
    assert status == 200, body
    assert headers["content-type"] == EVENT_STREAM
    assert headers.get("transfer-encoding") == "chunked"
    assert "content-length" not in headers
    assert events(body) == [{"model_name": "text", "model_version": "1",
                             "text_output": "streamed"}]


def raw_exchange(server, request, timeout=10):
    """Sends `request` bytes and reads until the server closes the connection."""
    s = socket.create_connection(("127.0.0.1", server.port), timeout=timeout)
    try:
        s.sendall(request)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return data
            data += chunk
    finally:
        s.close()


def generate_request(path, body, version="1.1", extra=""):
    data = json.dumps(body).encode()
    return (("POST %s HTTP/%s\r\nHost: x\r\nContent-Type: application/json\r\n"
             "Content-Length: %d\r\n%s\r\n" % (path, version, len(data), extra)).encode() + data)


def test_stream_framing_on_the_wire_and_the_connection_stays_usable(gen_server):
    # A stream, then an ordinary request on the same connection (the second closes it).
    req = (generate_request("/v2/models/fp32/generate_stream", {"INPUT0": [1, 2]}) +
           generate_request("/v2/models/fp32/generate", {"INPUT0": [3]},
                            extra="Connection: close\r\n"))
    data = raw_exchange(gen_server, req)
    head, rest = data.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200 OK\r\n"), head
    assert b"Transfer-Encoding: chunked" in head
    event = b'data: {"model_name":"fp32","model_version":"1","OUTPUT0":[1.0,2.0]}\n\n'
    chunk = b"%x\r\n%s\r\n" % (len(event), event)
    assert rest.startswith(chunk + b"0\r\n\r\n"), rest
    second = rest[len(chunk) + 5:]
    assert second.startswith(b"HTTP/1.1 200 OK\r\n"), second
    assert second.endswith(b'{"model_name":"fp32","model_version":"1","OUTPUT0":3.0}')


def test_http10_stream_is_not_chunked_and_ends_with_the_connection(gen_server):
    data = raw_exchange(gen_server, generate_request("/v2/models/fp32/generate_stream",
                                                     {"INPUT0": [5]}, version="1.0"))
    head, body = data.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.0 200 OK\r\n"), head
    assert b"chunked" not in head.lower()
    assert body == b'data: {"model_name":"fp32","model_version":"1","OUTPUT0":5.0}\n\n'


@pytest.mark.parametrize("path", ["generate", "generate_stream"])
def test_errors_before_inference_are_json_with_their_status(gen_server, path):
    status, headers, body = post(gen_server, "/v2/models/nope/" + path, {"x": 1})
    assert status == 404, body
    assert headers["content-type"] == "application/json"
    assert "error" in json.loads(body)
    status, headers, body = post(gen_server, "/v2/models/fp32/" + path,
                                 {"INPUT0": [1], "stop": ["a"]})
    assert status == 400, body
    assert headers["content-type"] == "application/json"
    assert json.loads(body)["error"] == ("generate request: parameter 'stop' must be a boolean, "
                                         "a number or a string, got an array")
    status, _, body = post(gen_server, "/v2/models/fp32/" + path, b"{not json")
    assert status == 400, body
    assert "failed to parse the generate request JSON" in json.loads(body)["error"]


def test_generate_without_the_models_input_is_the_validators_error(gen_server):
    status, _, body = post(gen_server, "/v2/models/fp32/generate", {"prompt": "x"})
    assert status == 400, body
    assert "INPUT0" in json.loads(body)["error"]


def test_get_on_generate_is_not_allowed(gen_server):
    conn = http.client.HTTPConnection("127.0.0.1", gen_server.port, timeout=10)
    try:
        conn.request("GET", "/v2/models/fp32/generate")
        r = conn.getresponse()
        assert r.status == 405
        r.read()
    finally:
        conn.close()


def test_infer_request_parameters(gen_server):
    client = gen_server.client()
    try:
        x = np.array([1.0, 2.0], dtype=np.float32)
        ok = client.infer("fp32", [Input("INPUT0", "FP32", x)],
                          parameters={"custom": "v", "n": 3, "ratio": 0.5, "flag": True,
                                      "sequence_id": "s1", "sequence_start": True,
                                      "priority": 1})
        np.testing.assert_array_equal(ok.outputs["OUTPUT0"], x)
        for params, message in [
                ({"nested": {"a": 1}}, "request parameter 'nested' must be a boolean, a number "
                                       "or a string, got an object"),
                ({"triton_x": 1}, "keys starting with 'triton_' are reserved for Triton usage"),
                ({"sequence_start": 1}, "'sequence_start' must be true or false")]:
            r = client.infer_raw("fp32", [Input("INPUT0", "FP32", x)], parameters=params)
            assert r.status == 400, r
            assert message in r.error_message()
    finally:
        client.close()


def test_server_metadata_lists_the_parameters_extension(gen_server):
    conn = http.client.HTTPConnection("127.0.0.1", gen_server.port, timeout=10)
    try:
        conn.request("GET", "/v2")
        assert "parameters" in json.loads(conn.getresponse().read())["extensions"]
    finally:
        conn.close()


def slow_infer_request(values, extra=""):
    body = json.dumps({"inputs": [{"name": "INPUT0", "shape": [len(values)],
                                   "datatype": "INT32", "data": values}]}).encode()
    return (("POST /v2/models/slow/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n%s\r\n"
             % (len(body), extra)).encode() + body)


def warm_up_slow(server):
    """The scheduler runs a model's first executions inline (on the HTTP thread) until it knows
    them slow; after this, a slow request is answered later, from its instance thread."""
    for _ in range(2):
        raw_exchange(server, slow_infer_request([0], extra="Connection: close\r\n"), timeout=20)


def test_pipelined_requests_behind_a_slow_one_are_answered_in_order(gen_server):
    # The first is answered later (watching the connection meanwhile); the second, already in
    # the buffer or read by the watch, must still be parsed and answered after it.
    warm_up_slow(gen_server)
    data = raw_exchange(gen_server, slow_infer_request([1]) +
                        slow_infer_request([2], extra="Connection: close\r\n"), timeout=20)
    replies = data.split(b"HTTP/1.1 200 OK\r\n")
    assert len(replies) == 3, data
    assert b'"data":[1]' in replies[1] and b'"data":[2]' in replies[2], data


def test_a_client_leaving_mid_request_leaves_the_server_serving(gen_server):
    warm_up_slow(gen_server)
    for _ in range(3):
        s = socket.create_connection(("127.0.0.1", gen_server.port), timeout=10)
        s.sendall(slow_infer_request([7]))
        time.sleep(0.1)
        s.close()  # before the 0.6 s answer
    time.sleep(1.0)
    status, _, body = post(gen_server, "/v2/models/fp32/generate", {"INPUT0": [1]})
    assert status == 200, body
    assert gen_server.alive()


DECOUPLED = """
name: "decoupled"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""

MODEL_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            x = pb_utils.get_input_tensor_by_name(request, "IN")
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x.as_numpy())]),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


def test_infer_on_a_decoupled_model_is_refused_as_triton_does(start_server, tmp_path_factory):
    repo = tmp_path_factory.mktemp("decoupled-repo")
    (repo / "decoupled" / "1").mkdir(parents=True)
    (repo / "decoupled" / "config.pbtxt").write_text(DECOUPLED)
    (repo / "decoupled" / "1" / "model.py").write_text(MODEL_PY)
    if not PYTHON_LIBRARY.is_file():
        pytest.skip("no python backend at %s: the decoupled model is a model.py" % PYTHON_LIBRARY)
    server = start_server([repo], ["--backend-directory", str(PYTHON_BACKEND_DIR)],
                          name="decoupled", ready_models=["decoupled"])
    client = server.client()
    try:
        r = client.infer_raw("decoupled", [Input("IN", "FP32", np.ones(1, np.float32))])
        assert r.status == 501, r
        assert r.error_message() == ("HTTP end point doesn't support models with decoupled "
                                     "transaction policy")
    finally:
        client.close()
    status, _, body = post(server, "/v2/models/decoupled/generate", {"IN": 2})
    assert status == 200, body
    assert json.loads(body)["OUT"] == 2.0
