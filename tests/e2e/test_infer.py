"""Inference through the identity and add_sub fixtures: every data type, JSON and binary tensor
data in both directions, output selection, batching, request ids, raw binary requests, and
HTTP transport variants (chunked bodies, Expect: 100-continue, concurrency)."""

import json
import threading

import numpy as np
import pytest

from e2e_helpers import batching_identity_name, optional_input_model_name, require_model
from v2client import (ALL_DATATYPES, HEADER_LENGTH, HOST_DTYPES, Input, InferResult,
                      RawConnection, bf16_to_float32, build_infer_body, json_bytes_equal,
                      serialize_bytes)


def _bf16(bits):
    return bf16_to_float32(np.array(bits, dtype="<u2"))


# Values every type must carry exactly through JSON and binary: extremes included. Integers
# beyond 2^53 check that 64-bit values never pass through a double.
VALUES = {
    "BOOL": np.array([True, False, True, True, False]),
    "UINT8": np.array([0, 1, 127, 128, 255], dtype=np.uint8),
    "UINT16": np.array([0, 1, 32767, 65535], dtype=np.uint16),
    "UINT32": np.array([0, 1, 2**31, 2**32 - 1], dtype=np.uint32),
    "UINT64": np.array([0, 1, 2**53 + 1, 2**63, 2**64 - 1], dtype=np.uint64),
    "INT8": np.array([-128, -1, 0, 1, 127], dtype=np.int8),
    "INT16": np.array([-32768, -1, 0, 1, 32767], dtype=np.int16),
    "INT32": np.array([-2**31, -1, 0, 1, 2**31 - 1], dtype=np.int32),
    "INT64": np.array([-2**63, -(2**53 + 1), 0, 2**53 + 1, 2**63 - 1], dtype=np.int64),
    "FP16": np.array([0.0, 1.5, -2.25, 65504.0, 6.103515625e-05, 0.0999755859375,
                      5.960464477539063e-08], dtype=np.float16),
    "FP32": np.array([0.0, 1.0, -1.5, 3.4028234663852886e38, 1.1754943508222875e-38,
                      0.1, 1.401298464324817e-45, -123456.789], dtype=np.float32),
    "FP64": np.array([0.0, 0.1, -1e300, 2.2250738585072014e-308, 5e-324,
                      1.7976931348623157e308, 1.0 / 3.0], dtype=np.float64),
    "BF16": _bf16([0x0000, 0x3F80, 0xC020, 0x3E20, 0x7F7F, 0x0080, 0x4049]),
    "BYTES": [b"hello", b"", "w\u00f6rld \u2603".encode("utf-8"), b"x" * 1000,
              b'quote" back\\slash\nnewline\ttab', b"\x01\x1f"],
}
# Binary transport also carries bytes that are not UTF-8.
BINARY_ONLY_BYTES = [b"\x00\xff\xfe\x80", b"plain", b"\xc3", b""]

MODES = ["json-json", "binary-binary", "binary-json", "json-binary", "json-binary_data_output"]


def identity_model(datatype):
    return "identity_" + datatype.lower()


def assert_same_values(datatype, got, expected, got_binary):
    if datatype == "BYTES":
        got = list(np.asarray(got, dtype=object).reshape(-1))
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            if got_binary:
                assert g == e
            else:
                assert isinstance(g, str), g
                assert json_bytes_equal(g, e), (g, e)
        return
    got = np.asarray(got)
    assert got.dtype == HOST_DTYPES[datatype], got.dtype
    np.testing.assert_array_equal(got, np.asarray(expected, dtype=HOST_DTYPES[datatype]))


def run_identity(client, datatype, values, mode, request_id=None):
    in_binary = mode.startswith("binary")
    kw = {}
    if mode == "binary-binary" or mode == "json-binary_data_output":
        kw["binary_data_output"] = True
    elif mode == "json-binary":
        kw["outputs"] = [("OUTPUT0", True)]
    model = identity_model(datatype)
    res = client.infer(model, [Input("INPUT0", datatype, values, binary=in_binary)],
                       request_id=request_id, **kw)
    out_binary = mode.endswith("binary") or mode.endswith("binary_data_output")
    assert res.json["model_name"] == model
    assert res.json["model_version"] == "1"
    assert list(res.outputs) == ["OUTPUT0"]
    out = res.output_json["OUTPUT0"]
    assert out["datatype"] == datatype
    assert out["shape"] == [len(values)]
    assert ("OUTPUT0" in res.binary_outputs) == out_binary, res.json
    ctype = res.response.header("Content-Type", "")
    if out_binary:
        assert res.response.header(HEADER_LENGTH) is not None
    else:
        assert res.response.header(HEADER_LENGTH) is None
        assert ctype.startswith("application/json"), ctype
    assert_same_values(datatype, res.outputs["OUTPUT0"], values, out_binary)
    return res


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("datatype", ALL_DATATYPES)
def test_identity_every_type(client, datatype, mode):
    run_identity(client, datatype, VALUES[datatype], mode)


