#!/usr/bin/python3
"""Writes the seed corpora of the fuzz targets into tests/fuzz/corpus/<target>/ and the
dictionaries into tests/fuzz/dict/. Run it again after changing it; the outputs are committed.

Seeds are real inputs: request bodies built by the end-to-end tests' client (tests/e2e/v2client)
for the models of the fuzz fixture (tests/fuzz/fuzz_support.cc), HTTP requests as clients send
them, config.pbtxt files from tests/fixtures and a few public Triton configs
(../shared/fixtures/triton-configs), the same configs as JSON, and valid safetensors files.
Each target's input format (a leading options byte, for some) is described in its .cc file.

Usage: /usr/bin/python3 tests/fuzz/make_corpus.py
"""

import json
import pathlib
import shutil
import struct
import sys

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
from v2client import Input, build_infer_body  # noqa: E402

CORPUS = HERE / "corpus"
DICT = HERE / "dict"

# The fixture's models (fuzz_support.cc), in its order; the repository target picks them by
# index from its first byte.
MODELS = ["add_sub", "identity_int32", "identity_bytes", "identity_bool", "batched_fp16",
          "reshaped_bf16", "labelled_fp64", "versioned_int64", "broken"]

# A handful of the public Triton configs, chosen for the fields they use (ensembles and
# sequence batching that vramd skips, instance groups, dynamic batching, strings, reshapes).
TRITON_CONFIGS = ["simple.pbtxt", "simple_string.pbtxt", "simple_sequence.pbtxt",
                  "densenet_onnx.pbtxt", "inception_onnx.pbtxt", "bert_base_trt_gpu.pbtxt",
                  "mock_llm.pbtxt", "identity_py.pbtxt", "peoplenet.pbtxt"]


def write(target, name, data):
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data if isinstance(data, bytes) else data.encode())


def infer_bodies():
    """(name, body, json_length or None) for each request."""
    f32 = np.arange(16, dtype=np.float32).reshape(1, 16)
    out = []

    def add(name, inputs, **kw):
        body, headers = build_infer_body(inputs, **kw)
        length = headers.get("Inference-Header-Content-Length")
        out.append((name, body, int(length) if length else None))

    add("add_sub_json", [Input("INPUT0", "FP32", f32), Input("INPUT1", "FP32", f32 + 1)],
        request_id="42")
    add("add_sub_binary", [Input("INPUT0", "FP32", f32, binary=True),
                           Input("INPUT1", "FP32", f32, binary=True)],
        binary_data_output=True)
    add("add_sub_mixed_outputs", [Input("INPUT0", "FP32", f32), Input("INPUT1", "FP32", f32, binary=True)],
        outputs=[("OUTPUT0", True), "OUTPUT1"])
    add("int32_nested", [Input("INPUT0", "INT32", np.array([1, -2, 2147483647], dtype=np.int32),
                               json_data=[[1], [-2], [2147483647]], shape=[3])])
    add("bytes_json", [Input("INPUT0", "BYTES", [b"hello", b"", "\u00e9t\u00e9".encode()])])
    add("bytes_binary", [Input("INPUT0", "BYTES", [b"\x00\xff", b"abc"], binary=True)],
        outputs=[{"name": "OUTPUT0", "parameters": {"binary_data": True}}])
    add("bool", [Input("INPUT0", "BOOL", np.array([[True, False], [False, True]]))])
    add("fp16_batched", [Input("INPUT0", "FP16", np.full((2, 2, 3), 0.5, dtype=np.float16))],
        parameters={"timeout": 1000000})
    add("bf16_reshaped", [Input("INPUT0", "BF16", np.zeros((1, 4), dtype=np.uint16), binary=True)])
    add("fp64_classification", [Input("INPUT0", "FP64", np.array([0.1, 3.5, -1e300, 2.0]))],
        outputs=[{"name": "OUTPUT0", "parameters": {"classification": 2}}])
    add("uint8_optional", [Input("INPUT0", "FP64", np.zeros(4)),
                           Input("INPUT1", "UINT8", np.array([0, 255], dtype=np.uint8), binary=True)])
    add("int64_versioned", [Input("INPUT0", "INT64", np.array([-(2 ** 63), 2 ** 63 - 1], dtype=np.int64))])
    add("all_ints", [Input(f"I{n}", t, np.array([1, 2], dtype=d)) for n, (t, d) in enumerate(
        [("UINT8", np.uint8), ("UINT16", np.uint16), ("UINT32", np.uint32), ("UINT64", np.uint64),
         ("INT8", np.int8), ("INT16", np.int16)])])
    add("shared_memory", [Input("INPUT0", "FP32", shape=[1, 16],
                                parameters={"shared_memory_region": "r", "shared_memory_byte_size": 64})])
    return out


