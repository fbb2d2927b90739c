"""Malformed requests: each must get the right 4xx and an error message that names the problem
(the field, tensor, header or value at fault). The server must survive every one of them: it is
checked alive after each test, and the last test runs a correct inference."""

import json

import numpy as np
import pytest

from e2e_helpers import FIXTURE_REPO, loadable_fixture_models
from v2client import HEADER_LENGTH, Input, InferResult, RawConnection, raw_http, serialize_bytes

INFER = "/v2/models/identity_fp32/infer"
ADD_SUB = "/v2/models/add_sub/infer"
JSON_CT = {"Content-Type": "application/json"}


@pytest.fixture(autouse=True)
def server_survives(server):
    yield
    assert server.alive(), "vramd died during this test\n" + server.describe()


def assert_error(r, status, *words):
    """`words`: each a string or a tuple of alternatives; every entry must appear in the error
    message (case-insensitive)."""
    assert r is not None, "no response: the server closed the connection without answering"
    assert r.status == status, "expected HTTP %d, got %d: %r" % (status, r.status, r.body[:400])
    msg = r.error_message()
    assert msg.strip(), "empty error message"
    low = msg.lower()
    for w in words:
        alts = w if isinstance(w, tuple) else (w,)
        assert any(a.lower() in low for a in alts), (
            "error message %r names none of %r" % (msg, alts))
    return msg


def J(obj):
    return json.dumps(obj).encode()


def fp32_input(**over):
    t = {"name": "INPUT0", "datatype": "FP32", "shape": [3], "data": [1.0, 2.0, 3.0]}
    t.update(over)
    return {k: v for k, v in t.items() if v is not None}


def add_sub_body(shape0=(1, 16), shape1=(1, 16), outputs=None, **extra):
    def t(name, shape):
        n = int(np.prod(shape)) if all(d >= 0 for d in shape) else 0
        return {"name": name, "datatype": "FP32", "shape": list(shape), "data": [1.0] * n}
    body = {"inputs": [t("INPUT0", shape0), t("INPUT1", shape1)]}
    if outputs is not None:
        body["outputs"] = outputs
    body.update(extra)
    return J(body)


def binary_body(json_obj, binary):
    header = J(json_obj)
    return header + binary, {"Content-Type": "application/octet-stream",
                             HEADER_LENGTH: str(len(header))}


# -- JSON body errors ------------------------------------------------------------------------------

