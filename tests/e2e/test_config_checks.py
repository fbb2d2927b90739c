"""Config checks Triton makes, against the real binary (issue 16, item 6): each broken config
fails to load with `failed to load '<model>': <why>` once, naming the field; the server keeps
serving what loaded. The full list of cases with their exact texts is in
tests/unit/config/config_parser_test.cc (ValidationTest); these are the ones a user meets most."""

import pytest

IO = ('input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] %s } ]\n'
      'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]\n')

CASES = {
    "cpu_with_gpus": ('backend: "identity"\n' + IO % "" +
                      'instance_group [ { kind: KIND_CPU gpus: [ 0 ] } ]\n',
                      "kind KIND_CPU runs on no GPU, yet gpus lists [0]"),
    "gpus_twice": ('backend: "identity"\n' + IO % "" +
                   'instance_group [ { name: "g" kind: KIND_GPU gpus: [ 0, 0 ] } ]\n',
                   "instance_group 'g': gpus lists GPU 0 twice"),
    "gpu_group_cpu_backend": ('backend: "identity"\n' + IO % "" +
                              'instance_group [ { name: "g" kind: KIND_GPU } ]\n',
                              "instance_group 'g': kind is KIND_GPU but backend 'identity' runs "
                              "on the CPU only"),
    # mlp runs on GPUs; this machine (CI) has none. Placement is checked before the backend
    # reads the model, so no weights file is needed. tests/device/placement_gpu_check.py checks
    # an ordinal past the GPUs of a GPU machine.
    # A build without CUDA (CI's sanitizer job) has an mlp without its GPU side: then the
    # backend is what cannot run the group.
    "gpu_group_no_gpu": ('backend: "mlp"\n' + IO % "" +
                         'instance_group [ { name: "g" kind: KIND_GPU gpus: [ 1 ] } ]\n',
                         ("instance_group 'g': kind is KIND_GPU but this server sees no GPU",
                          "instance_group 'g': kind is KIND_GPU but backend 'mlp' runs on the "
                          "CPU only")),
    "empty_reshape": ('backend: "identity"\nmax_batch_size: 0\n' + IO % "reshape { shape: [ ] }",
                      "an empty reshape makes a scalar, which only a batching model may take"),
    "nchw_two_dims": ('backend: "identity"\n'
                      'input [ { name: "INPUT0" data_type: TYPE_FP32 format: FORMAT_NCHW dims: [ 3, 4 ] } ]\n'
                      'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 3, 4 ] } ]\n',
                      "format FORMAT_NCHW needs 3 dims"),
    "priority_level": ('backend: "identity"\nmax_batch_size: 4\n' + IO % "" +
                       'dynamic_batching { priority_levels: 2 default_priority_level: 5 }\n',
                       "default_priority_level is 5; with priority_levels 2 it must be in [1, 2]"),
    "platform_pair": ('platform: "pytorch_libtorch"\nbackend: "onnxruntime"\n' + IO % "",
                      "platform 'pytorch_libtorch' is served by backend 'pytorch', not by backend "
                      "'onnxruntime'"),
}


@pytest.fixture(scope="module")
def server(start_server, tmp_path_factory):
    repo = tmp_path_factory.mktemp("config-checks")
    for name, (text, _) in CASES.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(text)
    (repo / "good" / "1").mkdir(parents=True)
    (repo / "good" / "config.pbtxt").write_text('backend: "identity"\n' + IO % "")
    return start_server([repo], ["--model-control-mode", "explicit", "--load-model", "good"],
                        name="config-checks", ready_models=["good"])


@pytest.mark.parametrize("name", sorted(CASES))
def test_broken_config_fails_to_load_naming_why(server, name):
    c = server.client()
    if name == "gpu_group_no_gpu" and c.get("/v2/memory").json()["cuda"]["available"]:
        pytest.skip("this machine has a GPU; tests/device/placement_gpu_check.py refuses an "
                    "ordinal past its GPUs")
    r = c.post("/v2/repository/models/%s/load" % name)
    assert r.status == 400, r
    msg = r.error_message()
    assert msg.startswith("failed to load '%s': " % name), msg
    assert msg.count("failed to load") == 1, msg
    expected = CASES[name][1]
    assert any(e in msg for e in (expected if isinstance(expected, tuple) else (expected,))), msg
    assert c.get("/v2/models/%s/ready" % name).status != 200
    assert c.get("/v2/models/good/ready").status == 200
