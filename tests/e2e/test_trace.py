"""Tracing (server/trace/, docs/tracing.md): Triton's trace extension over HTTP and gRPC, the
--trace-config flags, Triton's trace file, and the OpenTelemetry export (OTLP/HTTP, JSON) to a
small collector this file runs: span structure, the parent link from a W3C traceparent (HTTP
header and gRPC metadata), and the spans of a load and a reload. Every way a request arrives is
traced: infer, generate and generate_stream over HTTP, ModelInfer and each request of a
ModelStreamInfer stream over gRPC (a decoupled model's too, when the python backend is built).
The calls a model makes are traced as children of its request: an ensemble's steps, and a
python model's BLS calls given trace=request.trace() (in process and hosted out of process).

Models: "echo" (identity, on the CPU) written into a repository per test.
"""

import http.server
import json
import pathlib
import threading
import time

import numpy as np
import pytest

from e2e_helpers import (PYTHON_BACKEND_DIR, PYTHON_LIBRARY, VramdProcess, copy_model,
                         grpc_modules, wait_for)
from v2client import Input

MODEL = """
name: "{name}"
backend: "identity"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 2 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 2 ] }} ]
"""
JSON_CT = {"Content-Type": "application/json"}
PARENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = "00-%s-%s-01" % (PARENT_TRACE, PARENT_SPAN)


class Collector:
    """An OTLP/HTTP receiver: keeps every span POSTed to /v1/traces with its resource."""

    def __init__(self):
        self.spans = []
        self.resources = []
        self.bodies = 0
        self.lock = threading.Lock()
        collector = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                ok = self.path == "/v1/traces" and \
                    self.headers["Content-Type"].startswith("application/json")
                if ok:
                    doc = json.loads(body)
                    with collector.lock:
                        collector.bodies += 1
                        for rs in doc["resourceSpans"]:
                            collector.resources.append(rs["resource"])
                            for ss in rs["scopeSpans"]:
                                collector.spans.extend(ss["spans"])
                self.send_response(200 if ok else 400)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self):
        return "http://127.0.0.1:%d/v1/traces" % self.server.server_address[1]

    def named(self, name):
        with self.lock:
            return [s for s in self.spans if s["name"] == name]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def attributes(span):
    out = {}
    for a in span["attributes"]:
        v = a["value"]
        out[a["key"]] = v.get("stringValue", v.get("intValue"))
    return out


@pytest.fixture
def collector():
    c = Collector()
    yield c
    c.close()


@pytest.fixture
def repo(tmp_path):
    r = tmp_path / "repo"
    (r / "echo" / "1").mkdir(parents=True)
    (r / "echo" / "config.pbtxt").write_text(MODEL.format(name="echo"))
    return r


@pytest.fixture
def serve(tmp_path, repo):
    servers = []

    def start(args):
        s = VramdProcess([repo], tmp_path / ("logs-%d" % len(servers)), list(args),
                         name="trace")
        servers.append(s)
        return s.start()

    yield start
    for s in servers:
        if s.alive():
            s.assert_clean_exit(s.stop())
        s.kill()


def infer(server, headers=None):
    c = server.client()
    try:
        r = c.infer_raw("echo", [Input("INPUT0", "FP32", np.array([1.0, 2.0], np.float32))],
                        headers=headers)
        assert r.status == 200, r.body
    finally:
        c.close()


def post_json(server, path, body):
    c = server.client()
    try:
        r = c.post(path, json.dumps(body).encode(), JSON_CT)
        return r.status, json.loads(r.body) if r.body else None
    finally:
        c.close()


def get_json(server, path):
    c = server.client()
    try:
        r = c.get(path)
        return r.status, json.loads(r.body)
    finally:
        c.close()


def event_times(span):
    return {e["name"]: int(e["timeUnixNano"]) for e in span["events"]}


def otel_args(collector, rate=1):
    return ["--trace-config", "mode=opentelemetry", "--trace-config", "level=TIMESTAMPS",
            "--trace-config", "rate=%d" % rate,
            "--trace-config", "opentelemetry,url=" + collector.url,
            "--trace-config", "opentelemetry,resource=service.name=vramd-test",
            "--trace-config", "opentelemetry,bsp_schedule_delay=100"]


