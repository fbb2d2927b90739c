"""Sleeping models (docs/memory.md, "Sleeping models"; issue 17, item 4): a model put to sleep
gives back what it holds on its devices and keeps its instances; a request wakes it and gets the
answer it got before; an idle time puts it to sleep by itself; a load or a wake that does not
fit puts the least recently used idle models to sleep first; the index and the metrics show it.

The models are the built-in mlp backend on CPU instances, with random weights: a CPU model's
weights are host memory already, so asleep at either level it drops them and reads them again
from model.safetensors on wake (a GPU model keeps a pinned copy at level 1: on the device, in
tests/device). The server's budget (--memory-budget cpu=...) stands for a small GPU."""

import re
import subprocess
import threading

import numpy as np
import pytest

from e2e_helpers import VRAMD_BIN, index_rows, safetensors_bytes, wait_for
from test_stats_metrics import metrics_page, sample
from v2client import InferResult, Input


VRAMCTL = str(VRAMD_BIN.parent / "vramctl")
WIDTH = 512  # weights of 512 x 512 floats: 1 MiB a model
WEIGHT_BYTES = WIDTH * WIDTH * 4 + WIDTH * 4


def config(name, extra=""):
    return """name: "%s"
backend: "mlp"
max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ %d ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ %d ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
%s
""" % (name, WIDTH, WIDTH, extra)


def parameter(key, value):
    return 'parameters { key: "%s" value { string_value: "%s" } }' % (key, value)


def weights(seed):
    rng = np.random.default_rng(seed)
    return safetensors_bytes([
        ("layers.0.weight", rng.standard_normal((WIDTH, WIDTH)).astype(np.float32)),
        ("layers.0.bias", rng.standard_normal(WIDTH).astype(np.float32)),
    ])


def add_model(repo, name, seed, extra=""):
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(config(name, extra))
    (repo / name / "1" / "model.safetensors").write_bytes(weights(seed))


INPUT = np.random.default_rng(7).standard_normal((2, WIDTH)).astype(np.float32)


def infer(client, model):
    r = client.infer_raw(model, [Input("INPUT0", "FP32", INPUT, binary=True)])
    assert r.status == 200, "infer %s: HTTP %d %r" % (model, r.status, r.body[:500])
    return InferResult(r).outputs["OUTPUT0"]


def post(client, model, action, body=b""):
    return client.post("/v2/repository/models/%s/%s" % (model, action), body,
                       {"Content-Type": "application/json"})


def sleep_state(client, model):
    rows = index_rows(client, model)
    assert len(rows) == 1, rows
    return rows[0]


def version_bytes(client, model, device="cpu"):
    """What version 1 of `model` holds on `device`, itself and below (/v2/memory)."""
    report = client.get("/v2/memory").json()
    stack = [report["owners"]]
    while stack:
        node = stack.pop()
        if node["path"].endswith("model:%s/version:1" % model):
            return subtree_live(node, device)
        stack.extend(node["children"])
    raise AssertionError("no owner for %s version 1 in %s" % (model, report["owners"]))


def subtree_live(node, device):
    own = node["by_device"].get(device, 0)
    return own + sum(subtree_live(child, device) for child in node["children"])


@pytest.fixture(scope="module")
def sleep_server(start_server, tmp_path_factory):
    repo = tmp_path_factory.mktemp("sleep-repo")
    add_model(repo, "sleeper", seed=1)
    add_model(repo, "deep", seed=2)
    add_model(repo, "dozer", seed=3, extra=parameter("vramd.sleep_after_idle", "300ms"))
    add_model(repo, "plain", seed=4)
    (repo / "echo" / "1").mkdir(parents=True)
    (repo / "echo" / "config.pbtxt").write_text("""
backend: "identity"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
""")
    return start_server([repo], [], name="sleep",
                        ready_models=["sleeper", "deep", "dozer", "plain", "echo"])


