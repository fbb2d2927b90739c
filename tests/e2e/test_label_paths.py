"""label_filename from a config override (explicit mode) may only name a regular file inside the
model directory, of bounded size: an absolute path, "..", a symlink out of the directory, a FIFO
and a device are refused with a load error naming the file and why, and never opened. Before
this rule the lines of any file on the host came back as classification labels, a FIFO hung the
load, and /dev/zero was read until memory ran out."""

import json
import os

import numpy as np
import pytest

from v2client import Input

CONFIG = """
name: "labelled"
backend: "identity"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] label_filename: "labels.txt" } ]
"""


@pytest.fixture(scope="module")
def setup(start_server, tmp_path_factory):
    root = tmp_path_factory.mktemp("label-paths")
    repo = root / "repo"
    d = repo / "labelled"
    (d / "1").mkdir(parents=True)
    (d / "config.pbtxt").write_text(CONFIG)
    (d / "labels.txt").write_text("cat\ndog\nbird\nfish\n")
    secret = root / "secret.txt"
    secret.write_text("s3cret-line-0\ns3cret-line-1\ns3cret-line-2\ns3cret-line-3\n")
    os.symlink(secret, d / "escape.txt")
    os.mkfifo(d / "fifo.txt")
    os.symlink("/dev/zero", d / "zero.txt")
    server = start_server([repo], ["--model-control-mode", "explicit", "--load-model", "labelled"],
                          name="label-paths", ready_models=["labelled"])
    return server, secret


def override(label):
    return json.dumps({
        "name": "labelled", "backend": "identity", "max_batch_size": 0,
        "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4],
                    "label_filename": label}],
    })


def load(client, label):
    body = json.dumps({"parameters": {"config": override(label)}}).encode()
    return client.post("/v2/repository/models/labelled/load", body,
                       {"Content-Type": "application/json"})


def top_labels(client):
    x = np.array([0.1, 0.9, 0.3, 0.2], dtype=np.float32)
    result = client.infer("labelled", [Input("INPUT0", "FP32", x)], outputs=[
        {"name": "OUTPUT0", "parameters": {"classification": 4}}])
    flat = np.asarray(result.outputs["OUTPUT0"], dtype=object).reshape(-1)
    return [v.decode() if isinstance(v, bytes) else v for v in flat]


@pytest.mark.parametrize("label,why", [
    ("ABSOLUTE", "relative"),
    ("../../secret.txt", ".."),
    ("escape.txt", "outside the model directory"),
    ("fifo.txt", "not a regular file"),
    ("zero.txt", ("not a regular file", "outside the model directory")),
    ("/dev/zero", "relative"),
])
def test_label_file_outside_the_model_or_not_a_file_is_refused(setup, label, why):
    server, secret = setup
    if label == "ABSOLUTE":
        label = str(secret)
    # A short timeout: a FIFO must be refused, not opened (which would block the load).
    c = server.client(timeout=10)
    try:
        r = load(c, label)
        assert r.status == 400, r
        msg = r.error_message()
        assert "label_filename" in msg and label in msg, msg
        assert any(w in msg for w in (why if isinstance(why, tuple) else (why,))), msg
        assert "s3cret" not in msg
        # The failed reload left the version serving with its own labels.
        labels = top_labels(c)
        assert labels == ["0.900000:1:dog", "0.300000:2:bird", "0.200000:3:fish",
                          "0.100000:0:cat"], labels
    finally:
        c.close()
    assert server.alive()


def test_label_file_inside_the_model_still_loads(setup):
    server, _ = setup
    c = server.client()
    try:
        r = load(c, "labels.txt")
        assert r.status == 200, r
        assert top_labels(c)[0] == "0.900000:1:dog"
    finally:
        c.close()
