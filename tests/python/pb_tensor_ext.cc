// Test-only extension module: vramd's pb_utils.Tensor (src/backends/python/pb_tensor.cc) plus
// helpers that make tensors and capsules the way the backend and foreign producers would.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <cstdlib>
#include <vector>

#include "backends/python/dlpack.h"
#include "backends/python/pb_tensor.h"

namespace py = pybind11;
using vramd::python::PbTensor;

namespace {
std::atomic<int> g_deleted{0};
struct FakeCtx { std::vector<int64_t> shape, strides; std::vector<char> data; DLManagedTensor m{}; };
}  // namespace

PYBIND11_MODULE(pb_tensor_ext, m) {
  vramd::python::BindTensor(m);
  // A FromBorrowed tensor over `buffer`'s memory; `owner` is the keepalive. kind: VramdDeviceKind.
  m.def("borrow", [](std::string name, int type, std::vector<int64_t> shape, py::buffer buffer,
                     py::object owner, int kind, int device_id) {
    py::buffer_info info = buffer.request();
    return PbTensor::FromBorrowed(std::move(name), static_cast<VramdDataType>(type),
                                  std::move(shape), info.ptr, static_cast<size_t>(info.size * info.itemsize),
                                  VramdMemory{static_cast<VramdDeviceKind>(kind), device_id},
                                  vramd::python::HoldPyObject(std::move(owner)));
  }, py::arg("name"), py::arg("type"), py::arg("shape"), py::arg("buffer"), py::arg("owner"),
     py::arg("kind") = 0, py::arg("device_id") = -1);
  // A foreign producer's "dltensor" capsule (zeroed host memory, whatever device it claims);
  // its deleter counts in deleted_count(). strides: None for NULL.
  m.def("make_capsule", [](int device_type, int device_id, int code, int bits, int lanes,
                           std::vector<int64_t> shape, py::object strides) {
    auto* ctx = new FakeCtx();
    ctx->shape = shape;
    int64_t n = 1;
    for (auto d : shape) n *= d;
    ctx->data.resize(static_cast<size_t>(n * bits / 8 * lanes) + 1);
    if (!strides.is_none()) ctx->strides = strides.cast<std::vector<int64_t>>();
    DLTensor& t = ctx->m.dl_tensor;
    t.data = ctx->data.data();
    t.device.device_type = static_cast<DLDeviceType>(device_type);
    t.device.device_id = device_id;
    t.ndim = static_cast<int32_t>(shape.size());
    t.dtype.code = static_cast<uint8_t>(code);
    t.dtype.bits = static_cast<uint8_t>(bits);
    t.dtype.lanes = static_cast<uint16_t>(lanes);
    t.shape = ctx->shape.data();
    t.strides = strides.is_none() ? nullptr : ctx->strides.data();
    ctx->m.manager_ctx = ctx;
    ctx->m.deleter = [](DLManagedTensor* self) { delete static_cast<FakeCtx*>(self->manager_ctx); ++g_deleted; };
    return py::reinterpret_steal<py::object>(PyCapsule_New(&ctx->m, "dltensor", [](PyObject* c) {
      if (PyCapsule_IsValid(c, "dltensor")) {
        auto* mt = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(c, "dltensor"));
        mt->deleter(mt);
      }
    }));
  });
  m.def("deleted_count", [] { return g_deleted.load(); });
  m.def("capsule_name", [](py::object c) { const char* n = PyCapsule_GetName(c.ptr()); return std::string(n ? n : ""); });
  // (code, bits, lanes, device_type, device_id, ndim, shape, strides or None, data address) of a capsule.
  m.def("capsule_info", [](py::object c) {
    auto* mt = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(c.ptr(), "dltensor"));
    if (mt == nullptr) throw py::error_already_set();
    const DLTensor& t = mt->dl_tensor;
    py::object strides = py::none();
    if (t.strides) strides = py::cast(std::vector<int64_t>(t.strides, t.strides + t.ndim));
    return py::make_tuple(int(t.dtype.code), int(t.dtype.bits), int(t.dtype.lanes), int(t.device.device_type),
                          t.device.device_id, t.ndim, std::vector<int64_t>(t.shape, t.shape + t.ndim), strides,
                          reinterpret_cast<uintptr_t>(t.data));
  });
  m.def("data_address", [](std::shared_ptr<PbTensor> t) { return reinterpret_cast<uintptr_t>(t->data()); });
  m.def("byte_size", [](std::shared_ptr<PbTensor> t) { return t->byte_size(); });
  m.def("raw_bytes", [](std::shared_ptr<PbTensor> t) {
    return py::bytes(static_cast<const char*>(t->data()), t->byte_size()); });
  m.def("memory", [](std::shared_ptr<PbTensor> t) { return py::make_tuple(int(t->memory().kind), t->memory().device_id); });
}