def test_settings_answer_as_triton_and_refuse_bad_values(serve):
    s = serve([])
    status, body = get_json(s, "/v2/trace/setting")
    assert status == 200
    assert body == {"trace_level": ["OFF"], "trace_rate": "1000", "trace_count": "-1",
                    "log_frequency": "0", "trace_file": "", "trace_mode": "triton"}
    status, meta = get_json(s, "/v2")
    assert "trace" in meta["extensions"]
    status, body = post_json(s, "/v2/trace/setting", {"trace_rate": "7", "trace_level": ["TIMESTAMPS"]})
    assert status == 200 and body["trace_rate"] == "7" and body["trace_level"] == ["TIMESTAMPS"]
    # A model's settings start as a copy of the global ones with its own changes.
    status, body = post_json(s, "/v2/models/echo/trace/setting", {"trace_count": "3"})
    assert status == 200 and body["trace_rate"] == "7" and body["trace_count"] == "3"
    # null: back to the global value.
    status, body = post_json(s, "/v2/models/echo/trace/setting", {"trace_count": None})
    assert status == 200 and body["trace_count"] == "-1"
    for bad, words in (({"trace_level": ["TENSORS"]}, "TENSORS"),
                       ({"trace_rate": "-2"}, "trace_rate"),
                       ({"trace_rate": "ten"}, "trace_rate"),
                       ({"trace_count": "-5"}, "trace_count"),
                       ({"trace_level": ["OFF", "TIMESTAMPS"]}, "trace_level"),
                       ({"trace_mode": "opentelemetry"}, "trace_mode"),
                       ({"trace_rate": {"x": 1}}, "trace_rate"),
                       ({"bogus": "1"}, "bogus")):
        status, body = post_json(s, "/v2/trace/setting", bad)
        assert status == 400, (bad, body)
        assert words in body["error"], (bad, body)
    status, body = get_json(s, "/v2/trace/setting")
    assert body["trace_rate"] == "7", "a refused update changed something: %s" % body


def test_bad_trace_config_flag_is_refused_at_start(tmp_path, repo):
    s = VramdProcess([repo], tmp_path / "logs", ["--trace-config", "level=LOUD"], name="badflag")
    s.launch()
    code = s.wait(timeout=30)
    assert code != 0
    assert "trace_level" in s.stderr_text() or "trace_level" in s.log(), s.describe()


def test_triton_trace_file_every_log_frequency_traces(serve, tmp_path):
    trace_file = tmp_path / "trace.json"
    s = serve(["--trace-file", str(trace_file), "--trace-level", "TIMESTAMPS", "--trace-rate", "1",
               "--trace-log-frequency", "2"])
    for _ in range(4):
        infer(s)
    pieces = [pathlib.Path("%s.%d" % (trace_file, i)) for i in (0, 1)]
    # A piece exists before its writer has finished it: wait until both read as JSON.
    def whole(p):
        try:
            return p.is_file() and isinstance(json.loads(p.read_text()), list)
        except ValueError:
            return False
    wait_for(lambda: all(whole(p) for p in pieces), timeout=20, what="trace files .0 and .1")
    entries = json.loads(pieces[0].read_text()) + json.loads(pieces[1].read_text())
    models = [e for e in entries if "model_name" in e]
    stamps = [e for e in entries if "timestamps" in e]
    assert len(models) == 4 and len(stamps) == 4, entries
    assert {m["model_name"] for m in models} == {"echo"}
    assert all(m["model_version"] == 1 for m in models)
    names = [t["name"] for t in stamps[0]["timestamps"]]
    for expected in ("HTTP_RECV_START", "REQUEST_START", "QUEUE_START", "COMPUTE_START",
                     "COMPUTE_END", "REQUEST_END", "HTTP_SEND_START", "HTTP_SEND_END"):
        assert expected in names, names
    ns = [t["ns"] for t in stamps[0]["timestamps"]]
    assert ns == sorted(ns)
    assert names.index("QUEUE_START") < names.index("COMPUTE_START") < names.index("COMPUTE_END")


def test_rate_and_count_sample_requests(serve, tmp_path):
    trace_file = tmp_path / "t.json"
    s = serve(["--trace-config", "triton,file=%s" % trace_file, "--trace-config", "level=TIMESTAMPS",
               "--trace-config", "rate=3", "--trace-config", "count=2"])
    for _ in range(12):
        infer(s)
    status, body = get_json(s, "/v2/trace/setting")
    assert body["trace_count"] == "0", body  # 12 requests at rate 3 would be 4; count stops at 2
    s.assert_clean_exit(s.stop())
    entries = json.loads(trace_file.read_text())  # log_frequency 0: written at exit
    assert len([e for e in entries if "timestamps" in e]) == 2, entries


