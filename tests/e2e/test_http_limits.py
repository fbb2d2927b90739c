"""What one client can do to the HTTP server (issue 12): a trailer that crashed it, framing that
smuggles, bodies and headers that stall, too many connections, no file descriptors left, and
what a stop signal does to requests in flight. Each test names the limit it checks; the flags
are documented in docs/security.md."""

import json
import os
import resource
import signal
import socket
import time

import pytest

from e2e_helpers import VramdProcess, in_background, wait_for
from v2client import RawConnection, raw_http

JSON_CT = {"Content-Type": "application/json"}

SLOW_CONFIG = """
name: "{name}"
backend: "identity"
max_batch_size: 4
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 2 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 2 ] }} ]
parameters {{ key: "execute_delay_us" value {{ string_value: "{delay_us}" }} }}
{extra}
"""

FAST_CONFIG = """
name: "fast"
backend: "identity"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 2 ] } ]
"""

WARMUP = """
model_warmup [ { name: "w" batch_size: 1
  inputs { key: "INPUT0" value { data_type: TYPE_FP32 dims: [ 2 ] zero_data: true } } } ]
"""


def write_model(repo, name, text):
    d = repo / name
    (d / "1").mkdir(parents=True, exist_ok=True)
    (d / "config.pbtxt").write_text(text)


def infer_body(rows=1):
    return json.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [rows, 2],
                                   "data": [1.0, 2.0] * rows}]}).encode()


def fast_body():
    return json.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [2],
                                   "data": [1.0, 2.0]}]}).encode()


def post_raw(host, port, path, headers, body=b"", **kw):
    head = "POST %s HTTP/1.1\r\nHost: x\r\n" % path
    for k, v in headers:
        head += "%s: %s\r\n" % (k, v)
    return raw_http(host, port, head.encode() + b"\r\n" + body, **kw)


def assert_answer(r, statuses, *words):
    assert r is not None, "the server closed the connection without an HTTP response"
    assert r.status in statuses, "expected %s, got %d %r" % (statuses, r.status, r.body[:300])
    text = r.body.decode("utf-8", "replace").lower()
    for w in words:
        assert w.lower() in text, "error %r does not mention %r" % (r.body[:300], w)


def metrics_port(server):
    import re
    m = wait_for(lambda: re.search(r"metrics listening on [^\s:]+:(\d+)", server.log()), 10,
                 what="the metrics port in the log")
    return int(m.group(1))


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    r = tmp_path_factory.mktemp("limits-repo")
    write_model(r, "fast", FAST_CONFIG)
    write_model(r, "slow", SLOW_CONFIG.format(name="slow", delay_us=2000000,
                                              extra="dynamic_batching { }"))
    return r


@pytest.fixture(scope="module")
def limited(start_server, repo):
    """A server with small limits, so that each can be reached quickly."""
    return start_server([repo], ["--http-thread-count", "2", "--http-header-timeout-secs", "1",
                                 "--http-body-timeout-secs", "1", "--http-body-memory-mib", "1",
                                 "--http-max-connections", "16"],
                        name="limited", ready_models=["fast", "slow"])


def assert_serves(server):
    assert server.alive(), "vramd died\n" + server.describe()
    c = server.client()
    try:
        r = c.post("/v2/models/fast/infer", fast_body(), JSON_CT)
        assert r.status == 200, r
    finally:
        c.close()


# -- item 1: trailers ------------------------------------------------------------------------------

@pytest.mark.parametrize("part", ["name", "value"])
def test_huge_chunked_trailer_is_refused_on_both_ports(server, part):
    big = b"a" * 70000
    trailer = (b"X-" + big + b": v") if part == "name" else (b"X-T: " + big)
    body = b"1\r\n{\r\n0\r\n" + trailer + b"\r\n\r\n"
    for port in (server.port, metrics_port(server)):
        r = post_raw(server.host, port, "/v2/repository/index",
                     [("Transfer-Encoding", "chunked")], body)
        assert_answer(r, (400, 431), "trailer")
        assert server.alive(), "a %d-byte trailer field %s killed vramd\n%s" % (
            len(big), part, server.describe())
    c = server.client()
    assert c.get("/v2/health/live").status == 200
    c.close()


def test_small_trailer_still_accepted(server):
    body = b"2\r\n{}\r\n0\r\nX-Checksum: 1\r\n\r\n"
    r = post_raw(server.host, server.port, "/v2/repository/index",
                 [("Transfer-Encoding", "chunked"), ("Content-Type", "application/json")], body)
    assert r is not None and r.status == 200, r


# -- item 8: framing -------------------------------------------------------------------------------

@pytest.mark.parametrize("te", ["gzip", "chunked, gzip", "gzip, chunked", "identity", "chunkedx"])
def test_transfer_encoding_other_than_chunked_is_400(server, te):
    body = fast_body()
    r = post_raw(server.host, server.port, "/v2/models/identity_fp32/infer",
                 [("Transfer-Encoding", te), ("Content-Length", str(len(body)))], body)
    assert_answer(r, (400,))
    text = r.body.decode().lower()
    assert "transfer-encoding" in text or "content-length" in text, r.body