# The protobuf wire format, enough to write ModelInferRequest seeds without the generated
# module (which lives in a build folder): varints, length-delimited fields, packed numbers.
def pb_varint(v):
    v &= (1 << 64) - 1  # negative int64s as two's complement, ten bytes
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def pb_bytes(field, data):
    data = data.encode() if isinstance(data, str) else data
    return pb_varint(field << 3 | 2) + pb_varint(len(data)) + data


def pb_int(field, v):
    return pb_varint(field << 3) + pb_varint(v)


def pb_packed(field, values, fmt=None):
    body = b"".join(struct.pack("<" + fmt, v) for v in values) if fmt else b"".join(
        pb_varint(v) for v in values)
    return pb_bytes(field, body)


def pb_parameter(value):
    """InferParameter: bool 1, int64 2, string 3, double 4, uint64 5."""
    if isinstance(value, bool):
        return pb_int(1, int(value))
    if isinstance(value, int):
        return pb_int(2, value)
    if isinstance(value, float):
        return pb_varint(4 << 3 | 1) + struct.pack("<d", value)
    return pb_bytes(3, value)


def pb_parameters(field, parameters):
    return b"".join(pb_bytes(field, pb_bytes(1, k) + pb_bytes(2, pb_parameter(v)))
                    for k, v in parameters.items())


def pb_input(name, datatype, shape, contents=b"", parameters=None):
    """A ModelInferRequest's inputs entry (field 5); `contents`: its InferTensorContents."""
    return pb_bytes(5, pb_bytes(1, name) + pb_bytes(2, datatype) + pb_packed(3, shape) +
                    pb_parameters(4, parameters or {}) + (pb_bytes(5, contents) if contents else b""))


def pb_output(name, parameters=None):
    """A ModelInferRequest's outputs entry (field 6)."""
    return pb_bytes(6, pb_bytes(1, name) + pb_parameters(2, parameters or {}))


