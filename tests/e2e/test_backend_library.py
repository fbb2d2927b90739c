"""A backend loaded from a shared library (docs/backends.md): vramd started with
--backend-directory <build>/test-backends serves tests/backends/echo_c over HTTP, and a model
whose library is missing or of another ABI version fails alone, with the reason in the index.

Needs VRAMD_TEST_BACKENDS_DIR (set by tests/CMakeLists.txt); skipped without it."""

import numpy as np
import pytest

from e2e_helpers import TEST_BACKENDS_DIR, index_rows, needs_echo_c
from v2client import Input

pytestmark = needs_echo_c

ECHO_CONFIG = """
backend: "%s"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] },
        { name: "INPUT1" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] },
         { name: "OUTPUT1" data_type: TYPE_STRING dims: [ -1 ] } ]
instance_group [ { kind: KIND_CPU count: 2 } ]
"""


def _add_model(repo, name, backend):
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(ECHO_CONFIG % backend)


@pytest.fixture(scope="module")
def library_server(start_server, tmp_path_factory):
    repo = tmp_path_factory.mktemp("backend-library-repo")
    _add_model(repo, "echo", "echo_c")
    _add_model(repo, "old_abi", "wrong_abi")
    _add_model(repo, "no_library", "missing")
    return start_server([repo], ["--backend-directory", TEST_BACKENDS_DIR], name="backend-library",
                        ready_models=["echo"])


@pytest.mark.parametrize("binary", [False, True])
def test_echo_c_serves_over_http(library_server, binary):
    values = np.array([1.5, -2.0, 0.0, 3.25], dtype=np.float32)
    words = [b"hello", b"", b"w\xc3\xb6rld"]
    client = library_server.client()
    try:
        result = client.infer("echo", [Input("INPUT0", "FP32", values, binary=binary),
                                       Input("INPUT1", "BYTES", words, binary=binary)],
                              request_id="echo-1")
    finally:
        client.close()
    assert result.json["id"] == "echo-1"
    np.testing.assert_array_equal(result.outputs["OUTPUT0"], values)
    assert [bytes(w) if not isinstance(w, str) else w.encode() for w in
            result.outputs["OUTPUT1"].reshape(-1)] == words


def test_failed_libraries_fail_their_models_only(library_server):
    client = library_server.client()
    try:
        old = index_rows(client, "old_abi")
        assert old and old[0]["state"] == "UNAVAILABLE", old
        assert "libvramd_wrong_abi.so" in old[0]["reason"], old
        assert "ABI version" in old[0]["reason"], old
        missing = index_rows(client, "no_library")
        assert missing and missing[0]["state"] == "UNAVAILABLE", missing
        assert "libvramd_missing.so" in missing[0]["reason"], missing
        assert client.get("/v2/models/echo/ready").status == 200
    finally:
        client.close()


def test_execute_error_is_an_error_response_and_serving_continues(library_server):
    client = library_server.client()
    try:
        magic = np.frombuffer(bytes([0xEE, 0, 0, 0]), dtype=np.float32)
        r = client.infer_raw("echo", [Input("INPUT0", "FP32", magic, binary=True),
                                      Input("INPUT1", "BYTES", [b"x"], binary=True)])
        assert r.status == 400, r
        assert "backend 'echo_c'" in r.error_message(), r
        ok = client.infer("echo", [Input("INPUT0", "FP32", np.array([1.0], dtype=np.float32)),
                                   Input("INPUT1", "BYTES", [b"y"])])
        np.testing.assert_array_equal(ok.outputs["OUTPUT0"], [1.0])
    finally:
        client.close()
