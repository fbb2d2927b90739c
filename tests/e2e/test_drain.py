"""Draining, as Kubernetes drives it when it stops a pod (deploy/kubernetes/deployment.yaml,
docs/deployment.md): the preStop hook runs `vramctl drain` (POST /v2/drain), readiness fails at
once while liveness holds and every request still arriving is served, the drain returns once no
inference request has been in flight for the quiet window (or at its timeout), then SIGTERM
ends the process with exit 0 within --exit-timeout-secs. Also: the drain's answers and errors,
gRPC ServerReady while draining, readiness after SIGTERM, and `vramctl drain`'s exit codes.

Each test starts its own server on a repository it writes: "slow" (identity, each execution
takes SLOW_S) and "fast" (identity, no delay), both on the CPU.
"""

import http.client
import json
import signal
import subprocess
import threading
import time

import numpy as np
import pytest

from e2e_helpers import VRAMD_BIN, VramdProcess, grpc_modules, in_background, wait_for
from v2client import Input, V2Client

VRAMCTL = VRAMD_BIN.parent / "vramctl"
JSON_CT = {"Content-Type": "application/json"}
EXIT_TIMEOUT_S = 10
SLOW_S = 1.5
# A request that is surely still executing a second after it was sent, even on a busy machine.
SLOWER_S = 4.0
# Scheduling noise allowed on the timings below (a 2-core machine running other tests).
SLACK_S = 0.15

MODEL = """
name: "{name}"
backend: "identity"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 2 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 2 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 2 }} ]
{extra}
"""


@pytest.fixture
def repo(tmp_path):
    r = tmp_path / "repo"
    delay = 'parameters { key: "execute_delay_us" value { string_value: "%d" } }'
    for name, extra in (("slow", delay % int(SLOW_S * 1e6)),
                        ("slower", delay % int(SLOWER_S * 1e6)),
                        ("fast", "")):
        (r / name / "1").mkdir(parents=True)
        (r / name / "config.pbtxt").write_text(MODEL.format(name=name, extra=extra))
    return r


@pytest.fixture
def serve(tmp_path, repo):
    """serve(extra_args=()) starts a server on `repo` and waits until it is ready. A server a
    test has not stopped itself is stopped at the end and must exit 0 cleanly."""
    servers = []

    def start(extra_args=(), name="drain"):
        s = VramdProcess([repo], tmp_path / ("logs-%s-%d" % (name, len(servers))),
                         ["--exit-timeout-secs", str(EXIT_TIMEOUT_S)] + list(extra_args),
                         name=name)
        servers.append(s)
        return s.start()

    yield start
    errors = []
    for s in servers:
        if s.alive():
            try:
                s.assert_clean_exit(s.stop())
            except AssertionError as e:
                errors.append(str(e))
        s.kill()
    assert not errors, "\n\n".join(errors)


def status_of(server, path, timeout=2.0):
    """GET `path` on a new connection, as the kubelet probes: (status, body), or (None, why)
    when there is no HTTP answer (refused, reset)."""
    c = V2Client(server.host, server.port, timeout=timeout)
    try:
        r = c.get(path)
        return r.status, r.body
    except (OSError, http.client.HTTPException) as e:
        return None, repr(e)
    finally:
        c.close()


def post_drain(server, body=None, timeout=60.0):
    c = V2Client(server.host, server.port, timeout=timeout)
    try:
        data = b"" if body is None else (body if isinstance(body, bytes)
                                         else json.dumps(body).encode())
        return c.post("/v2/drain", data, JSON_CT)
    finally:
        c.close()


def infer(client, model, seed):
    """One request; returns (status, ok) where ok says the output equals the input."""
    x = np.array([seed, -seed], dtype=np.float32)
    r = client.infer_raw(model, [Input("INPUT0", "FP32", x)])
    if r.status != 200:
        return r.status, False
    out = r.json()["outputs"][0]["data"]
    return 200, out == [float(seed), float(-seed)]


