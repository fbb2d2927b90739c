"""The python backend end to end: Triton model.py files (tests/e2e/python_models, written as a
Triton user writes them: `import triton_python_backend_utils as pb_utils`, `class
TritonPythonModel`) served by <build>/backends/python/libvramd_python.so, over plain
HTTP. The behaviours are those Triton's own python-backend tests exercise
(/work/shared/reference/python-backend.md, parts 1 and 3).

One server (explicit model control, every model loaded at start) serves the whole module, twice:
with every python model in vramd's process, then with each in a stub (a vramd_backend_host
process of its own; --backend-config=python,default-hosting=stub), so every test runs in both
hosting modes. Where a mode cannot hold a check by nature (the ledger cannot see a stub's numpy
arrays) the test checks that mode's equivalent and says why. The
repository is a copy of python_models in a temp dir, so that Python's bytecode caches and the
models' marker files stay out of the source tree.

Needs libvramd_python.so: VRAMD_PYTHON_BACKEND_DIR (a directory holding python/
libvramd_python.so), else <dir of VRAMD_BIN>/../../backends. Skips when it is missing; the stub
runs need vramd_backend_host beside it.
"""

import concurrent.futures
import http.client
import json
import os
import pathlib
import re
import shutil
import struct
import socket
import threading
import time
import urllib.request

import numpy as np
import pytest

from e2e_helpers import (BACKEND_HOST, PYTHON_BACKEND_DIR, grpc_modules, index_rows, rss_bytes,
                         load_model, model_config, skip_module_without_python_backend, wait_for)
from v2client import Input, InferResult, build_infer_body

HERE = pathlib.Path(__file__).resolve().parent
MODELS = HERE / "python_models"
BACKEND_DIR, HOST = PYTHON_BACKEND_DIR, BACKEND_HOST
skip_module_without_python_backend()