@pytest.mark.parametrize("datatype", ["FP16", "FP32", "FP64", "BF16"])
def test_identity_special_floats_binary(client, datatype):
    # NaN, infinities and -0.0 have no JSON form but must pass bit-exactly in binary.
    if datatype == "BF16":
        bits = np.array([0x7FC0, 0x7F80, 0xFF80, 0x8000, 0x0001], dtype="<u2")
        raw = bits.tobytes()
        inp = Input("INPUT0", "BF16", shape=[5], binary=True, raw=raw)
    else:
        v = np.array([np.nan, np.inf, -np.inf, -0.0, 1.0], dtype=HOST_DTYPES[datatype])
        raw = v.tobytes()
        inp = Input("INPUT0", datatype, v, binary=True)
    res = client.infer(identity_model(datatype), [inp], binary_data_output=True)
    assert res.response.body[-len(raw):] == raw


def test_identity_bytes_non_utf8_binary_is_exact(client):
    run_identity(client, "BYTES", BINARY_ONLY_BYTES, "binary-binary")


def test_identity_bytes_non_utf8_as_json_is_refused(client):
    # JSON strings carry text: bytes that are not UTF-8 are sent exactly as binary data or not
    # at all (src/server/http/infer_codec.h says why), and the error says how to get them.
    def refusal(element, byte, offset):
        return ("output 'OUTPUT0' cannot be sent as JSON: its element %d is not valid UTF-8 "
                "(byte 0x%02X at offset %d), and a JSON string carries text only; request it as "
                "binary data (output parameter \"binary_data\": true, or request parameter "
                "\"binary_data_output\": true) to receive its bytes exactly"
                % (element, byte, offset))

    values = [b"fine", b"\xff\xfe\x00a"]
    r = client.infer_raw("identity_bytes", [Input("INPUT0", "BYTES", values, binary=True)])
    assert r.status == 400, r
    assert r.error_message() == refusal(1, 0xFF, 0)
    # A JSON input string is not checked for UTF-8 (a raw byte 0xE9, Latin-1 'e acute'), but
    # it is when written back as JSON.
    r = client.post("/v2/models/identity_bytes/infer",
                    b'{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"BYTES",'
                    b'"data":["caf\xe9"]}]}', {"Content-Type": "application/json"})
    assert r.status == 400, r
    assert r.error_message() == refusal(0, 0xE9, 3)
    res = client.infer("identity_bytes", [Input("INPUT0", "BYTES", values, binary=True)],
                       outputs=[("OUTPUT0", True)])
    assert list(res.outputs["OUTPUT0"]) == values


def test_identity_bytes_utf8_is_exact_as_json(client):
    # Valid UTF-8, NUL and control characters included, comes back as exactly those bytes.
    values = [b"\x00a", "caf\u00e9".encode("utf-8"), b"\x7f\x1f", "\U0010ffff".encode("utf-8")]
    r = client.infer_raw("identity_bytes", [Input("INPUT0", "BYTES", values, binary=True)])
    assert r.status == 200, r
    assert b'"data":["\\u0000a","caf\xc3\xa9","\x7f\\u001F","\xf4\x8f\xbf\xbf"]' in r.body, r.body
    data = json.loads(r.body.decode("utf-8", errors="strict"))["outputs"][0]["data"]
    assert [d.encode("utf-8") for d in data] == values


@pytest.mark.parametrize("mode", ["json-json", "binary-binary"])
def test_identity_zero_elements(client, mode):
    res = run_identity(client, "FP32", np.zeros(0, dtype=np.float32), mode)
    assert res.output_json["OUTPUT0"]["shape"] == [0]


def test_identity_large_binary_tensor(client):
    x = np.random.default_rng(1).standard_normal(4 * 1024 * 1024).astype(np.float32)  # 16 MiB
    res = client.infer("identity_fp32", [Input("INPUT0", "FP32", x, binary=True)],
                       binary_data_output=True)
    np.testing.assert_array_equal(res.outputs["OUTPUT0"], x)


def test_identity_large_json_tensor(client):
    x = np.arange(200_000, dtype=np.int32) - 100_000
    res = client.infer("identity_int32", [Input("INPUT0", "INT32", x)])
    np.testing.assert_array_equal(res.outputs["OUTPUT0"], x)