def slow_request(server, model="slow"):
    """Starts one request to `model` in the background; returns (thread, result)."""
    def run():
        c = server.client(timeout=30)
        try:
            return infer(c, model, 7)
        finally:
            c.close()
    return in_background(run)


def vramctl_drain(server, *args, url=None):
    return subprocess.run([str(VRAMCTL), "drain", "--url",
                           url or "http://%s:%d" % (server.host, server.port), *args],
                          capture_output=True, text=True, timeout=60)


def assert_drain_answer(r):
    assert r.status == 200, r
    body = r.json()
    assert body.get("draining") is True, body
    assert isinstance(body.get("quiet"), bool), body
    assert isinstance(body.get("in_flight"), int) and body["in_flight"] >= 0, body
    assert isinstance(body.get("waited_ms"), int) and body["waited_ms"] >= 0, body
    return body


def assert_not_ready_because_draining(status_body):
    status, body = status_body
    assert status == 503, "readiness while draining: %s %r" % (status, body)
    error = json.loads(body)["error"]
    assert "draining" in error, error


# -- the sequence Kubernetes runs ----------------------------------------------------------------


class Kubelet:
    """Probes readiness and liveness every `period` on new connections, recording
    (time, path, status) until stopped."""

    def __init__(self, server, period=0.1):
        self.server, self.period = server, period
        self.records = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stop.is_set():
            for path in ("/v2/health/ready", "/v2/health/live"):
                status, _ = status_of(self.server, path, timeout=2.0)
                self.records.append((time.monotonic(), path, status))
            self.stop.wait(self.period)

    def first(self, path, predicate, after=0.0):
        for t, p, s in self.records:
            if p == path and t >= after and predicate(s):
                return t
        return None

    def statuses(self, path, start=0.0, end=float("inf")):
        return [s for t, p, s in self.records if p == path and start <= t <= end]


