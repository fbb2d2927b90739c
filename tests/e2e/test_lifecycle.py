"""Process lifecycle: signals, in-flight requests at shutdown, broken models at start-up,
--exit-on-error, several model repositories, and command-line errors. Each test starts its own
server on a repository built in a temp dir from the fixture models."""

import http.client
import re
import shutil
import signal
import socket
import threading
import time

import numpy as np
import pytest

from e2e_helpers import FIXTURE_REPO, VramdProcess
from v2client import Input, InferResult, RawConnection, build_infer_body

BROKEN_LINE_TEXT = "@@@ this line is not protobuf text format @@@"


def copy_model(name, repo, new_name=None):
    src = FIXTURE_REPO / name
    if not src.is_dir():
        pytest.fail("fixture model %s is missing from %s" % (name, FIXTURE_REPO))
    dst = repo / (new_name or name)
    shutil.copytree(src, dst)
    if new_name:
        cfg = dst / "config.pbtxt"
        cfg.write_text(re.sub(r'(?m)^(\s*name\s*:\s*)"[^"]*"', r'\1"%s"' % new_name,
                              cfg.read_text(), count=1))
    return dst


def add_broken_model(repo, name="broken_model"):
    """A copy of identity_fp32 whose config.pbtxt has a syntax error; returns the error's line."""
    d = copy_model("identity_fp32", repo, name)
    cfg = d / "config.pbtxt"
    lines = cfg.read_text().rstrip("\n").split("\n")
    lines.append(BROKEN_LINE_TEXT)
    cfg.write_text("\n".join(lines) + "\n")
    return len(lines)


@pytest.fixture
def managed(tmp_path):
    """Factory for servers owned by one test; any still running at the end is killed (the test
    itself judges exit codes)."""
    procs = []

    def make(repos, extra_args=(), name="lc", port=0, ready_models=None):
        p = VramdProcess(repos, tmp_path / ("logs-" + name), extra_args, name=name, port=port,
                         ready_models=ready_models)
        procs.append(p)
        return p

    yield make
    for p in procs:
        p.kill()


def _good_repo(tmp_path, models=("identity_fp32", "add_sub")):
    repo = tmp_path / "repo"
    repo.mkdir()
    for m in models:
        copy_model(m, repo)
    return repo


def _infer_identity(client, n=8):
    x = np.arange(n, dtype=np.float32) - 3.5
    res = client.infer("identity_fp32", [Input("INPUT0", "FP32", x)])
    np.testing.assert_array_equal(res.outputs["OUTPUT0"], x)


# -- signals -----------------------------------------------------------------------------------


def test_listening_line_and_sigterm_exit_zero(tmp_path, managed):
    s = managed([_good_repo(tmp_path)]).start()  # waits for /v2/health/ready == 200
    assert re.search(r"HTTP listening on 127\.0\.0\.1:%d\b" % s.port, s.stderr_text()), (
        "the 'HTTP listening on' line is not on stderr\n" + s.describe())
    _infer_identity(s.client())
    s.assert_clean_exit(s.stop(signal.SIGTERM))


def test_sigint_exit_zero(tmp_path, managed):
    s = managed([_good_repo(tmp_path)]).start()
    _infer_identity(s.client())
    s.assert_clean_exit(s.stop(signal.SIGINT))