# Models that must fail to load.
BROKEN = {"py_init_error"}
ALL_MODELS = sorted(p.name for p in MODELS.iterdir() if (p / "config.pbtxt").is_file())
READY = [m for m in ALL_MODELS if m not in BROKEN]


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("python-repo")
    dst = root / "models"
    shutil.copytree(MODELS, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dst


@pytest.fixture(scope="module")
def shm_before():
    return set(os.listdir("/dev/shm"))


# Every test runs twice: with the models in vramd's process, and with each in a stub
# (vramd_backend_host; docs/remote-backends.md) through --backend-config's default-hosting.
HOSTINGS = ["in_process", "stub"]


@pytest.fixture(scope="module", params=HOSTINGS)
def py_server(request, start_server, repo, shm_before):
    hosting = request.param
    if hosting == "stub" and not HOST.is_file():
        pytest.skip("no vramd_backend_host at %s" % HOST)
    s = start_server([repo], ["--backend-directory", str(BACKEND_DIR),
                              "--model-control-mode", "explicit", "--load-model", "*",
                              "--http-thread-count", "8",
                              "--http-header-forward-pattern=^x-fwd-",
                              "--grpc-header-forward-pattern=^x-fwd-|tenant",
                              "--backend-config=python,default-hosting=" + hosting],
                     name="python-" + hosting, ready_models=READY)
    s.hosting = hosting
    yield s
    # Stopped here, not at the session's end: the next hosting's server does not share the
    # machine with this one. A stub's host processes end with the server.
    hosts = list(host_processes(s))
    if s.alive():
        code = s.stop()
        s.assert_clean_exit(code)
    wait_for(lambda: not [p for p in hosts if process_alive(p)], timeout=5,
             what=lambda: "host processes outliving the server: %s"
             % [p for p in hosts if process_alive(p)])


@pytest.fixture
def client(py_server):
    c = py_server.client()
    yield c
    c.close()


def bytes_out(result, name):
    """The single element of BYTES output `name`, as bytes."""
    value = result.outputs[name].reshape(-1)[0]
    return value if isinstance(value, bytes) else str(value).encode()


def json_out(result, name):
    return json.loads(bytes_out(result, name).decode())


def post_json(py_server, path, body, timeout=30):
    """POST with urllib; returns (status, parsed JSON or raw text)."""
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (py_server.port, path),
                                 data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, data = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, data = e.code, e.read()
    try:
        return status, json.loads(data)
    except ValueError:
        return status, data.decode(errors="replace")


def int32(v):
    return np.array([v], dtype=np.int32)


def metrics_page(py_server):
    m = re.search(r"metrics listening on [^ ]+:(\d+)", py_server.stderr_text())
    assert m, "no 'metrics listening on' line in the log\n" + py_server.describe()
    with urllib.request.urlopen("http://127.0.0.1:%s/metrics" % m.group(1), timeout=10) as r:
        return r.read().decode()


def metric_value(text, name, labels):
    """The value of the sample `name{...}` whose labels include `labels` (a dict)."""
    for line in text.splitlines():
        if not line.startswith(name + "{") and line.split(" ")[0] != name:
            continue
        head, _, value = line.rpartition(" ")
        got = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', head))
        if head.split("{")[0] == name and all(got.get(k) == v for k, v in labels.items()):
            return float(value)
    return None


def walk(node):
    yield node
    for child in node.get("children", []):
        yield from walk(child)


def memory_report(client):
    r = client.get("/v2/memory")
    assert r.status == 200, r
    return r.json()


def owner_node(report, path):
    for node in walk(report["owners"]):
        if node["path"] == path:
            return node
    return None


def fd_count(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def host_processes(py_server):
    """{pid: model name} of the server's vramd_backend_host children (their argv names the
    stub: "model 'm' version 1 on CPU")."""
    hosts = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open("/proc/%s/cmdline" % entry, "rb") as f:
                argv = f.read().decode(errors="replace")
        except (OSError, IndexError, ValueError):
            continue
        m = re.search(r"model '([^']+)' version", argv)
        if ppid == py_server.proc.pid and m:
            hosts[int(entry)] = m.group(1)
    return hosts


def process_alive(pid):
    """Whether `pid` runs (a zombie or a missing process does not)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def host_of(py_server, model):
    pids = [p for p, m in host_processes(py_server).items() if m == model]
    assert len(pids) == 1, (model, host_processes(py_server))
    return pids[0]


PYTHON_MODELS = [m for m in READY
                 if 'backend: "python"' in (MODELS / m / "config.pbtxt").read_text()]


def test_every_python_model_is_hosted_as_the_server_was_told(py_server):
    hosts = host_processes(py_server)
    if py_server.hosting == "in_process":
        assert hosts == {}, hosts
        return
    # One stub per model (all instances on the CPU share it); none for the built-in identity.
    assert sorted(hosts.values()) == sorted(PYTHON_MODELS), hosts
    assert "bls_identity" not in hosts.values()


# ----------------------------------------------------------------------------------------------
# 1. identity over dtypes and shapes; requested outputs; initialize args


@pytest.mark.parametrize("shape", [(2, 3), (1, 1), (0, 3), (4, 0)])
@pytest.mark.parametrize("binary", [False, True])
def test_identity_every_dtype_and_shape(client, shape, binary):
    rng = np.random.default_rng(7)
    n = int(np.prod(shape))
    fp32 = rng.standard_normal(shape).astype(np.float32)
    int64 = rng.integers(-2**62, 2**62, size=shape, dtype=np.int64)
    boolean = rng.integers(0, 2, size=shape).astype(bool)
    fp16 = rng.standard_normal(shape).astype(np.float16)
    words = np.array([("w%d-\u00e9" % i).encode() for i in range(n)] + [b""],
                     dtype=np.object_)[:n].reshape(shape)
    if n:
        words.reshape(-1)[0] = b""  # an empty element too
    result = client.infer("py_identity", [
        Input("IN_FP32", "FP32", fp32, binary=binary),
        Input("IN_INT64", "INT64", int64, binary=binary),
        Input("IN_BOOL", "BOOL", boolean, binary=binary),
        Input("IN_FP16", "FP16", fp16, binary=True),  # FP16 has no exact JSON form
        Input("IN_BYTES", "BYTES", words, binary=binary),
    ], binary_data_output=True)
    assert sorted(result.outputs) == ["OUT_BOOL", "OUT_BYTES", "OUT_FP16", "OUT_FP32",
                                      "OUT_INT64"]
    for name, want, wire in [("OUT_FP32", fp32, "FP32"), ("OUT_INT64", int64, "INT64"),
                             ("OUT_BOOL", boolean, "BOOL"), ("OUT_FP16", fp16, "FP16")]:
        got = result.outputs[name]
        assert result.output_json[name]["datatype"] == wire
        assert list(result.output_json[name]["shape"]) == list(shape), name
        assert got.dtype == want.dtype, name
        np.testing.assert_array_equal(got, want, err_msg=name)
    assert result.output_json["OUT_BYTES"]["datatype"] == "BYTES"
    assert list(result.output_json["OUT_BYTES"]["shape"]) == list(shape)
    got = [bytes(x) for x in result.outputs["OUT_BYTES"].reshape(-1)]
    assert got == list(words.reshape(-1))


def memfd_mappings(pid):
    with open("/proc/%d/maps" % pid) as f:
        return [ln.strip() for ln in f if "memfd:vramd-remote" in ln]


def test_large_tensors_cross_whole_and_leave_no_segment(py_server, client):
    # 1.2 MB tensors: over a stub's 32 KiB inline limit, so requests, answers, a BLS call and its
    # result each cross in a memfd segment (docs/remote-backends.md); in-process, no copy at all.
    rng = np.random.default_rng(11)
    fp32 = rng.standard_normal((300, 1000)).astype(np.float32)
    words = np.array([b"x" * 1000 + b"%d" % i for i in range(1200)], dtype=np.object_)
    result = client.infer("py_identity", [
        Input("IN_FP32", "FP32", fp32, binary=True),
        Input("IN_INT64", "INT64", np.arange(150000, dtype=np.int64).reshape(1, -1), binary=True),
        Input("IN_BOOL", "BOOL", np.ones((1, 1), bool), binary=True),
        Input("IN_FP16", "FP16", np.ones((1, 1), np.float16), binary=True),
        Input("IN_BYTES", "BYTES", words.reshape(1, -1), binary=True)], binary_data_output=True)
    np.testing.assert_array_equal(result.outputs["OUT_FP32"], fp32)
    np.testing.assert_array_equal(result.outputs["OUT_INT64"].reshape(-1),
                                  np.arange(150000, dtype=np.int64))
    assert [bytes(w) for w in result.outputs["OUT_BYTES"].reshape(-1)] == list(words)
    x = rng.standard_normal(300000).astype(np.float32)
    for target, want in (("bls_identity", x * 2), ("py_add_one", (x + 1) * 2)):
        result = client.infer("py_bls", [Input("IN", "FP32", x, binary=True)],
                              parameters={"target": target}, binary_data_output=True)
        np.testing.assert_array_equal(result.outputs["OUT"], want.astype(np.float32))
    pids = [py_server.proc.pid]
    if py_server.hosting == "stub":
        pids += [host_of(py_server, m) for m in ("py_identity", "py_bls", "py_add_one")]
    wait_for(lambda: not any(memfd_mappings(p) for p in pids), timeout=5,
             what=lambda: "segments unmapped: %s" % {p: memfd_mappings(p) for p in pids})


def test_identity_requested_outputs_subset(client):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    words = np.array([[b"a", b"bb", b"ccc"]], dtype=np.object_)
    inputs = [Input("IN_FP32", "FP32", x), Input("IN_INT64", "INT64", np.ones((1, 2), np.int64)),
              Input("IN_BOOL", "BOOL", np.zeros((1, 1), bool)),
              Input("IN_FP16", "FP16", np.ones((1, 1), np.float16), binary=True),
              Input("IN_BYTES", "BYTES", words)]
    result = client.infer("py_identity", inputs, outputs=[("OUT_FP32", False),
                                                          ("OUT_BYTES", True)])
    assert sorted(result.outputs) == ["OUT_BYTES", "OUT_FP32"]
    np.testing.assert_array_equal(result.outputs["OUT_FP32"], x)
    assert [bytes(v) for v in result.outputs["OUT_BYTES"].reshape(-1)] == [b"a", b"bb", b"ccc"]
    result = client.infer("py_identity", inputs, outputs=["OUT_BOOL"])
    assert list(result.outputs) == ["OUT_BOOL"]
    # An output the model does not have is the client's error.
    r = client.infer_raw("py_identity", inputs, outputs=["NO_SUCH_OUTPUT"])
    assert r.status == 400, r
    assert "NO_SUCH_OUTPUT" in r.error_message()


def test_initialize_args_have_tritons_seven_keys_and_values(client, repo):
    result = client.infer("py_init_args", [Input("IN", "INT32", int32(0))])
    got = json_out(result, "ARGS")
    args, types = got["args"], got["types"]
    assert sorted(args) == sorted(["model_config", "model_instance_kind", "model_instance_name",
                                   "model_instance_device_id", "model_repository",
                                   "model_version", "model_name"])
    assert set(types.values()) == {"str"}, types
    assert args["model_name"] == "py_init_args"
    assert args["model_instance_name"] == "py_init_args_0_0"
    assert args["model_instance_kind"] == "CPU"
    assert args["model_instance_device_id"] == "0"
    assert args["model_version"] == "1"
    assert args["model_repository"] == str(repo / "py_init_args")
    config = json.loads(args["model_config"])
    assert config["name"] == "py_init_args"
    assert config["backend"] == "python"
    assert [i["name"] for i in config["input"]] == ["IN"]
    assert [o["name"] for o in config["output"]] == ["ARGS"]
    assert config["output"][0]["data_type"] == "TYPE_STRING"
    # The config the model got is the config the server serves.
    assert config == model_config(client, "py_init_args")


# ----------------------------------------------------------------------------------------------
# 2. optional inputs


def test_optional_inputs_reach_the_model_only_when_sent(client):
    x = np.array([1, 2], dtype=np.float32)
    cases = [
        ([Input("INPUT0", "FP32", x)], ["INPUT0"], 3.0),
        ([Input("INPUT0", "FP32", x), Input("OPT1", "FP32", np.array([10], np.float32))],
         ["INPUT0", "OPT1"], 13.0),
        ([Input("INPUT0", "FP32", x), Input("OPT2", "INT32", np.array([100, 1], np.int32))],
         ["INPUT0", "OPT2"], 104.0),
        ([Input("OPT2", "INT32", np.array([5], np.int32)), Input("INPUT0", "FP32", x),
          Input("OPT1", "FP32", np.array([0.5], np.float32))], ["INPUT0", "OPT1", "OPT2"], 8.5),
    ]
    for inputs, present, total in cases:
        result = client.infer("py_optional", inputs)
        assert json_out(result, "PRESENT") == present
        assert result.outputs["SUM"].tolist() == [total]
    # The required input is still required.
    r = client.infer_raw("py_optional", [Input("OPT1", "FP32", np.array([1], np.float32))])
    assert r.status == 400, r
    assert "INPUT0" in r.error_message()


# ----------------------------------------------------------------------------------------------
# 3. request and response parameters


def test_request_parameters_reach_the_model_and_response_parameters_come_back(client):
    params = {"an_int": 42, "a_bool": True, "a_string": "hello world", "negative": -7}
    result = client.infer("py_params", [Input("IN", "INT32", int32(1))], parameters=params)
    assert bytes_out(result, "PARAMS_TYPE") == b"str"
    got = json.loads(bytes_out(result, "PARAMS").decode())
    assert got == params
    assert isinstance(got["an_int"], int) and got["a_bool"] is True
    assert result.json.get("parameters") == {"echo_count": 4, "model_says": "hello",
                                             "flag": True}
    # No parameters: an empty JSON object.
    result = client.infer("py_params", [Input("IN", "INT32", int32(1))])
    assert json.loads(bytes_out(result, "PARAMS").decode()) == {}
    assert result.json.get("parameters", {}).get("echo_count") == 0


def test_forwarded_headers_reach_the_model_as_parameters(client, py_server):
    # --http-header-forward-pattern=^x-fwd- (without case): the matching headers, named as
    # sent, after the request's own parameters; others are not forwarded.
    # A byte that is not UTF-8 (http.client sends "é" as Latin-1's 0xE9) reaches the model as
    # U+FFFD: parameters are text, and the model's json.loads must not fail on them.
    r = client.infer_raw("py_params", [Input("IN", "INT32", int32(1))], parameters={"p": 1},
                         headers={"X-Fwd-User": "alice", "x-fwd-trace": "t1", "X-Other": "no",
                                  "X-Fwd-Name": "caf\u00e9"})
    assert r.status == 200, r
    got = json.loads(bytes_out(InferResult(r), "PARAMS").decode())
    assert got == {"p": 1, "X-Fwd-User": "alice", "x-fwd-trace": "t1",
                   "X-Fwd-Name": "caf\ufffd"}
    # --grpc-header-forward-pattern=^x-fwd-|tenant: the call's metadata (keys in lowercase).
    grpc, pb, pb_grpc = grpc_modules()
    req = pb.ModelInferRequest(model_name="py_params")
    req.inputs.add(name="IN", datatype="INT32", shape=[1])
    req.raw_input_contents.append(int32(1).tobytes())
    req.parameters["p"].int64_param = 2
    with grpc.insecure_channel("127.0.0.1:%d" % py_server.grpc_port()) as ch:
        stub = pb_grpc.GRPCInferenceServiceStub(ch)
        md = [("x-fwd-user", "bob"), ("my-tenant-id", "t7"), ("x-other", "no"),
              ("x-fwd-raw-bin", b"\xff\x00z")]
        out = stub.ModelInfer(req, metadata=md, timeout=60)
        streamed = list(stub.ModelStreamInfer(iter([req]), metadata=md, timeout=60))
    for answer in (out, streamed[0].infer_response):
        raw = answer.raw_output_contents[0]
        got = json.loads(raw[4:4 + struct.unpack("<I", raw[:4])[0]].decode())
        assert got == {"p": 2, "x-fwd-user": "bob", "my-tenant-id": "t7",
                       "x-fwd-raw-bin": "\ufffd\x00z"}


def test_grpc_request_parameters_of_every_kind_reach_the_model(py_server):
    # InferParameter's five kinds as request.parameters() gives them (JSON): a uint64 past
    # int64's range stays exact, a double stays a double.
    grpc, pb, pb_grpc = grpc_modules()
    req = pb.ModelInferRequest(model_name="py_params")
    req.inputs.add(name="IN", datatype="INT32", shape=[1])
    req.raw_input_contents.append(int32(1).tobytes())
    req.parameters["b"].bool_param = True
    req.parameters["i"].int64_param = -(2**63)
    req.parameters["u"].uint64_param = 2**64 - 1
    req.parameters["d"].double_param = 0.1
    req.parameters["s"].string_param = "caf\u00e9 \"quoted\"\n"
    with grpc.insecure_channel("127.0.0.1:%d" % py_server.grpc_port()) as ch:
        out = pb_grpc.GRPCInferenceServiceStub(ch).ModelInfer(req, timeout=60)
    raw = out.raw_output_contents[0]
    got = json.loads(raw[4:4 + struct.unpack("<I", raw[:4])[0]].decode())
    assert got == {"b": True, "i": -(2**63), "u": 2**64 - 1, "d": 0.1,
                   "s": "caf\u00e9 \"quoted\"\n"}
    assert isinstance(got["d"], float) and isinstance(got["u"], int)
    # The response's parameters come back as InferParameters of their kinds.
    assert out.parameters["echo_count"].int64_param == 5
    assert out.parameters["model_says"].string_param == "hello"
    assert out.parameters["flag"].bool_param is True


# ----------------------------------------------------------------------------------------------
# 4. errors in every phase


def test_initialize_raising_fails_the_load_with_the_exception_text(client):
    rows = index_rows(client, "py_init_error")
    assert rows, "py_init_error is missing from the index"
    assert all(row["state"] == "UNAVAILABLE" for row in rows), rows
    assert any("initialize exploded (token 7f3a9)" in row["reason"] for row in rows), rows
    r = client.get("/v2/models/py_init_error/ready")
    assert r.status != 200
    # A load request gets the same text.
    r = load_model(client, "py_init_error")
    assert r.status >= 400, r
    message = r.error_message()
    assert "initialize exploded (token 7f3a9)" in message, message
    assert "ValueError" in message, message
    # The server still serves.
    result = client.infer("py_exec_error", [Input("IN", "INT32", int32(3))])
    assert result.outputs["OUT"].tolist() == [3]


def test_execute_raising_fails_that_request_only(client):
    r = client.infer_raw("py_exec_error", [Input("IN", "INT32", int32(-5))])
    assert r.status == 500, r
    message = r.error_message()
    assert "RuntimeError: py_exec_error: execute exploded on -5" in message, message
    for v in (1, 2, 3):
        result = client.infer("py_exec_error", [Input("IN", "INT32", int32(v))])
        assert result.outputs["OUT"].tolist() == [v]
    r = client.infer_raw("py_exec_error", [Input("IN", "INT32", int32(-6))])
    assert r.status == 500 and "execute exploded on -6" in r.error_message(), r
    assert client.get("/v2/models/py_exec_error/ready").status == 200


# IN value -> (TritonError code name, HTTP status)
BATCH_ERRORS = {1: ("INVALID_ARG", 400), 2: ("NOT_FOUND", 404), 3: ("UNAVAILABLE", 503),
                4: ("UNSUPPORTED", 501), 5: ("INTERNAL", 500)}


def test_per_request_error_inside_a_dynamic_batch(py_server):
    values = [0, 1, 0, 2, 3, 0, 4, 5]
    barrier = threading.Barrier(len(values))

    def send(v):
        c = py_server.client()
        try:
            c.get("/v2/health/live")  # connect first, so the requests leave together
            barrier.wait(10)
            return v, c.infer_raw("py_batch_error", [Input("IN", "INT32", np.array([[v]],
                                                                                 np.int32))])
        finally:
            c.close()

    with concurrent.futures.ThreadPoolExecutor(len(values)) as pool:
        answers = list(pool.map(send, values))
    batches = []
    for v, r in answers:
        if v == 0:
            assert r.status == 200, r
            result = InferResult(r)
            assert result.outputs["OUT"].tolist() == [[0]]
            batches.append(int(result.outputs["BATCH"].reshape(-1)[0]))
        else:
            code, status = BATCH_ERRORS[v]
            assert r.status == status, (code, r)
            assert "py_batch_error: request %d refused" % v in r.error_message(), r
    # The successes shared an execute with the failures.
    assert max(batches) >= 2, "no two requests were batched: %s" % batches


@pytest.mark.parametrize("mode,message", [
    (0, "Expected a list in the execute return, found type '<class 'str'>'."),
    (1, "Number of InferenceResponse objects do not match the number of InferenceRequest "
        "objects. InferenceRequest(s) size is:1, and InferenceResponse(s) size is:2"),
    (2, "Expected an 'InferenceResponse' object in the execute function return list, found "
        "type '<class 'str'>'."),
])
def test_wrong_return_from_execute_gives_tritons_message(client, mode, message):
    # The type is written as Triton's stub writes it: py::str(obj.get_type()), "<class 'str'>".
    r = client.infer_raw("py_bad_return", [Input("IN", "INT32", int32(mode))])
    assert r.status == 500, r
    assert message in r.error_message(), r
    # The instance survives it.
    result = client.infer("py_bad_return", [Input("IN", "INT32", int32(3))])
    assert result.outputs["OUT"].tolist() == [3]


def test_finalize_raising_does_not_fail_the_unload(py_server, client):
    result = client.infer("py_finalize_error", [Input("IN", "INT32", int32(9))])
    assert result.outputs["OUT"].tolist() == [9]
    stub = py_server.hosting == "stub"
    if stub:
        host = host_of(py_server, "py_finalize_error")
    r = client.post("/v2/repository/models/py_finalize_error/unload", b"",
                    {"Content-Type": "application/json"})
    assert r.status == 200, r
    wait_for(lambda: client.get("/v2/models/py_finalize_error/ready").status != 200,
             what="py_finalize_error to unload")
    wait_for(lambda: "finalize exploded (token c41e)" in py_server.log(), timeout=5,
             what="finalize's exception in the log")
    assert py_server.alive()
    if stub:
        # The unload ended the model's host (finalize ran in it, and raised).
        wait_for(lambda: not process_alive(host), timeout=5, what="the unloaded stub to exit")
        assert "py_finalize_error" not in host_processes(py_server).values()
    # It loads again, and serves.
    r = load_model(client, "py_finalize_error")
    assert r.status == 200, r
    result = client.infer("py_finalize_error", [Input("IN", "INT32", int32(4))])
    assert result.outputs["OUT"].tolist() == [4]
    if stub:
        assert host_of(py_server, "py_finalize_error") != host


# ----------------------------------------------------------------------------------------------
# 5. decoupled models through generate_stream


def generate_stream(py_server, model, body, timeout=30):
    """POST /v2/models/<model>/generate_stream; returns (status, content type, [event JSON])."""
    conn = http.client.HTTPConnection("127.0.0.1", py_server.port, timeout=timeout)
    try:
        conn.request("POST", "/v2/models/%s/generate_stream" % model, json.dumps(body),
                     {"Content-Type": "application/json"})
        r = conn.getresponse()
        data = r.read().decode()
        ctype = r.getheader("Content-Type", "")
        if r.status != 200:
            return r.status, ctype, data
    finally:
        conn.close()
    events = []
    for block in data.split("\n\n"):
        if not block.strip():
            continue
        lines = [ln for ln in block.split("\n") if ln.startswith("data:")]
        assert len(lines) == 1, "not one data line in the event %r" % block
        events.append(json.loads(lines[0][len("data:"):].strip()))
    return 200, ctype, events


@pytest.mark.parametrize("count", [1, 5])
def test_decoupled_responses_are_sse_events(py_server, count):
    status, ctype, events = generate_stream(py_server, "py_decoupled", {"COUNT": count})
    assert status == 200, events
    assert ctype.startswith("text/event-stream"), ctype
    assert [e["OUT"] for e in events] == list(range(count)), events
    assert [e["WORD"] for e in events] == ["w%d" % i for i in range(count)]
    assert all(e["model_name"] == "py_decoupled" for e in events)


def test_decoupled_zero_responses_then_final(py_server):
    status, _, events = generate_stream(py_server, "py_decoupled", {"COUNT": 0})
    assert status == 200 and events == [], events


def test_decoupled_model_refused_on_infer(client):
    r = client.infer_raw("py_decoupled", [Input("COUNT", "INT32", int32(2))])
    assert r.status == 501, r
    assert "decoupled" in r.error_message()


def test_decoupled_response_sender_from_a_thread_after_execute_returned(py_server):
    status, _, events = generate_stream(py_server, "py_decoupled_thread", {"COUNT": 4})
    assert status == 200, events
    assert [e["OUT"] for e in events] == [100, 101, 102, 103], events
    assert all(e["AFTER_RETURN"] is True for e in events), events
    # Two streams at once, each with its own sender.
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        got = list(pool.map(lambda n: generate_stream(py_server, "py_decoupled_thread",
                                                      {"COUNT": n}), [2, 3]))
    assert [[e["OUT"] for e in g[2]] for g in got] == [[100, 101], [100, 101, 102]]


# ----------------------------------------------------------------------------------------------
# 6. BLS


def test_bls_calls_the_builtin_identity(client):
    x = np.array([1.5, -2.0, 3.25], dtype=np.float32)
    result = client.infer("py_bls", [Input("IN", "FP32", x)])
    np.testing.assert_array_equal(result.outputs["OUT"], x * 2)


def test_bls_calls_another_python_model(client):
    x = np.array([1.0, 2.0], dtype=np.float32)
    result = client.infer("py_bls", [Input("IN", "FP32", x)],
                          parameters={"target": "py_add_one"})
    np.testing.assert_array_equal(result.outputs["OUT"], (x + 1) * 2)


def test_bls_reads_the_callers_inputs_in_place(py_server, client):
    """exec() waits for its answer while the caller holds its request, so the called model
    reads the caller's array where it is (in-process); exec(decoupled=True) may outlive the
    request object, so its inputs are copied. A host's call crosses the IPC either way. Outputs
    a CPU model made are host tensors whatever the preferred memory (Triton's default keeps them
    where the model left them)."""
    got = json_out(client.infer("py_bls_inplace", [Input("IN", "INT32", int32(1000))]),
                   "RESULT")
    want = float(sum(range(1000)))
    for how in ("exec", "decoupled"):
        assert got[how]["sum"] == want, got
        assert got[how]["on_cpu"] is True, got
    assert got["decoupled"]["ptr"] != got["mine"], got
    if py_server.hosting == "in_process":
        assert got["exec"]["ptr"] == got["mine"], got
    else:
        assert got["exec"]["ptr"] != got["mine"], got


def test_an_answer_made_of_a_lent_input_outlives_the_lender(client):
    """exec() lends the caller's array for the call; identity answers with its input's memory
    where vramd keeps it, so here vramd copies it: the caller overwriting its array after the
    call does not change the answer it holds."""
    n = 1 << 18  # 1 MiB: above the size the server's pool takes outputs from
    result = client.infer("py_bls_lent", [Input("IN", "INT32", int32(n))])
    np.testing.assert_array_equal(result.outputs["OUT"], np.arange(n, dtype=np.float32))


def test_bls_to_a_missing_model_is_an_error_response(client):
    r = client.infer_raw("py_bls", [Input("IN", "FP32", np.zeros(1, np.float32))],
                         parameters={"target": "no_such_model_here"})
    assert r.status == 500, r
    message = r.error_message()
    assert "BLS to no_such_model_here failed: " in message, message
    # The error the BLS call got names the model it could not find.
    assert "no_such_model_here" in message.split("failed: ", 1)[1], message


def test_async_bls(client):
    x = np.array([0.5, 4.0, -1.0], dtype=np.float32)
    result = client.infer("py_bls_async", [Input("IN", "FP32", x)])
    np.testing.assert_array_equal(result.outputs["OUT_IDENTITY"], x)
    np.testing.assert_array_equal(result.outputs["OUT_ADD_ONE"], x + 1)


def test_bls_outside_execute_raises(client):
    result = client.infer("py_bls_init", [Input("IN", "INT32", int32(0))])
    raised = json_out(result, "RAISED")
    assert raised["type"] is not None, "BLS in initialize did not raise"
    assert raised["message"] == "BLS is only supported during the 'execute' function.", raised


def test_decoupled_bls_iterates_the_called_models_responses(client):
    for count in (0, 3):
        result = client.infer("py_bls_decoupled", [Input("IN", "INT32", int32(count))],
                              binary_data_output=True)
        assert result.outputs["OUT"].tolist() == list(range(count))
        assert [bytes(w) for w in result.outputs["WORDS"].reshape(-1)] == \
            [b"w%d" % i for i in range(count)]
        assert result.outputs["FINAL_ONLY"].tolist()[0] in (0, 1)


def test_bls_decoupled_cancel(client):
    """ResponseIterator.cancel() cancels the called model's request: py_slow_stream sees
    is_cancelled() and ends with its CANCELLED error long before its 200 responses (2 s); the
    iterator still runs to the final response. Without cancel() all 5 of a short stream come."""
    t0 = time.monotonic()
    got = json_out(client.infer("py_bls_cancel", [Input("IN", "INT32", int32(3))]), "RESULT")
    elapsed = time.monotonic() - t0
    assert got["outs"][:3] == [0, 1, 2], got
    # The cancel is seen at the next response at the latest (one may be on its way).
    assert len(got["outs"]) <= 5, got
    assert got["error"] and "cancelled after" in got["error"], got
    assert elapsed < 1.5, "took %.2f s: the stream was not cancelled" % elapsed
    plain = json_out(client.infer("py_bls_cancel", [Input("IN", "INT32", int32(0))]), "RESULT")
    assert plain == {"outs": [0, 1, 2, 3, 4], "error": None}, plain


def test_model_control_from_a_model(py_server, client):
    assert client.get("/v2/models/py_ctl_target/ready").status == 200
    if py_server.hosting == "stub":
        target_host = host_of(py_server, "py_ctl_target")
        caller_host = host_of(py_server, "py_model_control")
    steps = dict(json_out(client.infer("py_model_control", [Input("IN", "INT32", int32(0))]),
                          "STEPS"))
    assert steps["ready"] == {"value": True}, steps
    assert steps["ready_v1"] == {"value": True}, steps
    assert steps["ready_v7"] == {"value": False}, steps
    assert steps["ready_bad_version"]["raised"], steps
    assert "'one' is not a number" in steps["ready_bad_version"]["message"], steps
    assert steps["unload"] == {"value": None}, steps
    assert steps["not_ready_after_unload"] is True, steps
    assert steps["load"] == {"value": None}, steps
    assert steps["ready_after_load"] is True, steps
    assert steps["load_missing"]["raised"], steps
    assert "no_such_model_ctl" in steps["load_missing"]["message"], steps
    assert steps["ready_missing"] == {"value": False}, steps
    # load_model(files=): the model loads from the files it was given, which no repository
    # holds, and serves; what Triton refuses is refused, naming the fault.
    assert steps["load_files"] == {"value": None}, steps
    assert steps["files_ready"] is True, steps
    assert "need a 'config' parameter" in steps["files_without_config"]["message"], steps
    assert "must start with 'file:'" in steps["files_bad_key"]["message"], steps
    assert "must be bytes" in steps["files_not_bytes"]["message"], steps
    assert "../outside.py" in steps["files_escape"]["message"], steps
    result = client.infer("py_from_files", [Input("IN", "INT32", int32(7))])
    assert result.outputs["OUT"].tolist() == [21]
    r = client.post("/v2/repository/models/py_from_files/unload", b"",
                    {"Content-Type": "application/json"})
    assert r.status == 200, r.body
    # The model it loaded again serves.
    assert client.get("/v2/models/py_ctl_target/ready").status == 200
    result = client.infer("py_ctl_target", [Input("IN", "INT32", int32(5))])
    assert result.outputs["OUT"].tolist() == [5]
    if py_server.hosting == "stub":
        # The calls went from one host to the server, which ended the target's host and
        # started another; the caller's host stayed.
        assert not process_alive(target_host)
        assert host_of(py_server, "py_ctl_target") != target_host
        assert host_of(py_server, "py_model_control") == caller_host


# ----------------------------------------------------------------------------------------------
# 7. custom metrics


def test_custom_metrics_on_the_metrics_endpoint(py_server, client):
    values = [0.5, 3.0, 7.0, 20.0]
    for v in values:
        result = client.infer("py_metrics", [Input("IN", "FP64", np.array([v]))])
    assert result.outputs["COUNTER_VALUE"].tolist() == [sum(values)]
    misuse = json_out(result, "MISUSE")
    for what, outcome in misuse.items():
        assert outcome["raised"], "%s did not raise" % what
        assert not outcome.get("not_model_exception"), (what, outcome)
    labels = {"model": "py_metrics", "test": "e2e"}
    text = metrics_page(py_server)
    assert "# TYPE py_e2e_requests_total counter" in text, text[-3000:]
    assert "# TYPE py_e2e_last_input gauge" in text
    assert "# TYPE py_e2e_input_histogram histogram" in text
    assert "# HELP py_e2e_requests_total Sum of the inputs seen" in text
    assert metric_value(text, "py_e2e_requests_total", labels) == sum(values)
    assert metric_value(text, "py_e2e_last_input", labels) == 20.0
    assert metric_value(text, "py_e2e_input_histogram_count", labels) == 4
    assert metric_value(text, "py_e2e_input_histogram_sum", labels) == sum(values)
    for le, n in [("1", 1), ("5", 2), ("10", 3), ("+Inf", 4)]:
        got = metric_value(text, "py_e2e_input_histogram_bucket", dict(labels, le=le))
        if got is None and le != "+Inf":  # Prometheus clients may write 1.0 for 1
            got = metric_value(text, "py_e2e_input_histogram_bucket", dict(labels, le=le + ".0"))
        assert got == n, (le, got)


# ----------------------------------------------------------------------------------------------
# 8. async def execute


def test_async_execute_runs_to_completion(py_server, client):
    x = np.array([1, -2, 3], dtype=np.int64)
    result = client.infer("py_async", [Input("IN", "INT64", x)])
    assert result.outputs["OUT"].tolist() == [3, -6, 9]
    assert result.outputs["LOOP_RUNNING"].tolist() == [True]

    def one(v):
        c = py_server.client()
        try:
            return c.infer("py_async", [Input("IN", "INT64", np.array([v], np.int64))]) \
                .outputs["OUT"].tolist()
        finally:
            c.close()

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        assert list(pool.map(one, range(8))) == [[3 * v] for v in range(8)]


# ----------------------------------------------------------------------------------------------
# 9. cancellation


def raw_post(path, body, headers):
    head = "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n" % (path, len(body))
    head += "".join("%s: %s\r\n" % kv for kv in headers.items()) + "\r\n"
    return head.encode() + body


def test_client_closing_early_cancels_the_request(py_server, tmp_path):
    marker_dir = tmp_path / "markers"
    marker_dir.mkdir()
    tag = "c1"
    body, headers = build_infer_body([Input("IN", "INT32", int32(1))],
                                     parameters={"marker_dir": str(marker_dir), "tag": tag})
    sock = socket.create_connection(("127.0.0.1", py_server.port), timeout=10)
    sock.sendall(raw_post("/v2/models/py_cancel/infer", body, headers))
    wait_for(lambda: (marker_dir / (tag + ".started")).exists(), timeout=10,
             what="the model to start executing")
    sock.close()
    t0 = time.monotonic()
    wait_for(lambda: any((marker_dir / (tag + s)).exists() for s in (".cancelled", ".timeout")),
             timeout=15, what="the model to end its loop")
    assert (marker_dir / (tag + ".cancelled")).exists(), (
        "the model polled is_cancelled() for 10 s and never saw the closed connection")
    assert time.monotonic() - t0 < 5
    assert float((marker_dir / (tag + ".cancelled")).read_text()) < 5.0
    # A request whose connection stays open is not cancelled; closing it cancels it too.
    body2, headers2 = build_infer_body([Input("IN", "INT32", int32(2))],
                                       parameters={"marker_dir": str(marker_dir), "tag": "c2"})
    sock2 = socket.create_connection(("127.0.0.1", py_server.port), timeout=15)
    try:
        sock2.sendall(raw_post("/v2/models/py_cancel/infer", body2, headers2))
        wait_for(lambda: (marker_dir / "c2.started").exists(), timeout=10,
                 what="the second request to start")
        time.sleep(0.5)
        assert not (marker_dir / "c2.cancelled").exists(), "an open connection was cancelled"
    finally:
        sock2.close()
    wait_for(lambda: (marker_dir / "c2.cancelled").exists(), timeout=5,
             what="the second request to be cancelled when its connection closed")


# ----------------------------------------------------------------------------------------------
# 10. model-local modules


def test_two_models_each_import_their_own_util(py_server):
    def which(model):
        c = py_server.client()
        try:
            return bytes_out(c.infer(model, [Input("IN", "INT32", int32(0))]), "WHICH").decode()
        finally:
            c.close()

    a, b = which("py_util_a"), which("py_util_b")
    assert a.split("|")[0] == "util-of-model-a", a
    assert b.split("|")[0] == "util-of-model-b", b
    assert a.split("|")[1].startswith("a:") and b.split("|")[1].startswith("b:")
    assert a.split("|")[1][2:] != b.split("|")[1][2:], "both utils have one module name"
    # Interleaved, still each its own.
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        got = list(pool.map(which, ["py_util_a", "py_util_b"] * 4))
    assert [g.split("|")[0] for g in got] == ["util-of-model-a", "util-of-model-b"] * 4


def test_relative_import_of_a_sibling_module(client):
    result = client.infer("py_relative", [Input("IN", "INT32", np.array([1, 2, 3], np.int32))])
    assert result.outputs["OUT"].tolist() == [2, 4, 6]
    assert bytes_out(result, "TAG") == b"relative-helper"


# ----------------------------------------------------------------------------------------------
# 11. logging


def test_logger_lines_appear_in_the_server_log(py_server, client):
    token = "tok-%d" % os.getpid()
    client.infer("py_logger", [Input("TEXT", "BYTES", np.array([token.encode()],
                                                               dtype=np.object_))])
    want = ["py_logger info " + token, "py_logger warning " + token, "py_logger error " + token,
            "py_logger via-log " + token]
    wait_for(lambda: all(w in py_server.log() for w in want), timeout=5,
             what=lambda: "the logger lines; log tail:\n" + py_server.log()[-2000:])
    assert "py_logger initialized as py_logger_0_0" in py_server.log()
    # Each at its level: "<date> <time> <level> [backend python] python model 'py_logger'
    # (model.py:<line>): <message>".
    for level, text in [("info", want[0]), ("warning", want[1]), ("error", want[2]),
                        ("info", want[3])]:
        lines = [ln for ln in py_server.log().splitlines() if ln.endswith(text)]
        assert len(lines) == 1, (text, lines)
        assert re.match(r"^\S+ \S+ %s .*py_logger.*\(model\.py:\d+\): %s$"
                        % (level, re.escape(text)), lines[0]), lines[0]


# ----------------------------------------------------------------------------------------------
# 12. many requests, 10% raising: no shm, fd or ledger leftovers


def test_ten_thousand_requests_leave_nothing_behind(py_server, shm_before):
    # The processes whose descriptors are counted: the server's, and in stub mode py_stress's
    # host too (its memfd segments and socket are the stub's equivalent of Triton's shm).
    pids = [py_server.proc.pid]
    if py_server.hosting == "stub":
        pids.append(host_of(py_server, "py_stress"))

    def fds():
        return sum(fd_count(p) for p in pids)

    def fd_targets():
        return {p: sorted(os.readlink("/proc/%d/fd/%s" % (p, f))
                          for f in os.listdir("/proc/%d/fd" % p)) for p in pids}
    model_path = "server/model:py_stress"

    def body_for(v):
        return build_infer_body([Input("IN", "INT32", int32(v), binary=True)],
                                binary_data_output=True)

    # One connection for the memory reports, open across both fd counts.
    mc = py_server.client()
    mc.get("/v2/health/live")
    # Warm up (first exception, first traceback) on one connection, then take the baselines.
    c = py_server.client()
    for v in range(1, 21):
        b, h = body_for(v)
        r = c.post("/v2/models/py_stress/infer", b, h)
        assert r.status == (500 if v % 10 == 0 else 200), r
    c.close()
    time.sleep(0.2)
    fds_before = fds()
    report = memory_report(mc)
    node = owner_node(report, model_path)
    assert node is not None, "no ledger owner %s" % model_path
    live_before = (node["subtree_live_bytes"], node["subtree_live_count"])

    total, threads = 10000, 8
    per_thread = total // threads
    failures = []

    def worker(t):
        conn = http.client.HTTPConnection("127.0.0.1", py_server.port, timeout=30)
        ok = errors = 0
        try:
            for i in range(per_thread):
                v = t * per_thread + i
                b, h = body_for(v)
                conn.request("POST", "/v2/models/py_stress/infer", b, h)
                r = conn.getresponse()
                data = r.read()
                if v % 10 == 0:
                    if r.status != 500 or b"is a multiple of 10" not in data:
                        failures.append((v, r.status, data[:200]))
                    errors += 1
                else:
                    n = int(r.getheader("Inference-Header-Content-Length"))
                    out = np.frombuffer(data[n:], dtype="<i4")
                    if r.status != 200 or out.tolist() != [v + 1]:
                        failures.append((v, r.status, data[:200]))
                    ok += 1
        finally:
            conn.close()
        return ok, errors

    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        counts = list(pool.map(worker, range(threads)))
    elapsed = time.monotonic() - t0
    assert not failures, failures[:5]
    assert sum(o for o, _ in counts) == 9000 and sum(e for _, e in counts) == 1000
    assert elapsed < 60, "10,000 requests took %.1f s" % elapsed

    # /dev/shm: nothing new.
    new_shm = set(os.listdir("/dev/shm")) - shm_before
    assert not new_shm, "new /dev/shm entries: %s" % sorted(new_shm)
    # File descriptors: back to the baseline once the connections are gone.
    try:
        wait_for(lambda: abs(fds() - fds_before) <= 2, timeout=5)
    except AssertionError:
        raise AssertionError("fds: %d before, %d after: %s" % (fds_before, fds(), fd_targets()))
    # No memfd segment is kept by either side of a stub (none by the server in-process either).
    memfds = {p: [t for t in ts if t.startswith("/memfd:")] for p, ts in fd_targets().items()}
    assert not any(memfds.values()), memfds
    for p in pids:
        with open("/proc/%d/maps" % p) as f:
            mapped = [ln for ln in f if "memfd:vramd-remote" in ln]
        assert not mapped, (p, mapped[:5])
    if py_server.hosting == "stub":
        # The same host served them all: no restart hid a leak.
        assert host_of(py_server, "py_stress") == pids[1]
    # The ledger: nothing left for the model's requests. A request's owner closes once its reply
    # has been written, which the server learns after the client may already have read it: the
    # last ones get a moment (CI's loaded run saw the last request's owner still open).
    def settled():
        report = memory_report(mc)
        node = owner_node(report, model_path)
        requests = [n["path"] for n in walk(node) if n["kind"] == "request"]
        done = not requests and \
            (node["subtree_live_bytes"], node["subtree_live_count"]) == live_before
        return report if done else None
    try:
        report = wait_for(settled, timeout=5, what="the requests' owners to close")
    except AssertionError:
        report = memory_report(mc)
        node = owner_node(report, model_path)
        requests_left = [n["path"] for n in walk(node) if n["kind"] == "request"]
        raise AssertionError("left after 5 s: %s, live %s (before %s)" % (
            requests_left[:10], (node["subtree_live_bytes"], node["subtree_live_count"]),
            live_before))
    leaks = [leak for leak in report["leaks"] if leak["owner"].startswith(model_path + "/")]
    assert not leaks, leaks[:3]
    mc.close()
    assert py_server.alive()


# ----------------------------------------------------------------------------------------------
# 13. growth of a model that keeps its outputs


# numpy's arrays are charged to the request that made them (src/backends/python/numpy_ledger.h):
# one kept in self.history outlives its request, is filed as that request's leak, and raises the
# instance's live bytes request after request; the growth detector flags the instance after
# --memory-growth-requests (16 by default) consecutive rises.
GROWTH_LINE = (r"memory growth: server/model:{}/version:1/instance:(\S+) rose on (\d+) "
               r"consecutive requests")
ARRAY_BYTES = 64 * 1024 * 4


def warm_up_host(client, model):
    """A host's resident memory rises by ~6 MiB over its first ~30 requests (malloc's arenas,
    the interpreter's caches), then stays flat: measured after these."""
    for v in range(40):
        client.infer(model, [Input("IN", "INT32", int32(v))])


def model_leaks(report, model):
    return [leak for leak in report["leaks"]
            if leak["owner"].startswith("server/model:%s/" % model)]


def test_growth_of_a_model_keeping_its_outputs_is_reported(py_server, client):
    stub = py_server.hosting == "stub"
    if stub:
        host = host_of(py_server, "py_leaky")
        warm_up_host(client, "py_leaky")
        rss_before = rss_bytes(host)
    for v in range(40):
        result = client.infer("py_leaky", [Input("IN", "INT32", int32(v))])
        assert result.outputs["OUT"].shape == (64 * 1024,)
        assert result.outputs["OUT"][0] == v
    report = memory_report(client)
    if stub:
        # What a stub does not give (docs/remote-backends.md, "Memory"): numpy's arrays live in
        # the host's own malloc, outside vramd's ledger. The 40 kept arrays (10 MiB) show only as
        # the host's resident memory; the ledger has nothing under the model, no leak names a
        # request, and the growth detector, which reads the ledger, says nothing.
        assert rss_bytes(host) - rss_before >= 40 * ARRAY_BYTES * 0.9, (rss_before,
                                                                         rss_bytes(host))
        node = owner_node(report, "server/model:py_leaky")
        assert node is not None and node["subtree_live_bytes"] == 0, node
        assert not model_leaks(report, "py_leaky"), model_leaks(report, "py_leaky")[:3]
        time.sleep(0.2)
        assert not re.search(GROWTH_LINE.format("py_leaky"), py_server.log())
        return
    node = owner_node(report, "server/model:py_leaky")
    assert node is not None
    assert node["subtree_live_bytes"] >= 40 * ARRAY_BYTES, node
    # Each kept array is its request's leak, named down to the request.
    leaks = model_leaks(report, "py_leaky")
    named = [leak for leak in leaks
             if re.fullmatch(r"server/model:py_leaky/version:1/instance:[^/]+/request:[^/]+",
                             leak["owner"]) and leak["bytes"] >= ARRAY_BYTES]
    assert len(named) >= 40, leaks[:3]
    wait_for(lambda: re.search(GROWTH_LINE.format("py_leaky"), py_server.log()), timeout=3,
             what="a memory growth warning for py_leaky")
    m = re.search(GROWTH_LINE.format("py_leaky"), py_server.log())
    assert m.group(1).startswith("py_leaky_"), m.group(0)
    assert int(m.group(2)) >= 16, m.group(0)


def test_the_same_model_without_the_history_is_not_reported(py_server, client):
    path = "server/model:py_no_history"
    before = owner_node(memory_report(client), path)
    if py_server.hosting == "stub":
        host = host_of(py_server, "py_no_history")
        warm_up_host(client, "py_no_history")
        rss_before = rss_bytes(host)
    for v in range(40):
        result = client.infer("py_no_history", [Input("IN", "INT32", int32(v))])
        assert result.outputs["OUT"][0] == v
    report = memory_report(client)
    if py_server.hosting == "stub":
        # The stub's equivalent: its host does not keep the arrays (py_leaky's rose >= 9 MiB).
        assert rss_bytes(host) - rss_before < 8 * ARRAY_BYTES, (rss_before, rss_bytes(host))
    assert not model_leaks(report, "py_no_history"), model_leaks(report, "py_no_history")[:3]
    node = owner_node(report, path)
    assert node["subtree_live_bytes"] == before["subtree_live_bytes"], (before, node)
    assert not [n["path"] for n in walk(node) if n["kind"] == "request"]
    # The growth warning for py_leaky (above, same server) shows the log is being read.
    assert not re.search(GROWTH_LINE.format("py_no_history"), py_server.log())