def test_identity_large_bytes_elements(client):
    values = [bytes([i % 256]) * (i * 997 % 70_000) for i in range(64)]
    res = client.infer("identity_bytes", [Input("INPUT0", "BYTES", values, binary=True)],
                       binary_data_output=True)
    assert list(res.outputs["OUTPUT0"]) == values


# -- add_sub ---------------------------------------------------------------------------------------


def add_sub_inputs(a, b, datatype="FP32", binary=False):
    return [Input("INPUT0", datatype, a, binary=binary), Input("INPUT1", datatype, b, binary=binary)]


@pytest.mark.parametrize("batch", [1, 3, 8])
@pytest.mark.parametrize("binary", [False, True])
def test_add_sub_fp32(client, batch, binary):
    rng = np.random.default_rng(batch)
    a = rng.standard_normal((batch, 16)).astype(np.float32)
    b = rng.standard_normal((batch, 16)).astype(np.float32)
    res = client.infer("add_sub", add_sub_inputs(a, b, binary=binary),
                       binary_data_output=binary)
    assert set(res.outputs) == {"OUTPUT0", "OUTPUT1"}
    for name in ("OUTPUT0", "OUTPUT1"):
        assert res.output_json[name]["datatype"] == "FP32"
        assert res.output_json[name]["shape"] == [batch, 16]
    np.testing.assert_array_equal(res.outputs["OUTPUT0"], a + b)
    np.testing.assert_array_equal(res.outputs["OUTPUT1"], a - b)


@pytest.mark.parametrize("binary", [False, True])
def test_add_sub_int32(client, binary):
    rng = np.random.default_rng(7)
    a = rng.integers(-10**6, 10**6, size=(4, 16), dtype=np.int32)
    b = rng.integers(-10**6, 10**6, size=(4, 16), dtype=np.int32)
    res = client.infer("add_sub_int32", add_sub_inputs(a, b, "INT32", binary),
                       binary_data_output=binary)
    assert res.output_json["OUTPUT0"]["datatype"] == "INT32"
    np.testing.assert_array_equal(res.outputs["OUTPUT0"], a + b)
    np.testing.assert_array_equal(res.outputs["OUTPUT1"], a - b)


def test_add_sub_int32_wraps(client):
    a = np.full((1, 16), 2**31 - 1, dtype=np.int32)
    b = np.full((1, 16), 1, dtype=np.int32)
    b[0, 1] = -1
    a[0, 2] = -2**31
    res = client.infer("add_sub_int32", add_sub_inputs(a, b, "INT32", True),
                       binary_data_output=True)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(res.outputs["OUTPUT0"], a + b)
        np.testing.assert_array_equal(res.outputs["OUTPUT1"], a - b)


def _ab(batch=2):
    a = np.arange(batch * 16, dtype=np.float32).reshape(batch, 16)
    b = np.full((batch, 16), 0.5, dtype=np.float32)
    return a, b


def test_add_sub_only_output1(client):
    a, b = _ab()
    res = client.infer("add_sub", add_sub_inputs(a, b), outputs=["OUTPUT1"])
    assert set(res.outputs) == {"OUTPUT1"}
    np.testing.assert_array_equal(res.outputs["OUTPUT1"], a - b)


def test_add_sub_only_output0_binary(client):
    a, b = _ab()
    res = client.infer("add_sub", add_sub_inputs(a, b, binary=True), outputs=[("OUTPUT0", True)])
    assert set(res.outputs) == {"OUTPUT0"}
    assert res.binary_outputs == {"OUTPUT0"}
    np.testing.assert_array_equal(res.outputs["OUTPUT0"], a + b)


def test_add_sub_mixed_output_forms(client):
    a, b = _ab(3)
    res = client.infer("add_sub", add_sub_inputs(a, b),
                       outputs=[("OUTPUT0", True), ("OUTPUT1", False)])
    assert res.binary_outputs == {"OUTPUT0"}
    np.testing.assert_array_equal(res.outputs["OUTPUT0"], a + b)
    np.testing.assert_array_equal(res.outputs["OUTPUT1"], a - b)


def test_add_sub_explicit_json_output_beats_binary_data_output(client):
    a, b = _ab()
    res = client.infer("add_sub", add_sub_inputs(a, b),
                       outputs=[("OUTPUT1", False), ("OUTPUT0", True)], binary_data_output=True)
    assert res.binary_outputs == {"OUTPUT0"}
    np.testing.assert_array_equal(res.outputs["OUTPUT1"], a - b)