def test_chunked_with_content_length_is_400(server):
    r = post_raw(server.host, server.port, "/v2/repository/index",
                 [("Transfer-Encoding", "chunked"), ("Content-Length", "7")],
                 b"2\r\n{}\r\n0\r\n\r\n")
    assert_answer(r, (400,))


def test_two_transfer_encoding_headers_are_400(server):
    r = post_raw(server.host, server.port, "/v2/repository/index",
                 [("Transfer-Encoding", "chunked"), ("Transfer-Encoding", "chunked")],
                 b"2\r\n{}\r\n0\r\n\r\n")
    assert_answer(r, (400,), "transfer-encoding")


# -- item 5: what a slow client may hold -----------------------------------------------------------

def test_stalled_body_is_408_within_the_body_timeout(limited):
    t0 = time.monotonic()
    r = post_raw(limited.host, limited.port, "/v2/models/fast/infer",
                 [("Content-Length", "100000")], b"{\"inputs\"", timeout=10)
    elapsed = time.monotonic() - t0
    assert_answer(r, (408,), "body", "--http-body-timeout-secs")
    assert elapsed < 5, "a stalled body was held %.1f s with a 1 s body timeout" % elapsed
    assert_serves(limited)


def test_stalled_header_is_408_within_the_header_timeout(limited):
    t0 = time.monotonic()
    r = raw_http(limited.host, limited.port, b"POST /v2/models/fast/infer HTTP/1.1\r\nHost: x\r\n",
                 timeout=10)
    elapsed = time.monotonic() - t0
    assert_answer(r, (408,), "header", "--http-header-timeout-secs")
    assert elapsed < 5, elapsed


def test_trickled_header_is_cut_at_the_header_timeout(limited):
    # One byte every 0.3 s never lets the header complete: the timeout counts from the first
    # byte, not from the last one.
    conn = RawConnection(limited.host, limited.port, timeout=10)
    t0 = time.monotonic()
    try:
        for b in b"GET /v2/health/live HTTP/1.1\r\nX-Slow: " + b"a" * 100:
            if not conn.send(bytes([b])):
                break
            time.sleep(0.3)
            if time.monotonic() - t0 > 8:
                break
        r = conn.read_response()
    except (OSError, socket.timeout):
        r = None
    finally:
        conn.close()
    assert time.monotonic() - t0 < 6, "a trickled header was held past the header timeout"
    assert r is None or r.status == 408, r


def test_body_memory_budget_answers_503_then_frees(limited):
    # 1 MiB for all bodies: one stalled 900 KB body leaves no room for a second one...
    a = RawConnection(limited.host, limited.port, timeout=10)
    try:
        a.send(b"POST /v2/models/fast/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 900000\r\n\r\n"
               + b"x" * 1000)
        time.sleep(0.2)
        r = post_raw(limited.host, limited.port, "/v2/models/fast/infer",
                     [("Content-Length", "900000")], b"", timeout=5)
        assert_answer(r, (503,), "--http-body-memory-mib")
        # ...and a small request still fits beside it.
        assert_serves(limited)
        # The stalled one is cut at the body timeout and its share is given back.
        first = a.read_response()
        assert first is not None and first.status == 408, first
    finally:
        a.close()
    body = b"x" * 900000
    def room():
        r = post_raw(limited.host, limited.port, "/v2/models/fast/infer",
                     [("Content-Length", str(len(body)))], body, timeout=5)
        return r if r is not None and r.status != 503 else None
    r = wait_for(room, 5, what="room in the body budget again")
    assert r.status == 400, r  # not JSON, but read: the budget was released


def test_idle_connection_closed_after_idle_timeout(start_server, repo):
    s = start_server([repo], ["--http-idle-timeout-secs", "1"], name="idle",
                     ready_models=["fast"])
    conn = socket.create_connection((s.host, s.port), timeout=10)
    t0 = time.monotonic()
    try:
        data = conn.recv(100)
    except ConnectionResetError:
        data = b""
    finally:
        conn.close()
    assert data == b"" and time.monotonic() - t0 < 5, "idle connection kept %.1f s" % (
        time.monotonic() - t0)
    assert_serves(s)


