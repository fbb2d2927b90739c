"""Every non-infer endpoint of the KServe v2 HTTP protocol, against the fixtures repository."""

import json

import pytest

from e2e_helpers import batching_identity_name, require_model
import numpy as np

from v2client import ALL_DATATYPES, Input, RawConnection, raw_http

IDENTITY_MODELS = ["identity_" + t.lower() for t in ALL_DATATYPES]


def assert_json_response(r, status=200):
    assert r.status == status, "expected %d, got %d %r" % (status, r.status, r.body[:300])
    ctype = r.header("Content-Type", "")
    assert ctype.startswith("application/json"), "Content-Type %r" % ctype
    return r.json()


def assert_not_found(r, *words):
    assert r.status == 404, "expected 404, got %d %r" % (r.status, r.body[:300])
    msg = r.error_message()
    for w in words:
        assert w in msg, "error %r does not mention %r" % (msg, w)


# -- health and server metadata -------------------------------------------------------------------


def test_health_live(client):
    r = client.get("/v2/health/live")
    assert r.status == 200


def test_health_ready_is_strict(client):
    # Triton's strict readiness (ModelManager::AllModelsReady): the fixture repository holds
    # broken_syntax, which failed to load, so the server as a whole is not ready. A repository
    # without broken models answers 200 (test_lifecycle.py).
    r = client.get("/v2/health/ready")
    assert r.status == 400, r


def test_server_metadata(client):
    meta = assert_json_response(client.get("/v2"))
    assert meta["name"] == "vramd"
    assert isinstance(meta["version"], str) and meta["version"], meta
    assert isinstance(meta["extensions"], list)
    assert all(isinstance(e, str) for e in meta["extensions"])
    # Both are served, so a Triton client must be able to discover them.
    assert "binary_tensor_data" in meta["extensions"]
    assert "model_configuration" in meta["extensions"]
    assert "classification" in meta["extensions"]


def test_server_metadata_ignores_query_string(client):
    # A query string must not change the route.
    r = client.get("/v2?x=1")
    assert r.status == 200
    assert r.json()["name"] == "vramd"


# -- model metadata --------------------------------------------------------------------------------


def test_add_sub_metadata(client):
    meta = assert_json_response(client.get("/v2/models/add_sub"))
    assert meta["name"] == "add_sub"
    assert meta["versions"] == ["1"]
    assert isinstance(meta["platform"], str)
    inputs = {t["name"]: t for t in meta["inputs"]}
    outputs = {t["name"]: t for t in meta["outputs"]}
    assert set(inputs) == {"INPUT0", "INPUT1"}
    assert set(outputs) == {"OUTPUT0", "OUTPUT1"}
    for t in list(inputs.values()) + list(outputs.values()):
        assert t["datatype"] == "FP32"
        # max_batch_size 8: Triton shows the batch dimension as -1 in front of dims.
        assert t["shape"] == [-1, 16], t


def test_add_sub_int32_metadata(client):
    meta = assert_json_response(client.get("/v2/models/add_sub_int32"))
    assert meta["name"] == "add_sub_int32"
    for t in meta["inputs"] + meta["outputs"]:
        assert t["datatype"] == "INT32"


@pytest.mark.parametrize("model", IDENTITY_MODELS)
def test_identity_metadata(client, model):
    datatype = model[len("identity_"):].upper()
    meta = assert_json_response(client.get("/v2/models/" + model))
    assert meta["name"] == model
    assert meta["versions"] == ["1"]
    assert meta["inputs"] == [{"name": "INPUT0", "datatype": datatype, "shape": [-1]}]
    assert meta["outputs"] == [{"name": "OUTPUT0", "datatype": datatype, "shape": [-1]}]


def test_metadata_per_version(client):
    meta = assert_json_response(client.get("/v2/models/add_sub/versions/1"))
    assert meta["name"] == "add_sub"
    assert meta["versions"] == ["1"]
    assert {t["name"] for t in meta["inputs"]} == {"INPUT0", "INPUT1"}


def test_batching_identity_metadata(client):
    name = require_model(batching_identity_name(), "a batching identity (max_batch_size 4)")
    meta = assert_json_response(client.get("/v2/models/" + name))
    for t in meta["inputs"] + meta["outputs"]:
        assert t["shape"] == [-1, 2, 3], t


def test_versioned_metadata_lists_all_versions(client):
    meta = assert_json_response(client.get("/v2/models/versioned"))
    assert meta["name"] == "versioned"
    assert sorted(meta["versions"], key=int) == ["1", "3"]


