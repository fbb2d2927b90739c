// The backend's side of the C ABI (include/vramd/backend.h), for backends written in C++: the
// built-in backends use it, so they reach the runtime exactly as a library would, through a
// VramdBackendApi table and AbiBackend (abi_backend.h); only their linking differs.
//
// What it gives a backend:
//   - BackendApiFor<Model>: the table, with entry points that catch every exception (an
//     exception becomes VRAMD_INTERNAL, or VRAMD_RESOURCE_EXHAUSTED for bad_alloc, with a
//     message naming the entry point) and turn a Status into a VramdCode and message;
//   - Allocation: RAII for memory from VramdServerApi::allocate, freed through its free;
//   - LoadPhaseScope / RecordLoadPhase: the load's timing through record_load_phase, where the
//     server has it (struct_size says so);
//   - small readers of the ABI's structs (inputs, outputs, the config JSON).
//
// Thread safety: free functions without shared state; an Allocation is one thread's at a time.
#pragma once

#include <chrono>
#include <concepts>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "config/model_config.pb.h"
#include "core/data_type.h"
#include "core/status.h"
#include "core/tensor.h"
#include "vramd/backend.h"

namespace vramd::backends::abi {

// `status` as an entry point's result: its code, and its message into `error` (may be null).
VramdCode ReturnStatus(const Status& status, VramdError* error) noexcept;

// The exception being handled as an entry point's result, its text prefixed with `entry`.
// Allocates nothing, so it cannot fail itself. REQUIRES: called inside a catch block.
VramdCode ReturnCurrentException(VramdError* error, const char* entry) noexcept;

// A C++ backend's table. `Model` is made once per version and `Model::Instance` once per
// instance; both are destroyed by the server (instances first):
//   static Result<std::unique_ptr<Model>> Model::Create(const VramdModelInfo&);
//   Result<std::unique_ptr<Model::Instance>> Model::CreateInstance(const VramdInstanceInfo&);
//   Status Model::Instance::Execute(const VramdRequest&, const VramdOutputs&);
// and, for a model that can sleep (the table's model_sleep and model_wake), both of
//   Status Model::Sleep(int level);   // 1 or 2, as include/vramd/backend.h defines them
//   Status Model::Wake();
// `name` must outlive the process (a literal). One table per Model type, made on first use.
template <typename Model>
const VramdBackendApi* BackendApiFor(const char* name, bool supports_gpu,
                                     bool accepts_gpu_inputs = false);

// Memory from VramdServerApi::allocate, freed (through the same server) when destroyed.
class Allocation {
 public:
  Allocation() = default;
  ~Allocation() { Reset(); }
  Allocation(Allocation&& other) noexcept { *this = std::move(other); }
  Allocation& operator=(Allocation&& other) noexcept;
  Allocation(const Allocation&) = delete;
  Allocation& operator=(const Allocation&) = delete;

  // `size` bytes of `kind` (on `device_id` for a GPU), charged to `owner`, stream-ordered on
  // `stream` for a GPU. The server's error as a Status (ResourceExhausted when full,
  // Unavailable when the device kind is not available).
  static Result<Allocation> Make(const VramdServerApi* server, VramdOwner owner,
                                 VramdDeviceKind kind, int32_t device_id, size_t size,
                                 void* stream = nullptr);

  void* data() const { return ptr_; }
  size_t size() const { return size_; }
  VramdDeviceKind kind() const { return kind_; }
  explicit operator bool() const { return ptr_ != nullptr; }
  void Reset();

 private:
  const VramdServerApi* server_ = nullptr;
  VramdDeviceKind kind_ = VRAMD_DEVICE_CPU;
  int32_t device_id_ = -1;
  void* ptr_ = nullptr;
  size_t size_ = 0;
};

// Adds to phase `phase` of the load in progress; nothing when the server has no
// record_load_phase (an older server) or `server` is null.
void RecordLoadPhase(const VramdServerApi* server, const char* phase, double seconds,
                     uint64_t bytes);

// Times a scope as one phase (RecordLoadPhase at destruction).
class LoadPhaseScope {
 public:
  LoadPhaseScope(const VramdServerApi* server, const char* phase, uint64_t bytes = 0)
      : server_(server), phase_(phase), bytes_(bytes), start_(std::chrono::steady_clock::now()) {}
  ~LoadPhaseScope();
  LoadPhaseScope(const LoadPhaseScope&) = delete;
  LoadPhaseScope& operator=(const LoadPhaseScope&) = delete;