def grpc_infer_seeds():
    """(name, bytes) of ModelInferRequest messages, each after the target's options byte (bit 0:
    shared memory on, with regions "in" and "out" of 256 bytes)."""
    tensor, output = pb_input, pb_output

    def request(*parts, model="identity", version="", rid="", parameters=None):
        return (pb_bytes(1, model) + (pb_bytes(2, version) if version else b"") +
                (pb_bytes(3, rid) if rid else b"") + pb_parameters(4, parameters or {}) + b"".join(parts))

    f32 = struct.pack("<16f", *range(16))
    seeds = [
        ("raw_fp32", b"\x00" + request(tensor("INPUT0", "FP32", [1, 16]), pb_bytes(7, f32), rid="42")),
        ("raw_two", b"\x00" + request(tensor("INPUT0", "FP32", [16]), tensor("INPUT1", "INT8", [2, 2]),
                                       pb_bytes(7, f32), pb_bytes(7, b"\x01\x02\xff\x80"),
                                       output("OUTPUT0", {"classification": 3}), version="2")),
        ("typed_ints", b"\x00" + request(
            tensor("A", "INT32", [3], pb_packed(2, [1, -2, 2 ** 31 - 1])),
            tensor("B", "UINT16", [2], pb_packed(4, [0, 65535])),
            tensor("C", "INT64", [2], pb_packed(3, [-(2 ** 63), 2 ** 63 - 1])),
            tensor("D", "UINT64", [1], pb_packed(5, [2 ** 64 - 1])),
            tensor("E", "BOOL", [2], pb_packed(1, [1, 0])))),
        ("typed_floats", b"\x00" + request(
            tensor("F", "FP32", [2], pb_packed(6, [0.5, -1e30], "f")),
            tensor("G", "FP64", [2], pb_packed(7, [1e300, -0.0], "d")),
            parameters={"timeout": 1000, "priority": 1, "custom": "x", "flag": True, "ratio": 0.5})),
        ("typed_bytes", b"\x00" + request(
            tensor("S", "BYTES", [3], pb_bytes(8, b"hello") + pb_bytes(8, b"") + pb_bytes(8, b"\xff")),
            parameters={"sequence_id": 7, "sequence_start": True, "sequence_end": False})),
        ("raw_bytes", b"\x00" + request(tensor("S", "BYTES", [2]),
                                         pb_bytes(7, struct.pack("<I", 2) + b"ab" + struct.pack("<I", 0)),
                                         parameters={"sequence_id": "user-7"})),
        ("raw_fp16_bf16", b"\x00" + request(tensor("H", "FP16", [2]), tensor("B", "BF16", [1, 2]),
                                             pb_bytes(7, b"\x00\x3c\x00\x7c"), pb_bytes(7, b"\x80\x3f\x00\x00"))),
        ("empty_shape", b"\x00" + request(tensor("Z", "FP32", [0, 4]))),
        ("shm_in_out", b"\x01" + request(
            tensor("INPUT0", "FP32", [16], parameters={"shared_memory_region": "in",
                                                       "shared_memory_byte_size": 64,
                                                       "shared_memory_offset": 128}),
            output("INPUT0", {"shared_memory_region": "out", "shared_memory_byte_size": 64,
                              "shared_memory_offset": 16}))),
        ("shm_mixed", b"\x01" + request(
            tensor("A", "UINT8", [4], parameters={"shared_memory_region": "in", "shared_memory_byte_size": 4}),
            tensor("B", "INT16", [2]), pb_bytes(7, b"\x01\x00\x02\x00"),
            output("B", {"shared_memory_region": "in", "shared_memory_byte_size": 4,
                         "shared_memory_offset": 200}), output("A"))),
        ("shm_off", b"\x00" + request(
            tensor("INPUT0", "FP32", [16], parameters={"shared_memory_region": "in",
                                                       "shared_memory_byte_size": 64}))),
    ]
    return seeds


