#include "backends/remote/backend_host.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdio>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backends/remote/messages.h"
#include "backends/remote/peer.h"
#include "backends/remote/worker.h"
#include "core/mutex.h"
#include "memory/cuda_devices.h"
#include "memory/cuda_ipc.h"
#include "memory/device.h"

namespace vramd::backends::remote {
namespace {

// The host's VramdResponder: the id vramd knows the request by, and the two references of the
// server's own (abi_responses.h): the execute_requests call's and the backend's until its
// final respond (or the hand-back of a failed call). The host owns it (Host::responders_), so
// that one a backend never completes is freed when the model is destroyed.
struct HostResponder {
  HostResponder(uint64_t i, uint64_t request_owner) : id(i), owner(request_owner) {}
  const uint64_t id;
  const uint64_t owner;  // the request's ledger owner: its GPU outputs are charged to it
  std::atomic<int> references{2};
  std::atomic<bool> finished{false};
};

struct HostOutput {
  std::string name;
  VramdDataType datatype;
  std::vector<int64_t> shape;
  std::unique_ptr<std::byte[]> bytes;  // host memory; null for a GPU output
  size_t size;
  int32_t gpu = -1;        // a GPU output's device
  void* device = nullptr;  // a GPU output's memory: vramd's (Host::AllocateDevice), mapped here
};

struct HostResponse {
  uint64_t owner = 0;  // HostResponder::owner
  std::vector<HostOutput> outputs;
  std::string parameters_json;
};

// One response of an infer_async call: it keeps its frame, which its host tensors point into,
// and the mappings of its GPU tensors, which are vramd's pool memory that vramd holds (`held`)
// until the host lets go of the result (InferResultRelease).
struct HostInferResult {
  Frame frame;
  VramdCode code = VRAMD_OK;
  std::string message;
  std::string parameters_json;
  std::vector<WireTensor> outputs;
  std::vector<const void*> output_data;  // each output's bytes in this process
  std::vector<std::unique_ptr<memory::ImportedMemory>> mappings;
  uint64_t held = 0;  // vramd's id for the result it keeps for the GPU outputs; 0: none
};

HostResponder* AsResponder(VramdResponder* r) { return reinterpret_cast<HostResponder*>(r); }
HostResponse* AsResponse(VramdResponse* r) { return reinterpret_cast<HostResponse*>(r); }
const HostInferResult* AsResult(const VramdInferResult* r) {
  return reinterpret_cast<const HostInferResult*>(r);
}

void SetError(VramdError* error, std::string_view message) {
  if (error == nullptr) return;
  const size_t n = std::min(message.size(), sizeof(error->message) - 1);
  std::memcpy(error->message, message.data(), n);
  error->message[n] = '\0';
}

VramdCode Fail(VramdError* error, const Status& status) {
  SetError(error, status.message());
  return ToVramdCode(status.code());
}

Status FromCode(VramdCode code, const VramdError& error) {
  if (code == VRAMD_OK) return Status::Ok();
  std::string message(error.message, strnlen(error.message, sizeof(error.message)));
  return Status(ToStatusCode(code), message.empty() ? "the backend gave no message" : message);
}

Result<memory::Device> ToDevice(VramdDeviceKind kind, int32_t device_id) {
  switch (kind) {
    case VRAMD_DEVICE_CPU: return memory::Device::Cpu();
    case VRAMD_DEVICE_CUDA_HOST: return memory::Device::CudaHost();
    case VRAMD_DEVICE_GPU:
      if (device_id < 0) return Status::InvalidArgument(fmt::format("GPU {} is no device", device_id));
      return memory::Device::Cuda(device_id);
  }
  return Status::InvalidArgument(fmt::format("unknown memory kind {}", static_cast<int>(kind)));
}

// An entry point's body with every exception turned into a code (none may unwind into C).
template <typename Body>
VramdCode Guarded(const char* entry, VramdError* error, Body body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    SetError(error, fmt::format("{}: out of host memory", entry));
    return VRAMD_RESOURCE_EXHAUSTED;
  } catch (const std::exception& e) {
    SetError(error, fmt::format("{}: {}", entry, e.what()));
    return VRAMD_INTERNAL;
  } catch (...) {
    SetError(error, fmt::format("{}: unknown exception", entry));
    return VRAMD_INTERNAL;
  }
}

class Host {
 public:
  Host(UniqueFd socket, const VramdBackendApi* api, std::string label)
      : api_(api),
        label_(std::move(label)),
        peer_(std::move(socket), [this](Frame f) { return OnFrame(std::move(f)); },
              [this](const Status& s) { return OnClosed(s); }) {
    FillTable();
  }

  int Run() EXCLUDES(mu_) {
    peer_.Start();
    MutexLock lock(mu_);
    lock.Wait(closed_cv_, [this]() REQUIRES(mu_) { return closed_; });
    if (model_made_ && !model_destroyed_) {
      // vramd went away with the model still up: no one is left to serve, and a library's
      // threads may be anywhere. Leave without running destructors.
      std::_Exit(1);
    }
    return 0;
  }

 private:
  struct Slot {
    void* instance = nullptr;
    std::unique_ptr<Worker> worker;
  };
  struct InferContext {
    void (*on_result)(void*, VramdInferResult*, int32_t) = nullptr;
    void* context = nullptr;
  };

  static Host* Of(void* server) { return static_cast<Host*>(server); }

  // ---- Frames from vramd (reader thread: never calls the library). ----

  Status OnFrame(Frame f) EXCLUDES(mu_) {
    switch (f.type) {
      case MessageType::kModelCreate:
      case MessageType::kInstanceCreate:
      case MessageType::kInstanceDestroy:
      case MessageType::kModelDestroy:
      case MessageType::kAutoCompleteConfig:
        control_.Post([this, f = std::move(f)] { Control(f); });
        return Status::Ok();
      case MessageType::kExecute:
      case MessageType::kExecuteRequests: {
        WireReader r(f.data(), f.size(), MessageTypeName(static_cast<uint32_t>(f.type)));
        const uint32_t slot = r.U32("slot");
        Worker* worker = nullptr;
        {
          MutexLock lock(mu_);
          auto it = slots_.find(slot);
          if (it != slots_.end()) worker = it->second.worker.get();
        }
        if (!r.ok() || worker == nullptr) {
          return ReplyStatus(f.id, r.ok() ? Status::InvalidArgument(fmt::format(
                                                "no instance in slot {}", slot))
                                          : r.status());
        }
        // The slot's worker outlives this post: instance_destroy (on the control thread, after
        // vramd stopped sending executes for it) joins it after everything it was given.
        worker->Post([this, f = std::move(f)] {
          if (f.type == MessageType::kExecute) {
            ExecuteOne(f);
          } else {
            ExecuteList(f);
          }
        });
        return Status::Ok();
      }
      case MessageType::kInferResult:
        callbacks_.Post([this, f = std::move(f)] { DeliverInferResult(f); });
        return Status::Ok();
      case MessageType::kInstanceReady:
        // On a thread of its own: the instance's own thread may be busy executing (vramd asks
        // while it executes, as in-process), and a slow is_ready must not hold up instance
        // creation on the control thread.
        readiness_.Post([this, f = std::move(f)] { InstanceReady(f); });
        return Status::Ok();
      default:
        return Status::InvalidArgument(fmt::format(
            "vramd sent a {} frame, which only a host sends",
            MessageTypeName(static_cast<uint32_t>(f.type))));
    }
  }

