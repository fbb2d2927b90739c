"""Python models hosted out of vramd's process (src/backends/remote/, docs/remote-backends.md):
the same model.py (python_stub_models/pid_model) served in-process, with
VRAMD_PYTHON_HOSTING=stub (one vramd_backend_host process for both instances) and with
=process_per_instance (Triton's one process per instance). Answers equal the in-process ones;
a model that SIGKILLs its own process inside execute fails that request, the model serves again
after the restart, and /dev/shm is left as it was. A copy whose execute hangs (pid_hang, under a
1 s VRAMD_STUB_CALL_TIMEOUT_MS) has its process killed at the timeout, that request failing
with why, and reads not ready until the restarted process serves; a copy whose is_ready() is
False (pid_unready) reads not ready, asked in its process.

Needs libvramd_python.so and vramd_backend_host (VRAMD_PYTHON_BACKEND_DIR, else
<dir of VRAMD_BIN>/../../backends). Skips when either is missing.
"""

import concurrent.futures
import os
import pathlib
import time

import numpy as np
import pytest

from e2e_helpers import PYTHON_BACKEND_DIR, copy_model, index_rows, skip_module_without_python_backend, wait_for
from v2client import Input

HERE = pathlib.Path(__file__).resolve().parent
MODEL = HERE / "python_stub_models" / "pid_model"
BACKEND_DIR = PYTHON_BACKEND_DIR
skip_module_without_python_backend(host=True)

MODES = {"pid_in_process": "in_process", "pid_stub": "stub", "pid_ppi": "process_per_instance"}
# Every call into the host has this long, its first (auto_complete_config, which starts the
# interpreter: ~0.2 s alone) too. 3 s was not always room enough for four test files starting
# servers at once on two cores (the auto-complete was once killed at 3 s, failing the module's
# fixture); the hang test waits this long once.
HANG_TIMEOUT_MS = 6000
# Stub copies with parameters of their own.
EXTRA = {
    "pid_hang": {"VRAMD_PYTHON_HOSTING": "stub", "VRAMD_STUB_CALL_TIMEOUT_MS": str(HANG_TIMEOUT_MS)},
    "pid_unready": {"VRAMD_PYTHON_HOSTING": "stub", "PID_NOT_READY": "1"},
}


@pytest.fixture(scope="module")
def shm_before():
    return set(os.listdir("/dev/shm"))


@pytest.fixture(scope="module")
def server(start_server, tmp_path_factory, shm_before):
    repo = tmp_path_factory.mktemp("python-stub-repo")
    models = {name: {"VRAMD_PYTHON_HOSTING": mode} for name, mode in MODES.items()}
    models.update(EXTRA)
    for name, parameters in models.items():
        copy_model(MODEL, repo, name, parameters)
    s = start_server([repo], ["--backend-directory", str(BACKEND_DIR),
                              "--http-thread-count", "8"],
                     name="python-stub", ready_models=list(MODES) + ["pid_hang"])
    # pid_unready never reads ready; loaded is when the index lists it READY (it asks no model).
    c = s.client()
    wait_for(lambda: [r for r in index_rows(c, "pid_unready") if r["state"] == "READY"],
             timeout=30, what="pid_unready loaded")
    c.close()
    return s


