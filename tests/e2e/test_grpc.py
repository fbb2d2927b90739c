"""The gRPC front end (src/server/grpc/, Triton's inference.GRPCInferenceService) end to end,
with python3-grpcio and the stubs the build generates from vramd's own grpc_service.proto
(<build>/python, or VRAMD_GRPC_PYTHON_DIR): every RPC served, the typed and raw tensor forms,
error codes and texts as the HTTP front end words them, load with a config override, gzip both
ways, connection age, grpc.health.v1, cancellation, and a client that does not read. TLS and
restricted protocols: test_access.py.
"""

import glob
import json
import os
import pathlib
import struct
import sys
import tempfile
import time

import numpy as np
import pytest

from e2e_helpers import (FIXTURE_REPO, PYTHON_LIBRARY, PYTHON_BACKEND_DIR, VRAMD_BIN, copy_model,
                         rss_bytes, wait_for)

GRPC_PY = pathlib.Path(os.environ.get("VRAMD_GRPC_PYTHON_DIR")
                       or (VRAMD_BIN.resolve().parent.parent.parent / "python"))
grpc = pytest.importorskip("grpc", reason="python3-grpcio is not installed")
if not (GRPC_PY / "server" / "grpc" / "grpc_service_pb2.py").is_file():
    pytest.skip("no generated gRPC stubs at %s (build vramd, or set VRAMD_GRPC_PYTHON_DIR)"
                % GRPC_PY, allow_module_level=True)
sys.path.insert(0, str(GRPC_PY))
from server.grpc import grpc_service_pb2 as pb  # noqa: E402
from server.grpc import grpc_service_pb2_grpc as pb_grpc  # noqa: E402

MODELS = ["identity_fp32", "identity_bytes", "identity_int8", "identity_fp16", "add_sub"]
# The datatypes with a typed contents field that MODELS lack, each with its field and its type's
# extremes; the fixture repository has an identity_<datatype> model for each.
TYPED = [
    ("BOOL", "bool_contents", [True, False, True], np.bool_),
    ("INT16", "int_contents", [-32768, 0, 32767], np.int16),
    ("INT32", "int_contents", [-2**31, 0, 2**31 - 1], np.int32),
    ("INT64", "int64_contents", [-2**63, 0, 2**63 - 1], np.int64),
    ("UINT8", "uint_contents", [0, 1, 255], np.uint8),
    ("UINT16", "uint_contents", [0, 1, 65535], np.uint16),
    ("UINT32", "uint_contents", [0, 1, 2**32 - 1], np.uint32),
    ("UINT64", "uint64_contents", [0, 1, 2**64 - 1], np.uint64),
    ("FP64", "fp64_contents", [-1.5, 0.0, 1e300], np.float64),
]
PYTHON_MODELS = pathlib.Path(__file__).resolve().parent / "python_models"
# The decoupled model for the stream tests, when the python backend is built.
HAVE_PYTHON = PYTHON_LIBRARY.is_file()


@pytest.fixture(scope="module")
def server(start_server, tmp_path_factory):
    args = ["--model-control-mode", "explicit"]
    models = list(MODELS)
    repos = [str(FIXTURE_REPO)]
    # Executions longer than the scheduler's inline budget (1 ms) never run on the calling
    # thread: this model's answers come from its instance threads.
    slow = tmp_path_factory.mktemp("grpc-slow-repo")
    (slow / "identity_slow" / "1").mkdir(parents=True)
    (slow / "identity_slow" / "config.pbtxt").write_text(
        'name: "identity_slow" backend: "identity" max_batch_size: 0\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        'instance_group [ { kind: KIND_CPU count: 2 } ]\n'
        'parameters { key: "execute_delay_us" value: { string_value: "3000" } }\n')
    repos.append(str(slow))
    models.append("identity_slow")
    models += ["identity_" + t[0].lower() for t in TYPED]
    if HAVE_PYTHON:
        repo = tmp_path_factory.mktemp("grpc-python-repo")
        copy_model(PYTHON_MODELS / "py_decoupled", repo, "py_decoupled")
        copy_model(PYTHON_MODELS / "py_cancel", repo, "py_cancel")
        repos.append(str(repo))
        models += ["py_decoupled", "py_cancel"]
        args += ["--backend-directory", str(PYTHON_BACKEND_DIR)]
    for m in models:
        args += ["--load-model", m]
    return start_server(repos, args, name="grpc", ready_models=models)


@pytest.fixture(scope="module")
def channel(server):
    ch = grpc.insecure_channel("127.0.0.1:%d" % server.grpc_port())
    grpc.channel_ready_future(ch).result(timeout=30)
    yield ch
    ch.close()


@pytest.fixture(scope="module")
def stub(channel):
    return pb_grpc.GRPCInferenceServiceStub(channel)


def rpc_error(call, request):
    with pytest.raises(grpc.RpcError) as e:
        call(request, timeout=30)
    return e.value


def infer_fp32(model, values, **kwargs):
    x = np.asarray(values, dtype=np.float32)
    r = pb.ModelInferRequest(model_name=model, **kwargs)
    r.inputs.add(name="INPUT0", datatype="FP32", shape=list(x.shape))
    r.raw_input_contents.append(x.tobytes())
    return r


def test_health_and_metadata(stub, channel):
    assert stub.ServerLive(pb.ServerLiveRequest()).live
    assert stub.ServerReady(pb.ServerReadyRequest()).ready
    meta = stub.ServerMetadata(pb.ServerMetadataRequest())
    assert meta.name == "vramd" and meta.version
    assert "model_repository" in meta.extensions
    # grpc.health.v1.Health/Check, called raw: HealthCheckResponse{status: SERVING (1)}.
    check = channel.unary_unary("/grpc.health.v1.Health/Check",
                                request_serializer=lambda _: b"",
                                response_deserializer=lambda b: b)
    assert check(None, timeout=10) == b"\x08\x01"