def test_connection_cap_answers_503_and_recovers(limited):
    held = []
    try:
        for _ in range(15):  # the fixture's cap is 16; the checks below use one more
            held.append(socket.create_connection((limited.host, limited.port), timeout=10))
        spare = socket.create_connection((limited.host, limited.port), timeout=10)
        held.append(spare)
        time.sleep(0.2)
        r = raw_http(limited.host, limited.port, b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        assert_answer(r, (503,), "--http-max-connections")
        assert limited.alive()
    finally:
        for s in held:
            s.close()
    r = wait_for(lambda: (lambda x: x if x is not None and x.status == 200 else None)(
        raw_http(limited.host, limited.port, b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")),
        5, what="a connection accepted again")
    assert r.status == 200


# -- item 6: out of file descriptors ---------------------------------------------------------------

def _cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_out_of_file_descriptors_backs_off(tmp_path, repo):
    def low_fd_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (96, 96))

    s = VramdProcess([repo], tmp_path, ["--http-thread-count", "1"], name="fds",
                     ready_models=["fast"], preexec_fn=low_fd_limit)
    with stopped_at_exit(s):
        s.start()
        _exhaust_fds_and_recover(s)


def _exhaust_fds_and_recover(s):
    socks = []
    try:
        for _ in range(150):
            try:
                socks.append(socket.create_connection((s.host, s.port), timeout=5))
            except OSError:
                break
        cpu0 = _cpu_seconds(s.proc.pid)
        time.sleep(3)
        cpu = _cpu_seconds(s.proc.pid) - cpu0
        failures = s.log().count("HTTP accept failed")
        assert cpu < 0.5, "out of fds, the server burned %.2f s of CPU in 3 s" % cpu
        assert 1 <= failures <= 3, "%d accept-failure lines in 3 s" % failures
        assert "file descriptors" in s.log()
    finally:
        for c in socks:
            c.close()
    wait_for(lambda: _live(s), 10, what="the server answering again after fds were freed")
    code = s.stop()
    s.assert_clean_exit(code)


def _live(s):
    try:
        r = raw_http(s.host, s.port, b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n", timeout=2)
    except OSError:
        return None
    return r if r is not None and r.status == 200 else None


# -- item 3: stop signals --------------------------------------------------------------------------

class stopped_at_exit:
    """A server a test starts itself: killed if the test fails before it stopped it, so that a
    failing test leaves no server behind."""

    def __init__(self, server):
        self.server = server

    def __enter__(self):
        return self.server

    def __exit__(self, *exc):
        self.server.kill()
        return False


def test_sigterm_answers_request_executing_on_instance_thread(tmp_path, repo):
    s = VramdProcess([repo], tmp_path, ["--exit-timeout-secs", "30"], name="term-infer",
                     ready_models=["fast", "slow"])
    with stopped_at_exit(s):
        s.start()
        _term_during_execution(s)


def _term_during_execution(s):
    conn = RawConnection(s.host, s.port, timeout=20)
    try:
        body = infer_body()
        conn.send(b"POST /v2/models/slow/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
                  % len(body) + body)
        time.sleep(0.5)  # executing now (2 s)
        t0 = time.monotonic()
        s.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        s.send_signal(signal.SIGTERM)  # a second signal changes nothing
        r = conn.read_response()
        assert r is not None and r.status == 200, r
        assert json.loads(r.body)["outputs"][0]["data"] == [1.0, 2.0]
        # The connection then closes gracefully: end of stream, not a reset.
        conn.sock.settimeout(5)
        assert conn.sock.recv(100) == b""
    finally:
        conn.close()
    code = s.wait(timeout=15)
    assert time.monotonic() - t0 < 8, "exit waited %.1f s, not for the request" % (
        time.monotonic() - t0)
    s.assert_clean_exit(code)


def test_sigterm_answers_a_load_in_progress(tmp_path):
    repo = tmp_path / "repo"
    write_model(repo, "slowload", SLOW_CONFIG.format(name="slowload", delay_us=1500000,
                                                     extra=WARMUP))
    s = VramdProcess([repo], tmp_path / "logs", ["--model-control-mode", "explicit"],
                     name="term-load", ready_models=[])
    with stopped_at_exit(s):
        s.start()
        _term_during_load(s)


def _term_during_load(s):
    c = s.client(timeout=20)
    t, out = in_background(lambda: c.post("/v2/repository/models/slowload/load", b"", JSON_CT))
    time.sleep(0.5)  # the warmup execution is running
    s.send_signal(signal.SIGTERM)
    t.join(20)
    assert "value" in out, out
    assert out["value"].status == 200, out["value"]
    code = s.wait(timeout=15)
    s.assert_clean_exit(code)


def test_sigterm_during_start_up_exits_cleanly(tmp_path):
    repo = tmp_path / "repo"
    write_model(repo, "slowload", SLOW_CONFIG.format(name="slowload", delay_us=1500000,
                                                     extra=WARMUP))
    s = VramdProcess([repo], tmp_path / "logs", [], name="term-start", ready_models=[])
    with stopped_at_exit(s):
        s.launch()
        _term_during_start(s)


def _term_during_start(s):
    wait_for(lambda: "starting" in s.log(), 10, what="the start-up log line")
    for _ in range(3):
        s.send_signal(signal.SIGTERM)
        time.sleep(0.05)
    code = s.wait(timeout=20)
    assert code == 0, "a SIGTERM during start-up ended vramd with %s\n%s" % (code, s.describe())
    s.assert_clean_exit(code)
