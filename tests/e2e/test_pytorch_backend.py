"""The pytorch backend end to end (docs/pytorch.md): TorchScript models made here by Debian's
python3-torch, served by vramd through <build>/backends/pytorch/libvramd_pytorch.so, and every
answer compared with what torch itself computes for the same inputs.

Needs VRAMD_PYTORCH_BACKEND_DIR (set by tests/CMakeLists.txt when LibTorch was found at build
time) and `import torch` in this Python; each missing piece skips the module and says which."""

import concurrent.futures
import os
import pathlib

import numpy as np
import pytest

from e2e_helpers import index_rows, load_model
from v2client import Input

BACKEND_DIR = os.environ.get("VRAMD_PYTORCH_BACKEND_DIR")
LIBRARY = pathlib.Path(BACKEND_DIR or ".") / "pytorch" / "libvramd_pytorch.so"

if not BACKEND_DIR or not LIBRARY.is_file():
    pytest.skip("VRAMD_PYTORCH_BACKEND_DIR is unset or has no pytorch/libvramd_pytorch.so "
                "(LibTorch was not found when vramd was built: apt install libtorch-dev)",
                allow_module_level=True)
torch = pytest.importorskip("torch", reason="python3-torch is needed to make the test models")
import torch_models  # noqa: E402  (imports torch)

READY = ["addmul", "scale", "thrower", "types", "dict_out", "mlp", "wrong_type", "shout", "describe",
         "not_strings", "row_sums"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    repo = tmp_path_factory.mktemp("pytorch-repo")
    modules = torch_models.make_repository(repo)
    return repo, modules


@pytest.fixture(scope="module")
def torch_server(start_server, models):
    repo, _ = models
    return start_server([repo], ["--backend-directory", BACKEND_DIR], name="pytorch",
                        ready_models=READY)


def run_torch(module, *arrays):
    with torch.no_grad():
        out = module(*[torch.from_numpy(np.ascontiguousarray(a)) for a in arrays])
    if isinstance(out, dict):
        return {k: v.numpy() for k, v in out.items()}
    if isinstance(out, (tuple, list)):
        return [o.numpy() for o in out]
    return [out.numpy()]


@pytest.mark.parametrize("binary", [False, True])
def test_addmul_by_convention_matches_torch(torch_server, models, binary):
    _, modules = models
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    y = rng.standard_normal((3, 4)).astype(np.float32)
    client = torch_server.client()
    try:
        result = client.infer("addmul", [Input("INPUT__0", "FP32", x, binary=binary),
                                         Input("INPUT__1", "FP32", y, binary=binary)])
    finally:
        client.close()
    want = run_torch(modules["addmul"], x, y)
    np.testing.assert_array_equal(result.outputs["OUTPUT__0"], want[0])
    np.testing.assert_array_equal(result.outputs["OUTPUT__1"], want[1])
    assert result.outputs["OUTPUT__0"].shape == (3, 4)


def test_inputs_by_argument_name(torch_server, models):
    _, modules = models
    image = np.linspace(-2, 2, 9, dtype=np.float32)
    scale = np.array([3.0], dtype=np.float32)
    client = torch_server.client()
    try:
        result = client.infer("scale", [Input("scale", "FP32", scale),
                                        Input("image", "FP32", image)])
    finally:
        client.close()
    np.testing.assert_array_equal(result.outputs["OUTPUT__0"],
                                  run_torch(modules["scale"], image, scale)[0])


def test_integer_double_and_bool_types(torch_server, models):
    _, modules = models
    a = np.array([-5, 0, 7], dtype=np.int64)
    b = np.array([0.25, -1.0, 1e10], dtype=np.float64)
    c = np.array([1, -2147483647, 5], dtype=np.int32)
    client = torch_server.client()
    try:
        result = client.infer("types", [Input("INPUT__0", "INT64", a),
                                        Input("INPUT__1", "FP64", b),
                                        Input("INPUT__2", "INT32", c, binary=True)])
    finally:
        client.close()
    want = run_torch(modules["types"], a, b, c)
    for i, dtype in enumerate([np.int64, np.float64, np.int32, np.bool_]):
        got = result.outputs["OUTPUT__%d" % i]
        assert got.dtype == dtype, (i, got.dtype)
        np.testing.assert_array_equal(got, want[i])


def test_dict_outputs_by_name(torch_server, models):
    _, modules = models
    x = np.array([1.5, -4.0], dtype=np.float32)
    client = torch_server.client()
    try:
        result = client.infer("dict_out", [Input("INPUT__0", "FP32", x)])
    finally:
        client.close()
    want = run_torch(modules["dict_out"], x)
    np.testing.assert_array_equal(result.outputs["plus_one"], want["plus_one"])
    np.testing.assert_array_equal(result.outputs["negated"], want["negated"])


def test_traced_mlp_under_concurrent_batched_load_matches_torch(torch_server, models):
    _, modules = models
    rng = np.random.default_rng(5)
    batches = [rng.standard_normal((int(rng.integers(1, 4)), 16)).astype(np.float32)
               for _ in range(64)]

    def call(x):
        client = torch_server.client()
        try:
            return client.infer("mlp", [Input("INPUT__0", "FP32", x, binary=True)]).outputs[
                "OUTPUT__0"]
        finally:
            client.close()

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(call, batches))
    for x, got in zip(batches, answers):
        np.testing.assert_allclose(got, run_torch(modules["mlp"], x)[0], rtol=1e-5, atol=1e-6)