def test_model_ready_metadata_and_config(stub):
    assert stub.ModelReady(pb.ModelReadyRequest(name="identity_fp32")).ready
    assert stub.ModelReady(pb.ModelReadyRequest(name="identity_fp32", version="1")).ready
    e = rpc_error(stub.ModelReady, pb.ModelReadyRequest(name="no_such_model"))
    assert e.code() == grpc.StatusCode.NOT_FOUND and "no_such_model" in e.details()
    e = rpc_error(stub.ModelReady, pb.ModelReadyRequest(name="identity_fp32", version="x1"))
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and "'x1'" in e.details()

    md = stub.ModelMetadata(pb.ModelMetadataRequest(name="identity_fp32"))
    assert md.name == "identity_fp32" and list(md.versions) == ["1"]
    assert md.platform == "identity"
    assert [(t.name, t.datatype, list(t.shape)) for t in md.inputs] == [("INPUT0", "FP32", [-1])]
    assert [(t.name, t.datatype) for t in md.outputs] == [("OUTPUT0", "FP32")]

    cfg = stub.ModelConfig(pb.ModelConfigRequest(name="identity_fp32")).config
    assert cfg.name == "identity_fp32" and cfg.backend == "identity"
    assert cfg.input[0].name == "INPUT0" and cfg.input[0].data_type == 11  # TYPE_FP32
    assert list(cfg.input[0].dims) == [-1]
    # As placed: the unwritten KIND_AUTO group of a CPU-only backend is KIND_CPU (2).
    assert [g.kind for g in cfg.instance_group] == [2], cfg.instance_group
    e = rpc_error(stub.ModelConfig, pb.ModelConfigRequest(name="no_such_model"))
    assert e.code() == grpc.StatusCode.NOT_FOUND
    # One version's config, as that version was placed; a version not served is NOT_FOUND
    # naming it, and one that is no number INVALID_ARGUMENT.
    one = stub.ModelConfig(pb.ModelConfigRequest(name="identity_fp32", version="1")).config
    assert one == cfg
    e = rpc_error(stub.ModelConfig, pb.ModelConfigRequest(name="identity_fp32", version="7"))
    assert e.code() == grpc.StatusCode.NOT_FOUND and "7" in e.details(), e.details()
    e = rpc_error(stub.ModelConfig, pb.ModelConfigRequest(name="identity_fp32", version="v1"))
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and "'v1'" in e.details(), e.details()
    md = stub.ModelMetadata(pb.ModelMetadataRequest(name="identity_fp32", version="1"))
    assert list(md.versions) == ["1"]


def test_infer_raw_round_trip(stub):
    x = np.array([0.0, 1.5, -2.25, 3.4028234663852886e38], dtype=np.float32)
    r = infer_fp32("identity_fp32", x, id="req-7")
    r.outputs.add(name="OUTPUT0")
    out = stub.ModelInfer(r, timeout=30)
    assert out.model_name == "identity_fp32" and out.model_version == "1" and out.id == "req-7"
    assert [(o.name, o.datatype, list(o.shape)) for o in out.outputs] == [("OUTPUT0", "FP32", [4])]
    assert np.frombuffer(out.raw_output_contents[0], dtype=np.float32).tolist() == x.tolist()


def test_infer_typed_contents(stub):
    r = pb.ModelInferRequest(model_name="identity_fp32")
    t = r.inputs.add(name="INPUT0", datatype="FP32", shape=[3])
    t.contents.fp32_contents.extend([1.0, 2.5, -4.0])
    out = stub.ModelInfer(r, timeout=30)
    assert np.frombuffer(out.raw_output_contents[0], dtype=np.float32).tolist() == [1.0, 2.5, -4.0]

    r = pb.ModelInferRequest(model_name="identity_int8")
    r.inputs.add(name="INPUT0", datatype="INT8", shape=[3]).contents.int_contents.extend(
        [-128, 0, 127])
    out = stub.ModelInfer(r, timeout=30)
    assert np.frombuffer(out.raw_output_contents[0], dtype=np.int8).tolist() == [-128, 0, 127]

    words = [b"hello", b"", b"\x00\xff binary"]
    r = pb.ModelInferRequest(model_name="identity_bytes")
    r.inputs.add(name="INPUT0", datatype="BYTES", shape=[3]).contents.bytes_contents.extend(words)
    out = stub.ModelInfer(r, timeout=30)
    raw, got = out.raw_output_contents[0], []
    while raw:
        n = struct.unpack("<I", raw[:4])[0]
        got.append(raw[4:4 + n])
        raw = raw[4 + n:]
    assert got == words


@pytest.mark.parametrize("datatype,field,values,dtype", TYPED, ids=[t[0] for t in TYPED])
def test_typed_contents_of_every_datatype(stub, datatype, field, values, dtype):
    r = pb.ModelInferRequest(model_name="identity_" + datatype.lower())
    getattr(r.inputs.add(name="INPUT0", datatype=datatype, shape=[3]).contents,
            field).extend(values)
    out = stub.ModelInfer(r, timeout=30)
    assert (out.outputs[0].datatype, list(out.outputs[0].shape)) == (datatype, [3])
    assert np.frombuffer(out.raw_output_contents[0], dtype=dtype).tolist() == values


@pytest.mark.parametrize("datatype,field,values,shape,text", [
    ("INT16", "int_contents", [1, 40000], [2], "element 1 (40000) is out of range"),
    ("INT16", "int_contents", [-32769], [1], "element 0 (-32769) is out of range"),
    ("UINT8", "uint_contents", [256], [1], "element 0 (256) is out of range"),
    ("UINT16", "uint_contents", [7, 65536], [2], "element 1 (65536) is out of range"),
    ("INT32", "int_contents", [1, 2], [3], "2 elements in its contents, but shape [3] has 3"),
    ("BOOL", "int_contents", [1], [1], "other than the one of datatype BOOL"),
    ("UINT64", "int64_contents", [1], [1], "other than the one of datatype UINT64"),
], ids=["int16_high", "int16_low", "uint8", "uint16", "count", "bool_field", "uint64_field"])
def test_typed_contents_errors_name_the_element(stub, datatype, field, values, shape, text):
    r = pb.ModelInferRequest(model_name="identity_" + datatype.lower())
    getattr(r.inputs.add(name="INPUT0", datatype=datatype, shape=shape).contents,
            field).extend(values)
    e = rpc_error(stub.ModelInfer, r)
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e
    assert "input 'INPUT0'" in e.details() and text in e.details(), e.details()


def test_request_parameters_are_checked_by_kind(stub):
    """The parameters vramd reads itself take the kinds Triton's do; a wrong one is an error
    naming the key and the kind sent; a model's own parameters may be any kind but none."""
    def call(key, kind, value):
        r = infer_fp32("identity_fp32", [3.0])
        setattr(r.parameters[key], kind, value)
        return r

    for key, kind, value in [("priority", "uint64_param", 5), ("priority", "int64_param", 0),
                             ("timeout", "uint64_param", 10**9), ("mine", "double_param", 0.5),
                             ("mine", "uint64_param", 2**64 - 1), ("mine", "bool_param", False)]:
        out = stub.ModelInfer(call(key, kind, value), timeout=30)
        assert np.frombuffer(out.raw_output_contents[0], np.float32).tolist() == [3.0], key
    for key, kind, value, text in [
            ("priority", "int64_param", -1,
             "request parameter 'priority' must be a non-negative integer, got an int64"),
            ("priority", "string_param", "high",
             "request parameter 'priority' must be a non-negative integer, got a string"),
            ("timeout", "double_param", 1.5,
             "request parameter 'timeout' must be a non-negative integer (microseconds), got a "
             "double"),
            ("sequence_id", "double_param", 1.0,
             "request parameter 'sequence_id' must be a non-negative integer or a string, got a "
             "double"),
            ("sequence_id", "int64_param", -4,
             "request parameter 'sequence_id' must be a non-negative integer or a string, got an "
             "int64"),
            ("sequence_start", "string_param", "yes",
             "request parameter 'sequence_start' must be true or false, got a string"),
            ("sequence_end", "uint64_param", 1,
             "request parameter 'sequence_end' must be true or false, got a uint64")]:
        e = rpc_error(stub.ModelInfer, call(key, kind, value))
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, (key, e)
        assert text in e.details(), e.details()
    r = infer_fp32("identity_fp32", [3.0])
    r.parameters["empty"].SetInParent()  # an entry with no value of any kind
    e = rpc_error(stub.ModelInfer, r)
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e
    assert "request parameter 'empty' has no value" in e.details(), e.details()


