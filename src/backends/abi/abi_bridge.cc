#include "backends/abi/abi_bridge.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <exception>

#include "backends/abi/abi_responses.h"
#include "core/infer_request.h"
#include "core/request_trace.h"

namespace vramd::backends::abi {

Result<memory::Device> ToDevice(VramdDeviceKind kind, int32_t device_id) {
  switch (kind) {
    case VRAMD_DEVICE_CPU: return memory::Device::Cpu();
    case VRAMD_DEVICE_CUDA_HOST: return memory::Device::CudaHost();
    case VRAMD_DEVICE_GPU:
      if (device_id < 0) {
        return Status::InvalidArgument(fmt::format("GPU device id {} is negative", device_id));
      }
      return memory::Device::Cuda(device_id);
  }
  return Status::InvalidArgument(fmt::format("unknown device kind {}", static_cast<int>(kind)));
}

SharedBuffer ShareBuffer(memory::Buffer buffer) {
  const size_t size = buffer.size();
  auto held = std::make_shared<memory::Buffer>(std::move(buffer));
  const auto* bytes = static_cast<const std::byte*>(held->data());
  return SharedBuffer::View(std::move(held), bytes, size);
}

VramdMemory MemoryOf(const Tensor& tensor) {
  return tensor.on_gpu() ? VramdMemory{VRAMD_DEVICE_GPU, tensor.gpu}
                         : VramdMemory{VRAMD_DEVICE_CPU, -1};
}

VramdMemory PreferredOutputMemory(int output_gpu) {
  if (output_gpu == kOnHost) return {VRAMD_DEVICE_CPU, -1};
  return {VRAMD_DEVICE_GPU, output_gpu == kAnyGpu ? -1 : output_gpu};
}

int OutputGpuOf(const VramdMemory& preferred) {
  // Read as the integer a library wrote: a value the enum lacks must not be loaded as one.
  int32_t kind = VRAMD_DEVICE_CPU;
  std::memcpy(&kind, &preferred.kind, sizeof kind);
  if (kind != VRAMD_DEVICE_GPU) return kOnHost;
  return preferred.device_id < 0 ? kAnyGpu : preferred.device_id;
}

void ViewRequest(const InferRequest& request, RequestView* view) {
  view->inputs.reserve(request.inputs.size());
  view->input_memory.reserve(request.inputs.size());
  for (const Tensor& t : request.inputs) {
    view->inputs.push_back(VramdTensor{t.name.c_str(),
                                       static_cast<VramdDataType>(static_cast<int>(t.datatype)),
                                       t.shape.data(), t.shape.size(), t.data.data(),
                                       t.data.size()});
    view->input_memory.push_back(MemoryOf(t));
  }
  for (const RequestedOutput& o : request.outputs) view->requested_outputs.push_back(o.name.c_str());
  view->parameters_json = ParametersToJson(request.parameters);
  VramdRequest& v = view->request;
  v.struct_size = sizeof(VramdRequest);
  v.id = request.id.c_str();
  v.inputs = view->inputs.data();
  v.input_count = view->inputs.size();
  v.parameters_json = view->parameters_json.c_str();
  v.parameters_json_size = view->parameters_json.size();
  v.requested_outputs = view->requested_outputs.data();
  v.requested_output_count = view->requested_outputs.size();
  v.flags = request.flags;
  v.correlation_id = request.correlation_id;
  v.correlation_id_string =
      request.correlation_id_string.empty() ? nullptr : request.correlation_id_string.c_str();
  v.timeout_us = request.timeout_us;
  v.input_memory = view->input_memory.data();
  v.preferred_output_memory = PreferredOutputMemory(request.output_gpu);
  if (request.trace != nullptr) {
    view->traceparent = request.trace->Traceparent();
    v.traceparent = view->traceparent.c_str();
  }
}

ServerApi::ServerApi(std::string backend_name, memory::Allocator* allocator,
                     ServerServices* services)
    : backend_name_(std::move(backend_name)), allocator_(allocator), services_(services) {
  table_.struct_size = sizeof(VramdServerApi);
  table_.abi_version = VRAMD_BACKEND_ABI_VERSION;
  table_.server = this;
  table_.log = &ServerApi::Log;
  table_.allocate = &ServerApi::Allocate;
  table_.free = &ServerApi::Free;
  table_.record_load_phase = &ServerApi::RecordLoadPhase;
  table_.recharge = &ServerApi::Recharge;
  FillServicesTable(&table_);
  FillResponseTable(&table_);
}

void ServerApi::Log(void* server, VramdLogLevel level, const char* message) {
  try {
    const auto* self = static_cast<const ServerApi*>(server);
    const char* text = message != nullptr ? message : "";
    switch (level) {
      case VRAMD_LOG_ERROR: spdlog::error("[backend {}] {}", self->backend_name_, text); break;
      case VRAMD_LOG_WARNING: spdlog::warn("[backend {}] {}", self->backend_name_, text); break;
      case VRAMD_LOG_INFO: spdlog::info("[backend {}] {}", self->backend_name_, text); break;
      default: spdlog::debug("[backend {}] {}", self->backend_name_, text); break;
    }
  } catch (...) {
    // Logging must never fail the backend's call; a lost log line is the lesser harm.
  }
}

VramdCode ServerApi::Allocate(void* server, VramdOwner owner, VramdDeviceKind kind,
                              int32_t device_id, size_t size, void* stream, void** out,
                              VramdError* error) {
  try {
    if (out == nullptr) {
      SetError(error, "allocate: `out` is NULL");
      return VRAMD_INVALID_ARGUMENT;
    }
    *out = nullptr;
    const auto* self = static_cast<const ServerApi*>(server);
    if (self->allocator_ == nullptr) {  // auto_complete_config's table
      SetError(error, "allocate: this server table gives no memory (no model is loaded yet)");
      return VRAMD_UNAVAILABLE;
    }
    auto device = ToDevice(kind, device_id);
    if (!device.ok()) {
      SetError(error, "allocate: " + device.status().message());
      return VRAMD_INVALID_ARGUMENT;
    }
    auto ptr = self->allocator_->AllocateRaw(*device, size,
                                             reinterpret_cast<memory::StreamId>(stream),
                                             static_cast<memory::OwnerId>(owner));
    if (!ptr.ok()) {
      SetError(error, ptr.status().message());
      return ToVramdCode(ptr.status().code());
    }
    *out = *ptr;
    return VRAMD_OK;
  } catch (const std::bad_alloc&) {
    SetError(error, "allocate: out of host memory");
    return VRAMD_RESOURCE_EXHAUSTED;
  } catch (const std::exception& e) {
    SetError(error, fmt::format("allocate: {}", e.what()));
    return VRAMD_INTERNAL;
  } catch (...) {
    SetError(error, "allocate: unknown exception");
    return VRAMD_INTERNAL;
  }
}

void ServerApi::Free(void* server, VramdDeviceKind kind, int32_t device_id, void* ptr) {
  try {
    if (ptr == nullptr) return;
    const auto* self = static_cast<const ServerApi*>(server);
    if (self->allocator_ == nullptr) return;  // auto_complete_config's table allocated nothing
    auto device = ToDevice(kind, device_id);
    if (!device.ok()) {
      spdlog::error("[backend {}] free of {} with {}; the memory stays allocated",
                    self->backend_name_, ptr, device.status().message());
      return;
    }
    self->allocator_->Free(*device, ptr);
  } catch (...) {
    // Free has no way to report; the ledger counts unknown pointers itself.
  }
}

void ServerApi::RecordLoadPhase(void* server, const char* phase, double seconds,
                                uint64_t bytes) {
  try {
    LoadTiming* timing = static_cast<const ServerApi*>(server)->timing_.load();
    if (timing == nullptr || phase == nullptr) return;
    timing->Add(phase, seconds, bytes);
  } catch (...) {
    // A lost phase only makes the load's timing incomplete; it must not fail the load.
  }
}

VramdCode ServerApi::Recharge(void* server, void* ptr, VramdOwner owner, VramdError* error) {
  try {
    const auto* self = static_cast<const ServerApi*>(server);
    if (self->allocator_ == nullptr) {  // auto_complete_config's table allocated nothing
      SetError(error, "recharge: this server table gives no memory");
      return VRAMD_NOT_FOUND;
    }
    const Status status =
        self->allocator_->ledger()->Recharge(ptr, static_cast<memory::OwnerId>(owner));
    if (!status.ok()) {
      SetError(error, "recharge: " + status.message());
      return ToVramdCode(status.code());
    }
    return VRAMD_OK;
  } catch (const std::exception& e) {
    SetError(error, fmt::format("recharge: {}", e.what()));
    return VRAMD_INTERNAL;
  } catch (...) {
    SetError(error, "recharge: unknown exception");
    return VRAMD_INTERNAL;
  }
}

}  // namespace vramd::backends::abi