@pytest.mark.parametrize("version", ["1", "3"])
def test_versioned_metadata_per_version(client, version):
    meta = assert_json_response(client.get("/v2/models/versioned/versions/" + version))
    assert meta["name"] == "versioned"
    assert meta["versions"] == [version]


def test_metadata_unknown_model_404(client):
    assert_not_found(client.get("/v2/models/no_such_model"), "no_such_model")


def test_metadata_unknown_version_404(client):
    assert_not_found(client.get("/v2/models/versioned/versions/2"), "versioned")
    assert_not_found(client.get("/v2/models/add_sub/versions/7"), "add_sub")


def test_metadata_bad_version_string(client):
    for v in ["abc", "-1", "1.5", "0x1"]:
        r = client.get("/v2/models/add_sub/versions/" + v)
        assert r.status in (400, 404), (v, r)
        assert r.error_message()


def test_broken_model_is_absent(client):
    r = client.get("/v2/models/broken_syntax")
    assert r.status in (400, 404, 503), r
    assert "broken_syntax" in r.error_message()
    r = client.get("/v2/models/broken_syntax/ready")
    assert r.status in (400, 404, 503), r


def test_percent_encoded_model_name(client):
    r = client.get("/v2/models/add%5Fsub")  # "_" percent-encoded
    assert r.status == 200, r
    assert r.json()["name"] == "add_sub"


# -- model ready -----------------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["add_sub", "add_sub_int32", "identity_fp32", "identity_bytes",
                                   "versioned"])
def test_model_ready(client, model):
    r = client.get("/v2/models/%s/ready" % model)
    assert r.status == 200, r


@pytest.mark.parametrize("path", ["/v2/models/add_sub/versions/1/ready",
                                  "/v2/models/versioned/versions/1/ready",
                                  "/v2/models/versioned/versions/3/ready"])
def test_model_version_ready(client, path):
    r = client.get(path)
    assert r.status == 200, r


@pytest.mark.parametrize("path", ["/v2/models/no_such_model/ready",
                                  "/v2/models/versioned/versions/2/ready",
                                  "/v2/models/add_sub/versions/2/ready"])
def test_model_not_ready(client, path):
    # Triton answers 400 for "not ready"; vramd may answer 404 for "does not exist".
    r = client.get(path)
    assert r.status in (400, 404), r


# -- model config ----------------------------------------------------------------------------------


def _tensor_by_name(tensors):
    return {t["name"]: t for t in tensors}


def test_add_sub_config(client):
    cfg = assert_json_response(client.get("/v2/models/add_sub/config"))
    assert cfg["name"] == "add_sub"
    assert cfg["max_batch_size"] == 8
    inputs = _tensor_by_name(cfg["input"])
    outputs = _tensor_by_name(cfg["output"])
    assert set(inputs) == {"INPUT0", "INPUT1"}
    assert set(outputs) == {"OUTPUT0", "OUTPUT1"}
    for t in list(inputs.values()) + list(outputs.values()):
        assert t["data_type"] == "TYPE_FP32"
        # int64 fields are JSON numbers, not strings (unlike protobuf's JSON printer).
        assert t["dims"] == [16], t
        assert all(type(d) is int for d in t["dims"])


def test_config_fills_defaults(client):
    cfg = assert_json_response(client.get("/v2/models/identity_fp32/config"))
    assert cfg["name"] == "identity_fp32"
    assert cfg["max_batch_size"] == 0
    # Defaults filled as Triton does: a version policy and an instance group.
    assert "version_policy" in cfg
    assert cfg["version_policy"].get("latest", {}).get("num_versions") == 1, cfg["version_policy"]
    assert isinstance(cfg.get("instance_group"), list) and cfg["instance_group"], cfg
    assert cfg["instance_group"][0]["count"] >= 1
    # A loaded model's groups as placed, as Triton shows them: identity runs on the CPU only, so
    # the KIND_AUTO group the config leaves unwritten is KIND_CPU.
    assert cfg["instance_group"][0]["kind"] == "KIND_CPU", cfg["instance_group"]
    assert cfg["input"][0]["dims"] == [-1]
    assert cfg["input"][0]["data_type"] == "TYPE_FP32"
    assert cfg["output"][0]["name"] == "OUTPUT0"


def test_bytes_config_uses_type_string(client):
    cfg = assert_json_response(client.get("/v2/models/identity_bytes/config"))
    assert cfg["input"][0]["data_type"] == "TYPE_STRING"


def test_versioned_config_policy_all(client):
    cfg = assert_json_response(client.get("/v2/models/versioned/config"))
    assert cfg["name"] == "versioned"
    assert "all" in cfg["version_policy"], cfg["version_policy"]


@pytest.mark.parametrize("path", ["/v2/models/add_sub/versions/1/config",
                                  "/v2/models/versioned/versions/3/config"])