@pytest.mark.parametrize("where", ["input", "output"])
def test_shared_memory_parameters_are_checked(stub, where):
    def call(**params):
        r = infer_fp32("identity_fp32", [1.0])
        tensor = r.inputs[0] if where == "input" else r.outputs.add(name="OUTPUT0")
        for key, (kind, value) in params.items():
            setattr(tensor.parameters[key], kind, value)
        return r

    name = "input 'INPUT0'" if where == "input" else "output 'OUTPUT0'"
    for params, text in [
            (dict(shared_memory_region=("int64_param", 3), shared_memory_byte_size=("int64_param", 4)),
             "parameter 'shared_memory_region' must be a string, got an int64"),
            (dict(shared_memory_region=("string_param", "r"),
                  shared_memory_byte_size=("string_param", "4")),
             "parameter 'shared_memory_byte_size' must be a non-negative integer, got a string"),
            (dict(shared_memory_region=("string_param", "r"), shared_memory_byte_size=("int64_param", 4),
                  shared_memory_offset=("int64_param", -8)),
             "parameter 'shared_memory_offset' must be a non-negative integer, got an int64"),
            (dict(shared_memory_region=("string_param", "r"), shared_memory_byte_size=("int64_param", 4),
                  shared_memory_size=("int64_param", 4)),
             "unknown shared memory parameter 'shared_memory_size'"),
            (dict(shared_memory_region=("string_param", "r")),
             "shared memory needs parameters 'shared_memory_region' and 'shared_memory_byte_size'"),
            (dict(shared_memory_byte_size=("int64_param", 4)),
             "shared memory needs parameters 'shared_memory_region' and 'shared_memory_byte_size'")]:
        e = rpc_error(stub.ModelInfer, call(**params))
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, (params, e)
        assert name in e.details() and text in e.details(), e.details()


def test_infer_add_sub_selects_outputs(stub):
    a = np.arange(16, dtype=np.float32)
    b = np.ones(16, dtype=np.float32)
    cfg = stub.ModelConfig(pb.ModelConfigRequest(name="add_sub")).config
    r = pb.ModelInferRequest(model_name="add_sub")
    shape = ([1] if cfg.max_batch_size > 0 else []) + list(cfg.input[0].dims)
    for name, v in ((cfg.input[0].name, a), (cfg.input[1].name, b)):
        r.inputs.add(name=name, datatype="FP32", shape=shape)
        r.raw_input_contents.append(v.tobytes())
    r.outputs.add(name=cfg.output[1].name)
    out = stub.ModelInfer(r, timeout=30)
    assert [o.name for o in out.outputs] == [cfg.output[1].name]
    assert np.frombuffer(out.raw_output_contents[0], dtype=np.float32).tolist() == (a - b).tolist()


@pytest.mark.parametrize("case", [
    "unknown_model", "bad_version", "raw_size", "raw_count", "both_forms", "int8_range",
    "fp16_typed", "wrong_field", "reserved_parameter", "bad_timeout", "bad_datatype",
    "wrong_datatype", "no_data"])
def test_infer_errors_name_what_is_wrong(stub, case):
    code, text = grpc.StatusCode.INVALID_ARGUMENT, None
    if case == "unknown_model":
        r, code, text = infer_fp32("no_such_model", [1]), grpc.StatusCode.NOT_FOUND, "no_such_model"
    elif case == "bad_version":
        r, text = infer_fp32("identity_fp32", [1], model_version="latest"), "'latest'"
    elif case == "raw_size":
        r = infer_fp32("identity_fp32", [1, 2])
        r.raw_input_contents[0] = b"\x00" * 7
        text = "raw_input_contents has 7 bytes but shape [2] of FP32 needs 8"
    elif case == "raw_count":
        r = infer_fp32("identity_fp32", [1])
        r.raw_input_contents.append(b"")
        text = "raw_input_contents has 2 entries but the request has 1 inputs"
    elif case == "both_forms":
        r = infer_fp32("identity_fp32", [1])
        r.inputs[0].contents.fp32_contents.append(1.0)
        text = "input 'INPUT0' has 'contents'"
    elif case == "int8_range":
        r = pb.ModelInferRequest(model_name="identity_int8")
        r.inputs.add(name="INPUT0", datatype="INT8", shape=[2]).contents.int_contents.extend([1, 300])
        text = "element 1 (300) is out of range"
    elif case == "fp16_typed":
        r = pb.ModelInferRequest(model_name="identity_fp16")
        r.inputs.add(name="INPUT0", datatype="FP16", shape=[1]).contents.fp32_contents.append(1.0)
        text = "FP16 has no typed contents field"
    elif case == "wrong_field":
        r = pb.ModelInferRequest(model_name="identity_fp32")
        r.inputs.add(name="INPUT0", datatype="FP32", shape=[1]).contents.int_contents.append(1)
        text = "other than the one of datatype FP32"
    elif case == "reserved_parameter":
        r = infer_fp32("identity_fp32", [1])
        r.parameters["triton_x"].bool_param = True
        text = "'triton_x': keys starting with 'triton_' are reserved"
    elif case == "bad_timeout":
        r = infer_fp32("identity_fp32", [1])
        r.parameters["timeout"].string_param = "soon"
        text = "request parameter 'timeout' must be a non-negative integer (microseconds), got a string"
    elif case == "bad_datatype":
        r = pb.ModelInferRequest(model_name="identity_fp32")
        r.inputs.add(name="INPUT0", datatype="FLOAT", shape=[1])
        r.raw_input_contents.append(b"\x00" * 4)
        text = "unknown datatype 'FLOAT'"
    elif case == "wrong_datatype":
        r = pb.ModelInferRequest(model_name="identity_fp32")
        r.inputs.add(name="INPUT0", datatype="INT32", shape=[1])
        r.raw_input_contents.append(b"\x00" * 4)
        text = "INT32"
    elif case == "no_data":
        r = pb.ModelInferRequest(model_name="identity_fp32")
        r.inputs.add(name="INPUT0", datatype="FP32", shape=[2])
        text = "input 'INPUT0' has no data"
    e = rpc_error(stub.ModelInfer, r)
    assert e.code() == code, e
    assert text in e.details(), e.details()


