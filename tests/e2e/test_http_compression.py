"""HTTP request and response compression (issue 16, item 5), as Triton's clients use it:
`Content-Encoding: gzip` or `deflate` on a request body, `Accept-Encoding` for the answer. The
body limit (--http-max-input-size) applies to the decoded size, so a small compressed body
cannot expand past it; a body that is not what its Content-Encoding says, or a coding vramd
does not know, is refused naming it, and the connection serves on."""

import gzip
import json
import zlib

import numpy as np
import pytest

from e2e_helpers import FIXTURE_REPO
from v2client import V2Client

LIMIT = 1 << 20
JSON_CT = {"Content-Type": "application/json"}


@pytest.fixture(scope="module")
def server(start_server):
    return start_server([FIXTURE_REPO], ["--http-max-input-size", str(LIMIT)],
                        name="compression", ready_models=["identity_fp32"])


def infer_body(values):
    return json.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [len(values)],
                                   "data": values}]}).encode()


def raw_deflate(data):
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush()


@pytest.mark.parametrize("coding,encode", [("gzip", gzip.compress), ("deflate", zlib.compress),
                                           ("x-gzip", gzip.compress), ("deflate", raw_deflate),
                                           ("identity", lambda b: b)])
def test_compressed_requests_are_decoded(server, coding, encode):
    c = V2Client(server.host, server.port)
    values = [float(i) for i in range(300)]
    r = c.post("/v2/models/identity_fp32/infer", encode(infer_body(values)),
               dict(JSON_CT, **{"Content-Encoding": coding}))
    assert r.status == 200, r
    assert r.header("Content-Encoding") is None  # the client did not ask for a coded answer
    assert r.json()["outputs"][0]["data"] == values


def test_binary_tensor_data_in_a_compressed_body(server):
    # Inference-Header-Content-Length counts the decoded body's JSON, as in Triton.
    x = np.arange(64, dtype=np.float32)
    header = json.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [64],
                                     "parameters": {"binary_data_size": x.nbytes}}],
                         "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]})
    body = header.encode() + x.tobytes()
    c = V2Client(server.host, server.port)
    r = c.post("/v2/models/identity_fp32/infer", gzip.compress(body),
               {"Content-Encoding": "gzip", "Inference-Header-Content-Length": str(len(header)),
                "Accept-Encoding": "gzip"})
    assert r.status == 200, r
    assert r.header("Content-Encoding") == "gzip"
    plain = gzip.decompress(r.body)
    n = int(r.header("Inference-Header-Content-Length"))
    assert json.loads(plain[:n])["outputs"][0]["parameters"]["binary_data_size"] == x.nbytes
    np.testing.assert_array_equal(np.frombuffer(plain[n:], dtype=np.float32), x)


@pytest.mark.parametrize("accept,coding,decode", [
    ("gzip", "gzip", gzip.decompress),
    ("deflate", "deflate", zlib.decompress),
    ("gzip;q=0.2, deflate;q=0.8", "deflate", zlib.decompress),
    ("br", None, lambda b: b),
    ("gzip;q=0", None, lambda b: b)])
def test_answers_are_coded_as_the_client_accepts(server, accept, coding, decode):
    c = V2Client(server.host, server.port)
    values = [float(i % 7) for i in range(2000)]
    r = c.post("/v2/models/identity_fp32/infer", infer_body(values),
               dict(JSON_CT, **{"Accept-Encoding": accept}))
    assert r.status == 200, r
    assert r.header("Content-Encoding") == coding
    assert "Accept-Encoding" in (r.header("Vary") or "")
    assert json.loads(decode(r.body))["outputs"][0]["data"] == values
    if coding:
        assert len(r.body) < len(decode(r.body)) / 3
    # Other answers too: metadata, and an error's body.
    m = c.get("/v2/models/identity_fp32", {"Accept-Encoding": accept})
    assert m.status == 200 and json.loads(decode(m.body))["name"] == "identity_fp32"
    e = c.post("/v2/models/no_such_model/infer", infer_body([1.0]),
               dict(JSON_CT, **{"Accept-Encoding": accept}))
    assert e.status in (400, 404) and "no_such_model" in json.loads(decode(e.body))["error"]


def test_the_limit_applies_to_the_decoded_size(server):
    c = V2Client(server.host, server.port)
    # About 4 MiB of JSON that gzip takes to a few KiB: under the limit coded, over it decoded.
    big = infer_body([0.0] * (1 << 20))
    coded = gzip.compress(big)
    assert len(coded) < LIMIT < len(big)
    r = c.post("/v2/models/identity_fp32/infer", coded, dict(JSON_CT, **{"Content-Encoding": "gzip"}))
    assert r.status == 413, r
    assert "decodes to more than the limit of %d bytes" % LIMIT in r.error_message()
    assert "--http-max-input-size" in r.error_message()
    # A decoded body within the limit passes on the same connection.
    r = c.post("/v2/models/identity_fp32/infer", gzip.compress(infer_body([1.0, 2.0])),
               dict(JSON_CT, **{"Content-Encoding": "gzip"}))
    assert r.status == 200, r


@pytest.mark.parametrize("coding,body,status,text", [
    ("gzip", b"plain text, not gzip", 400, "not valid gzip data"),
    ("gzip", gzip.compress(infer_body([1.0] * 100), mtime=0)[:40], 400, "ends before"),
    ("deflate", b"\x00\x01\x02 not deflate", 400, "not valid deflate data"),
    ("br", b"whatever", 415, "Content-Encoding 'br' is not supported"),
    ("gzip, gzip", b"x", 415, "'gzip, gzip' is not supported")],
    ids=["not-gzip", "truncated-gzip", "not-deflate", "br", "coded-twice"])
def test_bad_coded_bodies_are_refused_and_the_connection_serves_on(server, coding, body, status,
                                                                    text):
    c = V2Client(server.host, server.port)
    r = c.post("/v2/models/identity_fp32/infer", body, dict(JSON_CT, **{"Content-Encoding": coding}))
    assert r.status == status, r
    assert text in r.error_message()
    before = c.connects
    r = c.post("/v2/models/identity_fp32/infer", infer_body([3.0]), JSON_CT)
    assert r.status == 200 and c.connects == before, r