JSON_CASES = [
    # id, path, body, words
    ("invalid_json", INFER, b'{"inputs": [', [("json", "parse")]),
    ("empty_body", INFER, b"", [("json", "parse", "empty", "body")]),
    ("body_is_array", INFER, b"[1, 2]", [("object",)]),
    ("trailing_garbage", INFER, J({"inputs": [fp32_input()]}) + b" xyz", [("json", "parse", "root")]),
    ("missing_inputs", INFER, J({}), ["inputs"]),
    ("inputs_not_array", INFER, J({"inputs": {"name": "INPUT0"}}), ["inputs"]),
    ("input_not_object", INFER, J({"inputs": [5]}), ["input"]),
    ("input_missing_name", INFER, J({"inputs": [fp32_input(name=None)]}), ["name"]),
    ("input_name_not_string", INFER, J({"inputs": [fp32_input(name=7)]}), ["name"]),
    ("input_missing_datatype", INFER, J({"inputs": [fp32_input(datatype=None)]}), ["datatype"]),
    ("input_missing_shape", INFER, J({"inputs": [fp32_input(shape=None)]}), ["shape"]),
    ("shape_not_array", INFER, J({"inputs": [fp32_input(shape="3")]}), ["shape"]),
    ("shape_float_dim", INFER, J({"inputs": [fp32_input(shape=[1.5])]}), ["shape"]),
    ("shape_string_dim", INFER, J({"inputs": [fp32_input(shape=["3"])]}), ["shape"]),
    ("shape_dim_over_int64", INFER, J({"inputs": [fp32_input(shape=[2**64])]}), ["shape"]),
    ("negative_dim", INFER, J({"inputs": [fp32_input(shape=[-1], data=[])]}),
     [("shape", "dim", "negative")]),
    ("unknown_datatype", INFER, J({"inputs": [fp32_input(datatype="FP128")]}), ["FP128"]),
    ("lowercase_datatype", INFER, J({"inputs": [fp32_input(datatype="fp32")]}), ["fp32"]),
    ("datatype_not_string", INFER, J({"inputs": [fp32_input(datatype=11)]}), ["datatype"]),
    ("wrong_datatype", INFER, J({"inputs": [fp32_input(datatype="FP64")]}),
     ["INPUT0", "FP32", "FP64"]),
    ("missing_data", INFER, J({"inputs": [fp32_input(data=None)]}), ["INPUT0"]),
    ("data_is_object", INFER, J({"inputs": [fp32_input(data={"a": 1})]}), ["INPUT0"]),
    ("data_count_too_few", INFER, J({"inputs": [fp32_input(shape=[4])]}), ["INPUT0"]),
    ("data_count_too_many", INFER, J({"inputs": [fp32_input(shape=[2])]}), ["INPUT0"]),
    ("data_string_for_fp32", INFER, J({"inputs": [fp32_input(data=["a", "b", "c"])]}),
     ["INPUT0"]),
    ("data_null_element", INFER, J({"inputs": [fp32_input(data=[1.0, None, 3.0])]}), ["INPUT0"]),
    ("non_string_id", INFER, J({"id": 5, "inputs": [fp32_input()]}), ["id"]),
    ("object_id", INFER, J({"id": {"x": 1}, "inputs": [fp32_input()]}), ["id"]),
    ("parameters_not_object", INFER, J({"parameters": 5, "inputs": [fp32_input()]}),
     ["parameters"]),
    ("binary_data_output_not_bool", INFER,
     J({"parameters": {"binary_data_output": "yes"}, "inputs": [fp32_input()]}),
     ["binary_data_output"]),
    ("unknown_input", INFER,
     J({"inputs": [fp32_input(), fp32_input(name="INPUT9")]}), ["INPUT9"]),
    ("duplicate_input", INFER, J({"inputs": [fp32_input(), fp32_input()]}), ["INPUT0"]),
    ("empty_inputs", INFER, J({"inputs": []}), [("INPUT0", "inputs")]),
    ("missing_required_input", ADD_SUB,
     J({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": [0.0] * 16}]}),
     ["INPUT1"]),
    ("identity_rank_mismatch", INFER,
     J({"inputs": [fp32_input(shape=[1, 3])]}), ["INPUT0"]),
    ("shape_mismatch", ADD_SUB, add_sub_body(shape0=(1, 15)), ["INPUT0", "15"]),
    ("missing_batch_dim", ADD_SUB, add_sub_body(shape0=(16,), shape1=(16,)), ["INPUT0"]),
    ("batch_too_large", ADD_SUB, add_sub_body(shape0=(9, 16), shape1=(9, 16)),
     [("batch",), ("8", "9")]),
    ("batch_zero", ADD_SUB, add_sub_body(shape0=(0, 16), shape1=(0, 16)), [("batch",)]),
    ("unknown_output", ADD_SUB, add_sub_body(outputs=[{"name": "OUTPUT9"}]), ["OUTPUT9"]),
    ("duplicate_output", ADD_SUB,
     add_sub_body(outputs=[{"name": "OUTPUT0"}, {"name": "OUTPUT0"}]), ["OUTPUT0"]),
    ("outputs_not_array", ADD_SUB, add_sub_body(outputs={"name": "OUTPUT0"}), ["outputs"]),
    ("output_missing_name", ADD_SUB, add_sub_body(outputs=[{}]), ["name"]),
    ("output_binary_data_not_bool", ADD_SUB,
     add_sub_body(outputs=[{"name": "OUTPUT0", "parameters": {"binary_data": "yes"}}]),
     ["binary_data"]),
    ("bytes_data_number", "/v2/models/identity_bytes/infer",
     J({"inputs": [{"name": "INPUT0", "datatype": "BYTES", "shape": [2], "data": ["a", 5]}]}),
     ["INPUT0"]),
    ("binary_data_size_without_binary_part", INFER,
     J({"inputs": [fp32_input(data=None, parameters={"binary_data_size": 12})]}),
     [("INPUT0", "binary")]),
    ("huge_shape_json", INFER,
     J({"inputs": [fp32_input(shape=[2**62], data=[1.0])]}), ["INPUT0"]),
]


@pytest.mark.parametrize("path,body,words", [c[1:] for c in JSON_CASES],
                         ids=[c[0] for c in JSON_CASES])
def test_malformed_json_request(client, path, body, words):
    r = client.post(path, body, JSON_CT)
    assert_error(r, 400, *words)


# Values that do not fit the tensor's type must be refused, never wrapped or truncated.
OUT_OF_RANGE = [
    ("UINT8", 256), ("UINT8", -1), ("INT8", 128), ("INT8", -129), ("UINT16", 65536),
    ("INT16", 40000), ("UINT32", -1), ("UINT32", 2**32), ("INT32", 2**31), ("INT32", -2**31 - 1),
    ("INT64", 2**63), ("UINT64", -1), ("UINT64", 2**64), ("INT32", 1.5), ("UINT8", 2.5),
    ("BOOL", "yes"), ("BOOL", 2), ("INT64", "7"),
]


@pytest.mark.parametrize("datatype,value", OUT_OF_RANGE,
                         ids=["%s=%r" % c for c in OUT_OF_RANGE])
def test_value_out_of_range_for_type(client, datatype, value):
    body = J({"inputs": [{"name": "INPUT0", "datatype": datatype, "shape": [2],
                          "data": [0 if datatype != "BOOL" else True, value]}]})
    r = client.post("/v2/models/identity_%s/infer" % datatype.lower(), body, JSON_CT)
    assert_error(r, 400, "INPUT0")


# -- binary tensor data errors ---------------------------------------------------------------------

F3 = np.array([1, 2, 3], dtype=np.float32).tobytes()


def bin_input(size, shape=(3,), datatype="FP32", name="INPUT0"):
    return {"name": name, "datatype": datatype, "shape": list(shape),
            "parameters": {"binary_data_size": size}}


def test_binary_size_does_not_match_shape(client):
    body, h = binary_body({"inputs": [bin_input(8)]}, F3[:8])
    assert_error(client.post(INFER, body, h), 400, "INPUT0")


def test_binary_sizes_less_than_body(client):
    body, h = binary_body({"inputs": [bin_input(12)]}, F3 + b"\0\0\0\0")
    assert_error(client.post(INFER, body, h), 400, ("binary", "bytes", "size"))


def test_binary_sizes_more_than_body(client):
    body, h = binary_body({"inputs": [bin_input(12)]}, F3[:8])
    assert_error(client.post(INFER, body, h), 400, ("INPUT0", "binary", "bytes"))


def test_binary_sizes_add_up_across_inputs(client):
    a = np.zeros((1, 16), np.float32).tobytes()
    body, h = binary_body({"inputs": [bin_input(64, (1, 16)), bin_input(64, (1, 16), name="INPUT1")]},
                          a + a[:60])
    assert_error(client.post(ADD_SUB, body, h), 400, ("INPUT1", "binary", "bytes"))


def test_header_length_larger_than_body(client):
    body, h = binary_body({"inputs": [bin_input(12)]}, F3)
    h[HEADER_LENGTH] = str(len(body) + 10)
    assert_error(client.post(INFER, body, h), 400,
                 ("Inference-Header-Content-Length", "header", "length"))


def test_header_length_cuts_json(client):
    body, h = binary_body({"inputs": [bin_input(12)]}, F3)
    h[HEADER_LENGTH] = str(int(h[HEADER_LENGTH]) - 5)
    assert_error(client.post(INFER, body, h), 400, ("json", "parse"))


@pytest.mark.parametrize("value", ["abc", "-5", "12x", "", "99999999999999999999999"])
def test_header_length_not_a_number(client, value):
    body, h = binary_body({"inputs": [bin_input(12)]}, F3)
    h[HEADER_LENGTH] = value
    assert_error(client.post(INFER, body, h), 400, ("Inference-Header-Content-Length", "header"))


@pytest.mark.parametrize("size", [-4, "12", 1.5, 2**62, 2**64])
def test_bad_binary_data_size(client, size):
    body, h = binary_body({"inputs": [bin_input(size)]}, F3)
    assert_error(client.post(INFER, body, h), 400, ("binary_data_size", "INPUT0"))


def test_huge_shape_binary(client):
    body, h = binary_body({"inputs": [bin_input(12, shape=(2**63 - 1,))]}, F3)
    assert_error(client.post(INFER, body, h), 400, "INPUT0")


def test_truncated_bytes_element(client):
    raw = serialize_bytes([b"ok"]) + b"\x64\x00\x00\x00" + b"only ten b"
    body, h = binary_body({"inputs": [bin_input(len(raw), (2,), "BYTES")]}, raw)
    assert_error(client.post("/v2/models/identity_bytes/infer", body, h), 400, "INPUT0")


def test_truncated_bytes_length_prefix(client):
    raw = serialize_bytes([b"ok"]) + b"\x01\x00"
    body, h = binary_body({"inputs": [bin_input(len(raw), (2,), "BYTES")]}, raw)
    assert_error(client.post("/v2/models/identity_bytes/infer", body, h), 400, "INPUT0")


def test_bytes_element_count_mismatch(client):
    raw = serialize_bytes([b"a", b"b"])
    body, h = binary_body({"inputs": [bin_input(len(raw), (3,), "BYTES")]}, raw)
    assert_error(client.post("/v2/models/identity_bytes/infer", body, h), 400, "INPUT0")


# -- URL errors ------------------------------------------------------------------------------------


def test_unknown_model_404(client):
    r = client.post("/v2/models/no_such_model/infer", J({"inputs": [fp32_input()]}), JSON_CT)
    assert_error(r, 404, "no_such_model")


def test_unknown_version_404(client):
    r = client.post("/v2/models/identity_fp32/versions/2/infer", J({"inputs": [fp32_input()]}),
                    JSON_CT)
    assert_error(r, 404, "identity_fp32")


@pytest.mark.parametrize("version", ["abc", "0", "-1", "1.0", "99999999999999999999"])
def test_bad_version_string(client, version):
    r = client.post("/v2/models/identity_fp32/versions/%s/infer" % version,
                    J({"inputs": [fp32_input()]}), JSON_CT)
    assert r.status in (400, 404), r
    assert r.error_message()


def test_broken_model_infer(client):
    r = client.post("/v2/models/broken_syntax/infer", J({"inputs": [fp32_input()]}), JSON_CT)
    assert r.status in (400, 404, 503), r
    assert "broken_syntax" in r.error_message()


def test_infer_wrong_method(client):
    r = client.get("/v2/models/identity_fp32/infer")
    assert_error(r, 405, ("GET", "method"))


# -- HTTP-level errors (raw sockets) ---------------------------------------------------------------


def _raw_post(server, headers, body=b"", path=INFER, **kw):
    head = "POST %s HTTP/1.1\r\nHost: x\r\n" % path
    for k, v in headers:
        head += "%s: %s\r\n" % (k, v)
    return raw_http(server.host, server.port, head.encode() + b"\r\n" + body, **kw)


def _assert_http_error(r, statuses, *words):
    assert r is not None, "the server closed the connection without an HTTP response"
    assert r.status in statuses, "expected %s, got %d %r" % (statuses, r.status, r.body[:300])
    text = r.body.decode("utf-8", "replace").lower()
    for w in words:
        alts = w if isinstance(w, tuple) else (w,)
        assert any(a.lower() in text for a in alts), (
            "error body %r names none of %r" % (r.body[:300], alts))


@pytest.mark.parametrize("value", ["abc", "-1", "12abc", "0x10"])
def test_garbage_content_length(server, value):
    body = J({"inputs": [fp32_input()]})
    r = _raw_post(server, [("Content-Type", "application/json"), ("Content-Length", value)], body)
    _assert_http_error(r, (400,), "content-length")


def test_conflicting_content_lengths(server):
    body = J({"inputs": [fp32_input()]})
    r = _raw_post(server, [("Content-Length", str(len(body))), ("Content-Length", "5")], body)
    _assert_http_error(r, (400,), "content-length")


def test_garbage_request_line(server):
    r = raw_http(server.host, server.port, b"HELLO THERE\r\n\r\n")
    _assert_http_error(r, (400,))


def test_bad_chunked_encoding(server):
    r = _raw_post(server, [("Transfer-Encoding", "chunked")], b"zz\r\nabc\r\n0\r\n\r\n")
    _assert_http_error(r, (400,), ("chunk",))


def test_oversized_header(server):
    r = raw_http(server.host, server.port,
                 b"GET /v2 HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (1 << 20) + b"\r\n\r\n")
    _assert_http_error(r, (400, 413, 431), ("header", "large", "limit"))


def test_body_shorter_than_content_length_then_half_close(server):
    # The client promises 100 bytes, sends 10 and closes its side: the server must not hang or
    # die; it answers 400 or just closes.
    r = _raw_post(server, [("Content-Length", "100")], b"0123456789", shutdown_write=True,
                  timeout=15)
    assert r is None or 400 <= r.status < 500, r


# -- the input size limit (a second server with a small --http-max-input-size) ---------------------

LIMIT = 4096


@pytest.fixture(scope="module")
def small_limit_server(start_server):
    return start_server([FIXTURE_REPO], ["--http-max-input-size", str(LIMIT)], name="small-limit",
                        ready_models=loadable_fixture_models())


def _fp32_body(n):
    return J({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [n],
                          "data": [1.0] * n}]})


def test_body_over_max_input_size_413(small_limit_server):
    body = _fp32_body(3000)
    assert len(body) > LIMIT
    c = small_limit_server.client()
    r = c.post(INFER, body, JSON_CT)
    assert r.status == 413, r
    assert r.body, "413 without a message"
    text = r.body.decode("utf-8", "replace").lower()
    assert any(w in text for w in ("large", "limit", "exceed", "size", str(LIMIT))), r.body


def test_body_under_max_input_size_ok(small_limit_server):
    body = _fp32_body(100)
    assert len(body) < LIMIT
    c = small_limit_server.client()
    r = c.post(INFER, body, JSON_CT)
    assert r.status == 200, r
    np.testing.assert_array_equal(InferResult(r).outputs["OUTPUT0"], np.ones(100, np.float32))


def test_declared_content_length_over_limit_413_without_body(small_limit_server):
    # The limit applies to the declared length: no need to wait for (or buffer) 1 GiB.
    r = _raw_post(small_limit_server, [("Content-Type", "application/json"),
                                       ("Content-Length", str(1 << 30))], b"", timeout=5)
    assert r is not None, "no answer to a 1 GiB Content-Length within 5 s"
    assert r.status == 413, r


def test_chunked_body_over_limit_413(small_limit_server):
    body = _fp32_body(3000)
    chunked = b""
    for i in range(0, len(body), 1000):
        part = body[i:i + 1000]
        chunked += b"%x\r\n%s\r\n" % (len(part), part)
    chunked += b"0\r\n\r\n"
    r = _raw_post(small_limit_server, [("Content-Type", "application/json"),
                                       ("Transfer-Encoding", "chunked")], chunked)
    assert r is not None and r.status == 413, r


def test_small_limit_server_still_serves(small_limit_server):
    c = small_limit_server.client()
    assert c.get("/v2/models/identity_fp32/ready").status == 200
    assert small_limit_server.alive()


# -- and after all of that -------------------------------------------------------------------------


def test_zz_server_still_serves_correct_infer(server, client):
    x = np.array([1.5, -2.0, 3.25], dtype=np.float32)
    res = client.infer("identity_fp32", [Input("INPUT0", "FP32", x)])
    np.testing.assert_array_equal(res.outputs["OUTPUT0"], x)
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    res = client.infer("add_sub", [Input("INPUT0", "FP32", a, binary=True),
                                   Input("INPUT1", "FP32", a, binary=True)],
                       binary_data_output=True)
    np.testing.assert_array_equal(res.outputs["OUTPUT0"], a + a)
    # A connection that saw an error keeps working too.
    conn = RawConnection(server.host, server.port)
    try:
        conn.send(b"POST " + INFER.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\n{")
        assert conn.read_response().status == 400
        conn.send(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        assert conn.read_response().status == 200
    finally:
        conn.close()