def test_a_sleeping_model_gives_back_its_weights_and_answers_as_before(sleep_server):
    client = sleep_server.client()
    try:
        before = infer(client, "sleeper")
        held = version_bytes(client, "sleeper")
        assert held >= WEIGHT_BYTES
        row = sleep_state(client, "sleeper")
        assert row["state"] == "READY" and row["sleep"] == "awake", row

        r = post(client, "sleeper", "sleep")
        assert r.status == 200, r
        row = sleep_state(client, "sleeper")
        # Asleep is still READY to a client: a request wakes it.
        assert row["state"] == "READY" and row["sleep"] == "asleep", row
        assert "sleeping" in row["reason"], row
        assert held - version_bytes(client, "sleeper") >= WEIGHT_BYTES
        assert client.get("/v2/models/sleeper/ready").status == 200

        after = infer(client, "sleeper")  # wakes it
        np.testing.assert_array_equal(after, before)
        assert sleep_state(client, "sleeper")["sleep"] == "awake"
        assert version_bytes(client, "sleeper") == held

        text = metrics_page(sleep_server)
        labels = dict(model="sleeper", version="1")
        assert sample(text, "vramd_model_sleeps_total", **labels) == 1
        assert sample(text, "vramd_model_wakes_total", **labels) == 1
        assert sample(text, "vramd_model_sleeping", **labels) == 0
        assert sample(text, "vramd_model_wake_seconds_total", **labels) > 0
    finally:
        client.close()