def test_validation_texts_equal_the_http_front_ends(server, stub):
    """An error the runtime finds reads the same over both protocols."""
    r = pb.ModelInferRequest(model_name="identity_fp32")
    r.inputs.add(name="INPUT0", datatype="INT32", shape=[1])
    r.raw_input_contents.append(b"\x00" * 4)
    e = rpc_error(stub.ModelInfer, r)
    c = server.client()
    body = json.dumps({"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1],
                                   "data": [0]}]}).encode()
    h = c.post("/v2/models/identity_fp32/infer", body, {"Content-Type": "application/json"})
    assert h.status == 400
    assert e.details() == h.error_message()


def test_system_shared_memory_round_trip(stub, shm_object):
    key = "/" + shm_object.name
    x = np.arange(64, dtype=np.float32) * 1.5
    shm_object.buf[256:256 + x.nbytes] = x.tobytes()
    stub.SystemSharedMemoryRegister(pb.SystemSharedMemoryRegisterRequest(
        name="in", key=key, offset=0, byte_size=4096))
    stub.SystemSharedMemoryRegister(pb.SystemSharedMemoryRegisterRequest(
        name="out", key=key, offset=8192, byte_size=4096))
    try:
        status = stub.SystemSharedMemoryStatus(pb.SystemSharedMemoryStatusRequest()).regions
        assert sorted(status) == ["in", "out"] and status["out"].offset == 8192
        assert status["in"].key == key and status["in"].byte_size == 4096
        e = rpc_error(stub.SystemSharedMemoryRegister, pb.SystemSharedMemoryRegisterRequest(
            name="in", key=key, offset=0, byte_size=16))
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and "already registered" in e.details()

        r = pb.ModelInferRequest(model_name="identity_fp32", id="shm")
        t = r.inputs.add(name="INPUT0", datatype="FP32", shape=[64])
        t.parameters["shared_memory_region"].string_param = "in"
        t.parameters["shared_memory_offset"].int64_param = 256
        t.parameters["shared_memory_byte_size"].int64_param = x.nbytes
        o = r.outputs.add(name="OUTPUT0")
        o.parameters["shared_memory_region"].string_param = "out"
        o.parameters["shared_memory_byte_size"].int64_param = 4096
        out = stub.ModelInfer(r, timeout=30)
        assert out.outputs[0].parameters["shared_memory_region"].string_param == "out"
        assert out.outputs[0].parameters["shared_memory_byte_size"].int64_param == x.nbytes
        assert out.raw_output_contents[0] == b""
        got = np.frombuffer(bytes(shm_object.buf[8192:8192 + x.nbytes]), dtype=np.float32)
        assert got.tolist() == x.tolist()

        # Each range is checked against its region, naming the tensor.
        t.parameters["shared_memory_offset"].int64_param = 4000
        e = rpc_error(stub.ModelInfer, r)
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "input 'INPUT0': 256 bytes at offset 4000 are beyond system shared memory region 'in'" in e.details()
        t.parameters["shared_memory_offset"].int64_param = 256
        t.parameters["shared_memory_region"].string_param = "nope"
        e = rpc_error(stub.ModelInfer, r)
        assert e.code() == grpc.StatusCode.NOT_FOUND and "'nope'" in e.details()
        t.parameters["shared_memory_region"].string_param = "in"
        o.parameters["shared_memory_byte_size"].int64_param = 16  # too small for the output
        e = rpc_error(stub.ModelInfer, r)
        assert "more than the 16 of its shared memory" in e.details()
    finally:
        stub.SystemSharedMemoryUnregister(pb.SystemSharedMemoryUnregisterRequest())
    assert not stub.SystemSharedMemoryStatus(pb.SystemSharedMemoryStatusRequest()).regions
    e = rpc_error(stub.SystemSharedMemoryStatus, pb.SystemSharedMemoryStatusRequest(name="in"))
    assert e.code() == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize("key,size,text", [
    ("/a/b", 16, "no other '/'"), ("noslash", 16, "no other '/'"),
    ("/vramd_no_such_object", 16, "no such object"), (None, 1 << 20, "beyond the")])
def test_shared_memory_registration_is_checked(stub, shm_object, key, size, text):
    key = key or "/" + shm_object.name
    e = rpc_error(stub.SystemSharedMemoryRegister, pb.SystemSharedMemoryRegisterRequest(
        name="bad", key=key, offset=0, byte_size=size))
    assert text in e.details()
    assert e.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND)


@pytest.mark.parametrize("elements", [4095, 4096, 300_000])
def test_large_outputs_arrive_whole(stub, elements):
    # Outputs of 16 KiB and more leave the server from the model's own buffer (not copied into
    # the message): the bytes, the entry's length prefix and the fields around it must be right
    # on either side of that size, plain and gzip-compressed.
    x = (np.arange(elements, dtype=np.float32) * 0.5 - 7.0)
    for compression in (None, grpc.Compression.Gzip):
        out = stub.ModelInfer(infer_fp32("identity_fp32", x, id="big-%d" % elements),
                              timeout=60, compression=compression)
        assert out.id == "big-%d" % elements and out.model_name == "identity_fp32"
        assert [o.name for o in out.outputs] == ["OUTPUT0"]
        assert list(out.outputs[0].shape) == [elements]
        assert len(out.raw_output_contents) == 1
        assert np.array_equal(np.frombuffer(out.raw_output_contents[0], dtype=np.float32), x)


def test_gzip_compressed_calls(stub):
    r = infer_fp32("identity_fp32", np.arange(1000, dtype=np.float32))
    out = stub.ModelInfer(r, timeout=30, compression=grpc.Compression.Gzip)
    assert np.frombuffer(out.raw_output_contents[0], dtype=np.float32).tolist() == list(range(1000))


