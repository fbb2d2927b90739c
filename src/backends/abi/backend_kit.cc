#include "backends/abi/backend_kit.h"

#include <fmt/format.h>

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <utility>

#include "backends/abi/abi_bridge.h"
#include "config/model_config_json.h"

namespace vramd::backends::abi {

VramdCode ReturnStatus(const Status& status, VramdError* error) noexcept {
  if (status.ok()) return VRAMD_OK;
  SetError(error, status.message());
  return ToVramdCode(status.code());
}

VramdCode ReturnCurrentException(VramdError* error, const char* entry) noexcept {
  auto write = [&](const char* what) {
    if (error != nullptr) std::snprintf(error->message, sizeof error->message, "%s: %s", entry, what);
  };
  try {
    throw;
  } catch (const std::bad_alloc&) {
    write("out of host memory");
    return VRAMD_RESOURCE_EXHAUSTED;
  } catch (const std::exception& e) {
    write(e.what());
    return VRAMD_INTERNAL;
  } catch (...) {
    write("unknown exception");
    return VRAMD_INTERNAL;
  }
}

Allocation& Allocation::operator=(Allocation&& other) noexcept {
  if (this != &other) {
    Reset();
    server_ = std::exchange(other.server_, nullptr);
    kind_ = other.kind_;
    device_id_ = other.device_id_;
    ptr_ = std::exchange(other.ptr_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

Result<Allocation> Allocation::Make(const VramdServerApi* server, VramdOwner owner,
                                    VramdDeviceKind kind, int32_t device_id, size_t size,
                                    void* stream) {
  Allocation a;
  VramdError error{};
  const VramdCode code =
      server->allocate(server->server, owner, kind, device_id, size, stream, &a.ptr_, &error);
  if (code != VRAMD_OK) return FromVramd(code, error, "");
  a.server_ = server;
  a.kind_ = kind;
  a.device_id_ = device_id;
  a.size_ = size;
  return a;
}

void Allocation::Reset() {
  if (ptr_ != nullptr) server_->free(server_->server, kind_, device_id_, ptr_);
  ptr_ = nullptr;
  size_ = 0;
}

void RecordLoadPhase(const VramdServerApi* server, const char* phase, double seconds,
                     uint64_t bytes) {
  if (server == nullptr) return;
  // An older server's table ends before the field.
  if (server->struct_size < offsetof(VramdServerApi, record_load_phase) + sizeof(void*)) return;
  if (server->record_load_phase == nullptr) return;
  server->record_load_phase(server->server, phase, seconds, bytes);
}

LoadPhaseScope::~LoadPhaseScope() {
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start_;
  RecordLoadPhase(server_, phase_, elapsed.count(), bytes_);
}

void Log(const VramdServerApi* server, VramdLogLevel level, const std::string& message) {
  if (server != nullptr && server->log != nullptr) server->log(server->server, level, message.c_str());
}

Result<config::ModelConfig> ModelConfigOf(const VramdModelInfo& info) {
  if (info.config_json == nullptr) {
    return Status::InvalidArgument(fmt::format("model '{}': no config JSON was given",
                                               info.name != nullptr ? info.name : ""));
  }
  return config::ModelConfigFromJson(std::string_view(info.config_json, info.config_json_size));
}

const VramdTensor* FindInput(const VramdRequest& request, std::string_view name) {
  for (size_t i = 0; i < request.input_count; ++i) {
    const VramdTensor& t = request.inputs[i];
    if (t.name != nullptr && name == t.name) return &t;
  }
  return nullptr;
}

Result<std::byte*> AddOutput(const VramdOutputs& outputs, const std::string& name,
                             DataType datatype, const Shape& shape, size_t byte_size) {
  void* data = nullptr;
  VramdError error{};
  const VramdCode code = outputs.add(outputs.outputs, name.c_str(), ToVramdDataType(datatype),
                                     shape.data(), shape.size(), byte_size, &data, &error);
  if (code != VRAMD_OK) return FromVramd(code, error, "");
  return static_cast<std::byte*>(data);
}

Result<std::byte*> AddOutputIn(const VramdOutputs& outputs, VramdMemory memory,
                               const std::string& name, DataType datatype, const Shape& shape,
                               size_t byte_size) {
  constexpr size_t kEnd =
      offsetof(VramdOutputs, add_on_device) + sizeof(VramdOutputs::add_on_device);
  if (outputs.struct_size < kEnd || outputs.add_on_device == nullptr) {
    if (memory.kind != VRAMD_DEVICE_GPU) return AddOutput(outputs, name, datatype, shape, byte_size);
    return Status::Unsupported(
        fmt::format("output '{}': this server takes no outputs in GPU memory", name));
  }
  void* data = nullptr;
  VramdError error{};
  const VramdCode code = outputs.add_on_device(
      outputs.outputs, name.c_str(), ToVramdDataType(datatype), shape.data(), shape.size(),
      byte_size, memory.kind, memory.device_id, &data, &error);
  if (code != VRAMD_OK) return FromVramd(code, error, "");
  return static_cast<std::byte*>(data);
}

Status AddFromInput(const VramdOutputs& outputs, const std::string& name,
                    const VramdRequest& request, const VramdTensor& input) {
  constexpr size_t kEnd =
      offsetof(VramdOutputs, add_from_input) + sizeof(VramdOutputs::add_from_input);
  if (outputs.struct_size >= kEnd && outputs.add_from_input != nullptr) {
    VramdError error{};
    const VramdCode code = outputs.add_from_input(
        outputs.outputs, name.c_str(), static_cast<size_t>(&input - request.inputs), &error);
    if (code != VRAMD_OK) return FromVramd(code, error, "");
    return Status::Ok();
  }
  if (InputMemory(request, input).kind == VRAMD_DEVICE_GPU) {
    return Status::Unsupported(fmt::format(
        "output '{}': this server cannot answer with input '{}', which is in GPU memory", name,
        input.name));
  }
  VRAMD_ASSIGN_OR_RETURN(std::byte * data, AddOutput(outputs, name, ToDataType(input.datatype),
                                                      ShapeOf(input), input.byte_size));
  // A client may place the output in shared memory over the input's own bytes.
  if (input.byte_size > 0) std::memmove(data, input.data, input.byte_size);
  return Status::Ok();
}

VramdMemory InputMemory(const VramdRequest& request, const VramdTensor& input) {
  constexpr size_t kEnd =
      offsetof(VramdRequest, input_memory) + sizeof(VramdRequest::input_memory);
  if (request.struct_size < kEnd || request.input_memory == nullptr) {
    return {VRAMD_DEVICE_CPU, -1};
  }
  return request.input_memory[&input - request.inputs];
}

VramdMemory PreferredOutputMemory(const VramdRequest& request) {
  constexpr size_t kEnd = offsetof(VramdRequest, preferred_output_memory) +
                          sizeof(VramdRequest::preferred_output_memory);
  if (request.struct_size < kEnd) return {VRAMD_DEVICE_CPU, -1};
  return request.preferred_output_memory;
}

Status Copy(const VramdServerApi* server, VramdMemory dst_memory, void* dst,
            VramdMemory src_memory, const void* src, size_t size, void* stream) {
  VramdError error{};
  const VramdCode code = server->copy(server->server, dst_memory.kind, dst_memory.device_id, dst,
                                      src_memory.kind, src_memory.device_id, src, size, stream,
                                      &error);
  if (code != VRAMD_OK) return FromVramd(code, error, "");
  return Status::Ok();
}

}  // namespace vramd::backends::abi
