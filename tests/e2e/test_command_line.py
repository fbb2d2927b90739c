"""tritonserver's command line on vramd (src/cli/triton_flags.h): no `serve` word needed, the
flags Triton deployments pass accepted with their meaning or with one warning each; an
unknown flag is still an error. The access flags (TLS, restricted APIs): test_access.py.
"""

import json
import re
import socket
import subprocess
import time

import numpy as np
import pytest

from e2e_helpers import FIXTURE_REPO, VRAMD_BIN, VramdProcess, copy_model
from v2client import Input

MODEL = "identity_fp32"
BASE = ["--model-control-mode", "explicit", "--load-model", MODEL]


class TritonStyle(VramdProcess):
    """A server started as tritonserver is: the same arguments, without `serve`."""

    def argv(self):
        argv = super().argv()
        assert argv[1] == "serve"
        return [argv[0]] + argv[2:]


def start(tmp_path, args, name):
    s = TritonStyle([FIXTURE_REPO], tmp_path / name, BASE + args, name=name, ready_models=[MODEL])
    try:
        s.start()
    except BaseException:
        s.kill()
        raise
    return s


def stop(s):
    code = s.stop()
    s.assert_clean_exit(code)


IGNORED = ["--pinned-memory-pool-byte-size=268435456", "--cuda-memory-pool-byte-size=0:67108864",
           "--cuda-memory-pool-byte-size=1:67108864", "--rate-limit=off",
           "--response-cache-byte-size=0", "--allow-gpu-metrics=false",
           "--metrics-interval-ms=2000", "--model-load-retry-count=0"]


def test_tritonserver_flags_without_the_serve_word(tmp_path):
    # --trace-level is Triton's deprecated spelling of --trace-config level=..., taken as such.
    s = start(tmp_path, IGNORED + ["--id=triton-compat", "--strict-model-config=false",
                                   "--trace-level=OFF", "--trace-rate=100",
                                   "--log-format=ISO8601", "--allow-http=true",
                                   "--grpc-use-ssl=false", "--allow-grpc=true"], "triton_style")
    try:
        c = s.client()
        meta = c.get("/v2")
        assert meta.status == 200 and meta.json()["name"] == "triton-compat"
        log = s.log()
        # One warning per flag given, naming it and why it changes nothing (the repeated one too).
        for flag in sorted({a.split("=")[0] for a in IGNORED}):
            lines = [l for l in log.splitlines() if (flag + " ignored:") in l]
            assert len(lines) == 1, (flag, lines)
            assert " warning " in lines[0]
        # ISO 8601 timestamps, UTC.
        first = log.splitlines()[0]
        assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ", first), first
    finally:
        stop(s)


def test_booleans_take_their_value_as_the_next_argument_and_model_store(tmp_path):
    # As getopt reads Triton's: --flag VALUE as well as --flag=VALUE; --model-store is
    # --model-repository's other name; the SageMaker, Vertex AI, cache, repository-agent and
    # virtual-address flags are warned about, one warning each.
    store = tmp_path / "store"
    copy_model(FIXTURE_REPO / MODEL, store, "identity_from_store")
    ignored = ["--sagemaker-port=8080", "--vertex-ai-default-model=m", "--cache-directory=/c",
               "--repoagent-directory=/r", "--cuda-virtual-address-size=0:1073741824"]
    s = TritonStyle([FIXTURE_REPO], tmp_path / "spellings", BASE + [
        "--model-store", str(store), "--load-model", "identity_from_store",
        "--allow-metrics", "false", "--strict-readiness", "true", "--exit-on-error", "false",
        "--allow-grpc", "true"] + ignored, name="spellings",
        ready_models=[MODEL, "identity_from_store"])
    try:
        s.start()
        c = s.client()
        r = c.infer("identity_from_store",
                    [Input("INPUT0", "FP32", np.array([1.0, 2.0], dtype=np.float32))])
        assert r.outputs["OUTPUT0"].tolist() == [1.0, 2.0]
        log = s.log()
        assert "metrics listening" not in log and "gRPC listening" in log
        for flag in ignored:
            assert (flag.split("=")[0] + " ignored:") in log, flag
    finally:
        stop(s)


def free_port():
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        return so.getsockname()[1]


def test_log_file_and_levels(tmp_path):
    # The log goes to the file, and --log-info=false keeps warnings only: the port is given,
    # since no "listening" line is logged to read it from.
    log_file = tmp_path / "vramd.log"
    port = free_port()
    s = TritonStyle([FIXTURE_REPO], tmp_path / "log_file", BASE + [
        "--log-file", str(log_file), "--log-info=false", "--rate-limit=off"],
        name="log_file", port=port, ready_models=[MODEL])
    s.launch()
    try:
        s.port = port
        s.wait_ready()
        assert s.client().get("/v2/models/%s/ready" % MODEL).status == 200
    finally:
        code = s.stop()
    assert code == 0
    text = log_file.read_text()
    assert "--rate-limit ignored" in text and " warning " in text, text[:2000]
    assert " info " not in text, text[:2000]
    assert s.stderr_text() == "", s.stderr_text()[:2000]


