#include "torch_ledger.h"

#include <dlfcn.h>
#include <sys/types.h>

#include <mutex>
#include <set>
#include <string>
#include <unordered_map>

#include "common.h"
#include "interpreter.h"
#include "ledger_table.h"

namespace vramd::python {
namespace {

struct Segment {
  LedgerTable* table;
  int32_t device;
};

std::mutex& SegmentsMutex() {
  static auto* mu = new std::mutex;
  return *mu;
}
// Every segment handed out, by address: torch frees on any thread, with no context.
std::unordered_map<void*, Segment>& Segments() {
  static auto* segments = new std::unordered_map<void*, Segment>;
  return *segments;
}

// Segments come from the server's pool on the default stream whatever torch's stream is:
// vramd's pool keeps each stream's segments apart (caching_pool.h), so with a stream per
// instance the 12 MiB segment it makes to serve torch's first 2 MiB request would be one per
// instance, mostly idle (+5.4 MiB per instance on the H200, docs/benchmarks.md), where on one
// stream the instances share it. That is safe because no segment goes back while work may
// still use it: the free first waits for the segment's stream (torch hands a segment back only
// when all its blocks are free, at emptyCache or when the pool goes, so the wait is rare).
// cudaStreamSynchronize is the CUDA runtime torch loaded (this library links no CUDA); where
// it cannot be found, segments keep torch's stream.
using StreamSynchronize = int (*)(void*);
StreamSynchronize CudaStreamSynchronize() {
  static const auto fn =
      reinterpret_cast<StreamSynchronize>(dlsym(RTLD_DEFAULT, "cudaStreamSynchronize"));
  return fn;
}

// Logs `reason` once per process (under the GIL).
void LogOnce(const ModelShared& model, const std::string& reason) {
  static auto* seen = new std::set<std::string>;
  if (!seen->insert(reason).second) return;
  Log(model.server, VRAMD_LOG_INFO,
      "python backend: torch's CUDA memory is not charged to the ledger: " + reason);
}

}  // namespace

py::object TorchPool(const ModelShared& model, bool gpu_instance, int32_t device,
                     const std::string& instance) {
  if (!gpu_instance) return py::none();
  // A model without torch costs nothing here (the probe below would reserve a pool segment).
  if (py::module_::import("importlib.util").attr("find_spec")("torch").is_none()) {
    LogOnce(model, "torch is not installed");
    return py::none();
  }
  // Whether torch's memory can go through the ledger here: asked for, and the server gives GPU
  // memory (a stub host gives none: docs/remote-backends.md), checked with one small block.
  std::string why_not;
  if (!model.ledger_torch || model.ledger_table == nullptr) {
    why_not = "VRAMD_PYTHON_LEDGER_TORCH is off";
  } else {
    VramdError error{};
    void* probe = LedgerAllocate(model.ledger_table, 0, VRAMD_DEVICE_GPU, device, 256, nullptr,
                                 &error);
    if (probe == nullptr) {
      why_not = std::string("the server gives this process no GPU memory (") + error.message +
                "): torch keeps its own allocator";
    } else {
      LedgerFree(model.ledger_table, VRAMD_DEVICE_GPU, device, probe);
    }
  }
  py::tuple made = py::module_::import("vramd_python_host")
                       .attr("torch_instance")(LibraryDirectory() + "/libvramd_python.so", device,
                                               why_not.empty(), model.torch_instance_stream);
  if (made[0].is_none()) {
    LogOnce(model, why_not.empty() ? made[1].cast<std::string>() : why_not);
    return py::none();
  }
  const std::string pool_reason = made[1].cast<std::string>();
  if (!why_not.empty() || !pool_reason.empty()) {
    LogOnce(model, !why_not.empty() ? why_not : pool_reason);
  } else {
    Log(model.server, VRAMD_LOG_VERBOSE,
        "python model '" + model.name + "': instance '" + instance +
            "' allocates torch's CUDA memory through the ledger (a MemPool of its own)");
  }
  return made[0];
}

py::object TorchPoolCall(const py::object& pool, int32_t device, const py::object& fn,
                         const py::tuple& args) {
  if (pool.is_none()) return fn(*args);
  return pool.attr("call")(fn, *args);
}

uint64_t TorchLedgerLiveSegments() {
  std::lock_guard<std::mutex> lock(SegmentsMutex());
  return Segments().size();
}

}  // namespace vramd::python

using vramd::python::CurrentContext;
using vramd::python::LedgerAllocate;
using vramd::python::LedgerFree;

extern "C" __attribute__((visibility("default"))) void* vramd_torch_malloc(ssize_t size,
                                                                           int device,
                                                                           void* stream) {
  try {
    if (size < 0) return nullptr;
    const vramd::python::CallContext* context = CurrentContext();
    // Only the instances' threads allocate into their pools, always within a context.
    if (context == nullptr || !context->model || context->model->ledger_table == nullptr) {
      return nullptr;
    }
    const VramdOwner owner = context->instance_owner != 0 ? context->instance_owner
                                                          : context->owner;
    vramd::python::LedgerTable* table = context->model->ledger_table;
    void* ptr = LedgerAllocate(table, owner, VRAMD_DEVICE_GPU, device, static_cast<size_t>(size),
                               vramd::python::CudaStreamSynchronize() ? nullptr : stream,
                               nullptr);
    if (ptr == nullptr) return nullptr;  // torch raises its OutOfMemoryError
    std::lock_guard<std::mutex> lock(vramd::python::SegmentsMutex());
    vramd::python::Segments()[ptr] = vramd::python::Segment{table, device};
    return ptr;
  } catch (...) {
    return nullptr;
  }
}

extern "C" __attribute__((visibility("default"))) void vramd_torch_free(void* ptr, ssize_t,
                                                                        int device,
                                                                        void* stream) {
  try {
    if (ptr == nullptr) return;
    if (auto synchronize = vramd::python::CudaStreamSynchronize()) synchronize(stream);
    vramd::python::LedgerTable* table = nullptr;
    {
      std::lock_guard<std::mutex> lock(vramd::python::SegmentsMutex());
      auto& segments = vramd::python::Segments();
      auto it = segments.find(ptr);
      if (it != segments.end()) {
        table = it->second.table;
        device = it->second.device;
        segments.erase(it);
      }
    }
    // An unknown pointer still goes to the server, whose ledger counts it as an unknown free.
    LedgerFree(table, VRAMD_DEVICE_GPU, device, ptr);
  } catch (...) {
  }
}