def grpc_routes_seeds():
    """(name, bytes) for the gRPC routes target: an options byte (bits 0-2 the RPC: 0 ModelInfer,
    1 a ModelStreamInfer request, 2 ModelMetadata, 3 ModelConfig, 4 ModelReady, 5
    ModelStatistics, 6 RepositoryIndex; bit 3 shared memory on), then the request message, for
    the fixture's models (fuzz_support.cc)."""
    tensor = pb_input

    def infer(model, tensors, raws, version="", outputs=b"", parameters=None):
        return (pb_bytes(1, model) + (pb_bytes(2, version) if version else b"") + pb_bytes(3, "7") +
                pb_parameters(4, parameters or {}) + b"".join(tensors) + outputs +
                b"".join(pb_bytes(7, r) for r in raws))

    f32 = struct.pack("<16f", *range(16))
    requests = [
        ("add_sub", infer("add_sub", [tensor("INPUT0", "FP32", [1, 16]), tensor("INPUT1", "FP32", [1, 16])],
                          [f32, f32])),
        ("int32", infer("identity_int32", [tensor("INPUT0", "INT32", [3])], [struct.pack("<3i", 1, -2, 3)],
                        parameters={"timeout": 100000, "custom": "x"})),
        ("bytes", infer("identity_bytes", [tensor("INPUT0", "BYTES", [2])],
                        [struct.pack("<I", 2) + b"hi" + struct.pack("<I", 0)])),
        ("bool", infer("identity_bool", [tensor("INPUT0", "BOOL", [1, 2])], [b"\x01\x00"])),
        ("fp16_batched", infer("batched_fp16", [tensor("INPUT0", "FP16", [2, 2, 3])], [b"\x00\x3c" * 12])),
        ("bf16_reshaped", infer("reshaped_bf16", [tensor("INPUT0", "BF16", [1, 4])], [b"\x80\x3f" * 4])),
        ("fp64_classified", infer("labelled_fp64", [tensor("INPUT0", "FP64", [4])],
                                  [struct.pack("<4d", 0.1, 3.5, -1.0, 2.0)],
                                  outputs=pb_output("OUTPUT0", {"classification": 2}))),
        ("int64_v2", infer("versioned_int64", [tensor("INPUT0", "INT64", [1])], [struct.pack("<q", -5)],
                           version="2")),
        ("broken", infer("broken", [tensor("INPUT0", "INT32", [1])], [b"\x00" * 4])),
    ]
    seeds = [("infer_" + n, b"\x00" + m) for n, m in requests]
    seeds += [("stream_" + n, b"\x01" + m) for n, m in requests[:3]]
    seeds.append(("infer_shm", b"\x08" + infer(
        "identity_int32", [tensor("INPUT0", "INT32", [4], parameters={
            "shared_memory_region": "in", "shared_memory_byte_size": 16})], [],
        outputs=pb_output("OUTPUT0", {"shared_memory_region": "out", "shared_memory_byte_size": 16,
                                      "shared_memory_offset": 8}))))
    for rpc, name in ((2, "metadata"), (3, "config"), (4, "ready"), (5, "statistics")):
        seeds.append((name, bytes([rpc]) + pb_bytes(1, "labelled_fp64")))
        seeds.append((name + "_version", bytes([rpc]) + pb_bytes(1, "versioned_int64") + pb_bytes(2, "1")))
    seeds.append(("statistics_all", b"\x05"))
    seeds.append(("index", b"\x06" + pb_int(2, 1)))
    return seeds