def test_kubernetes_termination_sequence(serve):
    """preStop `vramctl drain` -> readiness 503, liveness 200, requests still served (none
    fails) until the endpoint is removed -> quiet window -> drain returns 0 -> SIGTERM -> exit 0
    within the exit timeout; readiness never 200 again."""
    s = serve(name="k8s")
    kubelet = Kubelet(s)
    kubelet.thread.start()
    in_rotation = threading.Event()
    in_rotation.set()
    endpoint_lag_s = 0.8  # readiness failed -> endpoints updated -> no new traffic
    traffic = {"ok": 0, "failed": [], "last_end": 0.0, "during_drain": 0}
    prestop_start = [float("inf")]

    def load_balancer(seed):
        c = s.client(timeout=30)
        i = 0
        try:
            while in_rotation.is_set():
                started = time.monotonic()
                try:
                    status, ok = infer(c, "fast", seed * 1000 + i)
                except (OSError, http.client.HTTPException) as e:
                    status, ok = repr(e), False
                if status == 200 and ok:
                    traffic["ok"] += 1
                    if started > prestop_start[0]:
                        traffic["during_drain"] += 1
                else:
                    traffic["failed"].append(status)
                traffic["last_end"] = max(traffic["last_end"], time.monotonic())
                i += 1
                time.sleep(0.02)
        finally:
            c.close()

    def endpoints_controller():
        # Takes the pod out of rotation endpoint_lag_s after the kubelet first saw it unready.
        while True:
            t = kubelet.first("/v2/health/ready", lambda st: st != 200)
            if t is not None:
                break
            time.sleep(0.02)
        while time.monotonic() < t + endpoint_lag_s:
            time.sleep(0.02)
        in_rotation.clear()

    try:
        wait_for(lambda: kubelet.statuses("/v2/health/ready"), 10, what="a first probe")
        balancers = [threading.Thread(target=load_balancer, args=(k,), daemon=True)
                     for k in range(2)]
        for b in balancers:
            b.start()
        controller = threading.Thread(target=endpoints_controller, daemon=True)
        controller.start()
        time.sleep(0.5)
        slow_thread, slow_result = slow_request(s)  # in flight when the pod starts stopping
        time.sleep(0.3)

        prestop_start[0] = time.monotonic()
        out = vramctl_drain(s, "--quiet-ms", "1000", "--timeout-ms", "20000")
        prestop_end = time.monotonic()
        assert out.returncode == 0, "vramctl drain exited %d\n%s%s\n%s" % (
            out.returncode, out.stdout, out.stderr, s.describe())
        assert len(out.stdout.strip().splitlines()) == 1, out.stdout

        for b in balancers:
            b.join(30)
        controller.join(30)
        slow_thread.join(30)

        # Readiness failed at once and stayed failed; liveness never did.
        t_unready = kubelet.first("/v2/health/ready", lambda st: st != 200)
        assert t_unready is not None, "readiness never failed"
        # Measured from before vramctl starts, on a machine that may run other tests at once:
        # the bound covers its start-up and a probe period, and readiness must fail well before
        # the drain could have ended (the quiet window counts from the traffic it stops).
        assert t_unready - prestop_start[0] < 3.0, (
            "readiness failed %.2f s after the drain began" % (t_unready - prestop_start[0]))
        assert t_unready < prestop_end - 0.9, "readiness failed only as the drain ended"
        after = kubelet.statuses("/v2/health/ready", start=t_unready, end=prestop_end)
        assert after and set(after) == {503}, "readiness during the drain: %s" % after
        assert_not_ready_because_draining(status_of(s, "/v2/health/ready"))
        live = kubelet.statuses("/v2/health/live")
        assert live and set(live) == {200}, "liveness before SIGTERM: %s" % sorted(set(live))

        # Every request was served, those arriving during the drain included.
        assert not traffic["failed"], "requests failed during the drain: %s" % traffic["failed"]
        assert traffic["during_drain"] > 0, "no request arrived during the drain: untested"
        assert slow_result.get("value") == (200, True), slow_result
        # The drain waited for a quiet window after the last request.
        assert prestop_end >= traffic["last_end"] + 1.0 - SLACK_S, (
            "the drain returned %.2f s after the last request, before the 1 s quiet window"
            % (prestop_end - traffic["last_end"]))

        term = time.monotonic()
        s.send_signal(signal.SIGTERM)
        code = s.wait(timeout=EXIT_TIMEOUT_S + 5)
        assert time.monotonic() - term < EXIT_TIMEOUT_S, "exit took longer than the exit timeout"
        s.assert_clean_exit(code)
        kubelet.stop.set()
        kubelet.thread.join(10)
        after_term = kubelet.statuses("/v2/health/ready", start=term + 0.05)
        assert 200 not in after_term, "readiness answered 200 after SIGTERM: %s" % after_term
    finally:
        in_rotation.clear()
        kubelet.stop.set()


# -- POST /v2/drain ------------------------------------------------------------------------------


def test_drain_returns_after_a_quiet_window_and_is_one_way(serve):
    s = serve()
    c = s.client()
    assert status_of(s, "/v2/health/ready")[0] == 200
    started = time.monotonic()
    t, result = in_background(lambda: post_drain(s, {"quiet_ms": 800, "timeout_ms": 20000}))
    wait_for(lambda: status_of(s, "/v2/health/ready")[0] == 503, 5,
             what="readiness to fail once the drain began")
    assert_not_ready_because_draining(status_of(s, "/v2/health/ready"))
    assert status_of(s, "/v2/health/live")[0] == 200
    # Requests arriving during the drain are served, and each restarts the quiet window.
    last_end = started
    for i in range(10):
        assert infer(c, "fast", i) == (200, True)
        last_end = time.monotonic()
        assert "value" not in result, "the drain returned while requests kept coming: %s" % (
            result,)
        time.sleep(0.1)
    t.join(30)
    returned = time.monotonic()
    assert "value" in result, result
    body = assert_drain_answer(result["value"])
    assert body["quiet"] is True and body["in_flight"] == 0, body
    assert returned - last_end >= 0.8 - SLACK_S, (
        "the drain returned %.2f s after the last request, before the 0.8 s quiet window"
        % (returned - last_end))
    assert body["waited_ms"] >= (last_end - started + 0.8 - SLACK_S) * 1000, body
    assert body["waited_ms"] <= (returned - started + SLACK_S) * 1000, body

    # One-way: still not ready, still serving; a second drain answers at once.
    assert_not_ready_because_draining(status_of(s, "/v2/health/ready"))
    assert status_of(s, "/v2/health/live")[0] == 200
    assert infer(c, "fast", 99) == (200, True)
    again = assert_drain_answer(post_drain(s, {"quiet_ms": 100, "timeout_ms": 5000}))
    assert again["quiet"] is True and again["in_flight"] == 0, again
    assert status_of(s, "/v2/health/ready")[0] == 503
    c.close()
    s.assert_clean_exit(s.stop())


