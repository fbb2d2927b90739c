// pb_utils.Tensor for vramd's in-process Python backend: Triton's python_backend `Tensor` class
// (c_python_backend_utils) as a pybind11 class over vramd tensor memory.
//
// A PbTensor is a name, a VramdDataType, a shape and a span of memory (host, pinned host or one
// GPU's) that something else keeps alive: a numpy array, a DLPack producer, a request input. The
// tensor holds that owner; everything made from a tensor without copying (a numpy view from
// AsNumpy, a DLPack capsule from ToDlpack and whatever a consumer builds from it) holds the
// tensor, so the owner lives until the last of them is gone.
//
// BYTES tensors hold Triton's serialization: each element a 4-byte little-endian length, then
// its bytes.
//
// Errors are thrown as TensorError (a std::runtime_error) with Triton's texts. BindTensor makes
// pybind11 raise them as m.TritonModelException: the one already in m when BindTensor runs (bind
// yours first to share it), else a new subclass of Exception it adds to m.
//
// Threads: every function here that touches Python objects needs the GIL, as pybind11 calls do.
// The owners a tensor holds may be released on any thread (a DLPack consumer's deleter runs where
// the consumer drops its tensor); a Python owner's release takes the GIL itself and is skipped
// once the interpreter is finalizing.
#ifndef VRAMD_BACKENDS_PYTHON_PB_TENSOR_H_
#define VRAMD_BACKENDS_PYTHON_PB_TENSOR_H_

#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "vramd/backend.h"

namespace vramd::python {

class TensorError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class PbTensor : public std::enable_shared_from_this<PbTensor> {
 public:
  // Triton's Tensor(name, numpy_array). Anything that is not an ndarray goes through
  // numpy.asarray first (as pybind11's py::array argument does in Triton). A non-C-contiguous
  // array is copied to C order; an array in non-native byte order is converted to native. The
  // tensor shares the (contiguous) array's memory: later writes to the array show in the tensor.
  // np.object_, np.bytes_ (and np.str_) arrays become BYTES, serialized: bytes elements as they
  // are, any other element as str(element) in UTF-8. An ml_dtypes bfloat16 array becomes BF16.
  // "Tensor name cannot be an empty string." on an empty name; "NumPy dtype is not supported."
  // for other dtypes (complex, datetime, structured ...).
  static std::shared_ptr<PbTensor> FromNumpy(std::string name, pybind11::object array);

  // Tensor.from_dlpack(name, capsule_or_obj): zero copy from a "dltensor" capsule or from an
  // object with __dlpack__ and __dlpack_device__ (a CUDA producer is asked with stream=1, the
  // legacy default stream; nothing here synchronizes further: a GPU consumer that reads on its
  // own non-blocking stream must synchronize first). The capsule is renamed "used_dltensor" and
  // the DLManagedTensor's deleter is called when the tensor and everything made from it are
  // gone. On an error the capsule is left as it was. CPU, CUDA host and CUDA (also managed)
  // memory; C-contiguous only (size-1 dimensions may have any stride); lanes 1.
  static std::shared_ptr<PbTensor> FromDlpack(std::string name, pybind11::object obj);

  // A view over memory someone else owns: no copy; `keepalive` is held as long as the tensor or
  // anything made from it lives (and released without the GIL unless it is a Python owner's own
  // deleter that takes it). For BYTES, `data` must be the serialized form.
  static std::shared_ptr<PbTensor> FromBorrowed(std::string name, VramdDataType type,
                                                std::vector<int64_t> shape, const void* data,
                                                size_t byte_size, VramdMemory memory,
                                                std::shared_ptr<void> keepalive);

  const std::string& name() const { return name_; }
  VramdDataType datatype() const { return datatype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  const void* data() const { return data_; }
  size_t byte_size() const { return byte_size_; }
  VramdMemory memory() const { return memory_; }
  // CPU or page-locked host memory (Triton's IsCPU: CPU and CPU_PINNED).
  bool is_cpu() const {
    return memory_.kind == VRAMD_DEVICE_CPU || memory_.kind == VRAMD_DEVICE_CUDA_HOST;
  }
  // What keeps the memory alive (shared; hold it to keep the memory after the tensor).
  const std::shared_ptr<void>& owner() const { return owner_; }
  // Elements, the product of the shape (1 for a 0-d tensor).
  int64_t element_count() const;

  // A zero-copy, writable numpy view whose base holds this tensor; BYTES -> a np.object_ array
  // of bytes with the tensor's shape (deserialized, a copy). "Tensor is stored in GPU and cannot
  // be converted to NumPy."; "Tensor dtype is BF16 and cannot be converted to NumPy. Use
  // to_dlpack() and from_dlpack() instead."
  // `self`, when given, is this tensor's own Python object: the array's base is then that
  // object (which holds the tensor) instead of a capsule made for it, one allocation fewer on
  // the path every input of every request takes.
  pybind11::object AsNumpy(pybind11::handle self = pybind11::handle());

  // A "dltensor" PyCapsule over this tensor's memory (zero copy; it holds this tensor), with
  // explicit C-order strides. BOOL is exported as kDLBool (8 bits), BF16 as kDLBfloat 16.
  // "DLPack does not have support for string tensors." for BYTES.
  pybind11::object ToDlpack();

  // __dlpack_device__: (device_type, device_id) as DLPack numbers: (1, 0) CPU, (2, id) GPU,
  // (3, 0) CUDA host.
  std::pair<int, int> DlpackDevice() const;

 private:
  PbTensor() = default;

  std::string name_;
  VramdDataType datatype_ = VRAMD_TYPE_INVALID;
  std::vector<int64_t> shape_;
  const void* data_ = nullptr;
  size_t byte_size_ = 0;
  VramdMemory memory_{VRAMD_DEVICE_CPU, -1};
  std::shared_ptr<void> owner_;
};

// A shared_ptr<void> that holds a Python object and releases it under the GIL (skipped once the
// interpreter is finalizing); for FromBorrowed keepalives that are Python objects. Needs the GIL.
std::shared_ptr<void> HoldPyObject(pybind11::object obj);

// Serialization of BYTES elements (Triton's serialize_byte_tensor): appends one element.
void AppendBytesElement(std::string* out, const char* data, size_t size);

// Registers class Tensor in m: Tensor(name, data), name(), shape() (list of int),
// triton_dtype() (int; vramd's numbering is Triton's), is_cpu(), as_numpy(), to_dlpack(),
// __dlpack__(stream=None), __dlpack_device__(), and the static from_dlpack(name, obj); and the
// TensorError translation described above.
void BindTensor(pybind11::module_& m);

}  // namespace vramd::python

#endif  // VRAMD_BACKENDS_PYTHON_PB_TENSOR_H_
