"""Tests of vramd's pb_utils.Tensor (src/backends/python/pb_tensor.cc).

Builds the test-only extension module pb_tensor_ext (tests/python/build_pb_tensor_ext.sh) into
a temporary directory, then drives it from Python.

Run: /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/python/test_pb_tensor.py
PB_TENSOR_EXT_DIR=<dir> uses a module built before (e.g. with sanitizers:
  EXTRA_CXXFLAGS="-fsanitize=address,undefined" tests/python/build_pb_tensor_ext.sh <dir>, then
  run pytest with LD_PRELOAD=$(g++ -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0).
"""

import gc
import importlib
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import weakref

import numpy as np
import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))
_BUILD = os.path.join(_HERE, "build_pb_tensor_ext.sh")

GPU_TEXT = "Tensor is stored in GPU and cannot be converted to NumPy."
BF16_TEXT = (
    "Tensor dtype is BF16 and cannot be converted to NumPy. "
    "Use to_dlpack() and from_dlpack() instead."
)
NONCONTIG_TEXT = (
    "DLPack tensor is not contiguous. Only contiguous DLPack tensors that are stored in "
    "C-Order are supported."
)
STRINGS_TEXT = "DLPack does not have support for string tensors."
NOT_DLPACK_TEXT = (
    "Provided tensor is not supported. Tensor must be a DLPack capsule or have "
    "`__dlpack__` and `__dlpack_device__` attributes"
)
EMPTY_NAME_TEXT = "Tensor name cannot be an empty string."

# VramdDataType numbering (== Triton's TRITONSERVER_DataType).
TYPES = {
    np.bool_: 1,
    np.uint8: 2,
    np.uint16: 3,
    np.uint32: 4,
    np.uint64: 5,
    np.int8: 6,
    np.int16: 7,
    np.int32: 8,
    np.int64: 9,
    np.float16: 10,
    np.float32: 11,
    np.float64: 12,
}
BYTES = 13
BF16 = 14
# DLPack device and type codes.
kDLCPU, kDLCUDA, kDLCUDAHost = 1, 2, 3
kDLInt, kDLUInt, kDLFloat, kDLBfloat, kDLComplex, kDLBool = 0, 1, 2, 4, 5, 6


@pytest.fixture(scope="module")
def ext():
    prebuilt = os.environ.get("PB_TENSOR_EXT_DIR")  # a build_pb_tensor_ext.sh output to use
    if prebuilt:
        sys.path.insert(0, prebuilt)
        try:
            yield importlib.import_module("pb_tensor_ext")
        finally:
            sys.path.remove(prebuilt)
        return
    if shutil.which(os.environ.get("CXX", "g++")) is None:
        pytest.skip("no C++ compiler (g++) to build the pb_tensor_ext test module")
    if not os.path.isdir("/usr/include/pybind11"):
        pytest.skip("no pybind11 headers in /usr/include/pybind11")
    out = tempfile.mkdtemp(prefix="pb_tensor_ext.")
    try:
        proc = subprocess.run(
            ["sh", _BUILD, out], capture_output=True, text=True, timeout=1200
        )
        if proc.returncode != 0:
            pytest.fail("building pb_tensor_ext failed:\n" + proc.stderr)
        sys.path.insert(0, out)
        try:
            yield importlib.import_module("pb_tensor_ext")
        finally:
            sys.path.remove(out)
    finally:
        shutil.rmtree(out, ignore_errors=True)


def raises(ext, text):
    return pytest.raises(ext.TritonModelException, match="^" + _escape(text) + "$")


def _escape(text):
    import re

    return re.escape(text)


def serialize(items):
    out = b""
    for s in items:
        out += struct.pack("<I", len(s)) + s
    return out


class Owner:
    """A weakref-able keepalive holding a buffer."""

    def __init__(self, data):
        self.buf = bytearray(data)


# ---------------------------------------------------------------- numpy


