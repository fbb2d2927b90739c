// pb_utils.Tensor: see pb_tensor.h.
#include "backends/python/pb_tensor.h"
#include "interpreter.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstring>
#include <limits>
#include <utility>

#include "backends/python/dlpack.h"

namespace py = pybind11;

namespace vramd::python {
namespace {

constexpr const char* kEmptyName = "Tensor name cannot be an empty string.";
constexpr const char* kNumpyDtype = "NumPy dtype is not supported.";
constexpr const char* kGpuNumpy = "Tensor is stored in GPU and cannot be converted to NumPy.";
constexpr const char* kBf16Numpy =
    "Tensor dtype is BF16 and cannot be converted to NumPy. Use to_dlpack() and from_dlpack() "
    "instead.";
constexpr const char* kNotContiguous =
    "DLPack tensor is not contiguous. Only contiguous DLPack tensors that are stored in C-Order "
    "are supported.";
constexpr const char* kDlpackStrings = "DLPack does not have support for string tensors.";
constexpr const char* kNotDlpack =
    "Provided tensor is not supported. Tensor must be a DLPack capsule or have `__dlpack__` and "
    "`__dlpack_device__` attributes";

constexpr const char* kCapsuleName = "dltensor";
constexpr const char* kUsedCapsuleName = "used_dltensor";

bool PythonAlive() {
  if (!Py_IsInitialized()) return false;
#if PY_VERSION_HEX >= 0x030D0000
  return !Py_IsFinalizing();
#else
  return !_Py_IsFinalizing();
#endif
}

// The numpy dtype of a fixed-size type, numpy's own descriptor (as_numpy runs for every input
// of every request: parsing a dtype name there showed in a python identity model's profile);
// None for BYTES, BF16 and INVALID.
py::object NumpyDtype(VramdDataType type) {
  switch (type) {
    case VRAMD_TYPE_BOOL: return py::dtype::of<bool>();
    case VRAMD_TYPE_UINT8: return py::dtype::of<uint8_t>();
    case VRAMD_TYPE_UINT16: return py::dtype::of<uint16_t>();
    case VRAMD_TYPE_UINT32: return py::dtype::of<uint32_t>();
    case VRAMD_TYPE_UINT64: return py::dtype::of<uint64_t>();
    case VRAMD_TYPE_INT8: return py::dtype::of<int8_t>();
    case VRAMD_TYPE_INT16: return py::dtype::of<int16_t>();
    case VRAMD_TYPE_INT32: return py::dtype::of<int32_t>();
    case VRAMD_TYPE_INT64: return py::dtype::of<int64_t>();
    case VRAMD_TYPE_FP16: return py::dtype("float16");
    case VRAMD_TYPE_FP32: return py::dtype::of<float>();
    case VRAMD_TYPE_FP64: return py::dtype::of<double>();
    default: return py::none();
  }
}

bool ToDlDataType(VramdDataType type, DLDataType* out) {
  out->lanes = 1;
  switch (type) {
    case VRAMD_TYPE_BOOL: out->code = kDLBool; out->bits = 8; return true;
    case VRAMD_TYPE_UINT8: out->code = kDLUInt; out->bits = 8; return true;
    case VRAMD_TYPE_UINT16: out->code = kDLUInt; out->bits = 16; return true;
    case VRAMD_TYPE_UINT32: out->code = kDLUInt; out->bits = 32; return true;
    case VRAMD_TYPE_UINT64: out->code = kDLUInt; out->bits = 64; return true;
    case VRAMD_TYPE_INT8: out->code = kDLInt; out->bits = 8; return true;
    case VRAMD_TYPE_INT16: out->code = kDLInt; out->bits = 16; return true;
    case VRAMD_TYPE_INT32: out->code = kDLInt; out->bits = 32; return true;
    case VRAMD_TYPE_INT64: out->code = kDLInt; out->bits = 64; return true;
    case VRAMD_TYPE_FP16: out->code = kDLFloat; out->bits = 16; return true;
    case VRAMD_TYPE_FP32: out->code = kDLFloat; out->bits = 32; return true;
    case VRAMD_TYPE_FP64: out->code = kDLFloat; out->bits = 64; return true;
    case VRAMD_TYPE_BF16: out->code = kDLBfloat; out->bits = 16; return true;
    default: return false;
  }
}

VramdDataType FromDlDataType(const DLDataType& dt, bool bool_origin) {
  if (dt.lanes != 1) return VRAMD_TYPE_INVALID;
  switch (dt.code) {
    case kDLBool:
      return dt.bits == 8 ? VRAMD_TYPE_BOOL : VRAMD_TYPE_INVALID;
    case kDLUInt:
      switch (dt.bits) {
        case 8: return bool_origin ? VRAMD_TYPE_BOOL : VRAMD_TYPE_UINT8;
        case 16: return VRAMD_TYPE_UINT16;
        case 32: return VRAMD_TYPE_UINT32;
        case 64: return VRAMD_TYPE_UINT64;
      }
      return VRAMD_TYPE_INVALID;
    case kDLInt:
      switch (dt.bits) {
        case 8: return VRAMD_TYPE_INT8;
        case 16: return VRAMD_TYPE_INT16;
        case 32: return VRAMD_TYPE_INT32;
        case 64: return VRAMD_TYPE_INT64;
      }
      return VRAMD_TYPE_INVALID;
    case kDLFloat:
      switch (dt.bits) {
        case 16: return VRAMD_TYPE_FP16;
        case 32: return VRAMD_TYPE_FP32;
        case 64: return VRAMD_TYPE_FP64;
      }
      return VRAMD_TYPE_INVALID;
    case kDLBfloat:
      return dt.bits == 16 ? VRAMD_TYPE_BF16 : VRAMD_TYPE_INVALID;
  }
  return VRAMD_TYPE_INVALID;
}

size_t ElementSize(VramdDataType type) {
  switch (type) {
    case VRAMD_TYPE_BOOL: case VRAMD_TYPE_UINT8: case VRAMD_TYPE_INT8: return 1;
    case VRAMD_TYPE_UINT16: case VRAMD_TYPE_INT16: case VRAMD_TYPE_FP16:
    case VRAMD_TYPE_BF16: return 2;
    case VRAMD_TYPE_UINT32: case VRAMD_TYPE_INT32: case VRAMD_TYPE_FP32: return 4;
    case VRAMD_TYPE_UINT64: case VRAMD_TYPE_INT64: case VRAMD_TYPE_FP64: return 8;
    default: return 0;
  }
}

// numpy dtype -> vramd type, by kind and item size (so any spelling of a dtype maps).
VramdDataType FromNumpyDtype(const py::dtype& dt) {
  const char kind = dt.kind();
  const py::ssize_t size = dt.itemsize();
  switch (kind) {
    case 'b':
      return size == 1 ? VRAMD_TYPE_BOOL : VRAMD_TYPE_INVALID;
    case 'u':
      switch (size) {
        case 1: return VRAMD_TYPE_UINT8;
        case 2: return VRAMD_TYPE_UINT16;
        case 4: return VRAMD_TYPE_UINT32;
        case 8: return VRAMD_TYPE_UINT64;
      }
      return VRAMD_TYPE_INVALID;
    case 'i':
      switch (size) {
        case 1: return VRAMD_TYPE_INT8;
        case 2: return VRAMD_TYPE_INT16;
        case 4: return VRAMD_TYPE_INT32;
        case 8: return VRAMD_TYPE_INT64;
      }
      return VRAMD_TYPE_INVALID;
    case 'f':
      switch (size) {
        case 2: return VRAMD_TYPE_FP16;
        case 4: return VRAMD_TYPE_FP32;
        case 8: return VRAMD_TYPE_FP64;
      }
      return VRAMD_TYPE_INVALID;
    case 'O': case 'S': case 'U':
      return VRAMD_TYPE_BYTES;
    case 'V':
      // ml_dtypes.bfloat16 (what jax and others use for BF16 in numpy).
      if (size == 2 && py::str(dt.attr("name")).cast<std::string>() == "bfloat16") {
        return VRAMD_TYPE_BF16;
      }
      return VRAMD_TYPE_INVALID;
  }
  return VRAMD_TYPE_INVALID;
}

// The DLManagedTensor a DLPack consumer gets from ToDlpack: holds the tensor, shape and strides.
struct ExportContext {
  std::shared_ptr<PbTensor> tensor;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  DLManagedTensor managed{};
};

void ExportDeleter(DLManagedTensor* self) {
  // Dropping the tensor may release a Python owner; HoldPyObject's release takes the GIL itself.
  delete static_cast<ExportContext*>(self->manager_ctx);
}

// The capsule's destructor: the DLManagedTensor is still ours unless a consumer renamed it.
void CapsuleDestructor(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, kCapsuleName)) return;  // consumed: the consumer deletes it
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, kCapsuleName));
  if (managed != nullptr && managed->deleter != nullptr) managed->deleter(managed);
  PyErr_Restore(type, value, traceback);
}