 private:
  const VramdServerApi* const server_;
  const char* const phase_;
  const uint64_t bytes_;
  const std::chrono::steady_clock::time_point start_;
};

// The server's log (prefixed there with the backend's name).
void Log(const VramdServerApi* server, VramdLogLevel level, const std::string& message);

// The model's config, parsed from VramdModelInfo::config_json with vramd's own parser (a
// built-in is compiled with the server; a library would parse the JSON itself).
Result<config::ModelConfig> ModelConfigOf(const VramdModelInfo& info);

inline DataType ToDataType(VramdDataType type) {
  return static_cast<DataType>(static_cast<int>(type));
}
inline VramdDataType ToVramdDataType(DataType type) {
  return static_cast<VramdDataType>(static_cast<int>(type));
}
inline Shape ShapeOf(const VramdTensor& t) { return Shape(t.shape, t.shape + t.rank); }
inline std::span<const std::byte> BytesOf(const VramdTensor& t) {
  return {static_cast<const std::byte*>(t.data), t.byte_size};
}

// The request's input `name`, or null when it was not sent.
const VramdTensor* FindInput(const VramdRequest& request, std::string_view name);

// A new output of `byte_size` bytes (VramdOutputs::add), to be filled before execute returns.
Result<std::byte*> AddOutput(const VramdOutputs& outputs, const std::string& name,
                             DataType datatype, const Shape& shape, size_t byte_size);

// As AddOutput, in `memory` (VramdOutputs::add_on_device; a server without it gets host
// memory for a host kind, and Unsupported for a GPU).
Result<std::byte*> AddOutputIn(const VramdOutputs& outputs, VramdMemory memory,
                               const std::string& name, DataType datatype, const Shape& shape,
                               size_t byte_size);

// Output `name` is `input` (one of request.inputs) unchanged, with no copy where the server
// can (VramdOutputs::add_from_input); a server without it gets a copy in host memory, and
// Unsupported for an input on a GPU.
Status AddFromInput(const VramdOutputs& outputs, const std::string& name,
                    const VramdRequest& request, const VramdTensor& input);

// Where `input` (one of request.inputs) is: host memory unless the request says otherwise.
VramdMemory InputMemory(const VramdRequest& request, const VramdTensor& input);

// Where the request's consumer takes outputs (VramdRequest::preferred_output_memory); host
// for a server that does not say.
VramdMemory PreferredOutputMemory(const VramdRequest& request);

// `size` bytes from `src` in `src_memory` to `dst` in `dst_memory`, through the server's copy
// (VramdServerApi::copy), ordered on `stream` and complete on return.
Status Copy(const VramdServerApi* server, VramdMemory dst_memory, void* dst,
            VramdMemory src_memory, const void* src, size_t size, void* stream);

// ---- implementation -------------------------------------------------------------------------

namespace internal {

template <typename Model>
struct EntryPoints {
  using Instance = typename Model::Instance;

  static constexpr bool kCanSleep = requires(Model& m) {
    { m.Sleep(1) } -> std::same_as<Status>;
    { m.Wake() } -> std::same_as<Status>;
  };

  static VramdCode ModelSleep(void* model, int32_t level, VramdError* error) {
    try {
      if (model == nullptr) {
        return ReturnStatus(Status::InvalidArgument("model_sleep: `model` is NULL"), error);
      }
      if (level != 1 && level != 2) {
        return ReturnStatus(Status::InvalidArgument(
                                "model_sleep: level " + std::to_string(level) +
                                " is not one of 1 (a host copy) or 2 (read again on wake)"),
                            error);
      }
      if constexpr (kCanSleep) {
        return ReturnStatus(static_cast<Model*>(model)->Sleep(level), error);
      } else {
        return ReturnStatus(Status::Unsupported("model_sleep: this model cannot sleep"), error);
      }
    } catch (...) {
      return ReturnCurrentException(error, "model_sleep");
    }
  }

