#!/usr/bin/env python3
"""Writes the TorchScript model of the pytorch-backend benchmarks, a Triton-style repository that
serves it, and the request files the load generators send.

  make_model.py OUT [--name resnet_small] [--arch resnet|mlp] [--image 112] [--width 64]
                [--instances 1] [--kind gpu|cpu] [--max-batch-size 8] [--seed 0]

Writes
  OUT/repo/<name>/config.pbtxt   platform "pytorch_libtorch", INPUT__0 / OUTPUT__0 (FP32),
                                 instance_group [{ kind: KIND_GPU count: N }]
  OUT/repo/<name>/1/model.pt     the module, torch.jit.script'ed and torch.jit.save'd (on CPU)
  OUT/input.bin                  one request's input, raw little-endian FP32, shape meta.input_shape
  OUT/output.bin                 the module's output for it, computed here on the CPU (reference)
  OUT/request.bin                the same input as a KServe v2 body with Triton's binary tensor
                                 extension (JSON header, then the tensor bytes; output asked for in
                                 binary); its JSON part is meta.header_length bytes long
  OUT/request.json               the same request as plain JSON (output in JSON)
  OUT/meta.json                  name, paths, shapes, header_length, parameter count, the config

The model (the benchmark's choice; see bench/torch/throughput_compare.py):
  resnet  (default) a ResNet-18-like conv net written with torch.nn only (torchvision is not
          needed): a 3x3 stem conv at full resolution, 4 stages of 2 residual blocks (width,
          2x, 4x, 8x channels, stride 2 between stages), global average pool, a 1000-way linear
          layer. No batch norm (a served model would have it folded into the convs). At batch 1
          and 112x112 it does about 14 GFLOP per forward in 20 convs: some hundreds of
          microseconds of GPU work per call on an H200, so that serving overhead, not Python or
          kernel launches alone, is what a comparison sees. 11 M parameters (45 MB FP32).
  mlp     4 dense layers of 4096 units with ReLU (input 4096, output 1000): GEMV-bound at batch 1.

Runs with torch 1.13 (CPU) and torch 2.x (CUDA) alike; nothing else is needed (no numpy).
The module can also be imported: write_config() is used by memory_compare.py.
"""
import argparse
import json
import os
import struct
import sys

import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1)
        self.relu = nn.ReLU()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Conv2d(cin, cout, 1, stride, 0)
        else:
            self.shortcut = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.conv1(x))
        y = self.conv2(y)
        return self.relu(y + self.shortcut(x))


class ResNetSmall(nn.Module):
    def __init__(self, width: int = 64, classes: int = 1000):
        super().__init__()
        self.stem = nn.Conv2d(3, width, 3, 1, 1)
        self.relu = nn.ReLU()
        layers = []
        cin = width
        for i, mult in enumerate((1, 2, 4, 8)):
            cout = width * mult
            stride = 1 if i == 0 else 2
            layers.append(Block(cin, cout, stride))
            layers.append(Block(cout, cout, 1))
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.stem(x))
        x = self.layers(x)
        x = torch.flatten(self.pool(x), 1)
        return self.fc(x)


class Mlp(nn.Module):
    def __init__(self, inputs: int = 4096, hidden: int = 4096, layers: int = 4, classes: int = 1000):
        super().__init__()
        mods = []
        n = inputs
        for _ in range(layers):
            mods += [nn.Linear(n, hidden), nn.ReLU()]
            n = hidden
        mods.append(nn.Linear(n, classes))
        self.net = nn.Sequential(*mods)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def input_dims(arch, image):
    """Input dims without the batch dimension."""
    return [3, image, image] if arch == "resnet" else [4096]


def write_config(model_dir, name, instances, kind, max_batch_size, in_dims, out_dims):
    """Writes <model_dir>/config.pbtxt; returns its text."""
    def dims(d):
        return ", ".join(str(x) for x in d)
    if max_batch_size <= 0:  # no batch dimension in the config: the full shape, batch 1
        in_dims, out_dims = [1] + list(in_dims), [1] + list(out_dims)
    text = f'''# Written by bench/torch/make_model.py.
name: "{name}"
platform: "pytorch_libtorch"
max_batch_size: {max(0, max_batch_size)}
input [
  {{
    name: "INPUT__0"
    data_type: TYPE_FP32
    dims: [ {dims(in_dims)} ]
  }}
]
output [
  {{
    name: "OUTPUT__0"
    data_type: TYPE_FP32
    dims: [ {dims(out_dims)} ]
  }}
]
instance_group [
  {{
    kind: KIND_{kind.upper()}
    count: {instances}
  }}
]
'''
    os.makedirs(model_dir, exist_ok=True)
    tmp = os.path.join(model_dir, ".config.pbtxt.tmp")
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, os.path.join(model_dir, "config.pbtxt"))
    return text


