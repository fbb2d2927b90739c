"""TorchScript models for the pytorch backend's tests, made at test time with Debian's
python3-torch (torch.jit.script / torch.jit.trace, saved with torch.jit.save), each written as
a Triton model directory: <repo>/<name>/config.pbtxt and <repo>/<name>/1/model.pt.

torch.jit.script needs the classes' source, so they live in this file rather than in strings."""

import pathlib
from typing import List

import torch


class AddMul(torch.nn.Module):
    """Two inputs, two outputs, named by Triton's INPUT__<i> / OUTPUT__<i> convention."""

    def forward(self, x: torch.Tensor, y: torch.Tensor):
        return x + y, x * y


class Scale(torch.nn.Module):
    """Inputs named after forward()'s arguments, not by convention."""

    def forward(self, image: torch.Tensor, scale: torch.Tensor):
        return image * scale


class Thrower(torch.nn.Module):
    """Raises from forward() when an input is negative: the server must answer with an error
    and keep serving."""

    def forward(self, x: torch.Tensor):
        if bool((x < 0).any()):
            raise RuntimeError("negative values are not allowed")
        return x * 2.0


class Types(torch.nn.Module):
    """Integer, double and boolean tensors in and out."""

    def forward(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor):
        return a * 2, b + 1.5, c - 1, a > 0


class DictOut(torch.nn.Module):
    """Outputs returned in a dict, matched by the config's output names."""

    def forward(self, x: torch.Tensor):
        return {"plus_one": x + 1.0, "negated": -x}


class WrongType(torch.nn.Module):
    """Returns float64 where the config promises FP32."""

    def forward(self, x: torch.Tensor):
        return x.double()


class Shout(torch.nn.Module):
    """Strings in and out (Triton's TYPE_STRING as TorchScript's List[str])."""

    def forward(self, text: List[str]) -> List[str]:
        return [s.upper() + "!" for s in text]


class Describe(torch.nn.Module):
    """A batch of strings and a tensor in; strings, their lengths and the tensor out."""

    def forward(self, words: List[str], x: torch.Tensor):
        lengths = torch.tensor([len(w) for w in words], dtype=torch.int64).unsqueeze(1)
        return [w + "=" + str(len(w)) for w in words], lengths, x * 2.0


class NotStrings(torch.nn.Module):
    """Returns a tensor where the config promises strings."""

    def forward(self, text: List[str]):
        return torch.zeros(len(text))


class RowSums(torch.nn.Module):
    """Needs its input as [batch, 2, 2] where clients send [batch, 4] (the config's reshape),
    and returns it as is, which clients get back as [batch, 4]."""

    def forward(self, x: torch.Tensor):
        return x.sum(-1), x * 1.0


class Memo(torch.nn.Module):
    """Keeps a 1 MiB tensor it makes in its first forward(): state of the shared module, made
    while one instance executed."""

    def __init__(self):
        super().__init__()
        self.table = torch.zeros(1)

    def forward(self, x: torch.Tensor):
        if self.table.numel() == 1:
            self.table = torch.arange(256 * 1024, dtype=torch.float32)
        return x + self.table[:4]


def mlp(seed=7):
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    net.eval()
    return torch.jit.trace(net, torch.zeros(1, 16))


def _tensor(name, dtype, dims):
    return '{ name: "%s" data_type: %s dims: [ %s ] }' % (name, dtype, ", ".join(map(str, dims)))


def config(inputs, outputs, max_batch_size=0, kind="KIND_CPU", count=1, extra=""):
    return ('backend: "pytorch"\nmax_batch_size: %d\ninput [ %s ]\noutput [ %s ]\n'
            'instance_group [ { kind: %s count: %d } ]\n%s' % (
                max_batch_size, ", ".join(_tensor(*t) for t in inputs),
                ", ".join(_tensor(*t) for t in outputs), kind, count, extra))


def write(repo, name, module, config_text, platform=False):
    """Writes one model directory; `module` may be None (no model.pt) or bytes (a corrupt file)."""
    d = pathlib.Path(repo) / name
    (d / "1").mkdir(parents=True, exist_ok=True)
    if platform:
        config_text = config_text.replace('backend: "pytorch"', 'platform: "pytorch_libtorch"')
    (d / "config.pbtxt").write_text(config_text)
    if isinstance(module, bytes):
        (d / "1" / "model.pt").write_bytes(module)
    elif module is not None:
        torch.jit.save(module, str(d / "1" / "model.pt"))
    return d


def scripted(cls):
    return torch.jit.script(cls())