@pytest.mark.parametrize("dtype", list(TYPES))
def test_numpy_round_trip_every_dtype(ext, dtype):
    if dtype is np.bool_:
        a = np.array([[True, False, True], [False, False, True]])
    else:
        a = (np.arange(6) * 3 % 7).astype(dtype).reshape(2, 3)
    t = ext.Tensor("in", a)
    assert t.name() == "in"
    assert t.triton_dtype() == TYPES[dtype]
    assert t.shape() == [2, 3]
    assert all(type(d) is int for d in t.shape())
    assert t.is_cpu()
    assert t.__dlpack_device__() == (kDLCPU, 0)
    b = t.as_numpy()
    assert b.dtype == np.dtype(dtype)
    assert b.shape == (2, 3)
    np.testing.assert_array_equal(a, b)
    assert ext.byte_size(t) == a.nbytes
    # Shares the array's memory, as Triton does.
    assert ext.data_address(t) == a.ctypes.data
    assert ext.memory(t) == (0, -1)


def test_other_dtype_spellings(ext):
    assert ext.Tensor("a", np.zeros(2, dtype="<i4")).triton_dtype() == 8
    assert ext.Tensor("a", np.zeros(2, dtype=np.intc)).triton_dtype() == 8
    assert ext.Tensor("a", np.zeros(2, dtype=np.longlong)).triton_dtype() == 9
    assert ext.Tensor("a", np.zeros(2, dtype=np.half)).triton_dtype() == 10


def test_big_endian_is_converted(ext):
    a = np.arange(5, dtype=">i4")
    t = ext.Tensor("be", a)
    assert t.triton_dtype() == 8
    b = t.as_numpy()
    assert b.dtype.isnative
    np.testing.assert_array_equal(b, np.arange(5))


def test_list_input_goes_through_asarray(ext):
    t = ext.Tensor("l", [[1, 2], [3, 4]])
    assert t.triton_dtype() == 9
    np.testing.assert_array_equal(t.as_numpy(), [[1, 2], [3, 4]])


def test_non_contiguous_input_is_copied_to_c_order(ext):
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    for view in (base[:, ::2], base.T, base[::2], np.asfortranarray(base)):
        assert not view.flags.c_contiguous
        t = ext.Tensor("nc", view)
        assert t.shape() == list(view.shape)
        b = t.as_numpy()
        assert b.flags.c_contiguous
        np.testing.assert_array_equal(b, view)
        assert ext.raw_bytes(t) == np.ascontiguousarray(view).tobytes()


def test_zero_d_and_empty(ext):
    t = ext.Tensor("s", np.array(3.5, dtype=np.float64))
    assert t.shape() == []
    b = t.as_numpy()
    assert b.shape == () and b.dtype == np.float64 and b[()] == 3.5
    for shape in [(0,), (2, 0), (0, 3, 1)]:
        e = ext.Tensor("e", np.zeros(shape, dtype=np.int16))
        assert e.shape() == list(shape)
        assert ext.byte_size(e) == 0
        b = e.as_numpy()
        assert b.shape == shape and b.dtype == np.int16
        assert np.from_dlpack(e).shape == shape
        import torch

        assert tuple(torch.from_dlpack(e).shape) == shape


def test_bytes_from_object_bytes_and_str(ext):
    a = np.array([[b"ab", b""], ["h\u00e9", 7]], dtype=np.object_)
    t = ext.Tensor("b", a)
    assert t.triton_dtype() == BYTES
    assert t.shape() == [2, 2]
    assert ext.raw_bytes(t) == serialize([b"ab", b"", "h\u00e9".encode(), b"7"])
    b = t.as_numpy()
    assert b.dtype == np.object_ and b.shape == (2, 2)
    assert b.tolist() == [[b"ab", b""], ["h\u00e9".encode(), b"7"]]
    assert all(type(x) is bytes for x in b.flat)


def test_bytes_from_np_bytes_and_str(ext):
    a = np.array([b"x", b"yz\x00w", b"long one"], dtype=np.bytes_)
    t = ext.Tensor("s", a)
    assert t.triton_dtype() == BYTES
    assert t.as_numpy().tolist() == [b"x", b"yz\x00w", b"long one"]
    u = ext.Tensor("u", np.array(["\u00fc", "ab"]))
    assert u.triton_dtype() == BYTES
    assert u.as_numpy().tolist() == ["\u00fc".encode(), b"ab"]