class CountingProxy:
    """A TCP relay to `port` that counts the bytes the server sends back."""

    def __init__(self, port):
        import socket
        import threading
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.to_client = 0
        self.connections = 0
        self.target = port
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _pump(self, src, dst, count):
        try:
            while True:
                data = src.recv(1 << 16)
                if not data:
                    break
                if count:
                    self.to_client += len(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            dst.close()
            src.close()

    def _accept(self):
        import socket
        import threading
        try:
            while True:
                client, _ = self.listener.accept()
                self.connections += 1
                upstream = socket.create_connection(("127.0.0.1", self.target))
                for args in ((client, upstream, False), (upstream, client, True)):
                    t = threading.Thread(target=self._pump, args=args, daemon=True)
                    t.start()
                    self.threads.append(t)
        except OSError:
            pass

    def close(self):
        self.listener.close()


def answer_bytes_through_proxy(grpc_port, request):
    proxy = CountingProxy(grpc_port)
    try:
        with grpc.insecure_channel("127.0.0.1:%d" % proxy.port) as ch:
            out = pb_grpc.GRPCInferenceServiceStub(ch).ModelInfer(request, timeout=30)
            stream = list(pb_grpc.GRPCInferenceServiceStub(ch).ModelStreamInfer(
                iter([request]), timeout=30))
        return proxy.to_client, out, stream
    finally:
        proxy.close()


def test_infer_response_compression_level(server, start_server):
    # Triton's --grpc-infer-response-compression-level: with it, a client that accepts gzip
    # (grpcio does by default) gets ModelInfer and stream answers compressed; a relay counting
    # the bytes on the wire shows it. 1 MiB of zeros compresses to almost nothing.
    zeros = infer_fp32("identity_fp32", np.zeros(1 << 18, dtype=np.float32))
    plain, out, stream = answer_bytes_through_proxy(server.grpc_port(), zeros)
    assert plain > 2 * (1 << 20), plain  # two answers of 1 MiB each, as they are
    compressed_server = start_server([FIXTURE_REPO], [
        "--model-control-mode", "explicit", "--load-model", "identity_fp32",
        "--grpc-infer-response-compression-level=HIGH"], name="grpc_compressed",
        ready_models=["identity_fp32"])
    small, out, stream = answer_bytes_through_proxy(compressed_server.grpc_port(), zeros)
    assert small < (1 << 16), small
    assert np.frombuffer(out.raw_output_contents[0], dtype=np.float32).tolist() == [0.0] * (1 << 18)
    assert len(stream) == 1
    assert len(stream[0].infer_response.raw_output_contents[0]) == 1 << 20
    compressed_server.assert_clean_exit(compressed_server.stop())


def test_max_connection_age_closes_connections_and_calls_go_on(start_server):
    # Triton's --grpc-max-connection-age: the server ends each connection after 300 ms (GOAWAY)
    # and the client reconnects; every call in between succeeds.
    s = start_server([FIXTURE_REPO], [
        "--model-control-mode", "explicit", "--load-model", "identity_fp32",
        "--grpc-max-connection-age=300", "--grpc-max-connection-age-grace=5000"],
        name="grpc_conn_age", ready_models=["identity_fp32"])
    proxy = CountingProxy(s.grpc_port())
    try:
        with grpc.insecure_channel("127.0.0.1:%d" % proxy.port) as ch:
            stub = pb_grpc.GRPCInferenceServiceStub(ch)
            deadline = time.monotonic() + 2.0
            calls = 0
            while time.monotonic() < deadline:
                out = stub.ModelInfer(infer_fp32("identity_fp32", [float(calls)]), timeout=30,
                                      wait_for_ready=True)
                assert np.frombuffer(out.raw_output_contents[0], np.float32).tolist() == [calls]
                calls += 1
                time.sleep(0.02)
        assert proxy.connections >= 3, (proxy.connections, calls)
    finally:
        proxy.close()
    s.assert_clean_exit(s.stop())


def test_a_malformed_message_is_an_error_and_the_server_serves_on(stub, channel):
    raw = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer",
                              request_serializer=lambda b: b, response_deserializer=lambda b: b)
    with pytest.raises(grpc.RpcError) as e:
        raw(b"\xff\xff\xff\xff\x0f garbage", timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "not a ModelInferRequest" in e.value.details()
    assert stub.ServerLive(pb.ServerLiveRequest()).live


def test_repository_index_load_unload_and_config_override(stub):
    index = stub.RepositoryIndex(pb.RepositoryIndexRequest())
    names = {m.name: m for m in index.models}
    assert names["identity_fp32"].state == "READY"
    assert "identity_batching" in names and names["identity_batching"].state != "READY"
    ready = {m.name for m in stub.RepositoryIndex(pb.RepositoryIndexRequest(ready=True)).models}
    assert "identity_fp32" in ready and "identity_batching" not in ready

    stub.RepositoryModelUnload(pb.RepositoryModelUnloadRequest(model_name="identity_int8"))
    assert not stub.ModelReady(pb.ModelReadyRequest(name="identity_int8")).ready
    stub.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name="identity_int8"))
    assert stub.ModelReady(pb.ModelReadyRequest(name="identity_int8")).ready

    # A config override: identity_int16 loaded again with three instances; ModelConfig shows
    # what was loaded.
    cfg = {"name": "identity_int16", "backend": "identity", "max_batch_size": 0,
           "input": [{"name": "INPUT0", "data_type": "TYPE_INT16", "dims": [-1]}],
           "output": [{"name": "OUTPUT0", "data_type": "TYPE_INT16", "dims": [-1]}],
           "instance_group": [{"kind": "KIND_CPU", "count": 3}]}
    load = pb.RepositoryModelLoadRequest(model_name="identity_int16")
    load.parameters["config"].string_param = json.dumps(cfg)
    stub.RepositoryModelLoad(load, timeout=60)
    got = stub.ModelConfig(pb.ModelConfigRequest(name="identity_int16")).config
    assert got.instance_group[0].count == 3

    bad = pb.RepositoryModelLoadRequest(model_name="identity_int16")
    bad.parameters["config"].string_param = "{not json"
    e = rpc_error(stub.RepositoryModelLoad, bad)
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and "parameter 'config'" in e.details()
    # Model files in the request need a config, and bytes.
    files = pb.RepositoryModelLoadRequest(model_name="identity_int16")
    files.parameters["file:1/model.bin"].bytes_param = b"x"
    e = rpc_error(stub.RepositoryModelLoad, files)
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and "need a 'config'" in e.details()
    files.parameters["config"].string_param = json.dumps(cfg)
    files.parameters["file:1/model.bin"].string_param = "x"
    e = rpc_error(stub.RepositoryModelLoad, files)
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and "bytes_param" in e.details()

    # A model no repository holds, loaded from the files the request carries.
    name = "grpc_files_%d" % os.getpid()
    cfg_files = dict(cfg, name=name, instance_group=[{"kind": "KIND_CPU", "count": 1}])
    load = pb.RepositoryModelLoadRequest(model_name=name)
    load.parameters["config"].string_param = json.dumps(cfg_files)
    load.parameters["file:1/weights.bin"].bytes_param = bytes(range(256))
    stub.RepositoryModelLoad(load, timeout=60)
    assert stub.ModelReady(pb.ModelReadyRequest(name=name)).ready
    dirs = glob.glob(os.path.join(tempfile.gettempdir(), "vramd-model-files", name + ".*"))
    assert len(dirs) == 1, dirs
    with open(os.path.join(dirs[0], "1", "weights.bin"), "rb") as f:
        assert f.read() == bytes(range(256))
    stub.RepositoryModelUnload(pb.RepositoryModelUnloadRequest(model_name=name), timeout=60)
    assert not os.path.exists(dirs[0])
    e = rpc_error(stub.RepositoryModelLoad, pb.RepositoryModelLoadRequest(model_name="no_such"))
    assert e.code() == grpc.StatusCode.NOT_FOUND


