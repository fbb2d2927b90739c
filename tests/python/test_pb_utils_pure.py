"""Tests of the pure-Python part of vramd's triton_python_backend_utils.

Run: /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/python/test_pb_utils_pure.py
"""

import importlib
import importlib.util
import json
import os
import struct
import sys
import types

import numpy as np
import pytest

_RESOURCES = os.path.join(
    os.path.dirname(os.path.abspath(__file__)),
    "..",
    "..",
    "src",
    "backends",
    "python",
    "resources",
)
sys.path.insert(0, os.path.normpath(_RESOURCES))

import triton_python_backend_utils as pb_utils  # noqa: E402


# ---------------------------------------------------------------- fakes


class FakeTensor:
    def __init__(self, name, array):
        self._name = name
        self._array = array

    def name(self):
        return self._name

    def as_numpy(self):
        return self._array


class FakeRequest:
    def __init__(self, inputs):
        self._inputs = inputs

    def inputs(self):
        return self._inputs


class FakeResponse:
    def __init__(self, outputs):
        self._outputs = outputs

    def output_tensors(self):
        return self._outputs


def _lp(*elements):
    return b"".join(struct.pack("<I", len(e)) + e for e in elements)


# ---------------------------------------------------------------- constants


def test_constants():
    assert pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START == 1
    assert pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END == 2
    assert pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL == 1
    assert pb_utils.TRITONSERVER_REQUEST_RELEASE_ALL == 1
    assert pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE == 2


def test_c_names_absent_without_c_module():
    assert "c_python_backend_utils" not in sys.modules
    for name in ("Tensor", "InferenceRequest", "InferenceResponse", "Logger",
                 "TritonError", "TritonModelException", "get_model_dir"):
        assert not hasattr(pb_utils, name)


