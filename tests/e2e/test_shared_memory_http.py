"""Triton's system and CUDA shared memory extensions over HTTP (src/server/http/kserve_routes.h,
src/server/shared_memory/): register, status and unregister a POSIX shared-memory region; an
input read from a region and an output written into one; every range and key checked; the
regions shared with the gRPC front end; CUDA registrations checked and refused without a GPU
(the CUDA round trip runs on the device: tests/device/cuda_shm_check.py);
--no-http-shared-memory turns both off."""

import base64
import json
import re
import urllib.request

import numpy as np
import pytest

from e2e_helpers import FIXTURE_REPO


@pytest.fixture(scope="module")
def server(start_server):
    return start_server([str(FIXTURE_REPO)], ["--model-control-mode", "explicit",
                                              "--load-model", "identity_fp32",
                                              "--load-model", "add_sub"],
                        name="shm_http", ready_models=["identity_fp32", "add_sub"])


def walk(node):
    yield node
    for child in node.get("children", []):
        yield from walk(child)


def post_json(c, path, doc):
    return c.post(path, json.dumps(doc).encode(), {"Content-Type": "application/json"})


def test_register_infer_through_shared_memory_and_unregister(server, shm_object):
    c = server.client()
    key = "/" + shm_object.name
    x = np.linspace(-3, 3, 32, dtype=np.float32)
    shm_object.buf[64:64 + x.nbytes] = x.tobytes()
    assert post_json(c, "/v2/systemsharedmemory/region/in/register",
                     {"key": key, "offset": 0, "byte_size": 1024}).status == 200
    assert post_json(c, "/v2/systemsharedmemory/region/out/register",
                     {"key": key, "offset": 4096, "byte_size": 1024}).status == 200
    try:
        status = c.get("/v2/systemsharedmemory/status")
        assert status.status == 200
        assert sorted((r["name"], r["offset"], r["byte_size"]) for r in status.json()) == [
            ("in", 0, 1024), ("out", 4096, 1024)]
        one = c.get("/v2/systemsharedmemory/region/in/status").json()
        assert one == [{"name": "in", "key": key, "offset": 0, "byte_size": 1024}]
        meta = c.get("/v2").json()
        assert "system_shared_memory" in meta["extensions"]
        assert "cuda_shared_memory" in meta["extensions"]
        # Client-owned host memory in the memory report while registered.
        owners = {n["path"]: n for n in walk(c.get("/v2/memory").json()["owners"])}
        assert owners["server/scope:client-shm:in"]["live_bytes"] == 1024
        assert owners["server/scope:client-shm:out"]["live_bytes"] == 1024

        body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [32],
                            "parameters": {"shared_memory_region": "in",
                                           "shared_memory_offset": 64,
                                           "shared_memory_byte_size": x.nbytes}}],
                "outputs": [{"name": "OUTPUT0",
                             "parameters": {"shared_memory_region": "out",
                                            "shared_memory_byte_size": 1024}}]}
        r = post_json(c, "/v2/models/identity_fp32/infer", body)
        assert r.status == 200, r
        out = r.json()["outputs"][0]
        assert out["parameters"] == {"shared_memory_region": "out",
                                     "shared_memory_byte_size": x.nbytes}
        assert "data" not in out
        got = np.frombuffer(bytes(shm_object.buf[4096:4096 + x.nbytes]), dtype=np.float32)
        assert got.tolist() == x.tolist()

        # Ranges, sizes and names are checked, naming the tensor.
        body["inputs"][0]["parameters"]["shared_memory_offset"] = 1000
        r = post_json(c, "/v2/models/identity_fp32/infer", body)
        assert r.status == 400 and "beyond system shared memory region 'in'" in r.error_message()
        body["inputs"][0]["parameters"]["shared_memory_offset"] = 64
        body["inputs"][0]["parameters"]["shared_memory_byte_size"] = 12
        r = post_json(c, "/v2/models/identity_fp32/infer", body)
        assert r.status == 400 and "shared_memory_byte_size is 12 bytes but shape [32]" in r.error_message()
        body["inputs"][0]["parameters"]["shared_memory_byte_size"] = x.nbytes
        body["outputs"][0]["parameters"]["shared_memory_byte_size"] = 8
        r = post_json(c, "/v2/models/identity_fp32/infer", body)
        assert r.status == 400 and "more than the 8 of its shared memory" in r.error_message()
        body["outputs"][0]["parameters"]["shared_memory_region"] = "missing"
        r = post_json(c, "/v2/models/identity_fp32/infer", body)
        assert r.status == 404 and "'missing'" in r.error_message()

        r = post_json(c, "/v2/systemsharedmemory/region/in/register",
                      {"key": key, "offset": 0, "byte_size": 16})
        assert r.status == 400 and "already registered" in r.error_message()
        for bad, text in (({"key": "/a/b", "byte_size": 16}, "no other '/'"),
                          ({"key": key, "byte_size": 1 << 20}, "beyond the"),
                          ({"key": key}, "'byte_size' must be"),
                          ({"key": 5, "byte_size": 16}, "'key' must be a string"),
                          ({"key": key, "offset": -1, "byte_size": 16},
                           "'offset' must be a non-negative integer"),
                          ({"key": key, "offset": 2**64 - 8, "byte_size": 16},
                           "offset 18446744073709551608 + byte_size 16 overflows"),
                          ({"key": key, "byte_size": -16}, "'byte_size' must be")):
            r = post_json(c, "/v2/systemsharedmemory/region/bad/register", bad)
            assert r.status == 400 and text in r.error_message(), (bad, r)
        for body in (b"", b"{not json", b"[1]"):
            r = c.post("/v2/systemsharedmemory/region/bad/register", body,
                       {"Content-Type": "application/json"})
            assert r.status == 400 and "register" in r.error_message(), (body, r)
        assert c.get("/v2/systemsharedmemory/region/bad/status").status == 404
    finally:
        assert c.post("/v2/systemsharedmemory/unregister").status == 200
    assert c.get("/v2/systemsharedmemory/status").json() == []
    assert c.get("/v2/systemsharedmemory/region/in/status").status == 404
    paths = [n["path"] for n in walk(c.get("/v2/memory").json()["owners"])]
    assert not [p for p in paths if "client-shm" in p], paths