def test_reshape_in_the_config_is_what_forward_sees_and_returns(torch_server, models):
    _, modules = models
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    client = torch_server.client()
    try:
        result = client.infer("row_sums", [Input("INPUT__0", "FP32", x, binary=True)])
    finally:
        client.close()
    sums, same = run_torch(modules["row_sums"], x.reshape(3, 2, 2))
    np.testing.assert_array_equal(result.outputs["OUTPUT__0"], sums)
    assert result.outputs["OUTPUT__0"].shape == (3, 2)
    np.testing.assert_array_equal(result.outputs["OUTPUT__1"], same.reshape(3, 4))
    assert result.outputs["OUTPUT__1"].shape == (3, 4)


def _texts(values):
    """A BYTES output as a flat list of str."""
    flat = np.asarray(values, dtype=object).reshape(-1)
    return [v.decode() if isinstance(v, bytes) else v for v in flat]


@pytest.mark.parametrize("binary", [False, True])
def test_strings_in_and_out_as_list_of_str_match_torch(torch_server, models, binary):
    _, modules = models
    words = ["hello", "w\u00f6rld", "", "x" * 300]
    client = torch_server.client()
    try:
        result = client.infer("shout", [Input("INPUT__0", "BYTES", words, binary=binary)])
    finally:
        client.close()
    assert _texts(result.outputs["OUTPUT__0"]) == modules["shout"](words)
    assert list(np.asarray(result.outputs["OUTPUT__0"], dtype=object).shape) == [len(words)]


def test_strings_and_tensors_under_concurrent_batching_match_torch(torch_server, models):
    _, modules = models
    rng = np.random.default_rng(9)
    requests = []
    for i in range(24):
        rows = int(rng.integers(1, 4))
        words = [["w%d_%s" % (i, "z" * int(rng.integers(0, 5)))] for _ in range(rows)]
        requests.append((words, rng.standard_normal((rows, 2)).astype(np.float32)))

    def call(request):
        words, x = request
        client = torch_server.client()
        try:
            return client.infer("describe", [Input("words", "BYTES", words, binary=True),
                                             Input("x", "FP32", x, binary=True)]).outputs
        finally:
            client.close()

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(call, requests))
    for (words, x), got in zip(requests, answers):
        flat = [w[0] for w in words]
        texts, lengths, doubled = modules["describe"](flat, torch.from_numpy(x))
        assert _texts(got["OUTPUT__0"]) == texts
        assert list(np.asarray(got["OUTPUT__0"], dtype=object).shape) == [len(words), 1]
        np.testing.assert_array_equal(got["OUTPUT__1"], lengths.numpy())
        np.testing.assert_array_equal(got["OUTPUT__2"], doubled.numpy())