def test_cuda_shared_memory_registration_is_checked(stub):
    """CUDA registrations over gRPC: the handle's size and the device are checked and named;
    nothing is left registered (the round trip with a real handle runs on the device:
    tests/device/cuda_shm_check.py)."""
    assert not stub.CudaSharedMemoryStatus(pb.CudaSharedMemoryStatusRequest()).regions
    for request, text in (
            (pb.CudaSharedMemoryRegisterRequest(name="g", raw_handle=b"x" * 10, device_id=0,
                                                byte_size=16), "has 64 bytes, got 10"),
            (pb.CudaSharedMemoryRegisterRequest(name="g", raw_handle=bytes(64), device_id=77,
                                                byte_size=16), "device 77 is not one this server uses"),
            (pb.CudaSharedMemoryRegisterRequest(name="g", raw_handle=bytes(64), device_id=-1,
                                                byte_size=16), "device -1"),
            (pb.CudaSharedMemoryRegisterRequest(name="g", raw_handle=bytes(64), device_id=0,
                                                byte_size=0), "byte_size 0")):
        e = rpc_error(stub.CudaSharedMemoryRegister, request)
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and text in e.details(), e.details()
    e = rpc_error(stub.CudaSharedMemoryStatus, pb.CudaSharedMemoryStatusRequest(name="g"))
    assert e.code() == grpc.StatusCode.NOT_FOUND and "no CUDA shared memory region" in e.details()
    stub.CudaSharedMemoryUnregister(pb.CudaSharedMemoryUnregisterRequest(name="g"))
    stub.CudaSharedMemoryUnregister(pb.CudaSharedMemoryUnregisterRequest())
    assert not stub.CudaSharedMemoryStatus(pb.CudaSharedMemoryStatusRequest()).regions


def test_trace_setting_answers_the_global_settings(stub):
    # The trace extension in full is tests/e2e/test_trace.py.
    r = stub.TraceSetting(pb.TraceSettingRequest())
    assert list(r.settings["trace_level"].value) == ["OFF"]
    assert list(r.settings["trace_rate"].value) == ["1000"]


def test_stream_infer_answers_each_request_in_order(stub):
    requests = [infer_fp32("identity_fp32", [i, -i], id="s%d" % i) for i in range(20)]
    bad = pb.ModelInferRequest(model_name="no_such_model", id="bad")
    requests.insert(5, bad)
    got = list(stub.ModelStreamInfer(iter(requests), timeout=30))
    # Requests run as they are read, so their answers come in the order they finish.
    assert len(got) == 21
    errors = [g for g in got if g.error_message]
    assert len(errors) == 1 and "no_such_model" in errors[0].error_message
    assert not errors[0].HasField("infer_response")
    answers = {g.infer_response.id: g for g in got if not g.error_message}
    assert sorted(answers) == sorted("s%d" % i for i in range(20))
    for i in range(20):
        assert np.frombuffer(answers["s%d" % i].infer_response.raw_output_contents[0],
                             dtype=np.float32).tolist() == [i, -i]


def send_unread_stream(stub, n=600, elements=65536):
    """Opens a stream of n identity requests of `elements` FP32 each and reads no answer until
    grpcio, which sends from the iterator on a thread of its own, stops taking requests (or has
    taken them all). Returns (how many it took, whether it took all, the answers' iterator)."""
    import threading
    import time
    sent = []
    done = threading.Event()

    def requests():
        for i in range(n):
            sent.append(i)
            yield infer_fp32("identity_fp32", np.full(elements, i, dtype=np.float32), id="r%d" % i)
        done.set()

    answers = stub.ModelStreamInfer(requests(), timeout=120)
    last, still = -1, 0
    deadline = time.monotonic() + 30
    while not done.is_set() and still < 10 and time.monotonic() < deadline:
        time.sleep(0.1)
        still = still + 1 if len(sent) == last else 0
        last = len(sent)
    return len(sent), done.is_set(), answers


def test_a_stream_whose_client_does_not_read_stops_being_read(stub):
    """A client that sends a stream of requests and reads none of the answers (or reads them
    slower than it sends): once a few answers wait to be written, the server stops reading the
    stream's requests, and gRPC's flow control then holds the client's sends. Nothing is lost:
    read afterwards, every answer arrives, in full."""
    n = 600
    sent, all_sent, answers = send_unread_stream(stub, n)
    assert not all_sent, "the client sent all %d requests with no answer read" % n
    got = {}
    for a in answers:
        assert not a.error_message, a.error_message
        got[a.infer_response.id] = a.infer_response.raw_output_contents[0]
    assert sorted(got) == sorted("r%d" % i for i in range(n))
    for i in (0, sent, n - 1):
        assert np.frombuffer(got["r%d" % i], dtype=np.float32)[[0, -1]].tolist() == [i, i]


def test_a_stream_nobody_reads_does_not_grow_the_server(server, stub):
    """The memory side of the test above: 600 answers of 256 KiB (150 MiB) made for a client
    that reads none of them; the server held every one before it paused such streams. (Not run
    under AddressSanitizer, whose quarantine of freed blocks is what RSS would measure.)"""
    before = rss_bytes(server.proc.pid)
    _, _, answers = send_unread_stream(stub)
    grown = rss_bytes(server.proc.pid) - before
    answers.cancel()
    assert grown < 48 << 20, "the server grew %d MiB for a stream nobody read" % (grown >> 20)


def count_request(n, **parameters):
    r = pb.ModelInferRequest(model_name="py_decoupled", id="c%d" % n)
    r.inputs.add(name="COUNT", datatype="INT32", shape=[1])
    r.raw_input_contents.append(np.array([n], dtype=np.int32).tobytes())
    for key, value in parameters.items():
        r.parameters[key].bool_param = value
    return r


@pytest.mark.skipif(not HAVE_PYTHON, reason="needs the python backend (py_decoupled)")
def test_stream_infer_carries_a_decoupled_models_responses(stub):
    got = list(stub.ModelStreamInfer(iter([count_request(3)]), timeout=60))
    assert [np.frombuffer(g.infer_response.raw_output_contents[0], dtype=np.int32)[0]
            for g in got] == [0, 1, 2]
    assert all(not g.infer_response.parameters["triton_final_response"].bool_param for g in got)
    assert {g.infer_response.id for g in got} == {"c3"}

    # tritonclient's enable_empty_final_response: an empty response says the request is done.
    got = list(stub.ModelStreamInfer(
        iter([count_request(2, triton_enable_empty_final_response=True), count_request(0)]),
        timeout=60))
    finals = [g for g in got if g.infer_response.parameters["triton_final_response"].bool_param]
    assert len(got) == 3 and len(finals) == 1
    assert finals[0].infer_response.id == "c2" and not finals[0].infer_response.outputs