def test_an_output_placed_over_its_own_input_is_written_whole(server, shm_object):
    """A client may place the output in the bytes its input came from, shifted: the identity
    model's copy then reads and writes overlapping ranges, which must still leave the input's
    values at the output's place (a plain memcpy there is undefined, and AddressSanitizer builds
    stopped the server on it)."""
    c = server.client()
    key = "/" + shm_object.name
    x = np.arange(1000, dtype=np.float32)
    shm_object.buf[0:x.nbytes] = x.tobytes()
    assert post_json(c, "/v2/systemsharedmemory/region/io/register",
                     {"key": key, "offset": 0, "byte_size": 8192}).status == 200
    try:
        body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1000],
                            "parameters": {"shared_memory_region": "io",
                                           "shared_memory_byte_size": x.nbytes}}],
                "outputs": [{"name": "OUTPUT0",
                             "parameters": {"shared_memory_region": "io",
                                            "shared_memory_offset": 12,
                                            "shared_memory_byte_size": x.nbytes}}]}
        r = post_json(c, "/v2/models/identity_fp32/infer", body)
        assert r.status == 200, r
        got = np.frombuffer(bytes(shm_object.buf[12:12 + x.nbytes]), dtype=np.float32)
        assert got.tolist() == x.tolist()
        assert c.get("/v2/health/live").status == 200
    finally:
        assert c.post("/v2/systemsharedmemory/region/io/unregister").status == 200


def test_an_output_placed_over_an_input_does_not_change_what_the_model_reads(server,
                                                                             shm_object):
    """OUTPUT0 placed in place of INPUT0 (a client computing in place): add_sub writes OUTPUT0
    before it computes OUTPUT1 from the same inputs, so had it been given the region as
    OUTPUT0's memory it would read its own sums back (OUTPUT1 = a, not a - b). Such an output
    is made apart and copied in once the execution is done."""
    c = server.client()
    key = "/" + shm_object.name
    a = np.arange(16, dtype=np.float32) + 1
    b = np.full(16, 10, dtype=np.float32)
    shm_object.buf[0:64] = a.tobytes()
    shm_object.buf[64:128] = b.tobytes()
    assert post_json(c, "/v2/systemsharedmemory/region/io/register",
                     {"key": key, "offset": 0, "byte_size": 4096}).status == 200
    try:
        def placed(name, offset):
            return {"name": name, "parameters": {"shared_memory_region": "io",
                                                 "shared_memory_offset": offset,
                                                 "shared_memory_byte_size": 64}}
        inputs = [dict(placed("INPUT0", 0), datatype="FP32", shape=[1, 16]),
                  dict(placed("INPUT1", 64), datatype="FP32", shape=[1, 16])]
        r = post_json(c, "/v2/models/add_sub/infer",
                      {"inputs": inputs, "outputs": [placed("OUTPUT0", 0), placed("OUTPUT1", 128)]})
        assert r.status == 200, r
        sums = np.frombuffer(bytes(shm_object.buf[0:64]), dtype=np.float32)
        differences = np.frombuffer(bytes(shm_object.buf[128:192]), dtype=np.float32)
        assert sums.tolist() == (a + b).tolist()
        assert differences.tolist() == (a - b).tolist()
    finally:
        assert c.post("/v2/systemsharedmemory/region/io/unregister").status == 200