  Status OnClosed(const Status& receive) EXCLUDES(mu_) {
    if (!receive.ok()) {
      std::fprintf(stderr, "vramd_backend_host (%s): %s\n", label_.c_str(),
                   receive.ToString().c_str());
    }
    MutexLock lock(mu_);
    closed_ = true;
    closed_cv_.notify_all();
    return Status::Unavailable(fmt::format("vramd closed its connection to the host of {}", label_));
  }

  Status ReplyStatus(uint64_t id, const Status& status) {
    WireWriter w;
    EncodeStatus(w, status);
    return peer_.Reply(id, w.buffer());
  }

  // ---- The control thread. ----

  void Control(const Frame& f) EXCLUDES(mu_) {
    const std::string what = MessageTypeName(static_cast<uint32_t>(f.type));
    WireReader r(f.data(), f.size(), what);
    Status status;
    try {
      if (f.type == MessageType::kAutoCompleteConfig) {
        std::optional<std::string> completed;
        status = AutoComplete(r, &completed);
        WireWriter w;
        EncodeStatus(w, status);
        w.U8(completed.has_value() ? 1 : 0);
        w.Str(completed.value_or(""));
        static_cast<void>(peer_.Reply(f.id, w.buffer()));
        return;
      }
      switch (f.type) {
        case MessageType::kModelCreate: status = ModelCreate(r); break;
        case MessageType::kInstanceCreate: status = InstanceCreate(r); break;
        case MessageType::kInstanceDestroy: status = InstanceDestroy(r); break;
        case MessageType::kModelDestroy: status = ModelDestroy(r); break;
        default: status = Status::Internal("not a control message"); break;
      }
    } catch (const std::exception& e) {
      status = Status::Internal(fmt::format("{}: {}", what, e.what()));
    }
    static_cast<void>(ReplyStatus(f.id, status));
  }

  // The C ABI's view of `wire` (which must outlive it), with this host's server table.
  VramdModelInfo InfoOf(const WireModelInfo& wire) {
    VramdModelInfo info{};
    info.struct_size = sizeof info;
    info.name = wire.name.c_str();
    info.version = wire.version;
    info.model_dir = wire.model_dir.c_str();
    info.version_dir = wire.version_dir.c_str();
    info.config_json = wire.config_json.c_str();
    info.config_json_size = wire.config_json.size();
    info.owner = wire.owner;
    info.server = &table_;
    return info;
  }

  Status ModelCreate(WireReader& r) {
    model_info_ = DecodeModelInfo(r);
    VRAMD_RETURN_IF_ERROR(r.Finish());
    if (model_ != nullptr) return Status::InvalidArgument("the model was created already");
    const VramdModelInfo info = InfoOf(model_info_);
    VramdError error{};
    void* model = nullptr;
    const VramdCode code = api_->model_create(&info, &model, &error);
    if (code != VRAMD_OK) return FromCode(code, error);
    model_ = model;
    MutexLock lock(mu_);
    model_made_ = true;
    return Status::Ok();
  }

  // As AbiBackend::AutoCompleteConfig in vramd's process: a library without the entry point
  // keeps the config.
  Status AutoComplete(WireReader& r, std::optional<std::string>* completed) {
    const WireModelInfo wire = DecodeModelInfo(r);
    VRAMD_RETURN_IF_ERROR(r.Finish());
    constexpr size_t kEnd = offsetof(VramdBackendApi, auto_complete_config) +
                            sizeof(VramdBackendApi::auto_complete_config);
    if (api_->struct_size < kEnd || api_->auto_complete_config == nullptr) return Status::Ok();
    const VramdModelInfo info = InfoOf(wire);
    auto complete = [](void* context, const char* text, size_t size) {
      auto* out = static_cast<std::optional<std::string>*>(context);
      if (!out->has_value() && text != nullptr) out->emplace(text, size);
    };
    VramdError error{};
    const VramdCode code = api_->auto_complete_config(&info, complete, completed, &error);
    if (code != VRAMD_OK) {
      completed->reset();
      return FromCode(code, error);
    }
    return Status::Ok();
  }

  Status InstanceCreate(WireReader& r) EXCLUDES(mu_) {
    WireInstanceInfo wire = DecodeInstanceInfo(r);
    VRAMD_RETURN_IF_ERROR(r.Finish());
    if (model_ == nullptr) return Status::InvalidArgument("instance_create before model_create");
    if (wire.kind != VRAMD_DEVICE_CPU && wire.kind != VRAMD_DEVICE_GPU) {
      return Status::InvalidArgument(fmt::format("instance kind {}", wire.kind));
    }
    {
      MutexLock lock(mu_);
      if (slots_.count(wire.slot) != 0) {
        return Status::InvalidArgument(fmt::format("slot {} is taken", wire.slot));
      }
    }
    VramdInstanceInfo info{};
    info.struct_size = sizeof info;
    info.name = wire.name.c_str();
    info.index = wire.index;
    info.kind = static_cast<VramdDeviceKind>(wire.kind);  // CPU or GPU, checked above
    info.device_id = wire.device_id;
    info.owner = wire.owner;
    VramdError error{};
    void* instance = nullptr;
    const VramdCode code = api_->instance_create(model_, &info, &instance, &error);
    if (code != VRAMD_OK) return FromCode(code, error);
    MutexLock lock(mu_);
    slots_[wire.slot] = Slot{instance, std::make_unique<Worker>()};
    return Status::Ok();
  }

  Status InstanceDestroy(WireReader& r) EXCLUDES(mu_) {
    const uint32_t slot = r.U32("slot");
    VRAMD_RETURN_IF_ERROR(r.Finish());
    Slot taken;
    {
      MutexLock lock(mu_);
      auto it = slots_.find(slot);
      if (it == slots_.end()) return Status::InvalidArgument(fmt::format("no instance in slot {}", slot));
      taken = std::move(it->second);
      slots_.erase(it);
    }
    taken.worker.reset();  // runs what was posted to it, then joins
    api_->instance_destroy(taken.instance);
    return Status::Ok();
  }