def http_seeds():
    """(name, bytes) of HTTP requests; each target input starts with its options byte."""
    def req(method, path, body=b"", headers=None, version="HTTP/1.1"):
        h = {"Host": "localhost:8000"}
        h.update(headers or {})
        if body and "Transfer-Encoding" not in h:
            h["Content-Length"] = str(len(body))
        head = f"{method} {path} {version}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items())
        return head.encode() + b"\r\n" + body

    def chunked(body, trailer=b""):
        return b"%x\r\n" % len(body) + body + b"\r\n0\r\n" + trailer + b"\r\n"

    seeds = []
    # Byte 0: chunk index 7 (64 KiB reads), default body limit; some seeds read in 1-byte and
    # 17-byte pieces, one with the 100-byte body limit.
    for name, path in [("live", "/v2/health/live"), ("ready", "/v2/health/ready"),
                       ("server", "/v2"), ("model", "/v2/models/add_sub"),
                       ("model_version", "/v2/models/versioned_int64/versions/2"),
                       ("model_ready", "/v2/models/identity_int32/ready"),
                       ("config", "/v2/models/labelled_fp64/config"),
                       ("stats", "/v2/models/stats"), ("model_stats", "/v2/models/add_sub/stats"),
                       ("memory", "/v2/memory"), ("lifecycle", "/v2/repository/models/add_sub/lifecycle"),
                       ("percent", "/v2/models/add%5Fsub?x=1")]:
        seeds.append((f"get_{name}", b"\x07" + req("GET", path)))
    # The fuzz target restricts statistics and model-config behind `x-key: k` and forwards
    # x-fwd- headers: the same requests with the key, with a wrong one, and forwarding.
    for name, path, headers in [
            ("stats_key", "/v2/models/stats", {"X-Key": "k"}),
            ("config_key", "/v2/models/labelled_fp64/config", {"x-key": "k", "X-Key": "no"}),
            ("config_wrong_key", "/v2/models/labelled_fp64/config", {"X-Key": "K"})]:
        seeds.append((f"get_{name}", b"\x07" + req("GET", path, headers=headers)))
    seeds.append(("index", b"\x07" + req("POST", "/v2/repository/index", b'{"ready": true}')))
    seeds.append(("load_refused", b"\x07" + req("POST", "/v2/repository/models/add_sub/load", b"{}")))
    for name, body, length in infer_bodies()[:6]:
        model = {"add": "add_sub", "int": "identity_int32", "byt": "identity_bytes",
                 "boo": "identity_bool"}[name[:3]]
        headers = {"Content-Type": "application/json"}
        if length is not None:
            headers = {"Content-Type": "application/octet-stream",
                       "Inference-Header-Content-Length": str(length)}
        seeds.append((f"infer_{name}", b"\x07" + req("POST", f"/v2/models/{model}/infer", body, headers)))
    raw = np.arange(8, dtype=np.int32).tobytes()
    seeds.append(("infer_raw_binary", b"\x07" + req("POST", "/v2/models/identity_int32/versions/1/infer", raw,
                                                    {"Inference-Header-Content-Length": "0"})))
    body = build_infer_body([Input("INPUT0", "INT32", np.array([5, 6], dtype=np.int32))])[0]
    seeds.append(("infer_chunked_trailer", b"\x02" + req(
        "POST", "/v2/models/identity_int32/infer", chunked(body, b"X-Checksum: 1\r\n"),
        {"Transfer-Encoding": "chunked"})))
    seeds.append(("pipelined", b"\x07" + req("GET", "/v2/health/live") +
                  req("POST", "/v2/models/identity_int32/infer", body) +
                  req("GET", "/v2/models/stats", headers={"Connection": "close"})))
    seeds.append(("http10", b"\x00" + req("GET", "/v2", version="HTTP/1.0")))
    seeds.append(("expect_continue", b"\x07" + req("POST", "/v2/models/identity_int32/infer", body,
                                                   {"Expect": "100-continue"})))
    seeds.append(("body_limit", b"\x0f" + req("POST", "/v2/models/identity_int32/infer", body + b" " * 100)))
    seeds.append(("te_and_length", b"\x07" + req("POST", "/v2/models/identity_int32/infer", chunked(body),
                                                 {"Transfer-Encoding": "gzip, chunked",
                                                  "Content-Length": "4"})))
    return seeds