def hosts_of(server, model):
    """Pids of vramd's backend host processes serving `model` (their argv names it)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open("/proc/%s/cmdline" % entry, "rb") as f:
                argv = f.read().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == server.proc.pid and any(b"model '%s'" % model.encode() in a for a in argv):
            pids.append(int(entry))
    return sorted(pids)


def open_fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def infer(client, model, values):
    r = client.infer(model, [Input("INPUT0", "FP32", np.array(values, dtype=np.float32))])
    return r.outputs["OUTPUT0"], int(r.outputs["OUTPUT1"].reshape(-1)[0])


def test_answers_equal_in_process_ones(server):
    c = server.client()
    values = [1.5, -2.0, 3.25]
    expected, pid = infer(c, "pid_in_process", values)
    assert pid == server.proc.pid
    for model in ("pid_stub", "pid_ppi"):
        got, host_pid = infer(c, model, values)
        np.testing.assert_array_equal(got, expected)
        assert host_pid != server.proc.pid
        assert host_pid in hosts_of(server, model)
    big = np.arange(200000, dtype=np.float32)  # 800 KB: crosses in a memfd segment
    np.testing.assert_array_equal(infer(c, "pid_stub", big)[0], big * 2)


def test_stub_shares_one_process_per_instance_does_not(server):
    assert len(hosts_of(server, "pid_stub")) == 1
    assert len(hosts_of(server, "pid_ppi")) == 2
    # Requests at once reach both instances; a stub answers from one pid, ppi from its two.
    def one(model):
        c = server.client()
        try:
            return infer(c, model, [1.0])[1]
        finally:
            c.close()

    def pids(model):
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            return set(pool.map(one, [model] * 32))
    assert pids("pid_stub") == set(hosts_of(server, "pid_stub"))
    assert pids("pid_ppi") <= set(hosts_of(server, "pid_ppi"))


def test_a_model_killing_its_stub_fails_that_request_and_serves_again(server, shm_before):
    c = server.client()
    _, before = infer(c, "pid_stub", [1.0])
    fds = open_fds(server.proc.pid)
    r = c.infer_raw("pid_stub", [Input("INPUT0", "FP32", np.array([-9.0], dtype=np.float32))])
    assert r.status != 200
    assert b"killed by signal 9" in r.body, r.body
    assert b"pid_stub" in r.body, r.body

    def served():
        r = c.infer_raw("pid_stub", [Input("INPUT0", "FP32", np.array([4.0], dtype=np.float32))])
        if r.status == 200:
            return r
        assert b"is restarting" in r.body, r.body
        return None
    wait_for(served, timeout=30, what="pid_stub serving again after its restart")
    _, after = infer(c, "pid_stub", [1.0])
    assert after != before
    assert hosts_of(server, "pid_stub") == [after]
    assert "restarting it (restart 1" in server.stderr_text()
    assert open_fds(server.proc.pid) == fds  # the dead process's socket and pidfd are closed
    # The other modes were not touched, and nothing was left in /dev/shm.
    infer(c, "pid_in_process", [1.0])
    infer(c, "pid_ppi", [1.0])
    assert set(os.listdir("/dev/shm")) == shm_before


def test_a_hung_stub_is_killed_at_its_timeout_and_unready_until_it_serves_again(server,
                                                                                  shm_before):
    c = server.client()
    _, before = infer(c, "pid_hang", [1.0])
    fds = open_fds(server.proc.pid)
    start = time.monotonic()
    r = c.infer_raw("pid_hang", [Input("INPUT0", "FP32", np.array([-7.0], dtype=np.float32))])
    assert time.monotonic() - start >= HANG_TIMEOUT_MS / 1000
    assert r.status != 200
    hung = b"hung: execute_requests did not return within %d ms" % HANG_TIMEOUT_MS
    assert hung in r.body and b"killed" in r.body and b"model 'pid_hang'" in r.body, r.body

    # Not ready from the error on (the endpoint and the index), until the new process serves.
    assert c.get("/v2/models/pid_hang/ready").status == 400
    [row] = index_rows(c, "pid_hang")
    assert row["state"] == "UNAVAILABLE" and "is restarting" in row["reason"], row
    wait_for(lambda: c.get("/v2/models/pid_hang/ready").status == 200, timeout=30,
             what="pid_hang ready again after its restart")
    assert index_rows(c, "pid_hang")[0]["state"] == "READY"
    _, after = infer(c, "pid_hang", [1.0])
    assert after != before
    assert hosts_of(server, "pid_hang") == [after]
    log = server.stderr_text()
    assert ("stub for model 'pid_hang' version 1 on CPU (pid %d) %s" % (before, hung.decode())
            in log), log
    assert "restarting it (restart 1 of this stub" in log.split(hung.decode(), 1)[1]
    # The old process's descriptors went with it, and nothing is in /dev/shm.
    assert open_fds(server.proc.pid) == fds
    assert set(os.listdir("/dev/shm")) == shm_before


def test_a_hosted_models_is_ready_is_asked_in_its_process(server):
    c = server.client()
    assert c.get("/v2/models/pid_unready/ready").status == 400
    assert c.get("/v2/models/pid_stub/ready").status == 200
    assert c.get("/v2/models/pid_ppi/ready").status == 200
    # Not ready is what clients are told; the model still serves, from its own process.
    assert infer(c, "pid_unready", [1.0])[1] in hosts_of(server, "pid_unready")


@pytest.mark.parametrize("flag,message", [
    ("--backend-config=python,default-hosting=stubb",
     '--backend-config=python,default-hosting=stubb: default-hosting is "stubb"; it takes '
     "in_process, stub or process_per_instance"),
    ("--backend-config=python", "--backend-config=python: no '='"),
    ("--backend-config=,default-hosting=stub", "--backend-config=,default-hosting=stub: the "
     "backend name before ',' is empty"),
])
def test_a_malformed_backend_config_stops_start_up_naming_the_flag(start_server, tmp_path,
                                                                     flag, message):
    s = start_server([tmp_path], ["--backend-directory", str(BACKEND_DIR), flag],
                     name="bad-backend-config", launch_only=True)
    assert s.wait(timeout=10) == 1
    assert message in s.stderr_text(), s.stderr_text()


def test_default_hosting_flag_and_ignored_settings(start_server, tmp_path_factory):
    # One model without VRAMD_PYTHON_HOSTING, one that asks for in_process: the flag moves
    # only the first; Triton's other python settings are logged once as ignored.
    repo = tmp_path_factory.mktemp("python-default-hosting")
    copy_model(MODEL, repo, "pid_default")
    copy_model(MODEL, repo, "pid_pinned", {"VRAMD_PYTHON_HOSTING": "in_process"})
    s = start_server([repo], ["--backend-directory", str(BACKEND_DIR),
                              "--backend-config=python,shm-default-byte-size=1048576",
                              "--backend-config=default-hosting=in_process",
                              "--backend-config=python,default-hosting=process_per_instance"],
                     name="python-default-hosting", ready_models=["pid_default", "pid_pinned"])
    c = s.client()
    _, pid = infer(c, "pid_default", [1.0])
    assert pid != s.proc.pid and len(hosts_of(s, "pid_default")) == 2  # one per instance
    assert infer(c, "pid_pinned", [1.0])[1] == s.proc.pid
    assert hosts_of(s, "pid_pinned") == []
    ignored = [ln for ln in s.stderr_text().splitlines()
               if "--backend-config=python,shm-default-byte-size=1048576: ignored" in ln]
    assert len(ignored) == 1, ignored