def floats_bytes(t):
    t = t.detach().to(torch.float32).contiguous().view(-1)
    return struct.pack("<%df" % t.numel(), *t.tolist())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--name", default="resnet_small")
    ap.add_argument("--arch", choices=("resnet", "mlp"), default="resnet")
    ap.add_argument("--image", type=int, default=112, help="resnet input height and width")
    ap.add_argument("--width", type=int, default=64, help="resnet channels of the first stage")
    ap.add_argument("--instances", type=int, default=1)
    ap.add_argument("--kind", choices=("gpu", "cpu"), default="gpu")
    ap.add_argument("--max-batch-size", type=int, default=8,
                    help="0: no batch dimension in the config (dims are the full [1, ...] shape)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)

    torch.manual_seed(a.seed)
    model = ResNetSmall(a.width) if a.arch == "resnet" else Mlp()
    model.eval()
    in_dims = input_dims(a.arch, a.image)
    x = torch.randn([1] + in_dims, generator=torch.Generator().manual_seed(a.seed + 1))
    try:
        scripted = torch.jit.script(model)
    except Exception as e:  # noqa: BLE001 (a torch whose scripting fails: trace instead)
        print(f"make_model.py: torch.jit.script failed ({e!r}); tracing", file=sys.stderr)
        with torch.no_grad():
            scripted = torch.jit.trace(model, x)
    model_dir = os.path.join(a.out, "repo", a.name)
    os.makedirs(os.path.join(model_dir, "1"), exist_ok=True)
    model_pt = os.path.join(model_dir, "1", "model.pt")
    torch.jit.save(scripted, model_pt)

    with torch.no_grad():
        y = scripted(x)
    out_dims = list(y.shape[1:])
    config = write_config(model_dir, a.name, a.instances, a.kind, a.max_batch_size, in_dims,
                          out_dims)

    xb = floats_bytes(x)
    with open(os.path.join(a.out, "input.bin"), "wb") as f:
        f.write(xb)
    with open(os.path.join(a.out, "output.bin"), "wb") as f:
        f.write(floats_bytes(y))
    shape = [1] + in_dims
    header = json.dumps({
        "inputs": [{"name": "INPUT__0", "shape": shape, "datatype": "FP32",
                    "parameters": {"binary_data_size": len(xb)}}],
        "outputs": [{"name": "OUTPUT__0", "parameters": {"binary_data": True}}],
    }, separators=(",", ":")).encode()
    with open(os.path.join(a.out, "request.bin"), "wb") as f:
        f.write(header + xb)
    with open(os.path.join(a.out, "request.json"), "w") as f:
        json.dump({"inputs": [{"name": "INPUT__0", "shape": shape, "datatype": "FP32",
                               "data": [round(v, 7) for v in x.view(-1).tolist()]}]},
                  f, separators=(",", ":"))
    meta = {
        "name": a.name, "arch": a.arch, "image": a.image, "width": a.width,
        "repository": os.path.abspath(os.path.join(a.out, "repo")),
        "model_pt": os.path.abspath(model_pt),
        "input_bin": os.path.abspath(os.path.join(a.out, "input.bin")),
        "output_bin": os.path.abspath(os.path.join(a.out, "output.bin")),
        "request_bin": os.path.abspath(os.path.join(a.out, "request.bin")),
        "request_json": os.path.abspath(os.path.join(a.out, "request.json")),
        "header_length": len(header),
        "input_shape": shape, "output_shape": [1] + out_dims,
        "max_batch_size": a.max_batch_size, "instances": a.instances, "kind": a.kind,
        "parameters": sum(p.numel() for p in model.parameters()),
        "torch_version": torch.__version__,
        "config": config,
    }
    with open(os.path.join(a.out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(json.dumps({k: meta[k] for k in ("name", "arch", "input_shape", "output_shape",
                                           "header_length", "parameters", "model_pt")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