// Owns a DLManagedTensor taken from a capsule: calls its deleter (under the GIL, since numpy's
// and other Python producers' deleters decrement references) when the last holder goes.
std::shared_ptr<void> HoldManaged(DLManagedTensor* managed) {
  return std::shared_ptr<void>(managed, [](void* p) {
    auto* m = static_cast<DLManagedTensor*>(p);
    if (m->deleter == nullptr) return;
    if (!PythonAlive()) return;  // at exit: leak rather than run Python code without a runtime
    ScopedGil gil;
    m->deleter(m);
  });
}

bool IsNumpyStringDtype(py::handle obj) {
  if (!py::hasattr(obj, "dtype")) return false;
  py::object dt = obj.attr("dtype");
  if (!py::isinstance<py::dtype>(dt)) return false;
  const char kind = py::reinterpret_borrow<py::dtype>(dt).kind();
  return kind == 'O' || kind == 'S' || kind == 'U';
}

// Whether a producer's element type is bool, for producers that export bool as kDLUInt 8.
bool IsBoolDtype(py::handle obj) {
  if (!py::hasattr(obj, "dtype")) return false;
  py::object dt = obj.attr("dtype");
  if (py::isinstance<py::dtype>(dt)) return py::reinterpret_borrow<py::dtype>(dt).kind() == 'b';
  const std::string s = py::str(dt).cast<std::string>();
  return s == "torch.bool" || s == "bool";
}

}  // namespace

