#!/usr/bin/python3
"""Writes models for vramd's built-in `mlp` backend, and reference results for them.

  make_mlp_model.py model OUT_DIR --inputs K (--hidden H,H,... | --target-bytes SIZE) --outputs N
        [--dtype fp32|fp16] [--seed S] [--max-batch-size B] [--instances C] [--kind cpu|gpu]
        [--hidden-layers L] [--name NAME] [--version V]
    Writes a Triton-style model directory: OUT_DIR/config.pbtxt and OUT_DIR/V/model.safetensors
    with tensors layers.{i}.weight [out, in] and layers.{i}.bias [out] (ReLU between layers).
    --target-bytes (e.g. 64MiB, 1GiB) picks one hidden width H for L hidden layers (default 2)
    so that the weights take about that many bytes; --hidden gives the widths instead.
    Weights are He-initialised from --seed (numpy's default_rng), so a model is reproducible.

  make_mlp_model.py reference MODEL_DIR OUT_FILE [--batch B] [--seed S] [--version V]
    Reads MODEL_DIR/V/model.safetensors, draws B inputs uniform in [-1, 1) from --seed and
    writes them with the outputs numpy computes (in float64, from the file's weights; F16
    weights widened exactly) to OUT_FILE: a safetensors file with tensors "input" [B, K] and
    "output" [B, N] (F32), or JSON {"input": [[...]], "output": [[...]]} when OUT_FILE ends in
    .json.

The safetensors format is written and read here directly (an 8-byte little-endian header
size, a JSON header, the raw data); only numpy is needed. Run with /usr/bin/python3.
"""
import argparse
import json
import math
import os
import re
import struct
import sys

import numpy as np

DTYPES = {"fp32": ("F32", np.float32), "fp16": ("F16", np.float16)}
NUMPY_OF = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "F64": np.dtype("<f8")}


def parse_size(text):
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?i?B?)?\s*", text, re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 1048576, 64MiB, 1GiB)")
    unit = (m.group(2) or "").upper().rstrip("B").rstrip("I")
    scale = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[unit]
    return int(float(m.group(1)) * scale)