  Status ModelDestroy(WireReader& r) EXCLUDES(mu_) {
    VRAMD_RETURN_IF_ERROR(r.Finish());
    {
      MutexLock lock(mu_);
      if (!slots_.empty()) {
        return Status::InvalidArgument(fmt::format("model_destroy with {} instances left", slots_.size()));
      }
    }
    if (model_ != nullptr) api_->model_destroy(model_);
    model_ = nullptr;
    std::map<HostResponder*, std::unique_ptr<HostResponder>> never_completed;
    {
      MutexLock lock(mu_);
      model_destroyed_ = true;
      never_completed.swap(responders_);
    }
    // With the model gone nothing can complete these any more. Said, so that a backend that
    // drops requests is seen.
    if (!never_completed.empty()) {
      Log(this, VRAMD_LOG_WARNING,
          fmt::format("the backend never sent a final response for {} request(s) before its "
                      "model was destroyed",
                      never_completed.size())
              .c_str());
    }
    return Status::Ok();
  }

  // vramd asks only between an instance's create and destroy (its probe goes first), one
  // question at a time per instance.
  void InstanceReady(const Frame& f) EXCLUDES(mu_) {
    WireReader r(f.data(), f.size(), "InstanceReady");
    const uint32_t slot = r.U32("slot");
    Status status = r.Finish();
    void* instance = status.ok() ? InstanceOf(slot) : nullptr;
    if (status.ok() && instance == nullptr) {
      status = Status::InvalidArgument(fmt::format("no instance in slot {}", slot));
    }
    constexpr size_t kEnd = offsetof(VramdBackendApi, instance_ready) + sizeof(VramdBackendApi::instance_ready);
    if (status.ok() && api_->struct_size >= kEnd && api_->instance_ready != nullptr) {
      VramdError error{};
      VramdCode code = VRAMD_INTERNAL;
      try {
        code = api_->instance_ready(instance, &error);
      } catch (...) {
        SetError(&error, "instance_ready threw");
      }
      status = FromCode(code, error);
    }
    static_cast<void>(ReplyStatus(f.id, status));
  }

  void* InstanceOf(uint32_t slot) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    auto it = slots_.find(slot);
    return it == slots_.end() ? nullptr : it->second.instance;
  }

  // ---- An instance's thread. ----

  static VramdCode AddOutput(void* sink, const char* name, VramdDataType datatype,
                             const int64_t* shape, size_t rank, size_t byte_size, void** data,
                             VramdError* error) {
    return Guarded("outputs->add", error, [&] {
      if (name == nullptr || data == nullptr || (shape == nullptr && rank > 0)) {
        return Fail(error, Status::InvalidArgument("outputs->add: NULL name, data or shape"));
      }
      auto* outputs = static_cast<std::vector<HostOutput>*>(sink);
      HostOutput out{name, datatype, std::vector<int64_t>(shape, shape + rank),
                     std::make_unique<std::byte[]>(byte_size == 0 ? 1 : byte_size), byte_size};
      *data = out.bytes.get();
      outputs->push_back(std::move(out));
      return VRAMD_OK;
    });
  }

  void ExecuteOne(const Frame& f) {
    WireReader r(f.data(), f.size(), "Execute");
    const uint32_t slot = r.U32("slot");
    WireRequest q;
    DecodeRequest(r, &q);
    Status status = r.Finish();
    std::vector<HostOutput> outputs;
    if (status.ok()) status = q.Bind();
    if (status.ok()) {
      VramdOutputs sink{sizeof(VramdOutputs), &outputs, &AddOutput};
      VramdError error{};
      VramdCode code = VRAMD_INTERNAL;
      try {
        code = api_->execute(InstanceOf(slot), &q.request, &sink, &error);
      } catch (...) {
        SetError(&error, "execute threw");
      }
      status = FromCode(code, error);
    }
    q.CloseMappings();
    WireWriter w;
    EncodeStatus(w, status);
    if (!status.ok()) outputs.clear();
    w.U32(static_cast<uint32_t>(outputs.size()));
    for (const HostOutput& o : outputs) {
      EncodeTensor(w, o.name.c_str(), o.datatype, o.shape.data(), o.shape.size(), o.bytes.get(), o.size);
    }
    static_cast<void>(peer_.Reply(f.id, w.buffer()));
  }

  HostResponder* NewResponder(uint64_t id, uint64_t owner) EXCLUDES(mu_) {
    auto made = std::make_unique<HostResponder>(id, owner);
    HostResponder* responder = made.get();
    MutexLock lock(mu_);
    responders_.emplace(responder, std::move(made));
    return responder;
  }