def make_repository(repo):
    """The repository test_pytorch_backend.py serves; returns {name: module} of the good ones."""
    f4 = [("INPUT__0", "TYPE_FP32", [4]), ("INPUT__1", "TYPE_FP32", [4])]
    modules = {}
    modules["addmul"] = scripted(AddMul)
    write(repo, "addmul", modules["addmul"],
          config(f4, [("OUTPUT__0", "TYPE_FP32", [4]), ("OUTPUT__1", "TYPE_FP32", [4])],
                 max_batch_size=8, count=2), platform=True)
    modules["scale"] = scripted(Scale)
    write(repo, "scale", modules["scale"],
          config([("image", "TYPE_FP32", [-1]), ("scale", "TYPE_FP32", [1])],
                 [("OUTPUT__0", "TYPE_FP32", [-1])]))
    modules["thrower"] = scripted(Thrower)
    write(repo, "thrower", modules["thrower"],
          config([("INPUT__0", "TYPE_FP32", [-1])], [("OUTPUT__0", "TYPE_FP32", [-1])]))
    modules["types"] = scripted(Types)
    write(repo, "types", modules["types"],
          config([("INPUT__0", "TYPE_INT64", [3]), ("INPUT__1", "TYPE_FP64", [3]),
                  ("INPUT__2", "TYPE_INT32", [3])],
                 [("OUTPUT__0", "TYPE_INT64", [3]), ("OUTPUT__1", "TYPE_FP64", [3]),
                  ("OUTPUT__2", "TYPE_INT32", [3]), ("OUTPUT__3", "TYPE_BOOL", [3])]))
    modules["dict_out"] = scripted(DictOut)
    write(repo, "dict_out", modules["dict_out"],
          config([("INPUT__0", "TYPE_FP32", [2])],
                 [("negated", "TYPE_FP32", [2]), ("plus_one", "TYPE_FP32", [2])]))
    modules["mlp"] = mlp()
    write(repo, "mlp", modules["mlp"],
          config([("INPUT__0", "TYPE_FP32", [16])], [("OUTPUT__0", "TYPE_FP32", [8])],
                 max_batch_size=8, count=2,
                 extra="dynamic_batching { max_queue_delay_microseconds: 2000 }\n"))
    modules["shout"] = scripted(Shout)
    write(repo, "shout", modules["shout"],
          config([("INPUT__0", "TYPE_STRING", [-1])], [("OUTPUT__0", "TYPE_STRING", [-1])]))
    modules["describe"] = scripted(Describe)
    write(repo, "describe", modules["describe"],
          config([("words", "TYPE_STRING", [1]), ("x", "TYPE_FP32", [2])],
                 [("OUTPUT__0", "TYPE_STRING", [1]), ("OUTPUT__1", "TYPE_INT64", [1]),
                  ("OUTPUT__2", "TYPE_FP32", [2])], max_batch_size=8, count=2,
                 extra="dynamic_batching { max_queue_delay_microseconds: 2000 }\n"))
    write(repo, "not_strings", scripted(NotStrings),
          config([("INPUT__0", "TYPE_STRING", [-1])], [("OUTPUT__0", "TYPE_STRING", [-1])]))
    modules["row_sums"] = scripted(RowSums)
    write(repo, "row_sums", modules["row_sums"], config(
        [("INPUT__0", "TYPE_FP32", [4])], [("OUTPUT__0", "TYPE_FP32", [2]),
                                           ("OUTPUT__1", "TYPE_FP32", [4])], max_batch_size=4)
          .replace("dims: [ 4 ] }", "dims: [ 4 ] reshape { shape: [ 2, 2 ] } }"))
    # Models that must fail to load, each alone.
    write(repo, "wrong_type", scripted(WrongType),
          config([("INPUT__0", "TYPE_FP32", [-1])], [("OUTPUT__0", "TYPE_FP32", [-1])]))
    write(repo, "bad_names", scripted(AddMul),
          config([("left", "TYPE_FP32", [4]), ("right", "TYPE_FP32", [4])],
                 [("OUTPUT__0", "TYPE_FP32", [4]), ("OUTPUT__1", "TYPE_FP32", [4])]))
    write(repo, "corrupt", b"PK\x03\x04 this is not a TorchScript archive" * 10,
          config([("INPUT__0", "TYPE_FP32", [-1])], [("OUTPUT__0", "TYPE_FP32", [-1])]))
    write(repo, "no_file", None,
          config([("INPUT__0", "TYPE_FP32", [-1])], [("OUTPUT__0", "TYPE_FP32", [-1])]))
    write(repo, "strings", scripted(Thrower),
          config([("INPUT__0", "TYPE_STRING", [-1])], [("OUTPUT__0", "TYPE_FP32", [-1])]))
    write(repo, "strings_as_tensor", scripted(Shout),
          config([("INPUT__0", "TYPE_FP32", [-1])], [("OUTPUT__0", "TYPE_STRING", [-1])]))
    return modules