def test_bytes_non_contiguous_zero_d_and_empty(ext):
    a = np.array([[b"a", b"b"], [b"c", b"d"]], dtype=np.object_).T
    assert ext.Tensor("t", a).as_numpy().tolist() == [[b"a", b"c"], [b"b", b"d"]]
    z = ext.Tensor("z", np.array(b"only", dtype=np.object_))
    assert z.shape() == []
    assert z.as_numpy().shape == () and z.as_numpy()[()] == b"only"
    e = ext.Tensor("e", np.zeros((0, 2), dtype=np.object_))
    assert e.shape() == [0, 2] and ext.byte_size(e) == 0
    assert e.as_numpy().shape == (0, 2) and e.as_numpy().dtype == np.object_


def test_borrowed_bytes_tensor(ext):
    data = serialize([b"one", b"", b"three"])
    owner = Owner(data)
    t = ext.borrow("in", BYTES, [3, 1], owner.buf, owner)
    assert t.as_numpy().tolist() == [[b"one"], [b""], [b"three"]]
    bad = Owner(data[:-2])
    with pytest.raises(ext.TritonModelException, match="truncated"):
        ext.borrow("in", BYTES, [3], bad.buf, bad).as_numpy()
    with pytest.raises(ext.TritonModelException, match="elements"):
        ext.borrow("in", BYTES, [2], owner.buf, owner).as_numpy()


def test_as_numpy_is_zero_copy_and_base_keeps_tensor(ext):
    a = np.arange(4, dtype=np.int32)
    t = ext.Tensor("z", a)
    v = t.as_numpy()
    v[1] = 100  # written through the tensor's memory ...
    assert a[1] == 100  # ... which is the source array's
    assert t.as_numpy()[1] == 100
    a[2] = -5
    assert v[2] == -5
    assert v.flags.writeable
    assert v.base is not None
    del t, a
    gc.collect()
    # The tensor's Python wrapper is gone, but the memory stays valid through v.base.
    assert v.tolist() == [0, 100, -5, 3]


def test_unsupported_numpy_dtype_and_empty_name(ext):
    with raises(ext, EMPTY_NAME_TEXT):
        ext.Tensor("", np.zeros(2))
    with raises(ext, "NumPy dtype is not supported."):
        ext.Tensor("c", np.zeros(2, dtype=np.complex64))
    with raises(ext, "NumPy dtype is not supported."):
        ext.Tensor("d", np.zeros(2, dtype="datetime64[s]"))
    assert issubclass(ext.TritonModelException, Exception)


# ---------------------------------------------------------------- DLPack with numpy


def test_dlpack_to_numpy_every_dtype(ext):
    for dtype in TYPES:
        if dtype is np.bool_:
            continue  # numpy 1.24 has no DLPack bool (kDLBool); see test_bool_dlpack
        a = (np.arange(6) % 5).astype(dtype).reshape(3, 2)
        t = ext.Tensor("t", a)
        b = np.from_dlpack(t)
        assert b.dtype == a.dtype
        np.testing.assert_array_equal(a, b)
        assert b.ctypes.data == a.ctypes.data  # zero copy


def test_numpy_to_tensor_via_dlpack(ext):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = ext.Tensor.from_dlpack("n", a)
    assert t.triton_dtype() == 11 and t.shape() == [3, 4]
    assert ext.data_address(t) == a.ctypes.data
    np.testing.assert_array_equal(t.as_numpy(), a)
    t2 = ext.Tensor.from_dlpack("c", a.__dlpack__())
    np.testing.assert_array_equal(t2.as_numpy(), a)
    # A 0-d array and an empty one.
    assert ext.Tensor.from_dlpack("z", np.array(7, dtype=np.int8)).as_numpy()[()] == 7
    assert ext.Tensor.from_dlpack("e", np.zeros((0, 5), np.int64)).shape() == [0, 5]


def test_numpy_dlpack_keeps_producer_alive(ext):
    a = np.arange(1000, dtype=np.float64)
    ref = weakref.ref(a) if hasattr(a, "__weakref__") else None
    t = ext.Tensor.from_dlpack("k", a)
    del a
    gc.collect()
    if ref is not None:
        assert ref() is not None
    np.testing.assert_array_equal(t.as_numpy(), np.arange(1000))
    del t
    gc.collect()
    if ref is not None:
        assert ref() is None