def test_exception_in_forward_is_an_error_response_and_the_server_keeps_serving(
        torch_server, models):
    _, modules = models
    client = torch_server.client()
    try:
        bad = client.infer_raw("thrower", [Input("INPUT__0", "FP32",
                                                 np.array([1.0, -1.0], dtype=np.float32))])
        assert bad.status >= 400, bad
        message = bad.error_message()
        assert "negative values are not allowed" in message, message
        assert "pytorch" in message, message
        good = np.array([1.0, 2.5], dtype=np.float32)
        for _ in range(3):
            result = client.infer("thrower", [Input("INPUT__0", "FP32", good)])
            np.testing.assert_array_equal(result.outputs["OUTPUT__0"],
                                          run_torch(modules["thrower"], good)[0])
        assert client.get("/v2/health/live").status == 200
    finally:
        client.close()
    assert torch_server.alive()


@pytest.mark.parametrize("model,request_input,words", [
    ("wrong_type", Input("INPUT__0", "FP32", np.ones(3, dtype=np.float32)), ["FP32"]),
    ("not_strings", Input("INPUT__0", "BYTES", ["a", "b"]), ["List[str]"]),
])
def test_output_of_another_type_than_the_config_says_is_an_error(torch_server, model,
                                                                 request_input, words):
    client = torch_server.client()
    try:
        r = client.infer_raw(model, [request_input])
        assert r.status >= 400, r
        message = r.error_message()
        assert "OUTPUT__0" in message, message
        for w in words:
            assert w in message, (w, message)
        assert client.get("/v2/models/addmul/ready").status == 200
    finally:
        client.close()


@pytest.mark.parametrize("model,words", [
    ("bad_names", ["left", "forward()", "x, y"]),
    ("corrupt", ["cannot load TorchScript file", "model.pt"]),
    ("no_file", ["no TorchScript file", "model.pt"]),
    ("strings", ["input 'INPUT__0' is TYPE_STRING", "must be List[str]", "Tensor"]),
    ("strings_as_tensor", ["forward() argument 'text'", "List[str]"]),
])
def test_models_the_backend_cannot_serve_fail_alone_with_the_reason(torch_server, model, words):
    client = torch_server.client()
    try:
        rows = index_rows(client, model)
        assert rows and rows[0]["state"] == "UNAVAILABLE", rows
        for w in words:
            assert w in rows[0]["reason"], (w, rows[0]["reason"])
        assert client.get("/v2/models/mlp/ready").status == 200
    finally:
        client.close()


def _walk(node):
    yield node
    for child in node.get("children", []):
        yield from _walk(child)


def _memory(client):
    r = client.get("/v2/memory")
    assert r.status == 200, r
    return r.json()


def _model_bytes(report, model):
    return sum(n["live_bytes"] for n in _walk(report["owners"])
               if n["path"].startswith("server/model:%s/" % model))


def _unload_to_baseline(client, model, baseline):
    """Unloads `model` and checks that nothing leaked and the ledger is back at `baseline`."""
    r = client.post("/v2/repository/models/%s/unload" % model, b"{}")
    assert r.status == 200, r
    after = _memory(client)
    assert after["leaks"] == [] and after["leaked_bytes_total"] == 0, after["leaks"]
    assert _model_bytes(after, model) == 0
    assert after["owners"]["subtree_live_bytes"] == baseline


def test_unload_and_reload_leave_the_ledger_at_zero(start_server, tmp_path_factory):
    repo = tmp_path_factory.mktemp("pytorch-ledger-repo")
    module = torch_models.mlp(seed=11)
    torch_models.write(repo, "mlp", module, torch_models.config(
        [("INPUT__0", "TYPE_FP32", [16])], [("OUTPUT__0", "TYPE_FP32", [8])],
        max_batch_size=8, count=2))
    server = start_server([repo], ["--backend-directory", BACKEND_DIR,
                                   "--model-control-mode", "explicit"],
                          name="pytorch-ledger", wait_ready=False)
    server.wait_listening()
    client = server.client()
    x = np.random.default_rng(3).standard_normal((4, 16)).astype(np.float32)
    want = run_torch(module, x)[0]
    try:
        baseline = _memory(client)["owners"]["subtree_live_bytes"]
        for cycle in range(3):
            r = load_model(client, "mlp")
            assert r.status == 200, r
            loaded = _memory(client)
            # The module's weights (16*32 + 32 + 32*8 + 8 floats) are in the ledger, charged
            # to the version, not somewhere outside it.
            assert _model_bytes(loaded, "mlp") >= (16 * 32 + 32 + 32 * 8 + 8) * 4, cycle
            for _ in range(5):
                got = client.infer("mlp", [Input("INPUT__0", "FP32", x)]).outputs["OUTPUT__0"]
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
            _unload_to_baseline(client, "mlp", baseline)
    finally:
        client.close()