def cancel_request(tmp_path, tag):
    """A py_cancel request: the model marks <tag>.started, then polls is_cancelled() for 10 s and
    marks <tag>.cancelled (and answers CANCELLED) once it reads true."""
    r = pb.ModelInferRequest(model_name="py_cancel", id=tag)
    r.inputs.add(name="IN", datatype="INT32", shape=[1])
    r.raw_input_contents.append(np.array([7], dtype=np.int32).tobytes())
    r.parameters["marker_dir"].string_param = str(tmp_path)
    r.parameters["tag"].string_param = tag
    return r


def wait_for_file(path, seconds, what):
    wait_for(path.exists, timeout=seconds, interval=0.01, what=what)


@pytest.mark.skipif(not HAVE_PYTHON, reason="needs the python backend (py_cancel)")
def test_a_cancelled_call_is_cancelled_for_the_model(stub, tmp_path):
    """A client that cancels a ModelInfer call (tritonclient.grpc's cancel, or a deadline
    passing) makes the request read as cancelled: py_cancel polls is_cancelled() and stops."""
    call = stub.ModelInfer.future(cancel_request(tmp_path, "unary"), timeout=30)
    wait_for_file(tmp_path / "unary.started", 10, "the model to start the request")
    call.cancel()
    wait_for_file(tmp_path / "unary.cancelled", 5, "the model to see the cancellation")
    # A deadline that passes cancels the same way.
    e = rpc_error(lambda r, timeout: stub.ModelInfer(r, timeout=0.5),
                  cancel_request(tmp_path, "deadline"))
    assert e.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    wait_for_file(tmp_path / "deadline.cancelled", 5, "a passed deadline to cancel")


@pytest.mark.skipif(not HAVE_PYTHON, reason="needs the python backend (py_cancel)")
def test_a_cancelled_stream_cancels_its_requests(stub, tmp_path):
    """A client that cancels a ModelStreamInfer stream makes each of its requests still running
    read as cancelled."""
    answers = stub.ModelStreamInfer(iter([cancel_request(tmp_path, "s1"),
                                          cancel_request(tmp_path, "s2")]), timeout=30)
    wait_for_file(tmp_path / "s1.started", 10, "the model to start the request")
    answers.cancel()
    wait_for_file(tmp_path / "s1.cancelled", 5, "the model to see the cancellation")


@pytest.mark.skipif(not HAVE_PYTHON, reason="needs the python backend (py_decoupled)")
def test_model_infer_refuses_a_decoupled_model(stub):
    e = rpc_error(stub.ModelInfer, count_request(1))
    assert e.code() == grpc.StatusCode.UNIMPLEMENTED
    assert "decoupled" in e.details()


def test_model_statistics(stub):
    for i in range(3):
        stub.ModelInfer(infer_fp32("identity_fp32", [i]), timeout=30)
    stats = stub.ModelStatistics(pb.ModelStatisticsRequest(name="identity_fp32"), timeout=30)
    assert [(m.name, m.version) for m in stats.model_stats] == [("identity_fp32", "1")]
    m = stats.model_stats[0]
    assert m.inference_count >= 3 and m.execution_count >= 3 and m.last_inference > 0
    assert m.inference_stats.success.count >= 3 and m.inference_stats.success.ns > 0
    every = stub.ModelStatistics(pb.ModelStatisticsRequest(), timeout=30)
    assert {"identity_fp32", "add_sub"} <= {s.name for s in every.model_stats}
    e = rpc_error(stub.ModelStatistics, pb.ModelStatisticsRequest(name="no_such_model"))
    assert e.code() == grpc.StatusCode.NOT_FOUND


def test_log_settings(stub):
    got = stub.LogSettings(pb.LogSettingsRequest(), timeout=30).settings
    assert got["log_info"].bool_param and got["log_format"].string_param == "default"
    r = pb.LogSettingsRequest()
    r.settings["log_verbose_level"].uint32_param = 1
    assert stub.LogSettings(r, timeout=30).settings["log_verbose_level"].uint32_param == 1
    r.settings["log_verbose_level"].uint32_param = 0
    assert stub.LogSettings(r, timeout=30).settings["log_verbose_level"].uint32_param == 0
    # This server logs to standard error: a client may not move its log to a file.
    to_file = pb.LogSettingsRequest()
    to_file.settings["log_file"].string_param = "/tmp/elsewhere.log"
    e = rpc_error(stub.LogSettings, to_file)
    assert e.code() == grpc.StatusCode.UNIMPLEMENTED and "--log-file" in e.details()
    bad = pb.LogSettingsRequest()
    bad.settings["log_format"].string_param = "json"
    e = rpc_error(stub.LogSettings, bad)
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and "log_format" in e.details()


def test_many_concurrent_calls(stub):
    import concurrent.futures
    def one(i):
        out = stub.ModelInfer(infer_fp32("identity_fp32", [i, i + 1]), timeout=30)
        return np.frombuffer(out.raw_output_contents[0], dtype=np.float32).tolist()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        got = list(pool.map(one, range(400)))
    assert got == [[float(i), float(i + 1)] for i in range(400)]


def test_answers_from_instance_threads_arrive_whole(stub):
    # Each answer is produced on an instance thread and sent by the call's queue thread; small
    # answers and ones large enough to be sent in place (16 KiB and more) alike.
    import concurrent.futures
    def one(i):
        n = 2 + (i % 3) * 6000
        values = np.arange(i, i + n, dtype=np.float32)
        out = stub.ModelInfer(infer_fp32("identity_slow", values), timeout=30)
        return np.array_equal(np.frombuffer(out.raw_output_contents[0], dtype=np.float32), values)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        got = list(pool.map(one, range(48)))
    assert all(got)
    e = rpc_error(stub.ModelInfer, infer_fp32("identity_slow", [[1.0, 2.0]]))
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and "INPUT0" in e.details()


def test_shared_memory_can_be_turned_off(start_server):
    s = start_server([str(FIXTURE_REPO)], ["--no-grpc-shared-memory", "--model-control-mode",
                                           "explicit", "--load-model", "identity_fp32"],
                     name="grpc_no_shm", ready_models=["identity_fp32"])
    ch = grpc.insecure_channel("127.0.0.1:%d" % s.grpc_port())
    try:
        stub = pb_grpc.GRPCInferenceServiceStub(ch)
        e = rpc_error(stub.SystemSharedMemoryStatus, pb.SystemSharedMemoryStatusRequest())
        assert e.code() == grpc.StatusCode.UNIMPLEMENTED and "turned off" in e.details()
        e = rpc_error(stub.CudaSharedMemoryRegister, pb.CudaSharedMemoryRegisterRequest(
            name="g", raw_handle=bytes(64), device_id=0, byte_size=16))
        assert e.code() == grpc.StatusCode.UNIMPLEMENTED and "CUDA shared memory is turned off" in e.details()
        r = infer_fp32("identity_fp32", [1])
        r.inputs[0].parameters["shared_memory_region"].string_param = "region0"
        e = rpc_error(stub.ModelInfer, r)
        assert e.code() == grpc.StatusCode.UNIMPLEMENTED and "shared_memory_region" in e.details()
    finally:
        ch.close()