def test_drain_times_out_with_a_request_in_flight(serve):
    s = serve()
    thread, result = slow_request(s, "slower")
    time.sleep(1.0)  # executing now, for SLOWER_S
    started = time.monotonic()
    body = assert_drain_answer(post_drain(s, {"quiet_ms": 200, "timeout_ms": 400}))
    elapsed = time.monotonic() - started
    assert body["quiet"] is False, body
    assert body["in_flight"] == 1, body
    assert 400 - SLACK_S * 1000 <= body["waited_ms"] < (SLOWER_S - 1.0) * 1000, body
    assert elapsed < SLOWER_S - 1.5, "the drain waited for the request: %.2f s" % elapsed
    thread.join(30)
    assert result.get("value") == (200, True), result  # the request in flight still answered
    assert_not_ready_because_draining(status_of(s, "/v2/health/ready"))
    s.assert_clean_exit(s.stop())


def test_drain_without_a_body_uses_the_defaults(serve):
    s = serve()
    started = time.monotonic()
    body = assert_drain_answer(post_drain(s))
    elapsed = time.monotonic() - started
    assert body["quiet"] is True and body["in_flight"] == 0, body
    # The default quiet window is 1000 ms (the default timeout, 30 s, is not reached).
    assert 1000 - SLACK_S * 1000 <= body["waited_ms"] <= (elapsed + SLACK_S) * 1000, body
    assert elapsed < 10, elapsed
    s.assert_clean_exit(s.stop())


BAD_BODIES = [
    (b"this is not JSON", None),
    (b"[1, 2]", None),
    (b'{"quiet_ms": -1}', "quiet_ms"),
    (b'{"timeout_ms": -5000}', "timeout_ms"),
    (b'{"quiet_ms": "1000"}', "quiet_ms"),
    (b'{"timeout_ms": true}', "timeout_ms"),
    (b'{"quiet_ms": 1.5}', "quiet_ms"),
    (b'{"quiet_ms": 100, "timeout_ms": null}', "timeout_ms"),
    (b'{"quiet_ms": 100, "quietms": 5}', "unknown field 'quietms' (quiet_ms, timeout_ms)"),
]


def test_bad_drain_bodies_are_400_and_do_not_drain(serve):
    s = serve()
    for body, field in BAD_BODIES:
        r = post_drain(s, body, timeout=10)
        assert r.status == 400, "%r: %r" % (body, r)
        error = r.error_message()
        assert error, body
        if field:
            assert field in error, "%r: the error does not name %s: %r" % (body, field, error)
    # A refused request starts nothing: still ready.
    assert status_of(s, "/v2/health/ready")[0] == 200
    s.assert_clean_exit(s.stop())