  static VramdCode ModelWake(void* model, VramdError* error) {
    try {
      if (model == nullptr) {
        return ReturnStatus(Status::InvalidArgument("model_wake: `model` is NULL"), error);
      }
      if constexpr (kCanSleep) {
        return ReturnStatus(static_cast<Model*>(model)->Wake(), error);
      } else {
        return ReturnStatus(Status::Unsupported("model_wake: this model cannot sleep"), error);
      }
    } catch (...) {
      return ReturnCurrentException(error, "model_wake");
    }
  }

  static VramdCode ModelCreate(const VramdModelInfo* info, void** model, VramdError* error) {
    try {
      if (info == nullptr || model == nullptr) {
        return ReturnStatus(Status::InvalidArgument("model_create: `info` or `model` is NULL"),
                            error);
      }
      *model = nullptr;
      auto made = Model::Create(*info);
      if (!made.ok()) return ReturnStatus(made.status(), error);
      *model = made->release();
      return VRAMD_OK;
    } catch (...) {
      return ReturnCurrentException(error, "model_create");
    }
  }

  static void ModelDestroy(void* model) {
    try {
      std::unique_ptr<Model> owned(static_cast<Model*>(model));  // adopted back from the C side
    } catch (...) {
      // Destruction has no way to report; what it failed to free shows as a leak.
    }
  }

  static VramdCode InstanceCreate(void* model, const VramdInstanceInfo* info, void** instance,
                                  VramdError* error) {
    try {
      if (model == nullptr || info == nullptr || instance == nullptr) {
        return ReturnStatus(
            Status::InvalidArgument("instance_create: `model`, `info` or `instance` is NULL"),
            error);
      }
      *instance = nullptr;
      auto made = static_cast<Model*>(model)->CreateInstance(*info);
      if (!made.ok()) return ReturnStatus(made.status(), error);
      *instance = made->release();
      return VRAMD_OK;
    } catch (...) {
      return ReturnCurrentException(error, "instance_create");
    }
  }

  static void InstanceDestroy(void* instance) {
    try {
      std::unique_ptr<Instance> owned(static_cast<Instance*>(instance));
    } catch (...) {
      // As ModelDestroy.
    }
  }

  static VramdCode Execute(void* instance, const VramdRequest* request,
                           const VramdOutputs* outputs, VramdError* error) {
    try {
      if (instance == nullptr || request == nullptr || outputs == nullptr) {
        return ReturnStatus(
            Status::InvalidArgument("execute: `instance`, `request` or `outputs` is NULL"),
            error);
      }
      return ReturnStatus(static_cast<Instance*>(instance)->Execute(*request, *outputs), error);
    } catch (...) {
      return ReturnCurrentException(error, "execute");
    }
  }
};

}  // namespace internal

template <typename Model>
const VramdBackendApi* BackendApiFor(const char* name, bool supports_gpu,
                                     bool accepts_gpu_inputs) {
  using Entry = internal::EntryPoints<Model>;
  static const VramdBackendApi api = {
      sizeof(VramdBackendApi), VRAMD_BACKEND_ABI_VERSION, name,  supports_gpu ? 1 : 0,
      &Entry::ModelCreate,     &Entry::ModelDestroy,      &Entry::InstanceCreate,
      &Entry::InstanceDestroy, &Entry::Execute,
      // execute_on_instance_threads: the kit's backends (the built-ins) keep no per-thread
      // state, so they keep the inline fast path and its saved thread hand-offs.
      0,
      // execute_requests, instance_ready, auto_complete_config: none (joined batches; ready
      // once created; a config as written).
      nullptr, nullptr, nullptr,
      accepts_gpu_inputs ? 1 : 0,
      // model_sleep, model_wake: where Model has Sleep and Wake.
      Entry::kCanSleep ? &Entry::ModelSleep : nullptr,
      Entry::kCanSleep ? &Entry::ModelWake : nullptr,
      // sleeps_in_place: no; a model that can sleep does it itself.
      0,
  };
  return &api;
}

}  // namespace vramd::backends::abi
