"""Model names come from clients (percent-decoded URLs, bodies): a control character in one must
not start a new line in the server's log (it is written escaped, as \\n), and a name longer than
any model directory's is refused before the server keeps anything for it."""

import shutil

import numpy as np
import pytest

from e2e_helpers import FIXTURE_REPO
from v2client import Input

FORGED = "forged line"
# Percent-encoded, as a client puts it in the URL: "x\nforged line" and "evil\r\nforged line".
UNKNOWN_URL = "x%0A" + FORGED.replace(" ", "%20")
EVIL_NAME = "evil\nforged line"
EVIL_URL = "evil%0Aforged%20line"


@pytest.fixture(scope="module")
def explicit_server(start_server, tmp_path_factory):
    repo = tmp_path_factory.mktemp("model-names-repo")
    shutil.copytree(FIXTURE_REPO / "identity_fp32", repo / "identity_fp32")
    # A model whose directory name holds a newline: loaded, served and unloaded under it.
    evil = repo / EVIL_NAME
    shutil.copytree(FIXTURE_REPO / "identity_fp32", evil)
    text = (evil / "config.pbtxt").read_text()
    (evil / "config.pbtxt").write_text(text.replace('name: "identity_fp32"',
                                                    'name: "evil\\nforged line"'))
    return start_server([repo], ["--model-control-mode", "explicit",
                                 "--load-model", "identity_fp32"],
                        name="model-names", ready_models=["identity_fp32"])


def test_a_newline_in_a_model_name_does_not_forge_log_lines(explicit_server):
    c = explicit_server.client()
    try:
        for action in ("load", "unload"):
            r = c.post("/v2/repository/models/%s/%s" % (UNKNOWN_URL, action))
            assert r.status in (200, 404), r
        r = c.post("/v2/repository/models/%s/load" % ("y%0D%0A" + FORGED.replace(" ", "%20")))
        assert r.status == 404, r
        assert c.post("/v2/repository/models/%s/load" % EVIL_URL).status == 200
        data = np.array([1.0, 2.0], dtype=np.float32)
        out = c.infer(EVIL_URL, [Input("INPUT0", "FP32", data)])
        np.testing.assert_array_equal(out.outputs["OUTPUT0"], data)
        assert c.post("/v2/repository/models/%s/unload" % EVIL_URL).status == 200
        r = c.infer_raw(UNKNOWN_URL, [Input("INPUT0", "FP32", data)])
        assert r.status in (400, 404), r
    finally:
        c.close()
    log = explicit_server.stderr_text()
    forged = [line for line in log.splitlines() if line.startswith(FORGED)]
    assert not forged, "client input started log lines %r\n%s" % (forged, log[-3000:])
    # The names are still there, readable, escaped.
    assert "'x\\nforged line'" in log, log[-3000:]
    assert "'y\\r\\nforged line'" in log, log[-3000:]
    assert "loaded model 'evil\\nforged line'" in log, log[-3000:]
    assert "unloaded model 'evil\\nforged line'" in log, log[-3000:]


def test_a_name_longer_than_a_directory_name_is_refused(explicit_server):
    c = explicit_server.client()
    try:
        for action in ("load", "unload"):
            r = c.post("/v2/repository/models/%s/%s" % ("n" * 4096, action))
            assert r.status == 400, r
            msg = r.error_message()
            assert "4096 bytes" in msg and "255" in msg, msg
            assert len(msg) < 1000, "the error repeats the whole name"
        # 255 bytes is a name a repository could hold: an unknown one is still a 404.
        r = c.post("/v2/repository/models/%s/load" % ("n" * 255))
        assert r.status == 404, r
        assert "n" * 255 in r.error_message()
    finally:
        c.close()