def test_state_a_module_keeps_from_forward_is_no_leak_of_the_instance(start_server,
                                                                        tmp_path_factory):
    """A tensor made in forward() and kept in the module is charged to the instance while it
    lives and moves to the version when the instance goes: the unload reports no leak, and the
    ledger goes back to where it was."""
    repo = tmp_path_factory.mktemp("pytorch-memo-repo")
    module = torch_models.scripted(torch_models.Memo)
    torch_models.write(repo, "memo", module, torch_models.config(
        [("INPUT__0", "TYPE_FP32", [4])], [("OUTPUT__0", "TYPE_FP32", [4])], count=2))
    server = start_server([repo], ["--backend-directory", BACKEND_DIR,
                                   "--model-control-mode", "explicit"],
                          name="pytorch-memo", wait_ready=False)
    server.wait_listening()
    client = server.client()
    x = np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32)
    try:
        baseline = _memory(client)["owners"]["subtree_live_bytes"]
        for cycle in range(2):
            r = load_model(client, "memo")
            assert r.status == 200, r
            got = client.infer("memo", [Input("INPUT__0", "FP32", x)]).outputs["OUTPUT__0"]
            np.testing.assert_array_equal(got, x + np.arange(4, dtype=np.float32))
            assert _model_bytes(_memory(client), "memo") >= 256 * 1024 * 4, cycle
            _unload_to_baseline(client, "memo", baseline)
    finally:
        client.close()


def test_a_sleeping_torch_model_gives_back_its_tensors_and_answers_as_before(
        start_server, tmp_path_factory):
    # On the CPU a module's tensors are host memory already: asleep (either level) it keeps
    # nothing, and the wake loads the file again (a GPU module keeps a pinned copy at level 1:
    # tests/device). Every parameter and buffer leaves; the compiled module stays.
    repo = tmp_path_factory.mktemp("pytorch-sleep-repo")
    module = torch_models.mlp(seed=21)
    torch_models.write(repo, "mlp", module, torch_models.config(
        [("INPUT__0", "TYPE_FP32", [16])], [("OUTPUT__0", "TYPE_FP32", [8])],
        max_batch_size=8, count=2))
    server = start_server([repo], ["--backend-directory", BACKEND_DIR], name="pytorch-sleep",
                          ready_models=["mlp"])
    client = server.client()
    try:
        x = np.random.default_rng(3).standard_normal((2, 16)).astype(np.float32)
        before = client.infer("mlp", [Input("INPUT__0", "FP32", x)]).outputs["OUTPUT__0"]
        np.testing.assert_allclose(before, run_torch(module, x)[0], rtol=1e-5, atol=1e-6)
        held = _model_bytes(_memory(client), "mlp")
        weights = sum(p.numel() * 4 for p in module.parameters())
        for level in (1, 2):
            r = client.post("/v2/repository/models/mlp/sleep",
                            b'{"parameters": {"level": %d}}' % level)
            assert r.status == 200, r
            assert [row["sleep"] for row in index_rows(client, "mlp")] == ["asleep"]
            assert held - _model_bytes(_memory(client), "mlp") >= weights
            after = client.infer("mlp", [Input("INPUT__0", "FP32", x)]).outputs["OUTPUT__0"]
            np.testing.assert_array_equal(after, before)
            assert [row["sleep"] for row in index_rows(client, "mlp")] == ["awake"]
        report = _memory(client)
        assert report["leaks"] == [], report["leaks"]
    finally:
        client.close()
