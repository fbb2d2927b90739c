"""The memory report end to end: GET /v2/memory, `vramctl memory`, and /metrics on the metrics
port, on the shared fixtures server (no GPU here: the report must say so and still work)."""

import re
import subprocess
import urllib.request

import numpy as np
import pytest

from e2e_helpers import VRAMD_BIN
from v2client import Input

VRAMCTL_BIN = VRAMD_BIN.parent / "vramctl"


def walk(node, depth=0):
    yield node, depth
    for child in node.get("children", []):
        yield from walk(child, depth + 1)


def memory_report(server):
    r = server.client().get("/v2/memory")
    assert r.status == 200, r.body[:300]
    return r.json()


def add_sub_inputs():
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    return [Input("INPUT0", "FP32", a), Input("INPUT1", "FP32", a)]


def test_report_has_the_owner_tree_of_every_loaded_model(server):
    report = memory_report(server)
    root = report["owners"]
    assert root["path"] == "server" and root["kind"] == "server"
    paths = {n["path"]: n for n, _ in walk(root)}
    assert "server/model:add_sub" in paths
    assert "server/model:add_sub/version:1" in paths
    instances = [p for p in paths if p.startswith("server/model:add_sub/version:1/instance:")]
    assert instances, sorted(paths)
    for p in instances:
        assert paths[p]["kind"] == "instance"
    # Every node carries the documented figures.
    for node, _ in walk(root):
        for key in ("live_bytes", "peak_bytes", "subtree_live_bytes", "total_allocated_bytes"):
            assert isinstance(node[key], int) and node[key] >= 0, (node["path"], key)


def test_report_says_why_there_is_no_gpu(server):
    report = memory_report(server)
    if report["cuda"]["available"]:
        pytest.skip("this machine has a CUDA device; the no-GPU form is what CI checks")
    assert report["devices"] == []
    assert report["cuda"]["reason"]
    assert report["nvml"]["available"] is False and report["nvml"]["reason"]
    assert isinstance(report["pools"], list)


def test_requests_leave_no_owner_and_no_leak(server):
    client = server.client()
    before = memory_report(server)
    for i in range(50):
        client.infer("add_sub", add_sub_inputs(), request_id="mem-%d" % i)
    after = memory_report(server)
    assert after["leaks"] == [] and after["leaked_bytes_total"] == 0
    assert not any("/request:" in n["path"] for n, _ in walk(after["owners"]))
    assert after["owners"]["subtree_live_bytes"] == before["owners"]["subtree_live_bytes"]


def test_wrong_method_on_memory_is_405(server):
    assert server.client().post("/v2/memory", b"{}").status == 405


def test_vramctl_memory_prints_the_tree(server):
    out = subprocess.run([str(VRAMCTL_BIN), "memory", "--url",
                          "http://%s:%d" % (server.host, server.port)],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert "model:add_sub" in out.stdout or "add_sub" in out.stdout
    assert "version:1" in out.stdout or "1" in out.stdout
    # The model's lines are indented below the server's.
    lines = out.stdout.splitlines()
    server_line = next(i for i, l in enumerate(lines) if re.search(r"\bserver\b", l))
    model_line = next(i for i, l in enumerate(lines) if "add_sub" in l)
    assert model_line > server_line
    indent = lambda s: len(s) - len(s.lstrip())
    assert indent(lines[model_line]) > indent(lines[server_line])


def test_vramctl_reports_an_unreachable_server(tmp_path):
    out = subprocess.run([str(VRAMCTL_BIN), "memory", "--url", "http://127.0.0.1:1"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode != 0
    assert out.stderr.strip(), "vramctl said nothing about the failure"


def metrics_port(server):
    m = re.search(r"metrics listening on [^ ]+:(\d+)", server.stderr_text())
    assert m, "no 'metrics listening on' line in the log"
    return int(m.group(1))


def test_metrics_port_serves_memory_metrics(server):
    port = metrics_port(server)
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = r.read().decode()
    assert re.search(r"(?m)^# TYPE vramd_memory_leaked_bytes_total counter$", text), text[:500]
    assert re.search(r"(?m)^vramd_memory_leaked_bytes_total 0$", text)
    # Built-in CPU backends allocate nothing through the ledger, so the live-bytes family is
    # present with no add_sub sample (samples exist only where bytes are live).
    assert re.search(r"(?m)^# TYPE vramd_memory_live_bytes gauge$", text)
    assert re.search(r"(?m)^# TYPE vramd_nvml_available gauge$", text)
    # Every sample line is "name{labels} value" or "name value".
    for line in text.splitlines():
        if line and not line.startswith("#"):
            assert re.match(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})? [-+0-9.eEInfNa]+$', line), line


def test_metrics_port_answers_404_elsewhere(server):
    port = metrics_port(server)
    try:
        urllib.request.urlopen("http://127.0.0.1:%d/v2/health/live" % port, timeout=10)
        raise AssertionError("expected 404")
    except urllib.error.HTTPError as e:
        assert e.code == 404