def run_until_exit(args, timeout=30):
    return subprocess.run([str(VRAMD_BIN)] + args, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def test_a_header_forward_pattern_that_does_not_compile_stops_the_start():
    p = run_until_exit(["--model-repository", str(FIXTURE_REPO), "--http-port", "0",
                        "--grpc-port", "0", "--metrics-port", "0",
                        "--grpc-header-forward-pattern=x-(unclosed"])
    assert p.returncode == 1, p.stderr[-2000:]
    assert "--grpc-header-forward-pattern='x-(unclosed' is not a regular expression" in p.stderr
    assert "listening" not in p.stderr


def test_an_unknown_flag_is_still_an_error():
    p = run_until_exit(["--model-repository", str(FIXTURE_REPO), "--no-such-flag=1"])
    assert p.returncode != 0
    assert "--no-such-flag" in p.stdout + p.stderr


def test_allow_http_false_serves_grpc_only(tmp_path):
    s = TritonStyle([FIXTURE_REPO], tmp_path / "no_http", BASE + ["--allow-http=false"],
                    name="no_http")
    s.launch()
    try:
        port = s.grpc_port()
        deadline = time.monotonic() + 30
        while "HTTP off (--allow-http=false)" not in s.log() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "HTTP off (--allow-http=false)" in s.log()
        assert "HTTP listening" not in s.log()
        grpc = pytest.importorskip("grpc", reason="python3-grpcio is not installed")
        ch = grpc.insecure_channel("127.0.0.1:%d" % port)
        try:
            # grpc.health.v1 Check of the inference service: SERVING once the model is ready.
            check = ch.unary_unary("/grpc.health.v1.Health/Check",
                                   request_serializer=lambda s_: b"\x0a\x1einference.GRPCInferenceService",
                                   response_deserializer=lambda b: b)
            deadline = time.monotonic() + 30
            while check(None, timeout=10) != b"\x08\x01" and time.monotonic() < deadline:
                time.sleep(0.1)
            assert check(None, timeout=10) == b"\x08\x01"
        finally:
            ch.close()
    finally:
        code = s.stop()
        s.assert_clean_exit(code)


def test_the_logging_extension_over_http(tmp_path):
    # GET/POST /v2/logging (Triton's logging extension): the settings as the command line made
    # them; levels and format change while running; a server started on standard error keeps it
    # (a client may not choose a file), and a refused request changes nothing.
    s = start(tmp_path, ["--log-format=ISO8601"], "logging_ext")
    try:
        c = s.client()
        got = c.get("/v2/logging")
        assert got.status == 200
        assert got.json() == {"log_file": "", "log_info": True, "log_warning": True,
                              "log_error": True, "log_verbose_level": 0, "log_format": "ISO8601"}
        set_verbose = c.post("/v2/logging", json.dumps({"log_verbose_level": 1}).encode())
        assert set_verbose.status == 200 and set_verbose.json()["log_verbose_level"] == 1
        same = c.post("/v2/logging", json.dumps({"log_format": "ISO8601", "log_info": True}).encode())
        assert same.status == 200, same.body
        other = c.post("/v2/logging", json.dumps({"log_format": "default", "log_warning": False}).encode())
        assert other.status == 200, other.body
        assert other.json()["log_format"] == "default" and other.json()["log_warning"] is False
        mixed = c.post("/v2/logging", json.dumps({"log_verbose_level": 0,
                                                  "log_file": "/tmp/x.log"}).encode())
        assert mixed.status == 501 and b"--log-file" in mixed.body, mixed.body
        assert c.get("/v2/logging").json()["log_verbose_level"] == 1, "a refused request applied"
        for body, text in [({"log_format": "json"}, b"'log_format' must be the string"),
                           ({"no_such_setting": 1}, b"unknown log setting 'no_such_setting'"),
                           ({"log_verbose_level": -1}, b"log_verbose_level"),
                           ({"log_info": "yes"}, b"'log_info' must be a boolean"),
                           ([1, 2], b"must be a JSON object")]:
            r = c.post("/v2/logging", json.dumps(body).encode())
            assert r.status in (400, 501) and text in r.body, (body, r.status, r.body)
        assert c.request("PUT", "/v2/logging", b"{}").status == 405
    finally:
        stop(s)