def test_c_names_imported_when_c_module_exists(monkeypatch):
    fake = types.ModuleType("c_python_backend_utils")

    class Tensor:
        pass

    fake.Tensor = Tensor
    fake.TRITONSERVER_MEMORY_GPU = 1
    fake.get_model_dir = lambda: "/m"
    fake.NotExported = object()
    monkeypatch.setitem(sys.modules, "c_python_backend_utils", fake)
    # A fresh copy of the module, so the shared pb_utils stays untouched.
    spec = importlib.util.spec_from_file_location(
        "pb_utils_with_c", os.path.join(_RESOURCES, "triton_python_backend_utils.py")
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.Tensor is Tensor
    assert mod.TRITONSERVER_MEMORY_GPU == 1
    assert mod.get_model_dir() == "/m"
    assert not hasattr(mod, "NotExported")
    assert not hasattr(mod, "Logger")  # names the C module lacks stay undefined
    assert mod.serialize_byte_tensor(np.array([b"a"], dtype=object)) == _lp(b"a")
    assert not hasattr(pb_utils, "Tensor")


# ---------------------------------------------------------------- bytes


def test_serialize_object_bytes():
    arr = np.array([b"ab", b"", b"\x00\x01\x00"], dtype=np.object_)
    out = pb_utils.serialize_byte_tensor(arr)
    assert isinstance(out, bytes)
    assert out == _lp(b"ab", b"", b"\x00\x01\x00")


def test_serialize_object_str_utf8():
    arr = np.array(["h\u00e9", "x"], dtype=np.object_)
    assert pb_utils.serialize_byte_tensor(arr) == _lp("h\u00e9".encode("utf-8"), b"x")


def test_serialize_object_non_bytes_uses_str():
    arr = np.array([1, None, 2.5, np.bytes_(b"q")], dtype=np.object_)
    # Only exact ``bytes`` pass through; everything else goes through str().
    assert pb_utils.serialize_byte_tensor(arr) == _lp(b"1", b"None", b"2.5", b"b'q'")


def test_serialize_np_bytes_dtype():
    arr = np.array([b"abc", b"d"], dtype=np.bytes_)
    assert arr.dtype == np.dtype("S3")
    assert pb_utils.serialize_byte_tensor(arr) == _lp(b"abc", b"d")


def test_serialize_np_bytes_drops_trailing_nul():
    arr = np.array([b"a\x00\x00"], dtype=np.bytes_)
    assert pb_utils.serialize_byte_tensor(arr) == _lp(b"a")


def test_serialize_empty_returns_empty_tuple():
    assert pb_utils.serialize_byte_tensor(np.array([], dtype=np.object_)) == ()
    assert pb_utils.serialize_byte_tensor(np.zeros((2, 0), dtype=np.object_)) == ()
    # size 0 wins over the dtype check
    assert pb_utils.serialize_byte_tensor(np.array([], dtype=np.float32)) == ()


def test_serialize_non_bytes_dtype_returns_none():
    assert pb_utils.serialize_byte_tensor(np.array([1, 2], dtype=np.int32)) is None
    assert pb_utils.serialize_byte_tensor(np.array(["ab"], dtype=np.str_)) is None


def test_serialize_2d_c_order():
    arr = np.array([[b"a", b"b", b"c"], [b"d", b"e", b"f"]], dtype=np.object_)
    assert pb_utils.serialize_byte_tensor(arr) == _lp(b"a", b"b", b"c", b"d", b"e", b"f")
    # A transposed (Fortran-contiguous) view is still written in C order of
    # its logical shape.
    t = arr.T
    assert pb_utils.serialize_byte_tensor(t) == _lp(b"a", b"d", b"b", b"e", b"c", b"f")
    f = np.asfortranarray(arr)
    assert pb_utils.serialize_byte_tensor(f) == pb_utils.serialize_byte_tensor(arr)


def test_serialize_0d():
    assert pb_utils.serialize_byte_tensor(np.array(b"xy", dtype=np.object_)) == _lp(b"xy")


def test_deserialize():
    out = pb_utils.deserialize_bytes_tensor(_lp(b"ab", b"", b"\x00c"))
    assert out.dtype == np.object_
    assert out.shape == (3,)
    assert out.tolist() == [b"ab", b"", b"\x00c"]
    assert all(type(x) is bytes for x in out)


def test_deserialize_empty():
    out = pb_utils.deserialize_bytes_tensor(b"")
    assert out.dtype == np.object_
    assert out.shape == (0,)


def test_deserialize_accepts_buffers():
    raw = _lp(b"hello", b"w")
    for buf in (bytearray(raw), memoryview(raw), np.frombuffer(raw, dtype=np.uint8)):
        assert pb_utils.deserialize_bytes_tensor(buf).tolist() == [b"hello", b"w"]


def test_deserialize_truncated_raises():
    with pytest.raises(struct.error):
        pb_utils.deserialize_bytes_tensor(_lp(b"abcd")[:-1])
    with pytest.raises(struct.error):
        pb_utils.deserialize_bytes_tensor(b"\x01\x00")


@pytest.mark.parametrize(
    "arr",
    [
        np.array([b"a", b"bc", b"\xff\x00"], dtype=np.object_),
        np.array([[b"a", b"b"], [b"c", b""]], dtype=np.object_),
        np.array([b"ab", b"c"], dtype=np.bytes_),
    ],
)
def test_round_trip_bytes(arr):
    out = pb_utils.deserialize_bytes_tensor(pb_utils.serialize_byte_tensor(arr))
    expect = [bytes(x) for x in arr.ravel(order="C").tolist()]
    assert out.tolist() == expect
    assert out.reshape(arr.shape).tolist() == np.array(expect, dtype=object).reshape(arr.shape).tolist()


def test_round_trip_str():
    arr = np.array([["\u4e2d", "b"], ["", "d\u00fc"]], dtype=np.object_)
    out = pb_utils.deserialize_bytes_tensor(pb_utils.serialize_byte_tensor(arr))
    assert [x.decode("utf-8") for x in out] == ["\u4e2d", "b", "", "d\u00fc"]


def test_round_trip_empty():
    ser = pb_utils.serialize_byte_tensor(np.array([], dtype=np.object_))
    assert ser == ()
    out = pb_utils.deserialize_bytes_tensor(bytes(ser))
    assert out.shape == (0,) and out.dtype == np.object_


# ---------------------------------------------------------------- lookups


def test_get_input_tensor_by_name():
    a = FakeTensor("A", np.zeros(1))
    b = FakeTensor("B", np.ones(1))
    b2 = FakeTensor("B", np.ones(2))
    req = FakeRequest([a, b, b2])
    assert pb_utils.get_input_tensor_by_name(req, "A") is a
    assert pb_utils.get_input_tensor_by_name(req, "B") is b  # first match
    assert pb_utils.get_input_tensor_by_name(req, "C") is None
    assert pb_utils.get_input_tensor_by_name(FakeRequest([]), "A") is None


def test_get_output_tensor_by_name():
    x = FakeTensor("X", np.zeros(1))
    resp = FakeResponse([x])
    assert pb_utils.get_output_tensor_by_name(resp, "X") is x
    assert pb_utils.get_output_tensor_by_name(resp, "Y") is None
    assert pb_utils.get_output_tensor_by_name(FakeResponse([]), "X") is None


CONFIG = {
    "name": "m",
    "input": [
        {"name": "IN0", "data_type": "TYPE_FP32", "dims": [4]},
        {"name": "IN1", "data_type": "TYPE_STRING", "dims": [-1]},
    ],
    "output": [{"name": "OUT0", "data_type": "TYPE_INT32", "dims": [2, 2]}],
}


def test_get_input_config_by_name():
    assert pb_utils.get_input_config_by_name(CONFIG, "IN1") is CONFIG["input"][1]
    assert pb_utils.get_input_config_by_name(CONFIG, "OUT0") is None
    assert pb_utils.get_input_config_by_name({"name": "m"}, "IN0") is None


def test_get_output_config_by_name():
    assert pb_utils.get_output_config_by_name(CONFIG, "OUT0") is CONFIG["output"][0]
    assert pb_utils.get_output_config_by_name(CONFIG, "IN0") is None
    assert pb_utils.get_output_config_by_name({}, "OUT0") is None


def test_using_decoupled_model_transaction_policy():
    f = pb_utils.using_decoupled_model_transaction_policy
    assert f({}) is False
    assert f({"model_transaction_policy": {"decoupled": True}}) is True
    assert f({"model_transaction_policy": {"decoupled": False}}) is False
    assert f({"model_transaction_policy": {}}) is False


# ---------------------------------------------------------------- type maps

PAIRS = [
    (1, np.bool_),
    (2, np.uint8),
    (3, np.uint16),
    (4, np.uint32),
    (5, np.uint64),
    (6, np.int8),
    (7, np.int16),
    (8, np.int32),
    (9, np.int64),
    (10, np.float16),
    (11, np.float32),
    (12, np.float64),
    (13, np.object_),
]


@pytest.mark.parametrize("code,np_type", PAIRS)
def test_type_maps_both_ways(code, np_type):
    assert pb_utils.triton_to_numpy_type(code) is np_type
    assert pb_utils.numpy_to_triton_type(np_type) == code
    assert pb_utils.numpy_to_triton_type(np.dtype(np_type)) == code


def test_triton_to_numpy_type_unknown():
    assert pb_utils.triton_to_numpy_type(14) is None  # BF16: no numpy type
    assert pb_utils.triton_to_numpy_type(0) is None  # INVALID
    assert pb_utils.triton_to_numpy_type(99) is None
    assert pb_utils.triton_to_numpy_type("TYPE_FP32") is None
    assert pb_utils.triton_to_numpy_type([1]) is None


def test_triton_to_numpy_type_equal_values():
    # Triton compares with ==, so equal numbers of other types match.
    assert pb_utils.triton_to_numpy_type(np.int32(11)) is np.float32
    assert pb_utils.triton_to_numpy_type(11.0) is np.float32
    assert pb_utils.triton_to_numpy_type(True) is np.bool_


def test_numpy_to_triton_type_bytes_and_bool():
    assert pb_utils.numpy_to_triton_type(np.bytes_) == 13
    assert pb_utils.numpy_to_triton_type(np.array([b"ab"]).dtype.type) == 13
    # A sized "S3" dtype is not equal to np.bytes_ (only its .type is).
    assert pb_utils.numpy_to_triton_type(np.dtype("S3")) is None
    assert pb_utils.numpy_to_triton_type(np.array([True]).dtype) == 1
    assert pb_utils.numpy_to_triton_type(np.dtype(bool)) == 1
    # The builtin type ``bool`` itself is not equal to np.bool_ (Triton
    # behaves the same way).
    assert pb_utils.numpy_to_triton_type(bool) is None


def test_numpy_to_triton_type_unknown():
    assert pb_utils.numpy_to_triton_type(np.complex64) is None
    assert pb_utils.numpy_to_triton_type(np.str_) is None
    assert pb_utils.numpy_to_triton_type(np.dtype("U3")) is None
    assert pb_utils.numpy_to_triton_type(None) is None
    assert pb_utils.numpy_to_triton_type("float32") is None


def test_triton_string_to_numpy():
    m = pb_utils.TRITON_STRING_TO_NUMPY
    assert set(m) == {
        "TYPE_BOOL", "TYPE_UINT8", "TYPE_UINT16", "TYPE_UINT32", "TYPE_UINT64",
        "TYPE_INT8", "TYPE_INT16", "TYPE_INT32", "TYPE_INT64",
        "TYPE_FP16", "TYPE_FP32", "TYPE_FP64", "TYPE_STRING",
    }
    assert pb_utils.triton_string_to_numpy("TYPE_BOOL") is bool
    assert pb_utils.triton_string_to_numpy("TYPE_FP32") is np.float32
    assert pb_utils.triton_string_to_numpy("TYPE_STRING") is np.object_
    for key, value in m.items():
        assert pb_utils.triton_string_to_numpy(key) is value
    with pytest.raises(KeyError):
        pb_utils.triton_string_to_numpy("TYPE_BF16")
    with pytest.raises(KeyError):
        pb_utils.triton_string_to_numpy("FP32")


# ---------------------------------------------------------------- ModelConfig


def make_config(**extra):
    cfg = {"name": "mdl", "max_batch_size": 0, "input": [], "output": []}
    cfg.update(extra)
    return pb_utils.ModelConfig(json.dumps(cfg))


def test_model_config_as_dict():
    mc = make_config()
    d = mc.as_dict()
    assert d == {"name": "mdl", "max_batch_size": 0, "input": [], "output": []}
    assert mc.as_dict() is d


def test_model_config_from_dict_is_copied():
    src = {"name": "mdl", "max_batch_size": 0, "input": [], "output": []}
    mc = pb_utils.ModelConfig(src)
    mc.set_max_batch_size(3)
    assert src["max_batch_size"] == 0
    assert mc.as_dict()["max_batch_size"] == 3


def test_set_max_batch_size():
    mc = make_config()
    mc.set_max_batch_size(4)
    assert mc.as_dict()["max_batch_size"] == 4
    mc.set_max_batch_size(8)  # larger than current: fine
    assert mc.as_dict()["max_batch_size"] == 8
    mc.set_max_batch_size(8)  # equal: fine
    assert mc.as_dict()["max_batch_size"] == 8


def test_set_max_batch_size_error():
    mc = make_config(name="conflicting_max_batch_size", max_batch_size=6)
    with pytest.raises(ValueError) as e:
        mc.set_max_batch_size(4)
    assert str(e.value) == (
        "configuration specified max_batch_size 6, but in auto-complete-config "
        "function for model 'conflicting_max_batch_size' specified max_batch_size 4"
    )
    assert mc.as_dict()["max_batch_size"] == 6


def test_set_dynamic_batching():
    mc = make_config()
    mc.set_dynamic_batching()
    assert mc.as_dict()["dynamic_batching"] == {}
    mc.as_dict()["dynamic_batching"]["max_queue_delay_microseconds"] = 5
    mc.set_dynamic_batching()  # already set: no-op
    assert mc.as_dict()["dynamic_batching"] == {"max_queue_delay_microseconds": 5}


@pytest.mark.parametrize("scheduler", ["sequence_batching", "ensemble_scheduling"])
def test_set_dynamic_batching_error(scheduler):
    mc = make_config(name="conflicting_scheduler", **{scheduler: {}})
    with pytest.raises(ValueError) as e:
        mc.set_dynamic_batching()
    assert str(e.value) == (
        "Configuration specified scheduling_choice as '" + scheduler + "', but "
        "auto-complete-config function for model 'conflicting_scheduler' tries "
        "to set scheduling_choice as 'dynamic_batching'"
    )
    assert "dynamic_batching" not in mc.as_dict()


def test_set_dynamic_batching_both_schedulers_names_sequence():
    mc = make_config(sequence_batching={}, ensemble_scheduling={})
    with pytest.raises(ValueError, match="as 'sequence_batching'"):
        mc.set_dynamic_batching()


def test_add_input_and_output_append():
    mc = make_config()
    i0 = {"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]}
    i1 = {"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [4], "optional": True}
    o0 = {"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]}
    mc.add_input(i0)
    mc.add_input(i1)
    mc.add_output(o0)
    d = mc.as_dict()
    assert d["input"] == [i0, i1]
    assert d["output"] == [o0]


def test_add_input_without_input_key():
    mc = pb_utils.ModelConfig(json.dumps({"name": "mdl", "max_batch_size": 0}))
    mc.add_input({"name": "I", "data_type": "TYPE_INT8", "dims": [1]})
    mc.add_output({"name": "O", "data_type": "TYPE_INT8", "dims": [1]})
    assert mc.as_dict()["input"] == [{"name": "I", "data_type": "TYPE_INT8", "dims": [1]}]
    assert mc.as_dict()["output"] == [{"name": "O", "data_type": "TYPE_INT8", "dims": [1]}]


def test_add_input_merges_existing():
    mc = make_config(
        input=[
            {"name": "INPUT0", "data_type": "TYPE_INVALID", "dims": []},
            {"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [4], "optional": False},
        ]
    )
    mc.add_input({"name": "INPUT0", "data_type": "TYPE_FP16", "dims": [2, 2], "optional": True})
    mc.add_input({"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [4], "optional": False})
    d = mc.as_dict()
    assert d["input"] == [
        {"name": "INPUT0", "data_type": "TYPE_FP16", "dims": [2, 2], "optional": True},
        {"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [4], "optional": False},
    ]


def test_add_input_merge_keeps_optional_when_not_given():
    mc = make_config(input=[{"name": "I", "data_type": "TYPE_FP32", "dims": [4], "optional": True}])
    mc.add_input({"name": "I", "data_type": "TYPE_FP32", "dims": [4]})
    assert mc.as_dict()["input"] == [{"name": "I", "data_type": "TYPE_FP32", "dims": [4], "optional": True}]


def test_add_output_merges_existing():
    mc = make_config(output=[{"name": "O", "data_type": "TYPE_INVALID", "dims": []}])
    mc.add_output({"name": "O", "data_type": "TYPE_INT64", "dims": [-1]})
    assert mc.as_dict()["output"] == [{"name": "O", "data_type": "TYPE_INT64", "dims": [-1]}]


def test_add_input_wrong_property():
    mc = make_config(name="input_wrong_property")
    with pytest.raises(ValueError) as e:
        mc.add_input(
            {"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [4], "is_shape_tensor:": True}
        )
    assert str(e.value) == (
        "input 'INPUT1' in auto-complete-config function for model "
        "'input_wrong_property' contains property other than 'name', "
        "'data_type', 'dims' and 'optional'."
    )


def test_add_output_wrong_property():
    mc = make_config(name="output_wrong_property")
    with pytest.raises(ValueError) as e:
        mc.add_output({"name": "OUTPUT1", "data_type": "TYPE_FP32", "dims": [4], "optional": True})
    assert str(e.value) == (
        "output 'OUTPUT1' in auto-complete-config function for model "
        "'output_wrong_property' contains property other than 'name', "
        "'data_type' and 'dims'."
    )


def test_add_wrong_property_without_name_is_key_error():
    # Triton builds the unknown-property message from input['name'].
    mc = make_config()
    with pytest.raises(KeyError):
        mc.add_input({"data_type": "TYPE_FP32", "dims": [4], "bogus": 1})
    with pytest.raises(KeyError):
        mc.add_output({"data_type": "TYPE_FP32", "dims": [4], "bogus": 1})


@pytest.mark.parametrize("kind", ["input", "output"])
def test_add_missing_name(kind):
    mc = make_config(name=kind + "_missing_name")
    with pytest.raises(ValueError) as e:
        getattr(mc, "add_" + kind)({"data_type": "TYPE_FP32", "dims": [4]})
    assert str(e.value) == (
        kind + " in auto-complete-config function for model '" + kind
        + "_missing_name' is missing 'name' property."
    )


@pytest.mark.parametrize("kind", ["input", "output"])
def test_add_missing_datatype(kind):
    mc = make_config(name=kind + "_missing_datatype")
    with pytest.raises(ValueError) as e:
        getattr(mc, "add_" + kind)({"name": "T0", "dims": [4]})
    assert str(e.value) == (
        kind + " 'T0' in auto-complete-config function for model '" + kind
        + "_missing_datatype' is missing 'data_type' property."
    )


@pytest.mark.parametrize("kind", ["input", "output"])
def test_add_missing_dims(kind):
    mc = make_config(name=kind + "_missing_dims")
    with pytest.raises(ValueError) as e:
        getattr(mc, "add_" + kind)({"name": "T0", "data_type": "TYPE_FP32"})
    assert str(e.value) == (
        kind + " 'T0' in auto-complete-config function for model '" + kind
        + "_missing_dims' is missing 'dims' property."
    )


def test_add_missing_datatype_reported_before_dims():
    mc = make_config()
    with pytest.raises(ValueError, match="missing 'data_type' property"):
        mc.add_input({"name": "T0"})


@pytest.mark.parametrize("kind", ["input", "output"])
def test_add_mismatch_datatype(kind):
    mc = make_config(
        name=kind + "_mismatch_datatype",
        **{kind: [{"name": "T0", "data_type": "TYPE_FP32", "dims": [4]}]}
    )
    with pytest.raises(ValueError) as e:
        getattr(mc, "add_" + kind)({"name": "T0", "data_type": "TYPE_INT32", "dims": [4]})
    assert str(e.value) == (
        "unable to load model '" + kind + "_mismatch_datatype', configuration "
        "expects datatype TYPE_FP32 for " + kind + " 'T0', model provides TYPE_INT32"
    )


@pytest.mark.parametrize("kind", ["input", "output"])
def test_add_mismatch_dims(kind):
    mc = make_config(
        name=kind + "_mismatch_dims",
        **{kind: [{"name": "T0", "data_type": "TYPE_FP32", "dims": [2, 2]}]}
    )
    with pytest.raises(ValueError) as e:
        getattr(mc, "add_" + kind)({"name": "T0", "data_type": "TYPE_FP32", "dims": [4]})
    assert str(e.value) == (
        "model '" + kind + "_mismatch_dims', tensor 'T0': the model expects dims "
        "[4] but the model configuration specifies dims [2, 2]"
    )


def test_add_input_mismatch_dims_with_invalid_datatype():
    mc = make_config(input=[{"name": "T0", "data_type": "TYPE_INVALID", "dims": [3]}])
    with pytest.raises(ValueError, match="the model expects dims \\[4\\] but"):
        mc.add_input({"name": "T0", "data_type": "TYPE_FP32", "dims": [4]})


def test_add_input_mismatch_optional():
    mc = make_config(
        name="input_mismatch_optional",
        input=[{"name": "T0", "data_type": "TYPE_FP32", "dims": [4], "optional": False}],
    )
    with pytest.raises(ValueError) as e:
        mc.add_input({"name": "T0", "data_type": "TYPE_FP32", "dims": [4], "optional": True})
    assert str(e.value) == (
        "model 'input_mismatch_optional', tensor 'T0': the model expects optional "
        "True but the model configuration specifies optional False"
    )


def test_set_model_transaction_policy():
    mc = make_config()
    mc.set_model_transaction_policy({"decoupled": True})
    assert mc.as_dict()["model_transaction_policy"] == {"decoupled": True}
    mc.set_model_transaction_policy(dict(decoupled=True))  # same value: fine
    assert pb_utils.using_decoupled_model_transaction_policy(mc.as_dict()) is True


def test_set_model_transaction_policy_empty_dict_creates_section():
    mc = make_config()
    mc.set_model_transaction_policy({})
    assert mc.as_dict()["model_transaction_policy"] == {}


def test_set_model_transaction_policy_invalid_args():
    mc = make_config(name="model_transaction_policy_invalid_args")
    with pytest.raises(ValueError) as e:
        mc.set_model_transaction_policy({"decoupled": True, "bogus": 1})
    assert str(e.value) == (
        "model transaction property in auto-complete-config function for model "
        "'model_transaction_policy_invalid_args' contains property other than "
        "'decoupled'."
    )
    assert "model_transaction_policy" not in mc.as_dict()


def test_set_model_transaction_policy_mismatch():
    mc = make_config(
        name="model_transaction_policy_mismatch",
        model_transaction_policy={"decoupled": False},
    )
    with pytest.raises(ValueError) as e:
        mc.set_model_transaction_policy({"decoupled": True})
    assert str(e.value) == (
        "trying to change decoupled property in auto-complete-config for model "
        "'model_transaction_policy_mismatch', which is already set to 'False'."
    )
    assert mc.as_dict()["model_transaction_policy"] == {"decoupled": False}