def test_grpc_server_ready_is_false_while_draining(serve):
    grpc, pb, pb_grpc = grpc_modules()

    s = serve(name="drain-grpc")
    channel = grpc.insecure_channel("127.0.0.1:%d" % s.grpc_port())
    try:
        grpc.channel_ready_future(channel).result(timeout=30)
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        assert stub.ServerReady(pb.ServerReadyRequest(), timeout=10).ready
        assert stub.ServerLive(pb.ServerLiveRequest(), timeout=10).live
        assert assert_drain_answer(post_drain(s, {"quiet_ms": 100}))["quiet"] is True
        assert not stub.ServerReady(pb.ServerReadyRequest(), timeout=10).ready
        assert stub.ServerLive(pb.ServerLiveRequest(), timeout=10).live
        # Still serving over gRPC too.
        request = pb.ModelInferRequest(model_name="fast")
        tensor = request.inputs.add(name="INPUT0", datatype="FP32", shape=[2])
        tensor.contents.fp32_contents.extend([1.5, -2.0])
        reply = stub.ModelInfer(request, timeout=10)
        raw = reply.raw_output_contents[0] if reply.raw_output_contents else None
        values = (list(np.frombuffer(raw, dtype="<f4")) if raw is not None
                  else list(reply.outputs[0].contents.fp32_contents))
        assert values == [1.5, -2.0], reply
    finally:
        channel.close()
    s.assert_clean_exit(s.stop())


# -- SIGTERM -------------------------------------------------------------------------------------


def test_sigterm_fails_readiness_at_once_and_answers_what_is_in_flight(serve):
    s = serve(name="drain-term")
    thread, result = slow_request(s)
    time.sleep(0.3)
    term = time.monotonic()
    s.send_signal(signal.SIGTERM)
    time.sleep(0.05)
    probes = []
    while s.alive() and time.monotonic() - term < EXIT_TIMEOUT_S + 5:
        probes.append(status_of(s, "/v2/health/ready", timeout=1.0))
        time.sleep(0.05)
    code = s.wait(timeout=EXIT_TIMEOUT_S + 5)
    exit_s = time.monotonic() - term
    thread.join(30)
    # Refused (the listener closed) or 503 (draining): a failed probe either way, never 200.
    assert all(p[0] in (None, 503) for p in probes), "readiness after SIGTERM: %s" % [
        p[0] for p in probes]
    for p in probes:
        if p[0] == 503:
            assert_not_ready_because_draining(p)
    assert result.get("value") == (200, True), result
    assert exit_s < EXIT_TIMEOUT_S, "exit took %.1f s" % exit_s
    s.assert_clean_exit(code)


# -- vramctl drain -------------------------------------------------------------------------------


def test_vramctl_drain_exit_codes(serve):
    s = serve(name="drain-vramctl")
    # 3: timed out. The quiet window (2 s) is longer than the timeout, so it times out whether
    # or not the request below has reached the server yet (on a busy machine it may not have).
    thread, result = slow_request(s)
    time.sleep(0.3)
    out = vramctl_drain(s, "--quiet-ms", "2000", "--timeout-ms", "400")
    assert out.returncode == 3, "vramctl drain exited %d: %s%s" % (
        out.returncode, out.stdout, out.stderr)
    assert len(out.stdout.strip().splitlines()) == 1, out.stdout
    thread.join(30)
    assert result.get("value") == (200, True), result
    # 0: quiet.
    out = vramctl_drain(s, "--quiet-ms", "100", "--timeout-ms", "5000")
    assert out.returncode == 0, "vramctl drain exited %d: %s%s" % (
        out.returncode, out.stdout, out.stderr)
    assert len(out.stdout.strip().splitlines()) == 1, out.stdout
    s.assert_clean_exit(s.stop())


def test_vramctl_drain_of_an_unreachable_server_exits_2(tmp_path):
    """2, as every vramctl command that cannot reach vramd (1: vramd answered an error)."""
    out = subprocess.run([str(VRAMCTL), "drain", "--url", "http://127.0.0.1:1",
                          "--quiet-ms", "100", "--timeout-ms", "1000"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, "exit %d: %s%s" % (out.returncode, out.stdout, out.stderr)
    assert out.stderr.strip(), "vramctl said nothing about the failure"