def test_sigterm_with_idle_keepalive_connection(tmp_path, managed):
    # An idle keep-alive connection must not keep the server from exiting.
    s = managed([_good_repo(tmp_path)]).start()
    conn = RawConnection(s.host, s.port)
    try:
        conn.send(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        assert conn.read_response().status == 200
        s.send_signal(signal.SIGTERM)
        code = s.wait(timeout=15)
        s.assert_clean_exit(code)
    finally:
        conn.close()


def test_stops_accepting_after_sigterm(tmp_path, managed):
    s = managed([_good_repo(tmp_path)]).start()
    port = s.port
    s.assert_clean_exit(s.stop())
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_sigterm_request_in_flight_gets_answer(tmp_path, managed):
    """SIGTERM arrives while a request body is still being received: the request is in flight,
    so it must be answered in full before the server exits 0."""
    s = managed([_good_repo(tmp_path)]).start()
    x = np.random.default_rng(3).standard_normal(4 * 1024 * 1024).astype(np.float32)  # 16 MiB
    body, headers = build_infer_body([Input("INPUT0", "FP32", x, binary=True)],
                                     binary_data_output=True)
    head = "POST /v2/models/identity_fp32/infer HTTP/1.1\r\nHost: x\r\n"
    for k, v in headers.items():
        head += "%s: %s\r\n" % (k, v)
    head += "Content-Length: %d\r\n\r\n" % len(body)
    conn = RawConnection(s.host, s.port, timeout=30)
    try:
        conn.send(head.encode() + body[:-4096])
        time.sleep(0.3)
        s.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        sent = conn.send(body[-4096:])
        r = conn.read_response(timeout=30)
    finally:
        conn.close()
    code = s.wait(timeout=30)
    assert sent, "the server reset the connection of an in-flight request"
    assert r is not None, "the in-flight request got no answer"
    assert r.status == 200, r
    np.testing.assert_array_equal(InferResult(r).outputs["OUTPUT0"], x)
    s.assert_clean_exit(code)


def test_sigterm_during_concurrent_load(tmp_path, managed):
    """Requests racing with SIGTERM either complete correctly or fail to connect; never a wrong
    answer, never a crash."""
    s = managed([_good_repo(tmp_path)]).start()
    stop = threading.Event()
    problems = []
    ok = [0]

    def worker(seed):
        c = s.client(timeout=10)
        rng = np.random.default_rng(seed)
        while not stop.is_set():
            a = rng.standard_normal((2, 16)).astype(np.float32)
            try:
                res = c.infer("add_sub", [Input("INPUT0", "FP32", a, binary=True),
                                          Input("INPUT1", "FP32", a, binary=True)])
            except (OSError, ConnectionError):
                return  # the server went away before taking the request: acceptable
            except http.client.HTTPException as e:
                problems.append("cut-off response: %r" % e)
                return
            except AssertionError as e:
                if "HTTP 503" in str(e):
                    return  # refusing new work while draining is acceptable
                problems.append(repr(e))
                return
            if not np.array_equal(res.outputs["OUTPUT0"], a + a):
                problems.append("wrong answer")
                return
            ok[0] += 1

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    s.send_signal(signal.SIGTERM)
    code = s.wait(timeout=30)
    stop.set()
    for t in threads:
        t.join(15)
    assert ok[0] > 0
    assert not problems, problems
    s.assert_clean_exit(code)


# -- broken models and repositories ------------------------------------------------------------


def test_broken_model_skipped_and_logged_with_file_and_line(tmp_path, managed):
    repo = _good_repo(tmp_path)
    line = add_broken_model(repo)
    s = managed([repo], ready_models=["identity_fp32", "add_sub"]).start()
    c = s.client()
    _infer_identity(c)
    # Strict readiness: a failed model keeps the server "not ready" (Triton's default).
    assert c.get("/v2/health/ready").status == 400
    assert c.get("/v2/models/add_sub/ready").status == 200
    r = c.get("/v2/models/broken_model/ready")
    assert r.status in (400, 404), r
    r = c.get("/v2/models/broken_model")
    assert r.status in (400, 404, 503), r
    log = s.log()
    hits = [ln for ln in log.splitlines() if re.search(r"config\.pbtxt:%d\b" % line, ln)]
    assert hits, ("no log line names config.pbtxt:%d (the broken line)\n%s"
                  % (line, s.describe()))
    assert any("broken_model" in ln for ln in hits), hits
    s.assert_clean_exit(s.stop())


def test_no_strict_readiness_ready_despite_broken_model(tmp_path, managed):
    repo = _good_repo(tmp_path)
    add_broken_model(repo)
    s = managed([repo], ["--no-strict-readiness"]).start()  # waits for /v2/health/ready == 200
    assert s.client().get("/v2/models/broken_model/ready").status in (400, 404)
    s.assert_clean_exit(s.stop())


def test_exit_on_error_with_broken_model(tmp_path, managed):
    repo = _good_repo(tmp_path)
    line = add_broken_model(repo)
    s = managed([repo], ["--exit-on-error"]).launch()
    try:
        code = s.proc.wait(timeout=60)
    except Exception:  # noqa: BLE001
        raise AssertionError("--exit-on-error with a broken model: still running after 60 s\n"
                             + s.describe())
    s._close_files()
    assert code > 0, "expected a non-zero exit (not a signal), got %s\n%s" % (code, s.describe())
    assert re.search(r"config\.pbtxt:%d\b" % line, s.log()), s.describe()
    s.assert_no_crash_markers()


def test_exit_on_error_with_good_repository_serves(tmp_path, managed):
    s = managed([_good_repo(tmp_path)], ["--exit-on-error"]).start()
    _infer_identity(s.client())
    s.assert_clean_exit(s.stop())


def test_two_model_repositories(tmp_path, managed):
    repo_a = tmp_path / "a"
    repo_b = tmp_path / "b"
    repo_a.mkdir()
    repo_b.mkdir()
    copy_model("identity_fp32", repo_a)
    copy_model("add_sub", repo_b)
    s = managed([repo_a, repo_b]).start()
    c = s.client()
    _infer_identity(c)
    a = np.ones((1, 16), np.float32)
    res = c.infer("add_sub", [Input("INPUT0", "FP32", a), Input("INPUT1", "FP32", 2 * a)])
    np.testing.assert_array_equal(res.outputs["OUTPUT0"], 3 * a)
    names = {e["name"] for e in c.post("/v2/repository/index", b"{}").json()}
    assert {"identity_fp32", "add_sub"} <= names
    s.assert_clean_exit(s.stop())


def test_fixture_repository_with_broken_syntax_serves_the_rest(server):
    """The shared server runs on the fixture repository, which holds broken_syntax."""
    c = server.client()
    try:
        assert c.get("/v2/models/add_sub/ready").status == 200
        assert c.get("/v2/models/broken_syntax/ready").status in (400, 404)
        hits = [ln for ln in server.log().splitlines()
                if "broken_syntax" in ln and re.search(r"config\.pbtxt:\d+", ln)]
        assert hits, "no log line names broken_syntax's config.pbtxt:<line>\n" + server.describe()
    finally:
        c.close()


# -- command line --------------------------------------------------------------------------------


def test_port_in_use_fails(tmp_path, managed):
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen(1)
    try:
        s = managed([_good_repo(tmp_path)], port=blocker.getsockname()[1]).launch()
        try:
            code = s.proc.wait(timeout=30)
        finally:
            s.kill()
        assert code > 0, "expected a non-zero exit when the port is taken, got %s\n%s" % (
            code, s.describe())
        assert str(blocker.getsockname()[1]) in s.log(), s.describe()
    finally:
        blocker.close()


def test_unknown_flag_fails(tmp_path, managed):
    s = managed([_good_repo(tmp_path)], ["--no-such-flag"]).launch()
    try:
        code = s.proc.wait(timeout=30)
    finally:
        s.kill()
    assert code > 0, s.describe()
    assert "no-such-flag" in s.log(), s.describe()
