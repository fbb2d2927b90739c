#include "numpy_ledger.h"

#ifdef VRAMD_PYTHON_NUMPY

#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
// numpy 2's headers build for an older C API unless told: the handler API came with 1.22.
#define NPY_TARGET_VERSION NPY_1_22_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL vramd_python_numpy_api
#include <numpy/arrayobject.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common.h"
#include "ledger_table.h"

namespace vramd::python {
namespace {

// Each block: [padding][Header] data. The header sits right before the data, so free finds it
// from the data pointer alone.
struct Header {
  LedgerTable* table;  // null for a malloc block
  uint64_t size;       // the data's bytes
  uint64_t reserved;
  uint64_t tag;        // kLedgerTag or kMallocTag
};
static_assert(sizeof(Header) == 32, "the header's layout");
constexpr uint64_t kLedgerTag = 0x76726d644c656467ull;  // "vrmdLedg"
constexpr uint64_t kMallocTag = 0x76726d644d616c6cull;  // "vrmdMall"
// Ledger blocks are 256-byte aligned; 64 bytes before the data keep it 64-byte aligned (what
// numpy's SIMD loops like). malloc blocks are 16-byte aligned, as numpy's own.
constexpr size_t kLedgerOffset = 64;
constexpr size_t kMallocOffset = sizeof(Header);

Header* HeaderOf(void* data) { return static_cast<Header*>(data) - 1; }

void* Finish(void* base, size_t offset, LedgerTable* table, size_t size, uint64_t tag) {
  void* data = static_cast<char*>(base) + offset;
  *HeaderOf(data) = Header{table, size, 0, tag};
  return data;
}

void* MallocBlock(size_t size, bool zero) {
  if (size > SIZE_MAX - kMallocOffset) return nullptr;
  void* base = zero ? std::calloc(1, size + kMallocOffset) : std::malloc(size + kMallocOffset);
  return base ? Finish(base, kMallocOffset, nullptr, size, kMallocTag) : nullptr;
}

// Who pays for an allocation of `size` bytes made now; false: nobody (a malloc block).
bool ChargeOf(size_t size, LedgerTable** table, VramdOwner* owner) {
  const CallContext* context = CurrentContext();
  if (context == nullptr || !context->model || !context->model->ledger_numpy ||
      context->model->ledger_table == nullptr || size < context->model->numpy_min_bytes) {
    return false;
  }
  *table = context->model->ledger_table;
  *owner = context->phase == Phase::kExecute && context->model->decoupled
               ? context->instance_owner
               : context->owner;
  return true;
}

void* Allocate(size_t size, bool zero) {
  LedgerTable* table = nullptr;
  VramdOwner owner = 0;
  if (!ChargeOf(size, &table, &owner)) return MallocBlock(size, zero);
  if (size > SIZE_MAX - kLedgerOffset) return nullptr;
  VramdError error{};
  void* base = LedgerAllocate(table, owner, VRAMD_DEVICE_CPU, -1, size + kLedgerOffset, nullptr,
                              &error);
  if (base == nullptr) {
    // Refused (a quota, or no host memory left): numpy raises MemoryError, to which the
    // backend adds the server's reason (TakeLedgerFailure).
    if (error.message[0] != '\0') return nullptr;
    return MallocBlock(size, zero);  // the model is gone (its bound thread outlived it)
  }
  void* data = Finish(base, kLedgerOffset, table, size, kLedgerTag);
  if (zero) std::memset(data, 0, size);
  return data;
}

void FreeBlock(void* data) {
  if (data == nullptr) return;
  Header* header = HeaderOf(data);
  if (header->tag == kMallocTag) {
    std::free(static_cast<char*>(data) - kMallocOffset);
    return;
  }
  LedgerTable* table = header->table;
  header->tag = 0;  // a second free of the block finds no tag (and is a numpy bug)
  LedgerFree(table, VRAMD_DEVICE_CPU, -1, static_cast<char*>(data) - kLedgerOffset);
}

void* HandlerMalloc(void*, size_t size) { return Allocate(size, false); }

void* HandlerCalloc(void*, size_t count, size_t element) {
  if (element != 0 && count > SIZE_MAX / element) return nullptr;
  return Allocate(count * element, true);
}

void* HandlerRealloc(void*, void* data, size_t size) {
  if (data == nullptr) return Allocate(size, false);
  Header* header = HeaderOf(data);
  LedgerTable* table = nullptr;
  VramdOwner owner = 0;
  if (header->tag == kMallocTag && !ChargeOf(size, &table, &owner)) {
    if (size > SIZE_MAX - kMallocOffset) return nullptr;
    void* base = std::realloc(static_cast<char*>(data) - kMallocOffset, size + kMallocOffset);
    return base ? Finish(base, kMallocOffset, nullptr, size, kMallocTag) : nullptr;
  }
  // A new block charged as an allocation made now, then the old one freed (realloc's contract:
  // on failure the old block stays).
  void* moved = Allocate(size, false);
  if (moved == nullptr) return nullptr;
  std::memcpy(moved, data, std::min<uint64_t>(size, header->size));
  FreeBlock(data);
  return moved;
}

void HandlerFree(void*, void* data, size_t) { FreeBlock(data); }

PyDataMem_Handler MakeHandler() {
  PyDataMem_Handler handler{};
  std::strncpy(handler.name, "vramd_ledger", sizeof(handler.name) - 1);
  handler.version = 1;
  handler.allocator = PyDataMemAllocator{nullptr, &HandlerMalloc, &HandlerCalloc,
                                         &HandlerRealloc, &HandlerFree};
  return handler;
}

PyDataMem_Handler handler = MakeHandler();
// Set once, under the GIL: the capsule (null until numpy's C API loaded), and whether loading
// it failed (then never tried again).
PyObject* capsule = nullptr;
bool unavailable = false;

// Loads numpy's C API and makes the capsule, once. Needs the GIL.
PyObject* Capsule(const ModelShared& model) {
  if (capsule != nullptr || unavailable) return capsule;
  if (_import_array() < 0) {
    std::string why = "numpy's C API did not load";
    if (PyErr_Occurred()) {
      py::error_already_set e;
      why += ": " + ErrorText(e);
    }
    unavailable = true;
    Log(model.server, VRAMD_LOG_WARNING,
        "python backend: numpy arrays are not charged to the ledger (" + why + ")");
    return nullptr;
  }
  capsule = PyCapsule_New(&handler, "mem_handler", nullptr);
  if (capsule == nullptr) {
    PyErr_Clear();
    unavailable = true;
    Log(model.server, VRAMD_LOG_WARNING,
        "python backend: numpy arrays are not charged to the ledger (no capsule)");
  }
  return capsule;
}

}  // namespace

bool NumpyLedgerBuilt() { return true; }

NumpyLedgerScope::NumpyLedgerScope(const ModelShared& model) {
  if (!model.ledger_numpy || model.ledger_table == nullptr) return;
  PyObject* ours = Capsule(model);
  if (ours == nullptr) return;
  previous_ = PyDataMem_SetHandler(ours);
  if (previous_ == nullptr) {
    PyErr_Clear();
    return;
  }
  active_ = true;
}

NumpyLedgerScope::~NumpyLedgerScope() {
  if (!active_) return;
  PyObject* ours = PyDataMem_SetHandler(previous_);
  if (ours == nullptr) PyErr_Clear();
  Py_XDECREF(ours);
  Py_DECREF(previous_);
}

void InstallNumpyLedger(const ModelShared& model) {
  if (!model.ledger_numpy || model.ledger_table == nullptr) return;
  PyObject* ours = Capsule(model);
  if (ours == nullptr) return;
  PyObject* previous = PyDataMem_SetHandler(ours);
  if (previous == nullptr) PyErr_Clear();
  Py_XDECREF(previous);
}

void KeepNumpyLedger(const ModelShared& model) {
  thread_local bool kept = false;
  if (kept || !model.ledger_numpy || model.ledger_table == nullptr) return;
  InstallNumpyLedger(model);
  kept = Capsule(model) != nullptr;
}

}  // namespace vramd::python

#else  // no numpy headers at build time

namespace vramd::python {

bool NumpyLedgerBuilt() { return false; }
NumpyLedgerScope::NumpyLedgerScope(const ModelShared&) {}
NumpyLedgerScope::~NumpyLedgerScope() {}
void InstallNumpyLedger(const ModelShared&) {}
void KeepNumpyLedger(const ModelShared&) {}

}  // namespace vramd::python

#endif  // VRAMD_PYTHON_NUMPY