def test_opentelemetry_request_spans_with_traceparent(serve, collector):
    s = serve(otel_args(collector))
    infer(s, headers={"traceparent": TRACEPARENT})
    infer(s)  # no parent: a trace of its own
    wait_for(lambda: len(collector.named("InferRequest")) >= 2, timeout=20,
             what="two request spans at the collector")
    requests = collector.named("InferRequest")
    child = [r for r in requests if r["traceId"] == PARENT_TRACE]
    assert len(child) == 1, requests
    root = child[0]
    assert root["parentSpanId"] == PARENT_SPAN
    assert root["kind"] == 2
    attrs = attributes(root)
    assert attrs["model_name"] == "echo" and attrs["model_version"] == "1"
    assert "vramd.memory.instance_live_bytes" in attrs, attrs
    events = [e["name"] for e in root["events"]]
    assert "QUEUE_START" in events and "COMPUTE_END" in events and "HTTP_SEND_END" in events
    assert int(root["startTimeUnixNano"]) <= int(root["endTimeUnixNano"])
    # Its queue and compute spans hang below it, within its time.
    for name in ("queue", "compute"):
        spans = [x for x in collector.named(name) if x["parentSpanId"] == root["spanId"]]
        assert len(spans) == 1, (name, collector.spans)
        assert spans[0]["traceId"] == PARENT_TRACE
        assert int(root["startTimeUnixNano"]) <= int(spans[0]["startTimeUnixNano"])
        assert int(spans[0]["endTimeUnixNano"]) <= int(root["endTimeUnixNano"])
    other = [r for r in requests if r["traceId"] != PARENT_TRACE][0]
    assert "parentSpanId" not in other
    assert {"key": "service.name", "value": {"stringValue": "vramd-test"}} in \
        collector.resources[0]["attributes"]


def test_opentelemetry_traceparent_is_traced_whatever_the_rate(serve, collector):
    s = serve(otel_args(collector, rate=0))
    infer(s)
    infer(s, headers={"traceparent": TRACEPARENT})
    infer(s, headers={"traceparent": "00-zz-not-a-context"})  # malformed: ignored, not traced
    wait_for(lambda: len(collector.named("InferRequest")) >= 1, timeout=20, what="a request span")
    time.sleep(0.5)  # a second span would be in the next batch by now
    requests = collector.named("InferRequest")
    assert [r["traceId"] for r in requests] == [PARENT_TRACE], requests


def test_load_and_reload_spans(serve, collector, repo):
    s = serve(otel_args(collector) + ["--model-control-mode", "explicit", "--load-model", "echo"])
    wait_for(lambda: collector.named("load echo"), timeout=20, what="the start-up load's span")
    status, _ = post_json(s, "/v2/repository/models/echo/load", {})
    assert status == 200
    wait_for(lambda: len(collector.named("load echo")) >= 2, timeout=20, what="the reload's span")
    load = collector.named("load echo")[-1]
    assert attributes(load)["vramd.outcome"] == "ok"
    phases = [x for x in collector.spans if x.get("parentSpanId") == load["spanId"]]
    assert phases, "the reload has no phase spans"
    for p in phases:
        assert p["traceId"] == load["traceId"]
        assert int(load["startTimeUnixNano"]) <= int(p["startTimeUnixNano"])
    assert "switch" in [p["name"] for p in phases]


def test_export_failure_does_not_fail_requests(serve, tmp_path):
    # Nothing listens on port 1: every export fails, and is logged, but requests are served.
    s = serve(["--trace-config", "mode=opentelemetry", "--trace-config", "level=TIMESTAMPS",
               "--trace-config", "rate=1", "--trace-config", "opentelemetry,url=http://127.0.0.1:1/v1/traces",
               "--trace-config", "opentelemetry,bsp_schedule_delay=50"])
    for _ in range(3):
        infer(s)
    wait_for(lambda: "exporting" in s.log(), timeout=20, what="the export failure's warning")