std::shared_ptr<void> HoldPyObject(py::object obj) {
  PyObject* ptr = obj.release().ptr();
  return std::shared_ptr<void>(ptr, [](void* p) {
    if (p == nullptr || !PythonAlive()) return;
    ScopedGil gil;
    Py_DECREF(static_cast<PyObject*>(p));
  });
}

void AppendBytesElement(std::string* out, const char* data, size_t size) {
  if (size > std::numeric_limits<uint32_t>::max()) {
    throw TensorError("BYTES element of " + std::to_string(size) +
                      " bytes is longer than the 4-byte length allows.");
  }
  const uint32_t n = static_cast<uint32_t>(size);
  const char len[4] = {static_cast<char>(n & 0xff), static_cast<char>((n >> 8) & 0xff),
                       static_cast<char>((n >> 16) & 0xff), static_cast<char>((n >> 24) & 0xff)};
  out->append(len, 4);
  out->append(data, size);
}

int64_t PbTensor::element_count() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

std::shared_ptr<PbTensor> PbTensor::FromNumpy(std::string name, py::object array) {
  if (name.empty()) throw TensorError(kEmptyName);
  // numpy is imported only where needed: this runs for every output of every request.
  if (!py::isinstance<py::array>(array)) array = py::module_::import("numpy").attr("asarray")(array);
  py::array a = py::reinterpret_borrow<py::array>(array);
  py::dtype dt = a.dtype();
  const VramdDataType type = FromNumpyDtype(dt);
  if (type == VRAMD_TYPE_INVALID) throw TensorError(kNumpyDtype);

  std::shared_ptr<PbTensor> t(new PbTensor());
  t->name_ = std::move(name);
  t->datatype_ = type;
  t->memory_ = VramdMemory{VRAMD_DEVICE_CPU, -1};
  for (py::ssize_t i = 0; i < a.ndim(); ++i) t->shape_.push_back(a.shape(i));

  if (type == VRAMD_TYPE_BYTES) {
    auto serialized = std::make_shared<std::string>();
    // ravel(order="C") then tolist(): elements in C order; np.bytes_ items come back as bytes
    // without their trailing NULs (as numpy's item() gives them), np.str_ items as str.
    py::list items = a.attr("ravel")("C").attr("tolist")();
    for (py::handle item : items) {
      if (PyBytes_Check(item.ptr())) {
        AppendBytesElement(serialized.get(), PyBytes_AS_STRING(item.ptr()),
                           static_cast<size_t>(PyBytes_GET_SIZE(item.ptr())));
      } else {
        py::str s = PyUnicode_Check(item.ptr()) ? py::reinterpret_borrow<py::str>(item)
                                                : py::str(item);
        Py_ssize_t size = 0;
        const char* utf8 = PyUnicode_AsUTF8AndSize(s.ptr(), &size);
        if (utf8 == nullptr) throw py::error_already_set();
        AppendBytesElement(serialized.get(), utf8, static_cast<size_t>(size));
      }
    }
    t->data_ = serialized->data();
    t->byte_size_ = serialized->size();
    t->owner_ = std::move(serialized);
    return t;
  }

  // numpy's own isnative: '=' native, '|' no byte order, '<' / '>' native on a host of that
  // order.
  const char order = dt.byteorder();
  const bool native = order == '=' || order == '|' ||
                      order == (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? '<' : '>');
  if (!native) {
    a = py::reinterpret_steal<py::array>(
        a.attr("astype")(dt.attr("newbyteorder")("=")).release());
  }
  if (!(a.flags() & py::array::c_style)) {
    a = py::reinterpret_steal<py::array>(
        py::module_::import("numpy").attr("ascontiguousarray")(a).release());
  }
  t->data_ = a.data();
  t->byte_size_ = static_cast<size_t>(a.nbytes());
  t->owner_ = HoldPyObject(std::move(a));
  return t;
}