def test_config_per_version(client, path):
    cfg = assert_json_response(client.get(path))
    assert cfg["name"] == path.split("/")[3]


def test_config_unknown_model_404(client):
    assert_not_found(client.get("/v2/models/no_such_model/config"), "no_such_model")


def test_config_unknown_version_404(client):
    assert_not_found(client.get("/v2/models/versioned/versions/2/config"), "versioned")


# -- repository index (read-only model repository extension) ---------------------------------------


def test_repository_index(client):
    r = client.post("/v2/repository/index", b"{}", {"Content-Type": "application/json"})
    index = assert_json_response(r)
    names = {e["name"] for e in index}
    assert {"add_sub", "identity_fp32", "versioned"} <= names
    ready = [e for e in index if e["name"] == "add_sub"]
    assert ready and all(e["state"] == "READY" for e in ready), ready
    assert {e.get("version") for e in index if e["name"] == "versioned"} == {"1", "3"}
    # A model that failed to load is listed, not READY, with the reason (as Triton does).
    broken = [e for e in index if e["name"] == "broken_syntax"]
    assert broken, index
    assert all(e["state"] != "READY" and "config.pbtxt" in e["reason"] for e in broken), broken
    r = client.post("/v2/repository/index", json.dumps({"ready": True}).encode(),
                    {"Content-Type": "application/json"})
    index = assert_json_response(r)
    assert all(e["state"] == "READY" for e in index)
    assert "broken_syntax" not in {e["name"] for e in index}


# -- routing errors --------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/", "/v1/models", "/v3", "/v2/healthz", "/v2/health/dead",
                                  "/v2/models/add_sub/bogus", "/v2/models/add_sub/versions/1/x/y",
                                  "/v2x"])
def test_unknown_path_404(client, path):
    r = client.get(path)
    assert r.status == 404, (path, r)
    assert r.error_message()


@pytest.mark.parametrize("method,path", [
    ("POST", "/v2/health/live"),
    ("POST", "/v2/health/ready"),
    ("DELETE", "/v2"),
    ("PUT", "/v2/models/add_sub"),
    ("POST", "/v2/models/add_sub/ready"),
    ("POST", "/v2/models/add_sub/config"),
    ("GET", "/v2/models/add_sub/infer"),
    ("PUT", "/v2/models/add_sub/versions/1/infer"),
])
def test_wrong_method_405(client, method, path):
    r = client.request(method, path, body=b"" if method != "GET" else None)
    assert r.status == 405, (method, path, r)
    assert r.error_message()


# -- connection handling ---------------------------------------------------------------------------


def test_keep_alive_many_requests_one_connection(client):
    client.get("/v2/health/live")
    port = client.local_port()
    connects = client.connects
    x = np.arange(16, dtype=np.float32)
    for i in range(300):
        kind = i % 4
        if kind == 0:
            assert client.get("/v2/health/live").status == 200
        elif kind == 1:
            assert client.get("/v2/models/add_sub").json()["name"] == "add_sub"
        elif kind == 2:
            # An error answer must not close the connection either.
            assert client.get("/v2/models/no_such_model").status == 404
        else:
            res = client.infer("identity_fp32", [Input("INPUT0", "FP32", x + i, binary=i % 8 == 3)])
            np.testing.assert_array_equal(res.outputs["OUTPUT0"], x + i)
        assert client.local_port() == port, "server closed the connection at request %d" % i
    assert client.connects == connects


def test_http10_request_gets_answer(server):
    r = raw_http(server.host, server.port, b"GET /v2/health/live HTTP/1.0\r\n\r\n")
    assert r is not None and r.status == 200


def test_pipelined_requests_answered_in_order(server):
    req = (b"GET /v2/models/add_sub HTTP/1.1\r\nHost: x\r\n\r\n"
           b"GET /v2/models/no_such_model HTTP/1.1\r\nHost: x\r\n\r\n"
           b"GET /v2/models/identity_fp32 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    conn = RawConnection(server.host, server.port)
    try:
        conn.send(req)
        a = conn.read_response()
        b = conn.read_response()
        c = conn.read_response()
    finally:
        conn.close()
    assert a.status == 200 and a.json()["name"] == "add_sub"
    assert b.status == 404
    assert c.status == 200 and c.json()["name"] == "identity_fp32"


def test_connection_close_is_honoured(server):
    conn = RawConnection(server.host, server.port)
    try:
        conn.send(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        r = conn.read_response()
        assert r.status == 200
        assert conn.is_closed_by_peer(5.0), "server kept the connection open after Connection: close"
    finally:
        conn.close()