  // Drops one of the responder's references; the last frees it.
  void Unref(HostResponder* responder) EXCLUDES(mu_) {
    if (responder->references.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    MutexLock lock(mu_);
    responders_.erase(responder);
  }

  void ExecuteList(const Frame& f) {
    WireReader r(f.data(), f.size(), "ExecuteRequests");
    const uint32_t slot = r.U32("slot");
    const uint32_t count = r.Count("request count", 40);
    std::vector<std::unique_ptr<WireRequest>> requests;
    for (uint32_t i = 0; i < count && r.ok(); ++i) {
      requests.push_back(std::make_unique<WireRequest>());
      DecodeRequest(r, requests.back().get());
    }
    Status status = r.Finish();
    for (auto& q : requests) {
      if (status.ok()) status = q->Bind();
    }
    if (status.ok()) {
      std::vector<HostResponder*> responders;
      std::vector<VramdRequest*> list;
      for (auto& q : requests) {
        responders.push_back(NewResponder(q->responder, q->owner));
        q->request.responder = reinterpret_cast<VramdResponder*>(responders.back());
        list.push_back(&q->request);
      }
      VramdError error{};
      VramdCode code = VRAMD_INTERNAL;
      try {
        code = api_->execute_requests(InstanceOf(slot), list.data(), list.size(), &error);
      } catch (...) {
        SetError(&error, "execute_requests threw");
      }
      status = FromCode(code, error);
      for (HostResponder* h : responders) {
        // A failed call hands back what the backend did not complete (vramd answers those).
        if (!status.ok() && !h->finished.exchange(true)) Unref(h);
        Unref(h);
      }
    }
    for (auto& q : requests) q->CloseMappings();
    static_cast<void>(ReplyStatus(f.id, status));
  }

  // ---- The callback thread. ----

  void DeliverInferResult(const Frame& f) EXCLUDES(mu_) {
    auto result = std::make_unique<HostInferResult>();
    result->frame = f;
    WireReader r(f.data(), f.size(), "InferResult");
    const uint64_t context = r.U64("context");
    const bool final = r.U8("final") != 0;
    result->code = CodeFromWire(r.U32("code"));
    result->message = std::string(r.Str("message"));
    result->parameters_json = std::string(r.Str("parameters_json"));
    result->outputs = DecodeTensors(r);
    result->held = r.U64("held");
    Status status = r.Finish();
    if (status.ok()) status = MapOutputs(result.get());
    InferContext target;
    bool found = false;
    {
      MutexLock lock(mu_);
      auto it = infers_.find(context);
      if (it != infers_.end()) {
        found = true;
        target = it->second;
        if (final || !status.ok()) infers_.erase(it);
      }
    }
    if (!found) {  // not ours (or after its final result): dropped
      CloseResultMappings(result.get());
      return;
    }
    if (!status.ok()) {
      result->code = VRAMD_INTERNAL;
      result->message = status.message();
      result->outputs.clear();
      result->output_data.clear();
      result->parameters_json = "{}";
      CloseResultMappings(result.get());
    }
    try {
      target.on_result(target.context, reinterpret_cast<VramdInferResult*>(result.release()),
                       final || !status.ok() ? 1 : 0);
    } catch (...) {
    }
  }

  // Opens the mapping of each GPU output (vramd's export of the pool memory that holds it).
  static Status MapOutputs(HostInferResult* result) {
    for (const WireTensor& t : result->outputs) {
      if (t.gpu < 0) {
        result->output_data.push_back(t.data);
        continue;
      }
      auto mapped = memory::ImportedMemory::Open(t.gpu, t.ipc.handle);
      if (!mapped.ok()) {
        return mapped.status().WithContext(
            fmt::format("infer_async: output '{}': opening vramd's GPU {} memory", t.name, t.gpu));
      }
      result->output_data.push_back((*mapped)->base() + t.ipc.offset);
      result->mappings.push_back(std::move(mapped).value());
    }
    return Status::Ok();
  }

  // No kernel of this process may still read the outputs once vramd may reuse their memory,
  // and the mappings close before vramd hears (memory/cuda_ipc.h).
  void CloseResultMappings(HostInferResult* result) {
    for (const auto& mapping : result->mappings) {
      if (Status synced = memory::SynchronizeDevice(mapping->ordinal()); !synced.ok()) {
        Log(this, VRAMD_LOG_ERROR, fmt::format("infer_result_release: {}", synced.message()).c_str());
      }
    }
    result->mappings.clear();
    if (result->held != 0) {
      WireWriter w;
      w.U64(result->held);
      static_cast<void>(peer_.Notify(MessageType::kInferResultRelease, w.buffer()));
      result->held = 0;
    }
  }

  // ---- The server table the library calls. ----

  void FillTable() {
    table_.struct_size = sizeof table_;
    table_.abi_version = VRAMD_BACKEND_ABI_VERSION;
    table_.server = this;
    table_.log = &Log;
    table_.allocate = &Allocate;
    table_.free = &Free;
    table_.record_load_phase = &RecordLoadPhase;
    table_.recharge = &Recharge;
    table_.response_create = &ResponseCreate;
    table_.response_add_output = &ResponseAddOutput;
    table_.response_set_parameters = &ResponseSetParameters;
    table_.response_delete = &ResponseDelete;
    table_.respond = &Respond;
    table_.is_cancelled = &IsCancelled;
    table_.copy = &Copy;
    table_.infer_async = &InferAsync;
    table_.infer_result_error = &InferResultError;
    table_.infer_result_output_count = &InferResultOutputCount;
    table_.infer_result_output = &InferResultOutput;
    table_.infer_result_parameters = &InferResultParameters;
    table_.infer_result_release = &InferResultRelease;
    table_.load_model = &LoadModel;
    table_.unload_model = &UnloadModel;
    table_.is_model_ready = &IsModelReady;
    table_.metric_family_create = &MetricFamilyCreate;
    table_.metric_family_release = &MetricFamilyRelease;
    table_.metric_create = &MetricCreate;
    table_.metric_release = &MetricRelease;
    table_.metric_update = &MetricUpdate;
    table_.metric_value = &MetricValue;
    table_.infer_cancel = &InferCancel;
    table_.infer_cancel_release = &InferCancelRelease;
    table_.load_model_files = &LoadModelFiles;
  }

  // A call to vramd whose reply is a status and then `rest` (read by the caller).
  Result<Frame> CallChecked(MessageType type, WireWriter& w) {
    auto frame = peer_.Call(type, w.buffer());
    if (!frame.ok()) return frame.status();
    WireReader r(frame->data(), frame->size(), "Reply");
    VRAMD_RETURN_IF_ERROR(DecodeStatus(r));
    return frame;
  }

  static void Log(void* s, VramdLogLevel level, const char* message) {
    try {
      WireWriter w;
      w.U32(static_cast<uint32_t>(level));
      w.Str(message != nullptr ? message : "");
      static_cast<void>(Of(s)->peer_.Notify(MessageType::kLog, w.buffer()));
    } catch (...) {
    }
  }

  static VramdCode Allocate(void* s, VramdOwner owner, VramdDeviceKind kind, int32_t device_id,
                            size_t size, void*, void** out, VramdError* error) {
    return Guarded("allocate", error, [&] {
      if (out == nullptr) return Fail(error, Status::InvalidArgument("allocate: `out` is NULL"));
      *out = nullptr;
      if (kind == VRAMD_DEVICE_GPU) {
        auto ptr = Of(s)->AllocateDevice(owner, device_id, size);
        if (!ptr.ok()) return Fail(error, ptr.status().WithContext("allocate"));
        *out = *ptr;
        return VRAMD_OK;
      }
      if (kind != VRAMD_DEVICE_CPU && kind != VRAMD_DEVICE_CUDA_HOST) {
        return Fail(error, Status::InvalidArgument(fmt::format("allocate: unknown kind {}", static_cast<int>(kind))));
      }
      const size_t rounded = ((size == 0 ? 1 : size) + 255) / 256 * 256;
      *out = std::aligned_alloc(256, rounded);
      if (*out == nullptr) {
        return Fail(error, Status::ResourceExhausted(fmt::format("allocate: {} bytes of host memory", size)));
      }
      return VRAMD_OK;
    });
  }

  static void Free(void* s, VramdDeviceKind kind, int32_t, void* ptr) {
    if (kind == VRAMD_DEVICE_GPU) {
      try {
        Of(s)->FreeDevice(ptr);
      } catch (...) {
      }
      return;
    }
    std::free(ptr);
  }

  // GPU memory is vramd's (DeviceAllocate): charged to `owner` in its ledger and mapped here by
  // CUDA IPC (memory/cuda_ipc.h), so that a hosted backend's device memory has an owner as an
  // in-process one's has.
  Result<void*> AllocateDevice(VramdOwner owner, int32_t device, size_t size) EXCLUDES(mu_) {
    WireWriter w;
    w.U64(owner);
    w.I32(device);
    w.U64(size);
    VRAMD_ASSIGN_OR_RETURN(Frame reply, CallChecked(MessageType::kDeviceAllocate, w));
    WireReader r(reply.data(), reply.size(), "DeviceAllocate reply");
    static_cast<void>(DecodeStatus(r));  // OK: CallChecked checked it
    const uint64_t id = r.U64("id");
    const std::string_view handle = r.Str("handle");
    const uint64_t offset = r.U64("offset");
    if (r.ok() && handle.size() != memory::kIpcHandleBytes) {
      r.Refuse("handle", fmt::format("has {} bytes, not {}", handle.size(), memory::kIpcHandleBytes));
    }
    Status read = r.Finish();
    if (!read.ok()) {
      NotifyDeviceFree(id);
      return read;
    }
    memory::IpcHandle bytes;
    std::memcpy(bytes.data(), handle.data(), bytes.size());
    auto mapped = memory::ImportedMemory::Open(device, bytes);
    if (!mapped.ok()) {
      NotifyDeviceFree(id);
      return mapped.status().WithContext(fmt::format("mapping GPU {} memory of vramd's into {}", device, label_));
    }
    void* ptr = (*mapped)->base() + offset;
    MutexLock lock(mu_);
    device_memory_[ptr] = DeviceMemory{id, size, std::move(*mapped)};
    return ptr;
  }

  void FreeDevice(void* ptr) EXCLUDES(mu_) {
    DeviceMemory memory;
    {
      MutexLock lock(mu_);
      auto it = device_memory_.find(ptr);
      if (it == device_memory_.end()) {
        Log(this, VRAMD_LOG_ERROR, fmt::format("free: {} is not GPU memory vramd gave {}", ptr, label_).c_str());
        return;
      }
      memory = std::move(it->second);
      device_memory_.erase(it);
    }
    // The pool hands the block to someone else once vramd frees it: no kernel of this process
    // may still use it, and the mapping is closed before vramd hears (memory/cuda_ipc.h).
    const int device = memory.mapping->ordinal();
    if (Status synced = memory::SynchronizeDevice(device); !synced.ok()) {
      Log(this, VRAMD_LOG_ERROR, fmt::format("free: {}", synced.message()).c_str());
    }
    memory.mapping.reset();
    NotifyDeviceFree(memory.id);
  }

  // Lets go of GPU memory vramd gave this process, without freeing it: no kernel of this
  // process uses it any more and the mapping is closed; its id names it to vramd, which takes it
  // over (an output sent in a response). 0 for a pointer vramd did not give.
  uint64_t HandOverDevice(void* ptr) EXCLUDES(mu_) {
    DeviceMemory memory;
    {
      MutexLock lock(mu_);
      auto it = device_memory_.find(ptr);
      if (it == device_memory_.end()) return 0;
      memory = std::move(it->second);
      device_memory_.erase(it);
    }
    if (Status synced = memory::SynchronizeDevice(memory.mapping->ordinal()); !synced.ok()) {
      Log(this, VRAMD_LOG_ERROR, fmt::format("respond: {}", synced.message()).c_str());
    }
    memory.mapping.reset();
    return memory.id;
  }

  // How a GPU input at `ptr` crosses to vramd by reference: as an offset into memory vramd gave
  // this process (no mapping for vramd to open), or as this process's own CUDA IPC export.
  // nullopt: neither (its bytes then cross in host memory).
  std::optional<CallInputPlace> PlaceOnGpu(int32_t gpu, const void* ptr, size_t size) EXCLUDES(mu_) {
    const auto* p = static_cast<const std::byte*>(ptr);
    {
      MutexLock lock(mu_);
      // The block that starts at or before `ptr`: the last one whose start is not after it.
      auto it = device_memory_.upper_bound(const_cast<void*>(ptr));
      if (it != device_memory_.begin()) {
        --it;
        const auto* start = static_cast<const std::byte*>(it->first);
        const size_t offset = static_cast<size_t>(p - start);
        if (it->second.mapping->ordinal() == gpu && offset <= it->second.size &&
            size <= it->second.size - offset) {
          CallInputPlace place;
          place.gpu = gpu;
          place.device_allocation = it->second.id;
          place.ipc.offset = offset;
          return place;
        }
      }
    }
    auto exported = memory::ExportDeviceMemory(gpu, ptr);
    if (!exported.ok()) return std::nullopt;
    CallInputPlace place;
    place.gpu = gpu;
    place.ipc = *exported;
    return place;
  }

  void NotifyDeviceFree(uint64_t id) {
    WireWriter w;
    w.U64(id);
    static_cast<void>(peer_.Notify(MessageType::kDeviceFree, w.buffer()));
  }

  static void RecordLoadPhase(void* s, const char* phase, double seconds, uint64_t bytes) {
    try {
      WireWriter w;
      w.Str(phase != nullptr ? phase : "");
      w.F64(seconds);
      w.U64(bytes);
      static_cast<void>(Of(s)->peer_.Notify(MessageType::kRecordLoadPhase, w.buffer()));
    } catch (...) {
    }
  }

  // Host memory of a host process is not in vramd's ledger: there is no charge to move.
  static VramdCode Recharge(void*, void*, VramdOwner, VramdError*) { return VRAMD_OK; }

  static VramdCode ResponseCreate(void*, VramdResponder* responder, VramdResponse** response,
                                  VramdError* error) {
    return Guarded("response_create", error, [&] {
      if (responder == nullptr || response == nullptr) {
        return Fail(error, Status::InvalidArgument("response_create: `responder` or `response` is NULL"));
      }
      auto* made = new HostResponse;  // the backend's until respond or response_delete
      made->owner = AsResponder(responder)->owner;
      *response = reinterpret_cast<VramdResponse*>(made);
      return VRAMD_OK;
    });
  }

  // A GPU output is memory of vramd's pool (AllocateDevice, charged to the request), mapped
  // here; respond hands it over to vramd by its id, no bytes crossing.
  static VramdCode ResponseAddOutput(void* s, VramdResponse* response, const char* name,
                                     VramdDataType datatype, const int64_t* shape, size_t rank,
                                     size_t byte_size, VramdDeviceKind kind, int32_t device_id,
                                     void** data, VramdError* error) {
    return Guarded("response_add_output", error, [&] {
      if (response == nullptr || data == nullptr) {
        return Fail(error, Status::InvalidArgument("response_add_output: `response` or `data` is NULL"));
      }
      *data = nullptr;
      HostResponse* r = AsResponse(response);
      int32_t memory_kind = VRAMD_DEVICE_CPU;
      std::memcpy(&memory_kind, &kind, sizeof memory_kind);
      if (memory_kind != VRAMD_DEVICE_GPU || byte_size == 0) {
        return AddOutput(&r->outputs, name, datatype, shape, rank, byte_size, data, error);
      }
      if (name == nullptr || (shape == nullptr && rank > 0)) {
        return Fail(error, Status::InvalidArgument("response_add_output: NULL name or shape"));
      }
      auto device = Of(s)->AllocateDevice(r->owner, device_id, byte_size);
      if (!device.ok()) {
        return Fail(error, device.status().WithContext(
                               fmt::format("response_add_output '{}' on GPU {}", name, device_id)));
      }
      r->outputs.push_back(HostOutput{name, datatype, std::vector<int64_t>(shape, shape + rank),
                                      nullptr, byte_size, device_id, *device});
      *data = *device;
      return VRAMD_OK;
    });
  }

  // Deletes a response, freeing what it still holds on a GPU (a response not sent, or the
  // outputs a sent one did not hand over).
  void DropResponse(HostResponse* response) {
    std::unique_ptr<HostResponse> owned(response);
    if (owned == nullptr) return;
    for (const HostOutput& o : owned->outputs) {
      if (o.device != nullptr) FreeDevice(o.device);
    }
  }
  struct ResponseDropper {
    Host* host;
    void operator()(HostResponse* response) const { host->DropResponse(response); }
  };

  static VramdCode ResponseSetParameters(void*, VramdResponse* response, const char* json,
                                         size_t json_size, VramdError* error) {
    return Guarded("response_set_parameters", error, [&] {
      if (response == nullptr || (json == nullptr && json_size > 0)) {
        return Fail(error, Status::InvalidArgument("response_set_parameters: `response` or `json` is NULL"));
      }
      AsResponse(response)->parameters_json = json != nullptr ? std::string(json, json_size) : "{}";
      return VRAMD_OK;
    });
  }

  static void ResponseDelete(void* s, VramdResponse* response) {
    try {
      Of(s)->DropResponse(AsResponse(response));
    } catch (...) {
    }
  }

  static VramdCode Respond(void* s, VramdResponder* responder, VramdResponse* response,
                           VramdCode code, const char* message, uint32_t flags, VramdError* error) {
    // Taken in every case.
    std::unique_ptr<HostResponse, ResponseDropper> owned(AsResponse(response), ResponseDropper{Of(s)});
    return Guarded("respond", error, [&] {
      HostResponder* h = AsResponder(responder);
      if (h == nullptr) return Fail(error, Status::InvalidArgument("respond: `responder` is NULL"));
      const bool final = (flags & VRAMD_RESPONSE_FLAG_FINAL) != 0;
      if (h->finished.load()) {
        return Fail(error, Status::InvalidArgument(
                               "respond: the request was already completed (its final response "
                               "was sent)"));
      }
      const bool with_response = code == VRAMD_OK && owned != nullptr;
      WireWriter w;
      w.U64(h->id);
      w.U32(static_cast<uint32_t>(code));
      w.Str(message != nullptr ? message : "");
      w.U32(flags);
      w.U8(with_response ? 1 : 0);
      w.Str(with_response ? owned->parameters_json : "");
      w.U32(with_response ? static_cast<uint32_t>(owned->outputs.size()) : 0);
      if (with_response) {
        for (HostOutput& o : owned->outputs) {
          if (o.device == nullptr) {
            EncodeTensor(w, o.name.c_str(), o.datatype, o.shape.data(), o.shape.size(), o.bytes.get(), o.size);
            continue;
          }
          // vramd takes the memory over: this process lets go of it first (memory/cuda_ipc.h).
          const uint64_t id = Of(s)->HandOverDevice(std::exchange(o.device, nullptr));
          EncodeGpuTensor(w, o.name.c_str(), o.datatype, o.shape.data(), o.shape.size(), o.size,
                          o.gpu, memory::IpcExport{}, id);
        }
      }
      owned.reset();
      auto reply = Of(s)->CallChecked(MessageType::kRespond, w);
      if (!reply.ok()) return Fail(error, reply.status());
      if (final && !h->finished.exchange(true)) Of(s)->Unref(h);  // the backend's reference
      return VRAMD_OK;
    });
  }

  static int32_t IsCancelled(void* s, VramdResponder* responder) {
    try {
      HostResponder* h = AsResponder(responder);
      if (h == nullptr) return 0;
      WireWriter w;
      w.U64(h->id);
      auto reply = Of(s)->CallChecked(MessageType::kIsCancelled, w);
      if (!reply.ok()) return 0;
      WireReader r(reply->data(), reply->size(), "IsCancelled reply");
      static_cast<void>(DecodeStatus(r));
      return r.I32("cancelled") != 0 ? 1 : 0;
    } catch (...) {
      return 0;
    }
  }

  static VramdCode Copy(void*, VramdDeviceKind dst_kind, int32_t dst_device, void* dst,
                        VramdDeviceKind src_kind, int32_t src_device, const void* src, size_t size,
                        void* stream, VramdError* error) {
    return Guarded("copy", error, [&] {
      if (size > 0 && (dst == nullptr || src == nullptr)) {
        return Fail(error, Status::InvalidArgument("copy: `dst` or `src` is NULL"));
      }
      auto to = ToDevice(dst_kind, dst_device);
      if (!to.ok()) return Fail(error, to.status().WithContext("copy: destination"));
      auto from = ToDevice(src_kind, src_device);
      if (!from.ok()) return Fail(error, from.status().WithContext("copy: source"));
      Status copied = memory::CopyBytes(*to, dst, *from, src, size, stream);
      if (!copied.ok()) return Fail(error, copied.WithContext("copy"));
      return VRAMD_OK;
    });
  }

  static VramdCode InferAsync(void* s, const VramdInferCall* call,
                              void (*on_result)(void*, VramdInferResult*, int32_t), void* context,
                              VramdError* error) {
    return Guarded("infer_async", error, [&] {
      if (call == nullptr || on_result == nullptr || call->model == nullptr ||
          (call->input_count > 0 && call->inputs == nullptr)) {
        return Fail(error, Status::InvalidArgument("infer_async: a NULL call, model, inputs or on_result"));
      }
      // A GPU input crosses by reference where it can (PlaceOnGpu); otherwise its bytes are
      // copied to host memory here and cross in the frame.
      std::vector<CallInputPlace> places(call->input_count);
      std::vector<VramdTensor> inputs(call->inputs, call->inputs + call->input_count);
      std::vector<std::unique_ptr<std::byte[]>> staged;
      std::vector<int32_t> synchronized;
      for (size_t i = 0; call->input_memory != nullptr && i < inputs.size(); ++i) {
        VramdTensor& t = inputs[i];
        if (call->input_memory[i].kind != VRAMD_DEVICE_GPU || t.byte_size == 0) continue;
        auto device = ToDevice(VRAMD_DEVICE_GPU, call->input_memory[i].device_id);
        if (!device.ok()) return Fail(error, device.status().WithContext("infer_async"));
        const int32_t gpu = device->index;
        // The called model reads in another process, on streams of its own: the work that
        // produced the input must be done first.
        if (std::find(synchronized.begin(), synchronized.end(), gpu) == synchronized.end()) {
          Status synced = memory::SynchronizeDevice(gpu);
          if (!synced.ok()) return Fail(error, synced.WithContext("infer_async"));
          synchronized.push_back(gpu);
        }
        if (auto place = Of(s)->PlaceOnGpu(gpu, t.data, t.byte_size)) {
          places[i] = *place;
          continue;
        }
        staged.push_back(std::make_unique<std::byte[]>(t.byte_size));
        Status copied = memory::CopyBytes(memory::Device::Cpu(), staged.back().get(), *device,
                                          t.data, t.byte_size, nullptr);
        if (!copied.ok()) return Fail(error, copied.WithContext(fmt::format("infer_async: input '{}'", t.name)));
        t.data = staged.back().get();
      }
      VramdInferCall sent = *call;
      sent.inputs = inputs.data();
      call = &sent;
      Host* host = Of(s);
      void** cancel_token =
          call->struct_size >= offsetof(VramdInferCall, cancel_token) + sizeof(void**)
              ? call->cancel_token
              : nullptr;
      if (cancel_token != nullptr) *cancel_token = nullptr;
      uint64_t id;
      {
        MutexLock lock(host->mu_);
        id = host->next_infer_++;
        host->infers_[id] = InferContext{on_result, context};
      }
      WireWriter w;
      EncodeInferCall(w, id, *call, places);
      auto reply = host->CallChecked(MessageType::kInferAsync, w);
      if (!reply.ok()) {
        MutexLock lock(host->mu_);
        host->infers_.erase(id);
        return Fail(error, reply.status());
      }
      // The host's token is the call's id: vramd looks it up, and a call already ended is not
      // found there (a cancel then does nothing).
      if (cancel_token != nullptr) *cancel_token = new CancelToken{id};
      return VRAMD_OK;
    });
  }

  struct CancelToken {
    uint64_t id;
  };

  static void InferCancel(void* s, void* token) {
    if (token == nullptr) return;
    WireWriter w;
    w.U64(static_cast<CancelToken*>(token)->id);
    static_cast<void>(Of(s)->peer_.Notify(MessageType::kInferCancel, w.buffer()));
  }

  static void InferCancelRelease(void*, void* token) { delete static_cast<CancelToken*>(token); }

  static VramdCode InferResultError(void*, const VramdInferResult* result, const char** message) {
    const HostInferResult* r = AsResult(result);
    if (r == nullptr) return VRAMD_INVALID_ARGUMENT;
    if (message != nullptr) *message = r->message.c_str();
    return r->code;
  }

  static size_t InferResultOutputCount(void*, const VramdInferResult* result) {
    const HostInferResult* r = AsResult(result);
    return r == nullptr ? 0 : r->outputs.size();
  }

  static VramdCode InferResultOutput(void*, const VramdInferResult* result, size_t index,
                                     VramdTensor* tensor, VramdMemory* memory, VramdError* error) {
    const HostInferResult* r = AsResult(result);
    if (r == nullptr || tensor == nullptr || index >= r->outputs.size()) {
      return Fail(error, Status::InvalidArgument("infer_result_output: no such output"));
    }
    const WireTensor& t = r->outputs[index];
    *tensor = VramdTensor{t.name.c_str(), t.datatype, t.shape.data(), t.shape.size(),
                          r->output_data[index], t.byte_size};
    if (memory != nullptr) {
      *memory = t.gpu >= 0 ? VramdMemory{VRAMD_DEVICE_GPU, t.gpu} : VramdMemory{VRAMD_DEVICE_CPU, -1};
    }
    return VRAMD_OK;
  }

  static const char* InferResultParameters(void*, const VramdInferResult* result) {
    const HostInferResult* r = AsResult(result);
    return r == nullptr || r->parameters_json.empty() ? "{}" : r->parameters_json.c_str();
  }

  static void InferResultRelease(void* s, VramdInferResult* result) {
    std::unique_ptr<HostInferResult> owned(reinterpret_cast<HostInferResult*>(result));
    if (owned == nullptr) return;
    try {
      Of(s)->CloseResultMappings(owned.get());
    } catch (...) {
    }
  }

  static VramdCode LoadModel(void* s, const char* model, const char* config_json, VramdError* error) {
    return LoadModelFiles(s, model, config_json, nullptr, 0, error);
  }

  // kLoadModel carries the model, its config override and its files (none for load_model).
  static VramdCode LoadModelFiles(void* s, const char* model, const char* config_json,
                                  const VramdModelFile* files, size_t file_count,
                                  VramdError* error) {
    return Guarded("load_model", error, [&] {
      if (files == nullptr && file_count > 0) {
        return Fail(error, Status::InvalidArgument("load_model_files: `files` is NULL"));
      }
      WireWriter w;
      w.Str(model != nullptr ? model : "");
      w.Str(config_json != nullptr ? config_json : "");
      w.U64(file_count);
      for (size_t i = 0; i < file_count; ++i) {
        if (files[i].path == nullptr || (files[i].data == nullptr && files[i].size > 0)) {
          return Fail(error, Status::InvalidArgument(fmt::format(
                                 "load_model_files: file {} has a NULL path or data", i)));
        }
        w.Str(files[i].path);
        w.Str(std::string_view(static_cast<const char*>(files[i].data), files[i].size));
      }
      auto reply = Of(s)->CallChecked(MessageType::kLoadModel, w);
      return reply.ok() ? VRAMD_OK : Fail(error, reply.status());
    });
  }

  static VramdCode UnloadModel(void* s, const char* model, int32_t dependents, VramdError* error) {
    return Guarded("unload_model", error, [&] {
      WireWriter w;
      w.Str(model != nullptr ? model : "");
      w.I32(dependents);
      auto reply = Of(s)->CallChecked(MessageType::kUnloadModel, w);
      return reply.ok() ? VRAMD_OK : Fail(error, reply.status());
    });
  }

  static int32_t IsModelReady(void* s, const char* model, int64_t version) {
    try {
      WireWriter w;
      w.Str(model != nullptr ? model : "");
      w.I64(version);
      auto reply = Of(s)->CallChecked(MessageType::kIsModelReady, w);
      if (!reply.ok()) return 0;
      WireReader r(reply->data(), reply->size(), "IsModelReady reply");
      static_cast<void>(DecodeStatus(r));
      return r.I32("ready") != 0 ? 1 : 0;
    } catch (...) {
      return 0;
    }
  }

  // Metric handles are vramd's ids, carried in the void* the ABI hands out.
  static VramdCode MetricFamilyCreate(void* s, const char* name, const char* description,
                                      int32_t kind, void** family, VramdError* error) {
    return Guarded("metric_family_create", error, [&] {
      if (family == nullptr) return Fail(error, Status::InvalidArgument("metric_family_create: `family` is NULL"));
      WireWriter w;
      w.Str(name != nullptr ? name : "");
      w.Str(description != nullptr ? description : "");
      w.I32(kind);
      auto reply = Of(s)->CallChecked(MessageType::kMetricFamilyCreate, w);
      if (!reply.ok()) return Fail(error, reply.status());
      WireReader r(reply->data(), reply->size(), "MetricFamilyCreate reply");
      static_cast<void>(DecodeStatus(r));
      *family = reinterpret_cast<void*>(static_cast<uintptr_t>(r.U64("family")));
      return VRAMD_OK;
    });
  }

  static void MetricFamilyRelease(void* s, void* family) {
    try {
      WireWriter w;
      w.U64(reinterpret_cast<uintptr_t>(family));
      static_cast<void>(Of(s)->peer_.Notify(MessageType::kMetricFamilyRelease, w.buffer()));
    } catch (...) {
    }
  }

  static VramdCode MetricCreate(void* s, void* family, const char* labels_json,
                                const double* buckets, size_t bucket_count, void** metric,
                                VramdError* error) {
    return Guarded("metric_create", error, [&] {
      if (metric == nullptr || (bucket_count > 0 && buckets == nullptr)) {
        return Fail(error, Status::InvalidArgument("metric_create: `metric` or `buckets` is NULL"));
      }
      WireWriter w;
      w.U64(reinterpret_cast<uintptr_t>(family));
      w.Str(labels_json != nullptr ? labels_json : "{}");
      w.U32(static_cast<uint32_t>(bucket_count));
      for (size_t i = 0; i < bucket_count; ++i) w.F64(buckets[i]);
      auto reply = Of(s)->CallChecked(MessageType::kMetricCreate, w);
      if (!reply.ok()) return Fail(error, reply.status());
      WireReader r(reply->data(), reply->size(), "MetricCreate reply");
      static_cast<void>(DecodeStatus(r));
      *metric = reinterpret_cast<void*>(static_cast<uintptr_t>(r.U64("metric")));
      return VRAMD_OK;
    });
  }

  static void MetricRelease(void* s, void* metric) {
    try {
      WireWriter w;
      w.U64(reinterpret_cast<uintptr_t>(metric));
      static_cast<void>(Of(s)->peer_.Notify(MessageType::kMetricRelease, w.buffer()));
    } catch (...) {
    }
  }

  static VramdCode MetricUpdate(void* s, void* metric, int32_t op, double value, VramdError* error) {
    return Guarded("metric_update", error, [&] {
      WireWriter w;
      w.U64(reinterpret_cast<uintptr_t>(metric));
      w.I32(op);
      w.F64(value);
      auto reply = Of(s)->CallChecked(MessageType::kMetricUpdate, w);
      return reply.ok() ? VRAMD_OK : Fail(error, reply.status());
    });
  }

  static VramdCode MetricValue(void* s, void* metric, double* value, VramdError* error) {
    return Guarded("metric_value", error, [&] {
      if (value == nullptr) return Fail(error, Status::InvalidArgument("metric_value: `value` is NULL"));
      WireWriter w;
      w.U64(reinterpret_cast<uintptr_t>(metric));
      auto reply = Of(s)->CallChecked(MessageType::kMetricValue, w);
      if (!reply.ok()) return Fail(error, reply.status());
      WireReader r(reply->data(), reply->size(), "MetricValue reply");
      static_cast<void>(DecodeStatus(r));
      *value = r.F64("value");
      return VRAMD_OK;
    });
  }

  const VramdBackendApi* const api_;
  const std::string label_;
  VramdServerApi table_{};
  WireModelInfo model_info_;  // control thread; what the model's info points into
  void* model_ = nullptr;     // control thread

  Mutex mu_;
  std::condition_variable closed_cv_;
  bool closed_ GUARDED_BY(mu_) = false;
  // A model_create succeeded (a process may only complete a config, and make no model).
  bool model_made_ GUARDED_BY(mu_) = false;
  bool model_destroyed_ GUARDED_BY(mu_) = false;
  std::map<uint32_t, Slot> slots_ GUARDED_BY(mu_);
  uint64_t next_infer_ GUARDED_BY(mu_) = 1;
  std::map<uint64_t, InferContext> infers_ GUARDED_BY(mu_);
  // Requests given to execute_requests and not yet released by both sides (HostResponder).
  std::map<HostResponder*, std::unique_ptr<HostResponder>> responders_ GUARDED_BY(mu_);
  struct DeviceMemory {
    uint64_t id = 0;  // vramd's DeviceAllocate id
    size_t size = 0;
    std::unique_ptr<memory::ImportedMemory> mapping;
  };
  // By the pointer handed out, in address order (PlaceOnGpu finds the block that holds one).
  std::map<void*, DeviceMemory> device_memory_ GUARDED_BY(mu_);

  // Threads last: they stop (joining) before the state above goes.
  Worker control_;
  Worker callbacks_;
  Worker readiness_;  // instance_ready
  Peer peer_;
};

}  // namespace

int RunBackendHost(UniqueFd socket, const VramdBackendApi* api, std::string label) {
  auto host = std::make_unique<Host>(std::move(socket), api, std::move(label));
  const int status = host->Run();
  host.reset();
  return status;
}

}  // namespace vramd::backends::remote
