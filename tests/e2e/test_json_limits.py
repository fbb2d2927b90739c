"""JSON bodies of the repository API nested far deeper than any real request (120k and 2M
levels) or larger than the JSON size limit: each is answered 400 naming the limit, and the
server lives on and serves. Before the depth bound, rapidjson's recursive parser overflowed the
stack (SIGSEGV) on the index, load and unload bodies and on a load's config override (how deep
it takes depends on the build's stack frames: 120k in the report, 2M here)."""

import json
import shutil

import numpy as np
import pytest

from e2e_helpers import FIXTURE_REPO
from v2client import Input

DEPTHS = [120_000, 2_000_000]
JSON_CT = {"Content-Type": "application/json"}


@pytest.fixture(scope="module")
def explicit_server(start_server, tmp_path_factory):
    repo = tmp_path_factory.mktemp("json-limits-repo")
    shutil.copytree(FIXTURE_REPO / "identity_fp32", repo / "identity_fp32")
    return start_server([repo], ["--model-control-mode", "explicit",
                                 "--load-model", "identity_fp32"],
                        name="json-limits", ready_models=["identity_fp32"])


def assert_refused(server, r, *words):
    assert server.alive(), "vramd died on the request\n" + server.describe()
    assert r.status == 400, r
    msg = r.error_message().lower()
    for w in words:
        assert w in msg, "error %r does not say %r" % (msg, w)


def assert_still_serving(server):
    c = server.client()
    try:
        assert c.get("/v2/health/live").status == 200
        data = np.array([1.0, 2.0, 3.0], dtype=np.float32)
        out = c.infer("identity_fp32", [Input("INPUT0", "FP32", data)])
        np.testing.assert_array_equal(out.outputs["OUTPUT0"], data)
        r = c.post("/v2/repository/index", b"{}", JSON_CT)
        assert r.status == 200, r
    finally:
        c.close()
    server.assert_no_crash_markers()


@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize("opener", ["[", '{"a":'])
@pytest.mark.parametrize("target", ["/v2/repository/index",
                                    "/v2/repository/models/identity_fp32/load",
                                    "/v2/repository/models/identity_fp32/unload"])
def test_deep_body_is_refused_naming_the_depth_limit(explicit_server, target, opener, depth):
    c = explicit_server.client()
    try:
        r = c.post(target, (opener * depth).encode(), JSON_CT)
    finally:
        c.close()
    assert_refused(explicit_server, r, "deeper than", "levels")
    assert_still_serving(explicit_server)


@pytest.mark.parametrize("depth", DEPTHS)
def test_deep_config_override_is_refused_naming_the_parameter(explicit_server, depth):
    body = json.dumps({"parameters": {"config": "[" * depth}}).encode()
    c = explicit_server.client()
    try:
        r = c.post("/v2/repository/models/identity_fp32/load", body, JSON_CT)
    finally:
        c.close()
    assert_refused(explicit_server, r, "parameter 'config'", "deeper than", "levels")
    assert_still_serving(explicit_server)


@pytest.mark.parametrize("depth", [120_000, 1_000_000])  # 2M levels would pass the size limit
def test_config_override_nested_inside_an_object_is_refused(explicit_server, depth):
    # Valid JSON: an object whose "parameters" map nests on and on.
    config = ('{"name": "identity_fp32", "parameters": ' + '{"a": ' * depth + "1" + "}" * depth
              + "}")
    body = json.dumps({"parameters": {"config": config}}).encode()
    c = explicit_server.client()
    try:
        r = c.post("/v2/repository/models/identity_fp32/load", body, JSON_CT)
    finally:
        c.close()
    assert_refused(explicit_server, r, "parameter 'config'", "deeper than")
    assert_still_serving(explicit_server)


def test_oversized_body_is_refused_naming_the_size_limit(explicit_server):
    # Valid JSON, but larger than any repository request needs (the limit is 16 MiB).
    body = b'{"ready": true, "padding": "' + b"a" * (17 << 20) + b'"}'
    c = explicit_server.client()
    try:
        r = c.post("/v2/repository/index", body, JSON_CT)
    finally:
        c.close()
    assert_refused(explicit_server, r, "bytes", "limit")
    assert_still_serving(explicit_server)


def test_shallow_bodies_still_work(explicit_server):
    c = explicit_server.client()
    try:
        r = c.post("/v2/repository/index", b'{"ready": true}', JSON_CT)
        assert r.status == 200, r
        assert [row["name"] for row in r.json()] == ["identity_fp32"]
        config = json.dumps({"name": "identity_fp32", "backend": "identity",
                             "input": [{"name": "INPUT0", "data_type": "TYPE_FP32",
                                        "dims": [-1]}],
                             "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32",
                                         "dims": [-1]}],
                             "parameters": {"k": {"string_value": "v"}}})
        r = c.post("/v2/repository/models/identity_fp32/load",
                   json.dumps({"parameters": {"config": config}}).encode(), JSON_CT)
        assert r.status == 200, r
    finally:
        c.close()
    assert_still_serving(explicit_server)