def test_to_dlpack_capsule(ext):
    t = ext.Tensor("c", np.zeros((2, 3, 4), dtype=np.uint16))
    cap = t.to_dlpack()
    assert type(cap).__name__ == "PyCapsule"
    assert ext.capsule_name(cap) == "dltensor"
    code, bits, lanes, dev, dev_id, ndim, shape, strides, addr = ext.capsule_info(cap)
    assert (code, bits, lanes, dev, dev_id, ndim) == (kDLUInt, 16, 1, kDLCPU, 0, 3)
    assert shape == [2, 3, 4] and strides == [12, 4, 1]
    assert addr == ext.data_address(t)
    # Consumed once: numpy renames it and later calls the deleter.
    b = np.from_dlpack(type("P", (), {"__dlpack__": lambda s, stream=None: t.__dlpack__(stream),
                                      "__dlpack_device__": lambda s: t.__dlpack_device__()})())
    assert b.shape == (2, 3, 4)
    # A capsule someone already took is refused, and left alone.
    t2 = ext.Tensor.from_dlpack("again", cap)
    assert ext.capsule_name(cap) == "used_dltensor"
    with pytest.raises(ext.TritonModelException, match="already consumed"):
        ext.Tensor.from_dlpack("third", cap)
    assert t2.shape() == [2, 3, 4]


def test_dlpack_round_trip_through_tensor(ext):
    a = np.arange(6, dtype=np.int64)
    t = ext.Tensor("a", a)
    t2 = ext.Tensor.from_dlpack("b", t.to_dlpack())
    t3 = ext.Tensor.from_dlpack("c", t2)  # an object with __dlpack__
    assert t3.name() == "c" and ext.data_address(t3) == a.ctypes.data
    np.testing.assert_array_equal(t3.as_numpy(), a)


def test_bool_dlpack(ext):
    t = ext.Tensor("b", np.array([True, False, True]))
    code, bits, lanes = ext.capsule_info(t.to_dlpack())[:3]
    assert (code, bits, lanes) == (kDLBool, 8, 1)
    back = ext.Tensor.from_dlpack("bb", t)
    assert back.triton_dtype() == 1
    assert back.as_numpy().tolist() == [True, False, True]
    # A producer that exports bool as kDLUInt 8 but whose dtype is bool.
    cap = ext.make_capsule(kDLCPU, 0, kDLUInt, 8, 1, [4], None)

    class BoolProducer:
        dtype = np.dtype(np.bool_)

        def __dlpack__(self, stream=None):
            return cap

        def __dlpack_device__(self):
            return (kDLCPU, 0)

    assert ext.Tensor.from_dlpack("p", BoolProducer()).triton_dtype() == 1
    # The same code from a plain capsule is UINT8.
    u = ext.Tensor.from_dlpack("u", ext.make_capsule(kDLCPU, 0, kDLUInt, 8, 1, [4], None))
    assert u.triton_dtype() == 2


# ---------------------------------------------------------------- DLPack with torch


def test_torch_both_ways(ext):
    torch = pytest.importorskip("torch")
    from torch.utils import dlpack as tdl

    cases = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
             torch.float16, torch.float32, torch.float64]
    expect = [2, 6, 7, 8, 9, 10, 11, 12]
    for dt, code in zip(cases, expect):
        x = (torch.arange(12) % 7).to(dt).reshape(3, 4)
        t = ext.Tensor.from_dlpack("t", x)  # via __dlpack__
        assert t.triton_dtype() == code and t.shape() == [3, 4]
        assert ext.data_address(t) == x.data_ptr()
        np.testing.assert_array_equal(t.as_numpy(), x.numpy())
        t2 = ext.Tensor.from_dlpack("t", tdl.to_dlpack(x))  # via a capsule
        assert ext.data_address(t2) == x.data_ptr()
        y = tdl.from_dlpack(t.to_dlpack())
        assert y.dtype == dt and torch.equal(x, y) and y.data_ptr() == x.data_ptr()
        z = torch.from_dlpack(ext.Tensor("n", x.numpy()))
        assert torch.equal(x, z)
    # Mutations are seen both ways (zero copy).
    x = torch.zeros(4, dtype=torch.float32)
    t = ext.Tensor.from_dlpack("m", x)
    x[0] = 9
    assert t.as_numpy()[0] == 9
    t.as_numpy()[1] = 7
    assert x[1].item() == 7
    # Size-1 dimensions may have any stride; an unsqueezed tensor is contiguous.
    assert ext.Tensor.from_dlpack("u", torch.arange(3).unsqueeze(0)).shape() == [1, 3]
    # 0-d and empty.
    assert ext.Tensor.from_dlpack("s", torch.tensor(2.5)).as_numpy()[()] == 2.5
    assert ext.Tensor.from_dlpack("e", torch.zeros(0, 3)).shape() == [0, 3]


