"""Statistics extension and Triton's metrics end to end: after N successful and M failing
requests, GET /v2/models/{m}/stats and the metrics page report exactly that traffic, with
Triton's JSON shape, metric names and labels (docs/metrics.md)."""

import re
import urllib.request

import numpy as np
import pytest

from e2e_helpers import wait_for

from v2client import Input

MODEL = "stats_add_sub"
CONFIG = """
name: "%s"
backend: "add_sub"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
""" % MODEL

# The traffic: batch sizes of the successful requests, and the failing requests' count.
SUCCESS_BATCHES = [1, 1, 1, 4, 4, 2]
FAILURES = 3


@pytest.fixture(scope="module")
def stats_server(start_server, tmp_path_factory):
    repo = tmp_path_factory.mktemp("stats-repo")
    (repo / MODEL / "1").mkdir(parents=True)
    (repo / MODEL / "config.pbtxt").write_text(CONFIG)
    return start_server([repo], name="stats")


def metrics_page(server):
    # The metrics port is logged after the HTTP port (and the gRPC one) the server is ready on.
    m = wait_for(lambda: re.search(r"metrics listening on [^ ]+:(\d+)", server.stderr_text()),
                 timeout=10, what=lambda: "a 'metrics listening on' line\n" + server.describe())
    with urllib.request.urlopen("http://127.0.0.1:%s/metrics" % m.group(1), timeout=10) as r:
        assert r.status == 200
        return r.read().decode()


def sample(text, name, **labels):
    """The value of the sample `name{labels}` (labels in name order, as Triton writes them)."""
    label_text = ",".join('%s="%s"' % (k, v) for k, v in sorted(labels.items()))
    m = re.search(r"(?m)^%s\{%s\} (\S+)$" % (re.escape(name), re.escape(label_text)), text)
    assert m, "no sample %s{%s}\n%s" % (name, label_text, text[:3000])
    return float(m.group(1))


def send_traffic(client):
    for batch in SUCCESS_BATCHES:
        a = np.ones((batch, 16), dtype=np.float32)
        client.infer(MODEL, [Input("INPUT0", "FP32", a), Input("INPUT1", "FP32", a)])
    for _ in range(FAILURES):
        a = np.ones((1, 16), dtype=np.int32)  # wrong datatype: the model takes FP32
        r = client.infer_raw(MODEL, [Input("INPUT0", "INT32", a), Input("INPUT1", "INT32", a)])
        assert r.status == 400, r.body[:300]


@pytest.fixture(scope="module")
def after_traffic(stats_server):
    client = stats_server.client()
    send_traffic(client)
    return stats_server


def test_stats_equal_the_traffic_sent(after_traffic):
    client = after_traffic.client()
    r = client.get("/v2/models/%s/stats" % MODEL)
    assert r.status == 200, r.body[:300]
    stats = r.json()["model_stats"]
    assert [(s["name"], s["version"]) for s in stats] == [(MODEL, "1")]
    s = stats[0]
    n = len(SUCCESS_BATCHES)
    assert s["inference_count"] == sum(SUCCESS_BATCHES)
    assert s["execution_count"] == n
    assert s["last_inference"] > 0
    inf = s["inference_stats"]
    assert inf["success"]["count"] == n
    assert inf["fail"]["count"] == FAILURES
    for key in ("queue", "compute_input", "compute_infer", "compute_output"):
        assert inf[key]["count"] == n, key
        assert isinstance(inf[key]["ns"], int) and inf[key]["ns"] >= 0, key
    assert inf["success"]["ns"] > 0
    assert inf["cache_hit"] == {"count": 0, "ns": 0}
    assert inf["cache_miss"] == {"count": 0, "ns": 0}
    batches = {b["batch_size"]: b for b in s["batch_stats"]}
    expected = {size: SUCCESS_BATCHES.count(size) for size in set(SUCCESS_BATCHES)}
    assert sorted(batches) == sorted(expected)
    for size, count in expected.items():
        for key in ("compute_input", "compute_infer", "compute_output"):
            assert batches[size][key]["count"] == count, (size, key)
    assert isinstance(s["response_stats"], dict)
    assert s["memory_usage"] == []


def test_version_and_all_models_paths_agree(after_traffic):
    client = after_traffic.client()
    one = client.get("/v2/models/%s/stats" % MODEL).json()["model_stats"][0]
    v1 = client.get("/v2/models/%s/versions/1/stats" % MODEL)
    assert v1.status == 200
    assert v1.json()["model_stats"][0]["inference_stats"]["success"] == \
        one["inference_stats"]["success"]
    everything = client.get("/v2/models/stats")
    assert everything.status == 200
    names = [(s["name"], s["version"]) for s in everything.json()["model_stats"]]
    assert (MODEL, "1") in names


def test_unknown_model_and_version_are_404(stats_server):
    client = stats_server.client()
    r = client.get("/v2/models/no_such_model/stats")
    assert r.status == 404
    assert "no_such_model" in r.json()["error"]
    r = client.get("/v2/models/%s/versions/9/stats" % MODEL)
    assert r.status == 404
    assert "error" in r.json()
    assert client.post("/v2/models/stats", b"{}").status == 405


def test_metrics_equal_the_traffic_sent(after_traffic):
    text = metrics_page(after_traffic)
    labels = {"model": MODEL, "version": "1"}
    n = len(SUCCESS_BATCHES)
    assert sample(text, "nv_inference_request_success", **labels) == n
    assert sample(text, "nv_inference_count", **labels) == sum(SUCCESS_BATCHES)
    assert sample(text, "nv_inference_exec_count", **labels) == n
    assert sample(text, "nv_inference_pending_request_count", **labels) == 0
    failures = sum(sample(text, "nv_inference_request_failure", reason=reason, **labels)
                   for reason in ("REJECTED", "CANCELED", "BACKEND", "OTHER"))
    assert failures == FAILURES
    for name in ("nv_inference_request_duration_us", "nv_inference_queue_duration_us",
                 "nv_inference_compute_input_duration_us",
                 "nv_inference_compute_infer_duration_us",
                 "nv_inference_compute_output_duration_us"):
        assert sample(text, name, **labels) >= 0
    # The metrics and the stats endpoint agree.
    stats = after_traffic.client().get("/v2/models/%s/stats" % MODEL).json()["model_stats"][0]
    assert sample(text, "nv_inference_request_duration_us", **labels) == \
        stats["inference_stats"]["success"]["ns"] // 1000


def test_metric_families_have_triton_types(after_traffic):
    text = metrics_page(after_traffic)
    counters = ["nv_inference_request_success", "nv_inference_request_failure",
                "nv_inference_count", "nv_inference_exec_count",
                "nv_inference_request_duration_us", "nv_inference_queue_duration_us",
                "nv_inference_compute_input_duration_us",
                "nv_inference_compute_infer_duration_us",
                "nv_inference_compute_output_duration_us"]
    for name in counters:
        assert re.search(r"(?m)^# TYPE %s counter$" % name, text), name
    assert re.search(r"(?m)^# TYPE nv_inference_pending_request_count gauge$", text)
    # vramd's own memory families share the page.
    assert re.search(r"(?m)^# TYPE vramd_memory_live_bytes gauge$", text)
    # GPU families appear only with their gpu_uuid label, and only where NVML answers.
    for line in text.splitlines():
        if line.startswith("nv_gpu_"):
            assert re.match(r'^nv_gpu_[a-z_]+\{gpu_uuid="[^"]+"\} \S+$', line), line