def test_grpc_trace_setting_and_metadata_traceparent(serve, collector):
    grpc, pb, pb_grpc = grpc_modules()
    s = serve(otel_args(collector))
    channel = grpc.insecure_channel("127.0.0.1:%d" % s.grpc_port())
    try:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        r = stub.TraceSetting(pb.TraceSettingRequest(), timeout=10)
        assert list(r.settings["trace_level"].value) == ["TIMESTAMPS"]
        assert list(r.settings["trace_mode"].value) == ["opentelemetry"]
        req = pb.TraceSettingRequest(model_name="echo")
        req.settings["trace_rate"].value.append("2")
        assert list(stub.TraceSetting(req, timeout=10).settings["trace_rate"].value) == ["2"]
        req = pb.TraceSettingRequest(model_name="echo")
        req.settings["trace_rate"].SetInParent()  # no value: back to the global rate
        assert list(stub.TraceSetting(req, timeout=10).settings["trace_rate"].value) == ["1"]
        bad = pb.TraceSettingRequest()
        bad.settings["trace_level"].value.append("TENSORS")
        with pytest.raises(grpc.RpcError) as e:
            stub.TraceSetting(bad, timeout=10)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT

        infer_req = pb.ModelInferRequest(model_name="echo")
        t = infer_req.inputs.add(name="INPUT0", datatype="FP32", shape=[2])
        t.contents.fp32_contents.extend([1.0, 2.0])
        stub.ModelInfer(infer_req, timeout=10, metadata=(("traceparent", TRACEPARENT),))
    finally:
        channel.close()
    wait_for(lambda: any(x["traceId"] == PARENT_TRACE for x in collector.named("InferRequest")),
             timeout=20, what="the gRPC request's span")
    root = [x for x in collector.named("InferRequest") if x["traceId"] == PARENT_TRACE][0]
    assert root["parentSpanId"] == PARENT_SPAN
    assert attributes(root)["vramd.protocol"] == "grpc"
    assert "GRPC_SEND_END" in [e["name"] for e in root["events"]]


def test_rollback_span(serve, collector):
    s = serve(otel_args(collector) + ["--model-control-mode", "explicit", "--load-model", "echo"])
    cfg = {"name": "echo", "backend": "identity", "max_batch_size": 0,
           "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [2]}],
           "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [2]}],
           "parameters": {"vramd.rollback.watch_s": {"string_value": "60"}}}
    status, _ = post_json(s, "/v2/repository/models/echo/load",
                          {"parameters": {"config": json.dumps(cfg)}})
    assert status == 200
    status, body = post_json(s, "/v2/repository/models/echo/rollback",
                             {"parameters": {"reason": "span test"}})
    assert status == 200, body
    wait_for(lambda: collector.named("rollback echo"), timeout=20, what="the rollback's span")
    attrs = attributes(collector.named("rollback echo")[0])
    assert attrs["vramd.rollback.rule"] == "manual"
    assert attrs["vramd.rollback.figures"] == "span test"
    assert attrs["vramd.rollback.from_versions"] == "1" and attrs["vramd.rollback.to_versions"] == "1"


def test_generate_and_generate_stream_are_traced(serve, collector):
    s = serve(otel_args(collector))
    c = s.client()
    try:
        r = c.post("/v2/models/echo/generate", json.dumps({"INPUT0": [1.0, 2.0]}).encode(),
                   dict(JSON_CT, traceparent=TRACEPARENT))
        assert r.status == 200, r.body
        r = c.post("/v2/models/echo/generate_stream", json.dumps({"INPUT0": [3.0, 4.0]}).encode(),
                   JSON_CT)
        assert r.status == 200 and r.body.startswith(b"data: "), r.body
        # A body the model cannot take: traced too, its error on the span.
        r = c.post("/v2/models/echo/generate", json.dumps({"INPUT0": [1.0]}).encode(), JSON_CT)
        assert r.status == 400, r.body
    finally:
        c.close()
    wait_for(lambda: len(collector.named("InferRequest")) >= 3, timeout=20,
             what="three request spans at the collector")
    requests = collector.named("InferRequest")
    assert len(requests) == 3, requests
    generate = [x for x in requests if x["traceId"] == PARENT_TRACE]
    assert len(generate) == 1 and generate[0]["parentSpanId"] == PARENT_SPAN, requests
    for span in requests:
        times = event_times(span)
        assert times["HTTP_SEND_START"] <= times["HTTP_SEND_END"], span
        assert int(span["endTimeUnixNano"]) >= times["HTTP_SEND_END"]
    answered = [x for x in requests if "COMPUTE_END" in event_times(x)]
    assert len(answered) == 2, requests
    for span in answered:
        assert attributes(span)["model_version"] == "1"
        compute = [x for x in collector.named("compute") if x["parentSpanId"] == span["spanId"]]
        assert len(compute) == 1, collector.spans
    failed = [x for x in requests if "COMPUTE_END" not in event_times(x)][0]
    assert failed["status"]["code"] == 2, failed
    assert "INPUT0" in failed["status"]["message"], failed


