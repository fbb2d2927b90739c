"""Triton's system shared memory extension over HTTP (src/server/http/kserve_routes.h,
src/server/shared_memory/): register, status and unregister a POSIX shared-memory region; an
input read from a region and an output written into one; every range and key checked; the
regions shared with the gRPC front end; --no-http-shared-memory turns it off."""

import json
import os

import numpy as np
import pytest

from e2e_helpers import FIXTURE_REPO


@pytest.fixture(scope="module")
def server(start_server):
    return start_server([str(FIXTURE_REPO)], ["--model-control-mode", "explicit",
                                              "--load-model", "identity_fp32"],
                        name="shm_http", ready_models=["identity_fp32"])


@pytest.fixture
def shm_object():
    from multiprocessing import shared_memory
    obj = shared_memory.SharedMemory(name="vramd_http_test_%d" % os.getpid(), create=True,
                                     size=1 << 16)
    yield obj
    obj.close()
    obj.unlink()


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
        assert r.status == 400 and "beyond shared memory region 'in'" in r.error_message()
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
                          ({"key": 5, "byte_size": 16}, "'key' must be a string")):
            r = post_json(c, "/v2/systemsharedmemory/region/bad/register", bad)
            assert r.status == 400 and text in r.error_message(), (bad, r)
    finally:
        assert c.post("/v2/systemsharedmemory/unregister").status == 200
    assert c.get("/v2/systemsharedmemory/status").json() == []
    assert c.get("/v2/systemsharedmemory/region/in/status").status == 404
    paths = [n["path"] for n in walk(c.get("/v2/memory").json()["owners"])]
    assert not [p for p in paths if "client-shm" in p], paths


def test_shared_memory_over_http_can_be_turned_off(start_server):
    s = start_server([str(FIXTURE_REPO)], ["--no-http-shared-memory", "--model-control-mode",
                                           "explicit", "--load-model", "identity_fp32"],
                     name="shm_http_off", ready_models=["identity_fp32"])
    c = s.client()
    r = c.get("/v2/systemsharedmemory/status")
    assert r.status == 501 and "turned off" in r.error_message()
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1],
                        "parameters": {"shared_memory_region": "r",
                                       "shared_memory_byte_size": 4}}]}
    r = post_json(c, "/v2/models/identity_fp32/infer", body)
    assert r.status == 501 and "shared_memory_region" in r.error_message()