def test_add_sub_mixed_input_forms(client):
    a, b = _ab(2)
    inputs = [Input("INPUT0", "FP32", a, binary=True), Input("INPUT1", "FP32", b, binary=False)]
    res = client.infer("add_sub", inputs)
    np.testing.assert_array_equal(res.outputs["OUTPUT0"], a + b)
    inputs = [Input("INPUT1", "FP32", b, binary=True), Input("INPUT0", "FP32", a, binary=True)]
    res = client.infer("add_sub", inputs)  # binary parts in the order the inputs are listed
    np.testing.assert_array_equal(res.outputs["OUTPUT1"], a - b)


def test_add_sub_nested_json_data(client):
    a, b = _ab(2)
    body = json.dumps({"inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [2, 16], "data": a.tolist()},
        {"name": "INPUT1", "datatype": "FP32", "shape": [2, 16], "data": b.tolist()},
    ]}).encode()
    r = client.post("/v2/models/add_sub/infer", body, {"Content-Type": "application/json"})
    assert r.status == 200, r
    res = InferResult(r)
    np.testing.assert_array_equal(res.outputs["OUTPUT0"], a + b)


def test_add_sub_version_1_url(client):
    a, b = _ab(1)
    res = client.infer("add_sub", add_sub_inputs(a, b), version=1)
    assert res.json["model_version"] == "1"
    np.testing.assert_array_equal(res.outputs["OUTPUT0"], a + b)


# -- batching identity ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def batching_model(server):
    name = require_model(batching_identity_name(), "a batching identity (max_batch_size 4)")
    c = server.client()
    meta = c.get("/v2/models/" + name).json()
    c.close()
    return name, meta


@pytest.mark.parametrize("batch", [1, 2, 4])
@pytest.mark.parametrize("binary", [False, True])
def test_batched_identity(client, batching_model, batch, binary):
    name, meta = batching_model
    inp = meta["inputs"][0]
    dt = inp["datatype"]
    x = (np.arange(batch * 6) % 100).astype(HOST_DTYPES[dt]).reshape(batch, 2, 3)
    inputs = [Input(i["name"], i["datatype"], x.astype(HOST_DTYPES[i["datatype"]]), binary=binary)
              for i in meta["inputs"]]
    res = client.infer(name, inputs, binary_data_output=binary)
    assert len(res.outputs) == len(meta["outputs"])
    for o in meta["outputs"]:
        assert res.output_json[o["name"]]["shape"] == [batch, 2, 3]
        np.testing.assert_array_equal(res.outputs[o["name"]], x.astype(HOST_DTYPES[o["datatype"]]))


# -- request id ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["json-json", "binary-binary"])
def test_request_id_echoed(client, mode):
    rid = "req-\u00e9-42 with spaces"
    res = run_identity(client, "INT32", VALUES["INT32"], mode, request_id=rid)
    assert res.json["id"] == rid


def test_no_request_id_no_id_in_response(client):
    res = run_identity(client, "INT32", VALUES["INT32"], "json-json")
    assert res.json.get("id", "") == ""


# -- optional inputs and versions ----------------------------------------------------------------


def _input_for(meta_tensor, fill=1):
    dt = meta_tensor["datatype"]
    shape = [2 if d < 0 else d for d in meta_tensor["shape"]]
    n = int(np.prod(shape)) if shape else 1
    if dt == "BYTES":
        return Input(meta_tensor["name"], dt, [b"ab"] * n, shape=shape)
    data = (np.arange(n) % 50 + fill).astype(HOST_DTYPES[dt]).reshape(shape)
    return Input(meta_tensor["name"], dt, data)


def test_optional_input_may_be_left_out(client, server):
    name = require_model(optional_input_model_name(), "a model with an optional input")
    cfg = client.get("/v2/models/%s/config" % name).json()
    meta = client.get("/v2/models/" + name).json()
    optional = {t["name"] for t in cfg["input"] if t.get("optional")}
    assert optional, cfg
    required = [t for t in meta["inputs"] if t["name"] not in optional]
    res = client.infer(name, [_input_for(t) for t in required])
    assert res.json["model_name"] == name
    res_all = client.infer(name, [_input_for(t) for t in meta["inputs"]])
    assert len(res_all.outputs) >= len(res.outputs)


def _versioned_inputs(client):
    meta = client.get("/v2/models/versioned").json()
    return [_input_for(t) for t in meta["inputs"]]


def test_versioned_default_is_latest(client):
    res = client.infer("versioned", _versioned_inputs(client))
    assert res.json["model_name"] == "versioned"
    assert res.json["model_version"] == "3"