def test_torch_bf16(ext):
    torch = pytest.importorskip("torch")
    from torch.utils import dlpack as tdl

    x = torch.tensor([1.5, -2.0, 3.25, 1e10], dtype=torch.bfloat16)
    t = ext.Tensor.from_dlpack("bf", x)
    assert t.triton_dtype() == BF16
    assert t.shape() == [4]
    with raises(ext, BF16_TEXT):
        t.as_numpy()
    code, bits = ext.capsule_info(t.to_dlpack())[:2]
    assert (code, bits) == (kDLBfloat, 16)
    y = tdl.from_dlpack(t.to_dlpack())
    assert y.dtype == torch.bfloat16 and torch.equal(x, y)
    assert torch.equal(torch.from_dlpack(t), x)


def test_torch_keeps_tensor_alive(ext):
    torch = pytest.importorskip("torch")
    owner = Owner(np.arange(8, dtype=np.float32).tobytes())
    ref = weakref.ref(owner)
    t = ext.borrow("in", 11, [8], owner.buf, owner)
    del owner
    y = torch.from_dlpack(t)
    del t
    gc.collect()
    assert ref() is not None
    assert y.tolist() == list(range(8))
    del y
    gc.collect()
    assert ref() is None


# ---------------------------------------------------------------- errors and other memory


def test_dlpack_error_texts(ext):
    torch = pytest.importorskip("torch")
    with raises(ext, NONCONTIG_TEXT):
        ext.Tensor.from_dlpack("x", torch.arange(12).reshape(3, 4).t())
    with raises(ext, NONCONTIG_TEXT):
        ext.Tensor.from_dlpack("x", torch.arange(12)[::2])
    with raises(ext, NONCONTIG_TEXT):
        ext.Tensor.from_dlpack("x", np.arange(12).reshape(3, 4)[:, 1:])
    with raises(ext, STRINGS_TEXT):
        ext.Tensor("s", np.array([b"a"], dtype=np.object_)).to_dlpack()
    with raises(ext, STRINGS_TEXT):
        ext.Tensor("s", np.array([b"a"], dtype=np.object_)).__dlpack__()
    with raises(ext, STRINGS_TEXT):
        ext.Tensor.from_dlpack("s", ext.Tensor("s", np.array([b"a"], dtype=np.object_)))
    with raises(ext, STRINGS_TEXT):
        ext.Tensor.from_dlpack("s", np.array([b"a", b"b"]))
    for bad in (np.zeros(2).tolist(), 3, "text", object(), None):
        with raises(ext, NOT_DLPACK_TEXT):
            ext.Tensor.from_dlpack("x", bad)
    with raises(ext, EMPTY_NAME_TEXT):
        ext.Tensor.from_dlpack("", np.zeros(2))
    # A complex tensor, lanes != 1 and an unknown device are refused with an explanation.
    with pytest.raises(ext.TritonModelException, match="not supported"):
        ext.Tensor.from_dlpack("c", ext.make_capsule(kDLCPU, 0, kDLComplex, 64, 1, [2], None))
    with pytest.raises(ext.TritonModelException, match="not supported"):
        ext.Tensor.from_dlpack("l", ext.make_capsule(kDLCPU, 0, kDLFloat, 32, 4, [2], None))
    with pytest.raises(ext.TritonModelException, match="device type 4"):
        ext.Tensor.from_dlpack("o", ext.make_capsule(4, 0, kDLFloat, 32, 1, [2], None))


def test_refused_capsule_is_left_alone(ext):
    before = ext.deleted_count()
    cap = ext.make_capsule(kDLCPU, 0, kDLFloat, 32, 1, [2, 3], [1, 2])  # Fortran order
    with raises(ext, NONCONTIG_TEXT):
        ext.Tensor.from_dlpack("f", cap)
    assert ext.capsule_name(cap) == "dltensor"
    assert ext.deleted_count() == before
    del cap
    gc.collect()
    assert ext.deleted_count() == before + 1  # the capsule's own destructor deleted it