def write_safetensors(path, tensors, metadata=None):
    """tensors: list of (name, dtype name, numpy array), written in that order."""
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    for name, dtype, array in tensors:
        size = array.nbytes
        header[name] = {"dtype": dtype, "shape": list(array.shape),
                        "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)  # the data starts 8-byte aligned
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, dtype, array in tensors:
            np.ascontiguousarray(array, dtype=NUMPY_OF[dtype]).tofile(f)
    os.replace(tmp, path)


def read_safetensors(path):
    """{name: numpy array} (F32, F16 and F64 only)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    base = 8 + n
    out = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        dtype = NUMPY_OF[info["dtype"]]
        out[name] = np.frombuffer(data[base + begin:base + end], dtype=dtype).reshape(info["shape"])
    return out


def hidden_width_for(target_bytes, k, n, layers, element):
    """The hidden width H with `layers` hidden layers whose weights are about target_bytes."""
    params = target_bytes / element
    # params = k*H + H + (layers-1)*(H*H + H) + H*n + n
    a, b, c = layers - 1, k + n + layers, n - params
    h = -c / b if a == 0 else (-b + math.sqrt(b * b - 4 * a * c)) / (2 * a)
    return max(1, int(round(h)))


def config_text(args, widths):
    kind = "KIND_GPU" if args.kind == "gpu" else "KIND_CPU"
    return f"""# Written by scripts/make_mlp_model.py: {' -> '.join(map(str, widths))}, {args.dtype} weights,
# ReLU between layers, seed {args.seed}. Requests: {args.input_name} of shape [batch, {widths[0]}],
# batch 1..{args.max_batch_size}; the response's {args.output_name} has shape [batch, {widths[-1]}].
name: "{args.name}"
backend: "mlp"
max_batch_size: {args.max_batch_size}
input [
  {{
    name: "{args.input_name}"
    data_type: TYPE_FP32
    dims: [ {widths[0]} ]
  }}
]
output [
  {{
    name: "{args.output_name}"
    data_type: TYPE_FP32
    dims: [ {widths[-1]} ]
  }}
]
instance_group [
  {{
    count: {args.instances}
    kind: {kind}
  }}
]
"""


def make_model(args):
    dtype_name, np_dtype = DTYPES[args.dtype]
    if args.target_bytes is not None:
        element = np.dtype(np_dtype).itemsize
        h = hidden_width_for(args.target_bytes, args.inputs, args.outputs, args.hidden_layers,
                             element)
        hidden = [h] * args.hidden_layers
    else:
        hidden = [int(x) for x in args.hidden.split(",") if x.strip()] if args.hidden else []
    widths = [args.inputs] + hidden + [args.outputs]
    if min(widths) < 1:
        sys.exit("make_mlp_model.py: every width must be at least 1")
    args.name = args.name or os.path.basename(os.path.normpath(args.out_dir))
    rng = np.random.default_rng(args.seed)
    tensors = []
    for i, (fan_in, fan_out) in enumerate(zip(widths[:-1], widths[1:])):
        w = rng.standard_normal((fan_out, fan_in), dtype=np.float32)
        w *= np.float32(math.sqrt(2.0 / fan_in))
        b = (rng.standard_normal(fan_out, dtype=np.float32) * np.float32(0.1))
        tensors.append((f"layers.{i}.weight", dtype_name, w.astype(np_dtype)))
        tensors.append((f"layers.{i}.bias", dtype_name, b.astype(np_dtype)))
    version_dir = os.path.join(args.out_dir, str(args.version))
    os.makedirs(version_dir, exist_ok=True)
    write_safetensors(os.path.join(version_dir, "model.safetensors"), tensors,
                      {"format": "vramd-mlp", "widths": ",".join(map(str, widths)),
                       "seed": args.seed})
    with open(os.path.join(args.out_dir, "config.pbtxt"), "w") as f:
        f.write(config_text(args, widths))
    total = sum(t[2].nbytes for t in tensors)
    print(f"{args.out_dir}: {' -> '.join(map(str, widths))}, {args.dtype}, {total} bytes of weights")


def forward(weights, x):
    """numpy reference, float64: relu between layers, none after the last."""
    count = len([k for k in weights if k.endswith(".weight")])
    y = x.astype(np.float64)
    for i in range(count):
        w = weights[f"layers.{i}.weight"].astype(np.float64)
        b = weights[f"layers.{i}.bias"].astype(np.float64)
        y = y @ w.T + b
        if i != count - 1:
            y = np.maximum(y, 0.0)
    return y


def make_reference(args):
    weights = read_safetensors(os.path.join(args.model_dir, str(args.version), "model.safetensors"))
    k = weights["layers.0.weight"].shape[1]
    rng = np.random.default_rng(args.seed)
    x = rng.uniform(-1.0, 1.0, size=(args.batch, k)).astype(np.float32)
    y = forward(weights, x).astype(np.float32)
    if args.out_file.endswith(".json"):
        with open(args.out_file, "w") as f:
            json.dump({"input": x.tolist(), "output": y.tolist()}, f)
            f.write("\n")
    else:
        write_safetensors(args.out_file, [("input", "F32", x), ("output", "F32", y)],
                          {"format": "vramd-mlp-reference", "seed": args.seed})
    print(f"{args.out_file}: {args.batch} inputs of {k} and their {y.shape[1]} outputs")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    m = sub.add_parser("model", help="write a model directory")
    m.add_argument("out_dir")
    m.add_argument("--inputs", type=int, required=True, help="K, the input width")
    m.add_argument("--hidden", default="", help="hidden widths, comma-separated (e.g. 64,64)")
    m.add_argument("--outputs", type=int, required=True, help="N, the output width")
    m.add_argument("--target-bytes", type=parse_size, help="size the hidden layers for this "
                   "many bytes of weights (e.g. 64MiB, 1GiB); overrides --hidden")
    m.add_argument("--hidden-layers", type=int, default=2, help="with --target-bytes (default 2)")
    m.add_argument("--dtype", choices=sorted(DTYPES), default="fp32")
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--max-batch-size", type=int, default=8)
    m.add_argument("--instances", type=int, default=1)
    m.add_argument("--kind", choices=["cpu", "gpu"], default="cpu")
    m.add_argument("--name", help="model name (default: OUT_DIR's last component)")
    m.add_argument("--version", type=int, default=1)
    m.add_argument("--input-name", default="INPUT0")
    m.add_argument("--output-name", default="OUTPUT0")
    r = sub.add_parser("reference", help="write reference inputs and outputs")
    r.add_argument("model_dir")
    r.add_argument("out_file")
    r.add_argument("--batch", type=int, default=4)
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--version", type=int, default=1)
    args = p.parse_args()
    if args.command == "model":
        make_model(args)
    else:
        make_reference(args)


if __name__ == "__main__":
    main()