def stream_span_checks(spans, count):
    spans = [x for x in spans if x["traceId"] == PARENT_TRACE]
    assert len(spans) == count, spans
    for span in spans:
        assert span["parentSpanId"] == PARENT_SPAN
        assert attributes(span)["vramd.protocol"] == "grpc"
        times = event_times(span)
        assert times["GRPC_WAITREAD_END"] <= times["COMPUTE_START"] <= times["GRPC_SEND_START"]
        assert times["GRPC_SEND_START"] <= times["GRPC_SEND_END"]
    return spans


def test_grpc_stream_requests_are_traced(serve, collector, repo):
    grpc, pb, pb_grpc = grpc_modules()
    args = otel_args(collector)
    python = PYTHON_LIBRARY.is_file()
    if python:  # a decoupled model: one trace for all of a request's responses
        copy_model(pathlib.Path(__file__).resolve().parent / "python_models" / "py_decoupled",
                   repo, "py_decoupled")
        args += ["--backend-directory", str(PYTHON_BACKEND_DIR)]
    s = serve(args)

    def echo_request(i):
        r = pb.ModelInferRequest(model_name="echo", id="e%d" % i)
        t = r.inputs.add(name="INPUT0", datatype="FP32", shape=[2])
        t.contents.fp32_contents.extend([float(i), -float(i)])
        return r

    channel = grpc.insecure_channel("127.0.0.1:%d" % s.grpc_port())
    try:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        got = list(stub.ModelStreamInfer(iter([echo_request(1), echo_request(2)]), timeout=30,
                                         metadata=(("traceparent", TRACEPARENT),)))
        assert sorted(g.infer_response.id for g in got) == ["e1", "e2"], got
        wait_for(lambda: len([x for x in collector.named("InferRequest")
                              if x["traceId"] == PARENT_TRACE]) >= 2,
                 timeout=20, what="the stream's two request spans")
        spans = stream_span_checks(collector.named("InferRequest"), 2)
        assert {attributes(x)["model_name"] for x in spans} == {"echo"}
        if not python:
            return
        wait_for(lambda: s.client().get("/v2/models/py_decoupled/ready").status == 200,
                 timeout=60, what="py_decoupled ready")
        collector.spans.clear()
        r = pb.ModelInferRequest(model_name="py_decoupled", id="c3")
        r.inputs.add(name="COUNT", datatype="INT32", shape=[1])
        r.raw_input_contents.append(np.array([3], dtype=np.int32).tobytes())
        got = list(stub.ModelStreamInfer(iter([r]), timeout=60,
                                         metadata=(("traceparent", TRACEPARENT),)))
        assert len(got) == 3, got
        wait_for(lambda: collector.named("InferRequest"), timeout=20,
                 what="the decoupled request's span")
        time.sleep(0.3)  # a second span for the same request would have come by now
        [span] = stream_span_checks(collector.named("InferRequest"), 1)
        assert attributes(span)["model_name"] == "py_decoupled"
    finally:
        channel.close()


ENSEMBLE = """
name: "ens"
platform: "ensemble"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] } ]
ensemble_scheduling { step [ { model_name: "echo" model_version: -1
  input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "OUT" } } ] }
"""


def test_ensemble_steps_are_children_of_the_ensembles_trace(serve, collector, repo):
    (repo / "ens" / "1").mkdir(parents=True)
    (repo / "ens" / "config.pbtxt").write_text(ENSEMBLE)
    s = serve(otel_args(collector))
    c = s.client()
    try:
        r = c.infer_raw("ens", [Input("IN", "FP32", np.array([1.0, 2.0], np.float32))],
                        headers={"traceparent": TRACEPARENT})
        assert r.status == 200, r.body
    finally:
        c.close()
    wait_for(lambda: len(collector.named("InferRequest")) >= 2, timeout=20,
             what="the ensemble's and its step's spans")
    by_model = {attributes(x)["model_name"]: x for x in collector.named("InferRequest")}
    ens, step = by_model["ens"], by_model["echo"]
    assert ens["parentSpanId"] == PARENT_SPAN and ens["kind"] == 2
    assert step["traceId"] == PARENT_TRACE and step["parentSpanId"] == ens["spanId"], step
    assert step["kind"] == 1 and attributes(step)["vramd.protocol"] == "model"
    # A step is stamped by the runtime alone: no front end's receive or send.
    assert "QUEUE_START" in event_times(step) and "HTTP_SEND_END" not in event_times(step)
    assert int(ens["startTimeUnixNano"]) <= int(step["startTimeUnixNano"])
    assert int(step["endTimeUnixNano"]) <= int(ens["endTimeUnixNano"])