def pbtxt_to_json_seeds():
    """Configs as Triton-style JSON (what GET .../config returns and load overrides take)."""
    tensor = lambda n, t, d, **kw: dict({"name": n, "data_type": t, "dims": d}, **kw)  # noqa: E731
    return {
        "add_sub": {"name": "add_sub", "backend": "add_sub", "max_batch_size": 8,
                    "input": [tensor("INPUT0", "TYPE_FP32", [16]), tensor("INPUT1", "TYPE_FP32", [16])],
                    "output": [tensor("OUTPUT0", "TYPE_FP32", [16]), tensor("OUTPUT1", "TYPE_FP32", [16])],
                    "instance_group": [{"count": 1, "kind": "KIND_CPU"}]},
        "identity_camel": {"backend": "identity", "maxBatchSize": 4,
                           "input": [{"name": "INPUT0", "dataType": "TYPE_INT32", "dims": ["-1"]}],
                           "output": [{"name": "OUTPUT0", "dataType": "TYPE_INT32", "dims": ["-1"]}],
                           "dynamicBatching": {"preferredBatchSize": [2, 4],
                                               "maxQueueDelayMicroseconds": "100"}},
        "everything": {
            "name": "identity_bytes", "platform": "", "backend": "identity",
            "version_policy": {"specific": {"versions": [1, "2"]}}, "max_batch_size": 2,
            "input": [tensor("INPUT0", "TYPE_STRING", [-1], format="FORMAT_NONE", optional=True,
                             reshape={"shape": [-1]}, allow_ragged_batch=False)],
            "output": [tensor("OUTPUT0", "TYPE_STRING", [-1], label_filename="labels.txt")],
            "instance_group": [{"name": "g", "kind": "KIND_CPU", "count": 2, "gpus": []}],
            "default_model_filename": "model.pt",
            "dynamic_batching": {"priority_levels": 2, "default_priority_level": 1,
                                 "default_queue_policy": {"timeout_action": "DELAY",
                                                          "default_timeout_microseconds": 5,
                                                          "allow_timeout_override": True,
                                                          "max_queue_size": 3},
                                 "priority_queue_policy": {"1": {"timeout_action": 1}}},
            "parameters": {"reload_policy": {"string_value": "resource_preserving"}},
            "model_warmup": [{"name": "w", "batch_size": 1, "count": 1,
                              "inputs": {"INPUT0": {"data_type": "TYPE_STRING", "dims": [1],
                                                    "zero_data": True}}}]},
        "version_latest": {"backend": "identity", "version_policy": {"latest": {"num_versions": 2}},
                           "input": [tensor("INPUT0", "TYPE_INT64", [-1])],
                           "output": [tensor("OUTPUT0", "TYPE_INT64", [-1])]},
    }


def safetensors_file(tensors, metadata=None, pad_to=8):
    """tensors: list of (name, dtype, shape, bytes), laid out in order."""
    header, offset = {}, 0
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    if metadata is not None:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((-len(text)) % pad_to)
    return struct.pack("<Q", len(text)) + text + b"".join(t[3] for t in tensors)


def dictionary(tokens):
    lines = []
    for t in tokens:
        b = t.encode() if isinstance(t, str) else t
        lines.append('"' + "".join(chr(c) if 32 <= c < 127 and c not in (34, 92) else "\\x%02X" % c
                                   for c in b) + '"')
    return "\n".join(lines) + "\n"


def proto_tokens():
    """Field names (and their lowerCamel JSON names) and enum value names of model_config.proto."""
    names = set()
    for line in (ROOT / "src" / "config" / "model_config.proto").read_text().splitlines():
        parts = line.split("//")[0].replace(";", " ").split()
        if "=" in parts:
            i = parts.index("=")
            if i >= 1 and parts[i - 1] not in ("syntax",):
                names.add(parts[i - 1])
                if "_" in parts[i - 1] and not parts[i - 1].isupper():
                    head, *rest = parts[i - 1].split("_")
                    names.add(head + "".join(w.capitalize() for w in rest))
    return sorted(names)


def write_regressions():
    """The two crashes of issue 12 that these targets must never meet again (each was one
    request that killed the server): a chunked trailer field of 65,535 bytes or more (Beast threw
    std::length_error out of the I/O thread) and JSON nested ~120k deep in a repository body or
    a config override (the recursive parser overflowed the stack)."""
    def put(target, name, data):
        d = HERE / "regressions" / target
        d.mkdir(parents=True, exist_ok=True)
        (d / name).write_bytes(data)

    trailer = (b"POST /v2/models/identity_int32/infer HTTP/1.1\r\nHost: x\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n1\r\n{\r\n0\r\nX-T: " + b"a" * 70000 + b"\r\n\r\n")
    put("http_request", "issue12_trailer_70000", b"\x07" + trailer)
    deep = b"[" * 120000
    index = lambda model, action: bytes([MODELS.index(model) * 3 + action])  # noqa: E731
    put("repository_api", "issue12_index_nested", index("add_sub", 0) + deep)
    put("repository_api", "issue12_load_nested", index("identity_int32", 1) + deep)
    put("repository_api", "issue12_unload_nested", index("identity_int32", 2) + deep)
    put("repository_api", "issue12_override_nested", index("identity_int32", 1) +
        b'{"parameters": {"config": "' + deep + b'"}}')
    put("config_json", "issue12_nested", deep)