def health_request(service):
    """grpc.health.v1.HealthCheckRequest{service}, encoded by hand (field 1, a string)."""
    data = service.encode()
    assert len(data) < 128
    return b"\x0a" + bytes([len(data)]) + data if data else b""


SERVING, NOT_SERVING, SERVICE_UNKNOWN = b"\x08\x01", b"\x08\x02", b"\x08\x03"


def test_health_check_answers_the_server_and_its_readiness(channel):
    check = channel.unary_unary("/grpc.health.v1.Health/Check",
                                request_serializer=health_request,
                                response_deserializer=lambda b: b)
    assert check("", timeout=10) == SERVING
    assert check("inference.GRPCInferenceService", timeout=10) == SERVING
    with pytest.raises(grpc.RpcError) as e:
        check("no.such.Service", timeout=10)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND and "no.such.Service" in e.value.details()


def test_health_watch_streams_until_cancelled_or_shutdown(start_server):
    import signal
    import time
    s = start_server([str(FIXTURE_REPO)], ["--model-control-mode", "explicit",
                                           "--load-model", "identity_fp32"],
                     name="grpc_watch", ready_models=["identity_fp32"])
    ch = grpc.insecure_channel("127.0.0.1:%d" % s.grpc_port())
    try:
        watch = ch.unary_stream("/grpc.health.v1.Health/Watch",
                                request_serializer=health_request,
                                response_deserializer=lambda b: b)
        # An unknown service is watched too, as gRPC's own service does.
        unknown = watch("no.such.Service", timeout=60)
        assert next(unknown) == SERVICE_UNKNOWN
        unknown.cancel()
        # A cancelled watch leaves the server serving.
        stub = pb_grpc.GRPCInferenceServiceStub(ch)
        out = stub.ModelInfer(infer_fp32("identity_fp32", [5.0]), timeout=30)
        assert np.frombuffer(out.raw_output_contents[0], dtype=np.float32).tolist() == [5.0]
        # A watch kept open sees NOT_SERVING at shutdown and ends, without holding the
        # shutdown for gRPC's 30 s drain.
        stream = watch("", timeout=60)
        assert next(stream) == SERVING
        t0 = time.monotonic()
        s.send_signal(signal.SIGTERM)
        assert next(stream) == NOT_SERVING
        with pytest.raises(StopIteration):
            next(stream)
        assert stream.code() == grpc.StatusCode.OK
        code = s.wait(timeout=60)
        took = time.monotonic() - t0
        s.assert_clean_exit(code)
        assert took < 15, "the server took %.1fs to stop with a health watch open" % took
    finally:
        ch.close()


def test_log_settings_report_the_command_lines_log(start_server, tmp_path):
    # LogSettings reports what --log-* set at start-up, accepts those values again, and refuses
    # to change them, naming the flag.
    log_file = tmp_path / "grpc-log.txt"
    start_server([str(FIXTURE_REPO)], ["--model-control-mode", "explicit",
                                       "--log-format=ISO8601", "--log-file", str(log_file)],
                 name="grpc_log", launch_only=True)
    port = None
    deadline = time.monotonic() + 60
    while port is None and time.monotonic() < deadline:
        text = log_file.read_text() if log_file.exists() else ""
        for line in text.splitlines():
            if "gRPC listening on" in line:
                port = int(line.rsplit(":", 1)[1])
        time.sleep(0.05)
    assert port, "no gRPC port in %s" % log_file
    ch = grpc.insecure_channel("127.0.0.1:%d" % port)
    try:
        stub = pb_grpc.GRPCInferenceServiceStub(ch)
        got = stub.LogSettings(pb.LogSettingsRequest(), timeout=30).settings
        assert got["log_format"].string_param == "ISO8601"
        assert got["log_file"].string_param == str(log_file)
        assert got["log_info"].bool_param
        same = pb.LogSettingsRequest()
        same.settings["log_format"].string_param = "ISO8601"
        same.settings["log_info"].bool_param = True
        assert stub.LogSettings(same, timeout=30).settings["log_format"].string_param == "ISO8601"
        # The log moves to another file of the same folder, and only there.
        outside = pb.LogSettingsRequest()
        outside.settings["log_file"].string_param = "/etc/vramd.log"
        e = rpc_error(stub.LogSettings, outside)
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and "not a file in the folder" in e.details()
        second = tmp_path / "second-log.txt"
        move = pb.LogSettingsRequest()
        move.settings["log_file"].string_param = str(second)
        move.settings["log_format"].string_param = "default"
        got = stub.LogSettings(move, timeout=30).settings
        assert got["log_file"].string_param == str(second)
        load = pb.RepositoryModelLoadRequest(model_name="identity_fp32")
        stub.RepositoryModelLoad(load, timeout=60)
        assert "identity_fp32" in second.read_text()
        assert "log continues in %s" % second in log_file.read_text()
    finally:
        ch.close()


def test_channel_arguments_from_the_environment(start_server, monkeypatch, tmp_path):
    # VRAMD_GRPC_CHANNEL_ARGS (docs/grpc.md): integer channel arguments for measuring the
    # transport. A large frame size still carries a 4 MiB call whole; a malformed entry stops
    # the server at start with a message naming it.
    monkeypatch.setenv("VRAMD_GRPC_CHANNEL_ARGS",
                       "grpc.http2.max_frame_size=16777215,grpc.http2.lookahead_bytes=8388608")
    s = start_server([FIXTURE_REPO], ["--model-control-mode", "explicit",
                                      "--load-model", "identity_fp32"],
                     name="grpc_channel_args", ready_models=["identity_fp32"])
    assert "gRPC channel argument grpc.http2.max_frame_size=16777215" in s.log()
    with grpc.insecure_channel("127.0.0.1:%d" % s.grpc_port(),
                               options=[("grpc.max_receive_message_length", -1)]) as ch:
        x = np.arange(1 << 20, dtype=np.float32)
        out = pb_grpc.GRPCInferenceServiceStub(ch).ModelInfer(
            infer_fp32("identity_fp32", x), timeout=60)
        assert np.array_equal(np.frombuffer(out.raw_output_contents[0], np.float32), x)
    monkeypatch.setenv("VRAMD_GRPC_CHANNEL_ARGS", "grpc.http2.max_frame_size=big")
    bad = start_server([FIXTURE_REPO], [], name="grpc_bad_channel_args", launch_only=True)
    assert bad.wait() == 1
    assert ("VRAMD_GRPC_CHANNEL_ARGS: gRPC channel argument 'grpc.http2.max_frame_size=big' is "
            "not name=integer") in bad.log()