def test_shared_memory_over_http_can_be_turned_off(start_server):
    s = start_server([str(FIXTURE_REPO)], ["--no-http-shared-memory", "--model-control-mode",
                                           "explicit", "--load-model", "identity_fp32"],
                     name="shm_http_off", ready_models=["identity_fp32"])
    c = s.client()
    r = c.get("/v2/systemsharedmemory/status")
    assert r.status == 501 and "turned off" in r.error_message()
    r = c.get("/v2/cudasharedmemory/status")
    assert r.status == 501 and "CUDA shared memory is turned off" in r.error_message()
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1],
                        "parameters": {"shared_memory_region": "r",
                                       "shared_memory_byte_size": 4}}]}
    r = post_json(c, "/v2/models/identity_fp32/infer", body)
    assert r.status == 501 and "shared_memory_region" in r.error_message()


def test_cuda_shared_memory_registration_is_checked(server):
    """Every field of a CUDA registration is checked and named; a device this server does not
    use (here: any, without a GPU) is refused, and nothing is left registered. The status of
    a system region is not a CUDA region's."""
    c = server.client()
    assert c.get("/v2/cudasharedmemory/status").json() == []
    handle = {"b64": base64.b64encode(bytes(64)).decode()}
    for bad, text in (
            ({"device_id": 0, "byte_size": 16}, "'raw_handle' must be an object with a 'b64'"),
            ({"raw_handle": {"b64": "***="}, "device_id": 0, "byte_size": 16},
             "not a base64 character"),
            ({"raw_handle": {"b64": "abc"}, "device_id": 0, "byte_size": 16},
             "not a multiple of 4"),
            ({"raw_handle": {"b64": base64.b64encode(bytes(10)).decode()}, "device_id": 0,
              "byte_size": 16}, "a CUDA IPC handle has 64 bytes, got 10"),
            ({"raw_handle": handle, "byte_size": 16}, "'device_id' must be an integer"),
            ({"raw_handle": handle, "device_id": 0}, "'byte_size' must be"),
            ({"raw_handle": handle, "device_id": 99, "byte_size": 16},
             "device 99 is not one this server uses"),
            ({"raw_handle": handle, "device_id": 0, "byte_size": 0}, "byte_size 0")):
        r = post_json(c, "/v2/cudasharedmemory/region/g/register", bad)
        assert r.status == 400 and text in r.error_message(), (bad, r.body[:300])
    r = c.post("/v2/cudasharedmemory/region/g/register", b"[1]", {"Content-Type": "application/json"})
    assert r.status == 400 and "must be a JSON object" in r.error_message()
    r = c.get("/v2/cudasharedmemory/region/g/status")
    assert r.status == 404 and "no CUDA shared memory region named 'g'" in r.error_message()
    assert c.post("/v2/cudasharedmemory/region/g/unregister").status == 200
    assert c.post("/v2/cudasharedmemory/unregister").status == 200
    assert c.get("/v2/cudasharedmemory/register").status == 404
    assert c.get("/v2/cudasharedmemory/unregister").status == 405
    # The copy counters the request paths feed are exported; without a GPU nothing crosses one.
    port = re.search(r"metrics listening on [^ ]+:(\d+)", server.stderr_text()).group(1)
    with urllib.request.urlopen("http://127.0.0.1:%s/metrics" % port, timeout=10) as m:
        text = m.read().decode()
    for direction in ("h2d", "d2h", "d2d"):
        assert 'vramd_copy_bytes_total{direction="%s"} 0' % direction in text, text[-2000:]


def test_a_system_region_is_not_a_cuda_one(server, shm_object):
    c = server.client()
    key = "/" + shm_object.name
    assert post_json(c, "/v2/systemsharedmemory/region/sys/register",
                     {"key": key, "byte_size": 64}).status == 200
    try:
        r = c.get("/v2/cudasharedmemory/region/sys/status")
        assert r.status == 404, r
        # One namespace: a CUDA registration of a taken name is refused (with a GPU), or its
        # device is (without one): either way the system region stays.
        r = post_json(c, "/v2/cudasharedmemory/region/sys/register",
                      {"raw_handle": {"b64": base64.b64encode(bytes(64)).decode()},
                       "device_id": 0, "byte_size": 64})
        assert r.status in (400, 409), r
        assert c.post("/v2/cudasharedmemory/region/sys/unregister").status == 200
        assert c.get("/v2/systemsharedmemory/region/sys/status").status == 200
    finally:
        assert c.post("/v2/systemsharedmemory/region/sys/unregister").status == 200