@pytest.mark.skipif(not PYTHON_LIBRARY.is_file(), reason="needs the python backend (%s)"
                    % PYTHON_LIBRARY)
@pytest.mark.parametrize("hosting", ["in_process", "stub"])
def test_bls_calls_given_the_requests_trace_are_its_children(serve, collector, repo, hosting):
    copy_model(pathlib.Path(__file__).resolve().parent / "python_models" / "py_bls_traced",
               repo, "py_bls_traced", {"VRAMD_PYTHON_HOSTING": hosting})
    s = serve(otel_args(collector) + ["--backend-directory", str(PYTHON_BACKEND_DIR)])
    wait_for(lambda: s.client().get("/v2/models/py_bls_traced/ready").status == 200,
             timeout=60, what="py_bls_traced ready")
    c = s.client()
    try:
        r = c.infer("py_bls_traced", [Input("INPUT0", "FP32", np.array([1.0, 2.0], np.float32))],
                    headers={"traceparent": TRACEPARENT})
    finally:
        c.close()
    assert r.outputs["OUTPUT0"].tolist() == [1.0, 2.0]
    context = json.loads(r.outputs["CONTEXT"][0])
    wait_for(lambda: len(collector.named("InferRequest")) >= 2, timeout=20,
             what="the request's and its BLS call's spans")
    time.sleep(0.3)  # the untraced call's span, were there one, would have come by now
    spans = collector.named("InferRequest")
    assert len(spans) == 2, spans  # the call made without trace= is not traced
    by_model = {attributes(x)["model_name"]: x for x in spans}
    parent, child = by_model["py_bls_traced"], by_model["echo"]
    # get_context() names the request's own span, under which the call is traced.
    assert context == {"traceparent": "00-%s-%s-01" % (PARENT_TRACE, parent["spanId"])}
    assert parent["parentSpanId"] == PARENT_SPAN
    assert child["traceId"] == PARENT_TRACE and child["parentSpanId"] == parent["spanId"]
    assert attributes(child)["vramd.protocol"] == "model"
    compute = [x for x in collector.named("compute") if x["parentSpanId"] == child["spanId"]]
    assert len(compute) == 1


@pytest.mark.skipif(not PYTHON_LIBRARY.is_file(), reason="needs the python backend (%s)"
                    % PYTHON_LIBRARY)
def test_triton_mode_bls_child_names_its_parent_id_and_untraced_has_no_context(serve, tmp_path,
                                                                              repo):
    copy_model(pathlib.Path(__file__).resolve().parent / "python_models" / "py_bls_traced",
               repo, "py_bls_traced")
    trace_file = tmp_path / "trace.json"
    s = serve(["--trace-config", "triton,file=%s" % trace_file, "--trace-config",
               "level=TIMESTAMPS", "--trace-config", "rate=2",
               "--backend-directory", str(PYTHON_BACKEND_DIR)])
    wait_for(lambda: s.client().get("/v2/models/py_bls_traced/ready").status == 200,
             timeout=60, what="py_bls_traced ready")
    c = s.client()
    contexts = []
    try:
        for _ in range(2):  # rate 2: the first is not traced, the second is
            r = c.infer("py_bls_traced",
                        [Input("INPUT0", "FP32", np.array([1.0, 2.0], np.float32))])
            contexts.append(r.outputs["CONTEXT"][0])
    finally:
        c.close()
    untraced, traced = contexts
    assert untraced in (b"", ""), untraced  # get_context() was None
    assert json.loads(traced)["traceparent"].startswith("00-")
    s.assert_clean_exit(s.stop())  # the file is written at exit (log_frequency 0)
    entries = json.loads(trace_file.read_text())
    models = {e["model_name"]: e for e in entries if "model_name" in e}
    assert set(models) == {"py_bls_traced", "echo"}, entries
    assert models["py_bls_traced"]["parent_id"] == 0
    assert models["echo"]["parent_id"] == models["py_bls_traced"]["id"]