def test_gpu_capsule_deleter_called_once(ext):
    before = ext.deleted_count()
    cap = ext.make_capsule(kDLCUDA, 3, kDLFloat, 16, 1, [2, 5], [5, 1])
    t = ext.Tensor.from_dlpack("g", cap)
    assert ext.capsule_name(cap) == "used_dltensor"
    assert not t.is_cpu()
    assert t.triton_dtype() == 10 and t.shape() == [2, 5]
    assert ext.memory(t) == (1, 3)
    assert t.__dlpack_device__() == (kDLCUDA, 3)
    assert ext.byte_size(t) == 20
    with raises(ext, GPU_TEXT):
        t.as_numpy()
    out = t.to_dlpack()
    assert ext.capsule_info(out)[3:5] == (kDLCUDA, 3)
    del cap
    gc.collect()
    assert ext.deleted_count() == before  # we own it now
    del t
    gc.collect()
    assert ext.deleted_count() == before  # the exported capsule still holds the tensor
    del out
    gc.collect()
    assert ext.deleted_count() == before + 1


def test_cuda_host_memory_is_cpu(ext):
    owner = Owner(np.arange(3, dtype=np.int32).tobytes())
    t = ext.borrow("p", 8, [3], owner.buf, owner, kind=2)
    assert t.is_cpu()
    assert t.__dlpack_device__() == (kDLCUDAHost, 0)
    assert t.as_numpy().tolist() == [0, 1, 2]
    t2 = ext.Tensor.from_dlpack("p2", ext.make_capsule(kDLCUDAHost, 0, kDLInt, 32, 1, [3], None))
    assert t2.is_cpu() and ext.memory(t2) == (2, -1)


def test_gpu_borrowed_tensor(ext):
    owner = Owner(b"\0" * 16)
    t = ext.borrow("g", 11, [4], owner.buf, owner, kind=1, device_id=0)
    assert not t.is_cpu()
    assert t.__dlpack_device__() == (kDLCUDA, 0)
    with raises(ext, GPU_TEXT):
        t.as_numpy()
    owner = Owner(b"\0" * 8)
    b = ext.borrow("g", BF16, [4], owner.buf, owner, kind=1, device_id=0)
    with raises(ext, GPU_TEXT):  # the GPU check comes first, as in Triton
        b.as_numpy()


# ---------------------------------------------------------------- keepalive


def test_keepalive_released_with_last_reference(ext):
    owner = Owner(np.arange(6, dtype=np.int16).tobytes())
    ref = weakref.ref(owner)
    t = ext.borrow("in", 7, [2, 3], owner.buf, owner)
    del owner
    gc.collect()
    assert ref() is not None
    view = t.as_numpy()
    cap = t.to_dlpack()
    from_np = np.from_dlpack(ext.Tensor.from_dlpack("again", t))
    del t
    gc.collect()
    assert ref() is not None
    assert view.tolist() == [[0, 1, 2], [3, 4, 5]]
    del view
    gc.collect()
    assert ref() is not None
    del cap
    gc.collect()
    assert ref() is not None
    assert from_np.tolist() == [[0, 1, 2], [3, 4, 5]]
    del from_np
    gc.collect()
    assert ref() is None


def test_keepalive_released_without_views(ext):
    owner = Owner(b"\1\0\0\0")
    ref = weakref.ref(owner)
    t = ext.borrow("in", 8, [1], owner.buf, owner)
    del owner
    assert ref() is not None
    assert t.as_numpy().tolist() == [1]
    del t
    gc.collect()
    assert ref() is None


def test_numpy_source_released(ext):
    class Arr(np.ndarray):
        pass

    a = np.arange(5, dtype=np.int32).view(Arr)
    ref = weakref.ref(a)
    t = ext.Tensor("a", a)
    del a
    gc.collect()
    assert ref() is not None
    del t
    gc.collect()
    assert ref() is None


def test_static_from_dlpack_and_repr(ext):
    t = ext.Tensor("r", np.zeros(1, np.float32))
    assert ext.Tensor.from_dlpack("x", t).name() == "x"
    assert t.from_dlpack("y", t).name() == "y"  # also callable on an instance
    assert "r" in repr(t)