@pytest.mark.parametrize("version", [1, 3])
def test_versioned_explicit_version(client, version):
    res = client.infer("versioned", _versioned_inputs(client), version=version)
    assert res.json["model_version"] == str(version)


# -- raw binary request (Inference-Header-Content-Length: 0) -------------------------------------


def test_raw_binary_request(client):
    x = np.arange(10, dtype=np.float32) * 1.25
    r = client.post("/v2/models/identity_fp32/infer", x.tobytes(),
                    {"Content-Type": "application/octet-stream", HEADER_LENGTH: "0"})
    if r.status in (400, 501) and "raw" in r.body.decode(errors="replace").lower() \
            and "support" in r.body.decode(errors="replace").lower():
        pytest.skip("server does not support raw binary requests: %r" % r.body)
    assert r.status == 200, r
    res = InferResult(r)
    assert res.output_json["OUTPUT0"]["shape"] == [10]
    np.testing.assert_array_equal(res.outputs["OUTPUT0"], x)


def test_raw_binary_request_needs_single_input_model(client):
    r = client.post("/v2/models/add_sub/infer", np.zeros(32, np.float32).tobytes(),
                    {"Content-Type": "application/octet-stream", HEADER_LENGTH: "0"})
    assert r.status == 400, r
    assert "input" in r.error_message().lower()


# -- transport variants ----------------------------------------------------------------------------


def test_chunked_request_body(client):
    a, b = _ab(2)
    body, headers = build_infer_body(add_sub_inputs(a, b, binary=True))

    def chunks():
        for i in range(0, len(body), 100):
            yield body[i:i + 100]

    r = client.request("POST", "/v2/models/add_sub/infer", body=chunks(), headers=headers,
                       chunked=True)
    assert r.status == 200, r
    res = InferResult(r)
    np.testing.assert_array_equal(res.outputs["OUTPUT0"], a + b)


def test_expect_100_continue(server):
    # curl sends "Expect: 100-continue" for bodies over 1 KiB and waits up to 1 s for the
    # interim response; RFC 9110 requires the server to answer it (100 or a final status).
    x = np.arange(1024, dtype=np.float32)
    body, headers = build_infer_body([Input("INPUT0", "FP32", x, binary=True)])
    head = "POST /v2/models/identity_fp32/infer HTTP/1.1\r\nHost: x\r\n"
    for k, v in headers.items():
        head += "%s: %s\r\n" % (k, v)
    head += "Content-Length: %d\r\nExpect: 100-continue\r\n\r\n" % len(body)
    conn = RawConnection(server.host, server.port)
    try:
        conn.send(head.encode())
        interim = None
        try:
            interim = conn.read_response(timeout=2.0, skip_interim=False)
        except OSError:
            pass
        conn.send(body)
        final = conn.read_response() if interim is None or interim.status == 100 else interim
    finally:
        conn.close()
    assert interim is not None, "no 100 Continue within 2 s (curl would stall 1 s per request)"
    assert interim.status == 100, interim
    assert final.status == 200, final
    np.testing.assert_array_equal(InferResult(final).outputs["OUTPUT0"], x)


def test_concurrent_clients(server):
    errors = []

    def worker(seed):
        c = server.client()
        try:
            rng = np.random.default_rng(seed)
            for i in range(40):
                batch = int(rng.integers(1, 9))
                a = rng.standard_normal((batch, 16)).astype(np.float32)
                b = rng.standard_normal((batch, 16)).astype(np.float32)
                res = c.infer("add_sub", add_sub_inputs(a, b, binary=bool(i % 2)),
                              request_id="%d-%d" % (seed, i), binary_data_output=bool(i % 3))
                assert res.json["id"] == "%d-%d" % (seed, i)
                np.testing.assert_array_equal(res.outputs["OUTPUT0"], a + b)
                np.testing.assert_array_equal(res.outputs["OUTPUT1"], a - b)
        except BaseException as e:  # noqa: BLE001
            errors.append("worker %d: %r" % (seed, e))
        finally:
            c.close()

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors


def test_bytes_binary_serialization_is_length_prefixed(client):
    # The binary part of a BYTES output is exactly the 4-byte-length serialization.
    values = [b"a", b"bc", b""]
    res = client.infer("identity_bytes", [Input("INPUT0", "BYTES", values, binary=True)],
                       binary_data_output=True)
    assert res.output_json["OUTPUT0"]["parameters"]["binary_data_size"] == len(
        serialize_bytes(values))
    hl = int(res.response.header(HEADER_LENGTH))
    assert res.response.body[hl:] == serialize_bytes(values)
