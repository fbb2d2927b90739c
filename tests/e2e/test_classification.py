"""Triton's classification extension: an output requested with parameter "classification": k
comes back as its k highest values, as BYTES "<value>:<index>[:<label>]" (labels from the
output's label_filename), shaped [batch, k] for a batching model and [k] otherwise."""

import numpy as np
import pytest

from v2client import Input

CONFIG = """
name: "{name}"
backend: "identity"
max_batch_size: {max_batch}
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] {label} }} ]
"""


@pytest.fixture(scope="module")
def classifying_server(start_server, tmp_path_factory):
    repo = tmp_path_factory.mktemp("classification-repo")
    for name, max_batch, label in [("scores", 0, ""),
                                   ("labelled", 8, 'label_filename: "labels.txt"')]:
        d = repo / name
        (d / "1").mkdir(parents=True)
        (d / "config.pbtxt").write_text(CONFIG.format(name=name, max_batch=max_batch, label=label))
    (repo / "labelled" / "labels.txt").write_text("cat\ndog\nbird\nfish\n")
    return start_server([repo], name="classification")


def _texts(values):
    flat = np.asarray(values, dtype=object).reshape(-1)
    return [v.decode() if isinstance(v, bytes) else v for v in flat]


@pytest.mark.parametrize("binary", [False, True])
def test_top_classes_of_an_output_instead_of_the_tensor(classifying_server, binary):
    client = classifying_server.client()
    try:
        x = np.array([1.0, 5.0, 10.0, 4.0], dtype=np.float32)
        result = client.infer("scores", [Input("INPUT0", "FP32", x)], outputs=[
            {"name": "OUTPUT0", "parameters": {"classification": 2, "binary_data": binary}}])
    finally:
        client.close()
    out = result.outputs["OUTPUT0"]
    assert list(np.asarray(out, dtype=object).shape) == [2]
    assert _texts(out) == ["10.000000:2", "5.000000:1"]


def test_batched_classes_carry_their_labels(classifying_server):
    client = classifying_server.client()
    try:
        x = np.array([[0.1, 0.9, 0.3, 0.2], [7.0, 1.0, 8.0, 9.0]], dtype=np.float32)
        result = client.infer("labelled", [Input("INPUT0", "FP32", x, binary=True)], outputs=[
            {"name": "OUTPUT0", "parameters": {"classification": 3}}])
    finally:
        client.close()
    out = result.outputs["OUTPUT0"]
    assert list(np.asarray(out, dtype=object).shape) == [2, 3]
    assert _texts(out) == ["0.900000:1:dog", "0.300000:2:bird", "0.200000:3:fish",
                           "9.000000:3:fish", "8.000000:2:bird", "7.000000:0:cat"]


def test_a_bad_count_is_refused_naming_the_parameter(classifying_server):
    client = classifying_server.client()
    try:
        r = client.infer_raw("scores", [Input("INPUT0", "FP32", np.zeros(4, np.float32))],
                             outputs=[{"name": "OUTPUT0", "parameters": {"classification": 0}}])
        assert r.status == 400, r
        assert "'classification' must be a positive integer" in r.error_message()
        # Without the parameter the tensor itself comes back.
        plain = client.infer("scores", [Input("INPUT0", "FP32", np.ones(4, np.float32))])
        np.testing.assert_array_equal(plain.outputs["OUTPUT0"], np.ones(4, np.float32))
    finally:
        client.close()