def main():
    shutil.rmtree(CORPUS, ignore_errors=True)
    write_regressions()
    DICT.mkdir(exist_ok=True)

    for name, data in http_seeds():
        write("http_request", name, data)
    for name, data in grpc_infer_seeds():
        write("grpc_infer_codec", name, data)
    for name, data in grpc_routes_seeds():
        write("grpc_routes", name, data)

    for name, body, length in infer_bodies():
        if length is None:
            write("infer_codec", name, b"\x00" + body)
        else:
            write("infer_codec", name, b"\x01" + struct.pack("<H", length) + body)

    configs = pbtxt_to_json_seeds()
    for name, config in configs.items():
        write("config_json", name, json.dumps(config))
    index = lambda model, action: bytes([MODELS.index(model) * 3 + action])  # noqa: E731
    write("repository_api", "index_ready", index("add_sub", 0) + b'{"ready": true}')
    write("repository_api", "index_empty", index("add_sub", 0))
    write("repository_api", "load_plain", index("identity_int32", 1))
    write("repository_api", "unload", index("batched_fp16", 2) + b'{"parameters": {}}')
    write("repository_api", "load_file_param", index("add_sub", 1) + b'{"parameters": {"file:1/model.pt": "AAAA"}}')
    for model, key in [("add_sub", "add_sub"), ("identity_bytes", "everything"),
                       ("versioned_int64", "version_latest"), ("identity_int32", "identity_camel")]:
        body = json.dumps({"parameters": {"config": json.dumps(configs[key])}})
        write("repository_api", f"load_override_{key}", index(model, 1) + body.encode())

    pbtxt = sorted((ROOT / "tests" / "fixtures" / "configs").glob("*.pbtxt"))
    pbtxt += [ROOT / "tests" / "fixtures" / "models" / m / "config.pbtxt"
              for m in ("add_sub", "identity_batching", "optional_input", "versioned")]
    shared = ROOT.parent / "shared" / "fixtures" / "triton-configs"
    pbtxt += [shared / n for n in TRITON_CONFIGS if (shared / n).exists()]
    for p in pbtxt:
        name = p.stem if p.name != "config.pbtxt" else "model_" + p.parent.name
        write("config_pbtxt", name, p.read_bytes())

    f32 = np.arange(6, dtype="<f4").tobytes()
    write("safetensors", "one_f32", safetensors_file([("w", "F32", [2, 3], f32)]))
    write("safetensors", "mlp_like", safetensors_file(
        [("layer0.weight", "F32", [4, 2], np.ones(8, dtype="<f4").tobytes()),
         ("layer0.bias", "F32", [4], np.zeros(4, dtype="<f4").tobytes()),
         ("layer1.weight", "BF16", [1, 4], b"\x80\x3f" * 4)],
        metadata={"format": "pt", "note": "vramd fuzz seed"}))
    write("safetensors", "dtypes", safetensors_file(
        [(d, d, [2], bytes(2 * s)) for d, s in
         [("BOOL", 1), ("U8", 1), ("I8", 1), ("F8_E5M2", 1), ("F8_E4M3", 1), ("I16", 2), ("U16", 2),
          ("F16", 2), ("BF16", 2), ("I32", 4), ("U32", 4), ("F32", 4), ("F64", 8), ("I64", 8),
          ("U64", 8)]]))
    write("safetensors", "scalar_and_empty", safetensors_file(
        [("scalar", "F64", [], struct.pack("<d", 1.5)), ("empty", "I32", [0, 3], b"")], pad_to=1))
    write("safetensors", "header_only", safetensors_file([], metadata={}))

    (DICT / "http_request.dict").write_text(dictionary(
        ["GET ", "POST ", "PUT ", "HEAD ", " HTTP/1.1\r\n", " HTTP/1.0\r\n", "\r\n", "\r\n\r\n",
         "Host: ", "Content-Length: ", "Transfer-Encoding: chunked\r\n", "Transfer-Encoding: ",
         "Connection: close\r\n", "Connection: keep-alive\r\n", "Expect: 100-continue\r\n",
         "Inference-Header-Content-Length: ", "Content-Type: application/json\r\n",
         "0\r\n\r\n", ";ext=1", "/v2", "/v2/health/live", "/v2/health/ready", "/v2/models/",
         "/versions/", "/infer", "/ready", "/config", "/stats", "/v2/models/stats", "/v2/memory",
         "/v2/repository/index", "/v2/repository/models/", "/load", "/unload", "/lifecycle",
         "%2F", "%00", "?", "X-Key: k\r\n", "x-key: ", "X-Fwd-"] + MODELS + ['"inputs"', '"outputs"', '"datatype"', '"shape"', '"data"',
                                        '"binary_data_size"', '"INT32"', '"FP32"', '"BYTES"']))
    infer_tokens = ['"id"', '"inputs"', '"outputs"', '"name"', '"shape"', '"datatype"', '"data"',
                    '"parameters"', '"binary_data_size"', '"binary_data"', '"binary_data_output"',
                    '"classification"', '"timeout"', '"shared_memory_region"', "true", "false",
                    "null", "1e308", "-0.0", "65504", "\\u0000", "\\ud800", "[[", "]]"]
    infer_tokens += ['"%s"' % t for t in ["BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8",
                                          "INT16", "INT32", "INT64", "FP16", "FP32", "FP64",
                                          "BYTES", "BF16"]]
    infer_tokens += ['"INPUT0"', '"INPUT1"', '"OUTPUT0"', '"OUTPUT1"']
    (DICT / "infer_codec.dict").write_text(dictionary(infer_tokens))
    grpc_tokens = (["shared_memory_region", "shared_memory_offset", "shared_memory_byte_size",
                    "in", "out", "classification", "timeout", "priority", "sequence_id",
                    "sequence_start", "sequence_end", "triton_", "binary_data_output", "INPUT0",
                    "INPUT1", "OUTPUT0", "OUTPUT1"] +
                   ["BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32",
                    "INT64", "FP16", "BF16", "FP32", "FP64", "BYTES"])
    (DICT / "grpc_routes.dict").write_text(dictionary(grpc_tokens + MODELS))
    (DICT / "grpc_infer_codec.dict").write_text(dictionary(
        ["shared_memory_region", "shared_memory_offset", "shared_memory_byte_size", "in", "out",
         "classification", "timeout", "priority", "sequence_id", "sequence_start", "sequence_end",
         "triton_", "binary_data_output", "INPUT0", "OUTPUT0", "BOOL", "UINT8", "UINT16", "UINT32",
         "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16", "BF16", "FP32", "FP64", "BYTES"]))
    config_tokens = ['"%s"' % t for t in proto_tokens()] + ['"string_value"', '"reload_policy"',
                                                            '"resource_preserving"', '"identity"',
                                                            '"add_sub"', '"mlp"', '"pytorch"']
    (DICT / "config_json.dict").write_text(dictionary(config_tokens))
    (DICT / "repository_api.dict").write_text(dictionary(
        config_tokens + ['"ready"', '"config"', '"file:"', '"parameters"', '\\"', "{\\\"", "\\\":"]))
    (DICT / "config_pbtxt.dict").write_text(dictionary(
        proto_tokens() + [": ", " { ", " } ", " [ ", " ] ", '"', "#", "\n", "-1", "0x", "true"]))
    (DICT / "safetensors.dict").write_text(dictionary(
        ['"dtype"', '"shape"', '"data_offsets"', '"__metadata__"', "BOOL", "U8", "I8", "F8_E5M2",
         "F8_E4M3", "F8_E8M0", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "F64", "I64",
         "U64", "F4", "18446744073709551615", "9223372036854775807"]))


if __name__ == "__main__":
    main()