std::shared_ptr<PbTensor> PbTensor::FromDlpack(std::string name, py::object obj) {
  if (name.empty()) throw TensorError(kEmptyName);
  py::object capsule;
  bool bool_origin = false;
  if (PyCapsule_CheckExact(obj.ptr())) {
    capsule = obj;
  } else if (py::hasattr(obj, "__dlpack__") && py::hasattr(obj, "__dlpack_device__")) {
    if (IsNumpyStringDtype(obj)) throw TensorError(kDlpackStrings);
    bool_origin = IsBoolDtype(obj);
    py::tuple device = obj.attr("__dlpack_device__")();
    const int device_type = device[0].cast<int>();
    if (device_type == kDLCUDA || device_type == kDLCUDAManaged) {
      // Stream 1 (the legacy default stream): the producer makes it wait for its own work.
      try {
        capsule = obj.attr("__dlpack__")(py::arg("stream") = 1);
      } catch (py::error_already_set& e) {
        if (!e.matches(PyExc_TypeError)) throw;
        capsule = obj.attr("__dlpack__")();
      }
    } else {
      capsule = obj.attr("__dlpack__")();
    }
    if (!PyCapsule_CheckExact(capsule.ptr())) throw TensorError(kNotDlpack);
  } else {
    throw TensorError(kNotDlpack);
  }

  if (!PyCapsule_IsValid(capsule.ptr(), kCapsuleName)) {
    const char* cname = PyCapsule_GetName(capsule.ptr());
    PyErr_Clear();
    if (cname != nullptr && std::strcmp(cname, kUsedCapsuleName) == 0) {
      throw TensorError("DLPack capsule was already consumed: its name is \"used_dltensor\".");
    }
    throw TensorError(std::string("DLPack capsule must be named \"dltensor\", not \"") +
                      (cname ? cname : "") + "\".");
  }
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), kCapsuleName));
  if (managed == nullptr) throw py::error_already_set();
  const DLTensor& dl = managed->dl_tensor;

  const VramdDataType type = FromDlDataType(dl.dtype, bool_origin);
  if (type == VRAMD_TYPE_INVALID) {
    throw TensorError("DLPack tensor data type (code " + std::to_string(dl.dtype.code) +
                      ", bits " + std::to_string(dl.dtype.bits) + ", lanes " +
                      std::to_string(dl.dtype.lanes) + ") is not supported.");
  }
  if (dl.ndim < 0 || (dl.ndim > 0 && dl.shape == nullptr)) {
    throw TensorError("DLPack tensor has an invalid shape.");
  }
  std::vector<int64_t> shape(dl.shape, dl.shape + dl.ndim);
  int64_t count = 1;
  for (int64_t d : shape) {
    if (d < 0) throw TensorError("DLPack tensor has an invalid shape.");
    count *= d;
  }
  if (dl.strides != nullptr && count > 0) {
    int64_t expected = 1;
    for (int32_t i = dl.ndim - 1; i >= 0; --i) {
      if (shape[i] == 1) continue;
      if (dl.strides[i] != expected) throw TensorError(kNotContiguous);
      expected *= shape[i];
    }
  }
  VramdMemory memory;
  switch (dl.device.device_type) {
    case kDLCPU: memory = VramdMemory{VRAMD_DEVICE_CPU, -1}; break;
    case kDLCUDAHost: memory = VramdMemory{VRAMD_DEVICE_CUDA_HOST, -1}; break;
    case kDLCUDA:
    case kDLCUDAManaged: memory = VramdMemory{VRAMD_DEVICE_GPU, dl.device.device_id}; break;
    default:
      throw TensorError("DLPack device type " + std::to_string(dl.device.device_type) +
                        " is not supported: only CPU (1), CUDA (2), CUDA host (3) and CUDA "
                        "managed (13) memory.");
  }

  std::shared_ptr<PbTensor> t(new PbTensor());
  t->name_ = std::move(name);
  t->datatype_ = type;
  t->shape_ = std::move(shape);
  t->data_ = static_cast<const char*>(dl.data) + dl.byte_offset;
  t->byte_size_ = static_cast<size_t>(count) * ElementSize(type);
  t->memory_ = memory;
  // Take ownership: from here on the capsule's destructor leaves the tensor to us.
  if (PyCapsule_SetName(capsule.ptr(), kUsedCapsuleName) != 0) throw py::error_already_set();
  t->owner_ = HoldManaged(managed);
  return t;
}