def test_vramctl_sleeps_and_wakes_at_level_two(sleep_server):
    client = sleep_server.client()
    try:
        before = infer(client, "deep")
        url = "http://%s:%d" % (sleep_server.host, sleep_server.port)
        done = subprocess.run([VRAMCTL, "sleep", "deep", "--level", "2", "--url", url],
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done
        row = sleep_state(client, "deep")
        assert row["sleep"] == "asleep" and "level 2" in row["reason"], row
        done = subprocess.run([VRAMCTL, "wake", "deep", "--url", url],
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done
        assert sleep_state(client, "deep")["sleep"] == "awake"
        np.testing.assert_array_equal(infer(client, "deep"), before)
        # A sleep of a sleeping model and a wake of an awake one change nothing.
        assert post(client, "deep", "wake").status == 200
        assert post(client, "deep", "sleep").status == 200
        assert post(client, "deep", "sleep").status == 200
        np.testing.assert_array_equal(infer(client, "deep"), before)
    finally:
        client.close()


def test_requests_arriving_together_at_a_sleeping_model_all_get_its_answer(sleep_server):
    client = sleep_server.client()
    try:
        before = infer(client, "plain")
        assert post(client, "plain", "sleep").status == 200
    finally:
        client.close()
    answers = [None] * 8
    go = threading.Barrier(len(answers))

    def send(i):
        c = sleep_server.client()
        try:
            go.wait()
            answers[i] = infer(c, "plain")
        finally:
            c.close()

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(answers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for answer in answers:
        np.testing.assert_array_equal(answer, before)
    text = metrics_page(sleep_server)
    # One wake served them all.
    assert sample(text, "vramd_model_wakes_total", model="plain", version="1") == 1


def test_an_idle_model_sleeps_by_itself_and_a_request_wakes_it(sleep_server):
    client = sleep_server.client()
    try:
        before = infer(client, "dozer")
        wait_for(lambda: sleep_state(client, "dozer")["sleep"] == "asleep", timeout=10,
                 what="dozer asleep after 300 ms without a request")
        np.testing.assert_array_equal(infer(client, "dozer"), before)
        # It sleeps again once idle again.
        wait_for(lambda: sleep_state(client, "dozer")["sleep"] == "asleep", timeout=10,
                 what="dozer asleep again")
        text = metrics_page(sleep_server)
        assert sample(text, "vramd_model_sleeps_total", model="dozer", version="1") >= 2
        m = re.search(r"(?m)^vramd_idle_sleeps_total (\S+)$", text)
        assert m and float(m.group(1)) >= 2, text[-2000:]
    finally:
        client.close()


def test_sleep_requests_that_cannot_be_served_are_refused_clearly(sleep_server):
    client = sleep_server.client()
    try:
        r = post(client, "echo", "sleep")
        assert r.status == 501, r  # UNSUPPORTED, as Triton maps it
        assert "identity" in r.body.decode() and "cannot sleep" in r.body.decode(), r.body
        r = post(client, "nonexistent", "sleep")
        assert r.status in (400, 404), r
        assert "nonexistent" in r.body.decode()
        for body, words in [(b'{"parameters": {"level": 3}}', "level"),
                            (b'{"parameters": {"level": "deep"}}', "level"),
                            (b'{"parameters": {"version": "x"}}', "version"),
                            (b'{"parameters": {"version": 7}}', "version 7"),
                            (b'[1]', "JSON object"),
                            (b'{"parameters": ', "")]:
            r = post(client, "sleeper", "sleep", body)
            assert r.status in (400, 404), (body, r)
            assert words in r.body.decode(), (body, r.body)
        r = post(client, "sleeper", "wake", b'{"parameters": {"level": 1}}')
        assert r.status == 400 and "level" in r.body.decode(), r.body
        r = client.get("/v2/repository/models/sleeper/sleep")
        assert r.status == 405, r
        # Still serving, awake or not.
        infer(client, "sleeper")
    finally:
        client.close()


def test_a_config_asking_a_backend_that_cannot_sleep_to_sleep_fails_its_load(
        start_server, tmp_path_factory):
    repo = tmp_path_factory.mktemp("sleep-bad-repo")
    for name, extra in [("idle_identity", parameter("vramd.sleep_after_idle", "5s")),
                        ("bad_idle", parameter("vramd.sleep_after_idle", "soon")),
                        ("bad_level", parameter("vramd.sleep_level", "3"))]:
        (repo / name / "1").mkdir(parents=True)
        backend = "identity" if name == "idle_identity" else "mlp"
        (repo / name / "config.pbtxt").write_text("""
backend: "%s"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
%s
""" % (backend, extra))
    server = start_server([repo], [], name="sleep-bad", wait_ready=False)
    client = server.client()
    try:
        expected = {"idle_identity": "backend 'identity' cannot sleep",
                    "bad_idle": "'soon' is not a duration",
                    "bad_level": "'3' is not a sleep level"}

        def all_failed():
            rows = {row["name"]: row for row in
                    client.post("/v2/repository/index", b"{}").json()}
            return all(rows.get(n, {}).get("state") == "UNAVAILABLE" for n in expected) and rows
        rows = wait_for(all_failed, timeout=20, what="the three loads to fail")
        for name, words in expected.items():
            assert words in rows[name]["reason"], rows[name]
    finally:
        client.close()


def test_a_load_past_the_budget_puts_the_least_recently_used_idle_model_to_sleep(
        start_server, tmp_path_factory):
    repo = tmp_path_factory.mktemp("sleep-lru-repo")
    for i, name in enumerate(["a", "b", "c"]):
        add_model(repo, name, seed=10 + i)
    # Two models' weights fit, three do not (instances' workspaces are a few KiB each).
    budget = "cpu=%dKiB" % ((2 * WEIGHT_BYTES + 512 * 1024) // 1024)
    server = start_server([repo], ["--model-control-mode", "explicit", "--load-model", "a",
                                   "--load-model", "b", "--memory-budget", budget],
                          name="sleep-lru", ready_models=["a", "b"])
    client = server.client()
    try:
        answers = {"a": infer(client, "a")}
        answers["b"] = infer(client, "b")  # b is the more recently used
        r = client.post("/v2/repository/models/c/load", b"")
        assert r.status == 200, r
        assert sleep_state(client, "a")["sleep"] == "asleep"
        assert sleep_state(client, "b")["sleep"] == "awake"
        answers["c"] = infer(client, "c")
        # Waking a needs room too: b, used before c, sleeps now.
        np.testing.assert_array_equal(infer(client, "a"), answers["a"])
        assert sleep_state(client, "b")["sleep"] == "asleep"
        assert sleep_state(client, "c")["sleep"] == "awake"
        np.testing.assert_array_equal(infer(client, "c"), answers["c"])
        text = metrics_page(server)
        m = re.search(r"(?m)^vramd_pressure_sleeps_total (\S+)$", text)
        assert m and float(m.group(1)) == 2, text[-2000:]
        assert "slept to make room" in server.stderr_text()
    finally:
        client.close()


def test_a_model_whose_file_changed_while_asleep_fails_to_wake_and_says_why(
        start_server, tmp_path_factory):
    repo = tmp_path_factory.mktemp("sleep-changed-repo")
    add_model(repo, "moved", seed=20)
    server = start_server([repo], [], name="sleep-changed", ready_models=["moved"])
    client = server.client()
    path = repo / "moved" / "1" / "model.safetensors"
    try:
        before = infer(client, "moved")
        assert post(client, "moved", "sleep", b'{"parameters": {"level": 2}}').status == 200
        good = path.read_bytes()
        path.write_bytes(safetensors_bytes([
            ("layers.0.weight", np.eye(8, dtype=np.float32)),
            ("layers.0.bias", np.zeros(8, dtype=np.float32))]))
        r = client.infer_raw("moved", [Input("INPUT0", "FP32", INPUT, binary=True)])
        assert r.status != 200, r
        text = r.body.decode()
        assert "changed since the model loaded" in text and "model.safetensors" in text, text
        assert sleep_state(client, "moved")["sleep"] == "asleep"
        path.write_bytes(good)
        np.testing.assert_array_equal(infer(client, "moved"), before)
        text = metrics_page(server)
        assert sample(text, "vramd_model_wake_failures_total", model="moved", version="1") == 1
    finally:
        client.close()
