"""--model-control-mode poll end to end (repository/repository_watcher.h gives the rules): a
model added to the repository loads, a changed config.pbtxt reloads it, a removed model unloads,
each only once two consecutive scans agree; a version still being written is not loaded until
it settles; the publish procedure (write under a hidden name, then rename) works; the load and
unload requests are refused; --repository-poll-secs must be a positive integer.

Every server here polls every second (--repository-poll-secs 1), so a change takes effect after
1 to 2 s (the first scan that sees it, then the one that agrees), plus the load.
"""

import os
import shutil
import time

import numpy as np
import pytest

from e2e_helpers import (FIXTURE_REPO, affine_infer, affine_weights, index_rows, model_config,
                         model_lifecycle, repository_index, wait_for, write_affine_model,
                         write_affine_version)
from v2client import Input

POLL_ARGS = ["--model-control-mode", "poll", "--repository-poll-secs", "1"]
# A settled change needs a second scan at least one interval after the first that saw it.
MIN_SETTLE_S = 0.9
# Generous: two intervals, the load, and a loaded 2-core machine.
SETTLE_TIMEOUT_S = 10.0


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    write_affine_model(root / "affine", [1])
    return root


def start_poll_server(start_server, repo, name, ready_models=("affine",)):
    return start_server([repo], POLL_ARGS, name=name, ready_models=list(ready_models))


def is_ready(c, model, version=None):
    path = "/v2/models/%s" % model
    if version is not None:
        path += "/versions/%s" % version
    return c.get(path + "/ready").status == 200


def served_version(c, model="affine"):
    v, _, _ = affine_infer(c, model)
    return v


def no_failed_load(c, model):
    """Asserts that no transition in the model's lifecycle history records a failed load."""
    life = model_lifecycle(c, model)
    failed = [t for t in life["history"] if t["to"] == "failed" or "failed" in t["reason"]]
    assert not failed, "a load failed: %r" % (life,)
    return life


def test_poll_mode_refuses_load_and_unload(start_server, repo):
    s = start_poll_server(start_server, repo, "poll_refuse")
    c = s.client()
    for action in ("load", "unload"):
        r = c.post("/v2/repository/models/affine/%s" % action)
        assert r.status == 400, r
        msg = r.error_message()
        assert "not allowed" in msg and "poll" in msg, msg
    # A config override is refused the same way, before anything is loaded.
    r = c.post("/v2/repository/models/affine/load", b'{"parameters": {"config": "{}"}}')
    assert r.status == 400, r
    assert "not allowed" in r.error_message()
    assert is_ready(c, "affine")
    assert served_version(c) == 1


def test_poll_mode_follows_added_modified_and_removed_models(start_server, repo):
    s = start_poll_server(start_server, repo, "poll_follow")
    c = s.client()
    assert [row["name"] for row in repository_index(c)] == ["affine"]

    # Added: loads once two scans agree, not before.
    shutil.copytree(FIXTURE_REPO / "identity_int32", repo / "identity_int32")
    added = time.monotonic()
    wait_for(lambda: is_ready(c, "identity_int32"), SETTLE_TIMEOUT_S,
             what=lambda: "identity_int32 to load\n%s" % s.describe())
    assert time.monotonic() - added >= MIN_SETTLE_S, "loaded after a single scan"
    data = np.array([7, -8, 9], dtype=np.int32)
    out = c.infer("identity_int32", [Input("INPUT0", "INT32", data)])
    np.testing.assert_array_equal(out.outputs["OUTPUT0"], data)
    row, = index_rows(c, "identity_int32")
    assert (row["state"], row["lifecycle"], row.get("version")) == ("READY", "ready", "1"), row

    # Modified: config.pbtxt replaced the recommended way (hidden name, then rename over it).
    assert model_config(c, "identity_int32")["parameters"] == {}
    cfg = repo / "identity_int32" / "config.pbtxt"
    staged = repo / "identity_int32" / ".config.pbtxt.partial"
    staged.write_text(cfg.read_text() + '\nparameters { key: "execute_delay_us" '
                      'value { string_value: "1000" } }\n')
    os.rename(staged, cfg)
    modified = time.monotonic()

    def reloaded():
        params = model_config(c, "identity_int32")["parameters"]
        return params.get("execute_delay_us") == {"string_value": "1000"}

    wait_for(reloaded, SETTLE_TIMEOUT_S, what=lambda: "the changed config to be loaded\n%s"
             % s.describe())
    assert time.monotonic() - modified >= MIN_SETTLE_S, "reloaded after a single scan"
    life = no_failed_load(c, "identity_int32")
    assert sum(1 for t in life["history"] if t["to"] == "loading") == 2, life
    assert life["state"] == "ready" and life["serving"] == ["1"], life
    out = c.infer("identity_int32", [Input("INPUT0", "INT32", data)])
    np.testing.assert_array_equal(out.outputs["OUTPUT0"], data)

    # Removed: unloads once two scans agree; the other model serves on.
    shutil.rmtree(repo / "identity_int32")
    removed = time.monotonic()
    wait_for(lambda: not is_ready(c, "identity_int32"), SETTLE_TIMEOUT_S,
             what=lambda: "identity_int32 to unload\n%s" % s.describe())
    assert time.monotonic() - removed >= MIN_SETTLE_S, "unloaded after a single scan"
    wait_for(lambda: model_lifecycle(c, "identity_int32")["state"] == "unloaded", 5.0,
             what="the lifecycle to say unloaded")
    row, = index_rows(c, "identity_int32")
    assert (row["state"], row["lifecycle"]) == ("UNAVAILABLE", "unloaded"), row
    r = c.infer_raw("identity_int32", [Input("INPUT0", "INT32", data)])
    assert r.status in (400, 404, 503), r
    assert served_version(c) == 1
    # A model that left the repository does not hold the server's readiness back.
    assert c.get("/v2/health/ready").status == 200