std::shared_ptr<PbTensor> PbTensor::FromBorrowed(std::string name, VramdDataType type,
                                                 std::vector<int64_t> shape, const void* data,
                                                 size_t byte_size, VramdMemory memory,
                                                 std::shared_ptr<void> keepalive) {
  std::shared_ptr<PbTensor> t(new PbTensor());
  t->name_ = std::move(name);
  t->datatype_ = type;
  t->shape_ = std::move(shape);
  t->data_ = data;
  t->byte_size_ = byte_size;
  t->memory_ = memory;
  t->owner_ = std::move(keepalive);
  return t;
}

py::object PbTensor::AsNumpy(py::handle self) {
  if (!is_cpu()) throw TensorError(kGpuNumpy);
  if (datatype_ == VRAMD_TYPE_BF16) throw TensorError(kBf16Numpy);
  std::vector<py::ssize_t> shape(shape_.begin(), shape_.end());

  if (datatype_ == VRAMD_TYPE_BYTES) {
    py::list items;
    const auto* p = static_cast<const unsigned char*>(data_);
    size_t offset = 0;
    while (offset < byte_size_) {
      if (byte_size_ - offset < 4) throw TensorError("BYTES tensor '" + name_ + "' is truncated.");
      const uint32_t n = static_cast<uint32_t>(p[offset]) |
                         (static_cast<uint32_t>(p[offset + 1]) << 8) |
                         (static_cast<uint32_t>(p[offset + 2]) << 16) |
                         (static_cast<uint32_t>(p[offset + 3]) << 24);
      offset += 4;
      if (byte_size_ - offset < n) throw TensorError("BYTES tensor '" + name_ + "' is truncated.");
      items.append(py::bytes(reinterpret_cast<const char*>(p + offset), n));
      offset += n;
    }
    if (static_cast<int64_t>(items.size()) != element_count()) {
      throw TensorError("BYTES tensor '" + name_ + "' holds " + std::to_string(items.size()) +
                        " elements, its shape " + std::to_string(element_count()) + ".");
    }
    py::module_ np = py::module_::import("numpy");
    py::object flat = np.attr("empty")(items.size(), py::arg("dtype") = np.attr("object_"));
    for (size_t i = 0; i < items.size(); ++i) flat[py::int_(i)] = items[i];
    return flat.attr("reshape")(py::cast(shape));
  }

  py::object dtype = NumpyDtype(datatype_);
  if (dtype.is_none()) {
    throw TensorError("Tensor '" + name_ + "' has an invalid data type.");
  }
  // The base holds this tensor (and so its owner) for as long as the array or any view of it.
  if (self) return py::array(py::reinterpret_borrow<py::dtype>(dtype), shape, data_, self);
  auto* holder = new std::shared_ptr<PbTensor>(shared_from_this());
  py::capsule base(holder, [](void* p) { delete static_cast<std::shared_ptr<PbTensor>*>(p); });
  return py::array(py::reinterpret_borrow<py::dtype>(dtype), shape, data_, base);
}