def test_poll_mode_waits_for_a_growing_version(start_server, repo):
    """Version 2's weights are written a few bytes at a time across several scans: the model
    must keep serving version 1 (and never try a load of the partial file) until the file stops
    changing, then switch to version 2."""
    s = start_poll_server(start_server, repo, "poll_growing")
    c = s.client()
    assert served_version(c) == 1
    weights = affine_weights(2)
    version_dir = repo / "affine" / "2"
    version_dir.mkdir()
    chunks = 10  # 10 x 0.35 s: every 1-s scan sees a different size
    step = -(-len(weights) // chunks)
    with open(version_dir / "model.safetensors", "wb") as f:
        for i in range(0, len(weights), step):
            f.write(weights[i:i + step])
            f.flush()
            assert served_version(c) == 1
            assert not is_ready(c, "affine", 2)
            time.sleep(0.35)
    done = time.monotonic()
    wait_for(lambda: served_version(c) == 2, SETTLE_TIMEOUT_S,
             what=lambda: "version 2 to serve\n%s" % s.describe())
    assert time.monotonic() - done >= MIN_SETTLE_S - 0.35, "loaded before the file settled"
    life = no_failed_load(c, "affine")
    assert life["serving"] == ["2"], life
    # Version 2 serves from the switch on; the load is recorded once version 1 has drained and
    # gone, a moment later (last_load is the last finished load).
    life = wait_for(lambda: (lambda l: l if l["last_load"]["versions"] == ["2"] else None)(
        model_lifecycle(c, "affine")), SETTLE_TIMEOUT_S,
        what=lambda: "the load of version 2 to be recorded\n%s" % model_lifecycle(c, "affine"))
    assert life["last_load"]["ok"] and life["serving"] == ["2"], life
    assert not is_ready(c, "affine", 1)  # latest 1: version 1 went


def test_poll_mode_publish_procedure(start_server, repo):
    """Hidden staging names are invisible however long they take; the rename publishes."""
    s = start_poll_server(start_server, repo, "poll_publish")
    c = s.client()
    # A new version staged as .2.partial, and a new model staged as .affine_b.partial.
    write_affine_version(repo / "affine" / ".2.partial", 2)
    write_affine_model(repo / ".affine_b.partial", [5], name="affine_b")
    time.sleep(2.5)  # at least two scans
    assert served_version(c) == 1
    assert not is_ready(c, "affine", 2)
    assert [row["name"] for row in repository_index(c)] == ["affine"]
    assert c.get("/v2/models/affine_b/ready").status in (400, 404)
    assert len(model_lifecycle(c, "affine")["history"]) == 2  # only the start-up load

    os.rename(repo / "affine" / ".2.partial", repo / "affine" / "2")
    os.rename(repo / ".affine_b.partial", repo / "affine_b")
    wait_for(lambda: served_version(c) == 2 and is_ready(c, "affine_b"), SETTLE_TIMEOUT_S,
             what=lambda: "the published version and model to serve\n%s" % s.describe())
    assert served_version(c, "affine_b") == 5
    no_failed_load(c, "affine")
    no_failed_load(c, "affine_b")
    assert {row["name"]: row["lifecycle"] for row in repository_index(c)} == {
        "affine": "ready", "affine_b": "ready"}


@pytest.mark.parametrize("value", ["0", "-1", "abc", "1.5"])
def test_repository_poll_secs_must_be_a_positive_integer(start_server, repo, value):
    s = start_server([repo], ["--model-control-mode", "poll", "--repository-poll-secs", value],
                     name="poll_secs", launch_only=True)
    code = s.wait(timeout=15)
    assert code not in (0, None) and code > 0, "exit %s\n%s" % (code, s.describe())
    assert "--repository-poll-secs" in s.log(), s.describe()
    s.assert_no_crash_markers()