py::object PbTensor::ToDlpack() {
  if (datatype_ == VRAMD_TYPE_BYTES) throw TensorError(kDlpackStrings);
  DLDataType dtype;
  if (!ToDlDataType(datatype_, &dtype)) {
    throw TensorError("Tensor '" + name_ + "' has an invalid data type.");
  }
  auto* ctx = new ExportContext();
  ctx->tensor = shared_from_this();
  ctx->shape = shape_;
  ctx->strides.resize(shape_.size());
  int64_t stride = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    ctx->strides[i] = stride;
    stride *= shape_[i] > 0 ? shape_[i] : 1;
  }
  static char empty_data = 0;  // some consumers refuse a NULL data pointer, even for no elements
  DLTensor& dl = ctx->managed.dl_tensor;
  dl.data = data_ != nullptr ? const_cast<void*>(data_) : &empty_data;
  const auto device = DlpackDevice();
  dl.device.device_type = static_cast<DLDeviceType>(device.first);
  dl.device.device_id = device.second;
  dl.ndim = static_cast<int32_t>(shape_.size());
  dl.dtype = dtype;
  dl.shape = ctx->shape.empty() ? nullptr : ctx->shape.data();
  dl.strides = ctx->strides.empty() ? nullptr : ctx->strides.data();
  dl.byte_offset = 0;
  ctx->managed.manager_ctx = ctx;
  ctx->managed.deleter = ExportDeleter;
  PyObject* capsule = PyCapsule_New(&ctx->managed, kCapsuleName, CapsuleDestructor);
  if (capsule == nullptr) {
    delete ctx;
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::object>(capsule);
}

std::pair<int, int> PbTensor::DlpackDevice() const {
  switch (memory_.kind) {
    case VRAMD_DEVICE_GPU: return {kDLCUDA, memory_.device_id};
    case VRAMD_DEVICE_CUDA_HOST: return {kDLCUDAHost, 0};
    case VRAMD_DEVICE_CPU:
    default: return {kDLCPU, 0};
  }
}

namespace {
PyObject* g_tensor_exception = nullptr;  // m.TritonModelException, one reference held
}  // namespace

void BindTensor(py::module_& m) {
  if (py::hasattr(m, "TritonModelException")) {
    py::object existing = m.attr("TritonModelException");
    g_tensor_exception = existing.release().ptr();
  } else {
    const std::string qualified = m.attr("__name__").cast<std::string>() + ".TritonModelException";
    g_tensor_exception = PyErr_NewException(qualified.c_str(), PyExc_Exception, nullptr);
    if (g_tensor_exception == nullptr) throw py::error_already_set();
    m.attr("TritonModelException") = py::reinterpret_borrow<py::object>(g_tensor_exception);
  }
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const TensorError& e) {
      PyErr_SetString(g_tensor_exception, e.what());
    }
  });

  py::class_<PbTensor, std::shared_ptr<PbTensor>>(m, "Tensor")
      .def(py::init(&PbTensor::FromNumpy), py::arg("name"), py::arg("data"))
      .def("name", &PbTensor::name)
      .def("shape", &PbTensor::shape)
      .def("triton_dtype", [](const PbTensor& t) { return static_cast<int>(t.datatype()); })
      .def("is_cpu", &PbTensor::is_cpu)
      .def("as_numpy", [](py::handle self) { return py::cast<PbTensor&>(self).AsNumpy(self); })
      .def("to_dlpack", &PbTensor::ToDlpack)
      .def(
          "__dlpack__", [](PbTensor& t, py::object /*stream*/) { return t.ToDlpack(); },
          py::arg("stream") = py::none())
      .def("__dlpack_device__",
           [](const PbTensor& t) {
             const auto d = t.DlpackDevice();
             return py::make_tuple(d.first, d.second);
           })
      .def_static("from_dlpack", &PbTensor::FromDlpack, py::arg("name"), py::arg("tensor"))
      .def("__repr__", [](const PbTensor& t) {
        return "<Tensor '" + t.name() + "' dtype " + std::to_string(t.datatype()) + ">";
      });
}

}  // namespace vramd::python
