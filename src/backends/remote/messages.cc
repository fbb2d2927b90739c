#include "backends/remote/messages.h"

#include <fmt/format.h>

#include <cstddef>
#include <cstring>

#include "memory/cuda_devices.h"

namespace vramd::backends::remote {

namespace {

std::vector<std::string> DecodeStrings(WireReader& r, const char* field) {
  const uint32_t n = r.Count(field, 4);
  std::vector<std::string> out;
  out.reserve(n);
  for (uint32_t i = 0; i < n && r.ok(); ++i) out.emplace_back(r.Str(field));
  return out;
}

void EncodeStrings(WireWriter& w, const char* const* names, size_t count) {
  w.U32(static_cast<uint32_t>(count));
  for (size_t i = 0; i < count; ++i) w.Str(names[i] != nullptr ? names[i] : "");
}

std::optional<std::string> DecodeOptStr(WireReader& r, const char* field) {
  std::string_view s;
  if (!r.OptStr(field, &s)) return std::nullopt;
  return std::string(s);
}

}  // namespace

VramdCode CodeFromWire(uint32_t value) {
  return value <= static_cast<uint32_t>(VRAMD_UNKNOWN) ? static_cast<VramdCode>(value)
                                                        : VRAMD_INTERNAL;
}

VramdDeviceKind DeviceKindFromWire(int32_t value, bool* valid) {
  *valid = value >= VRAMD_DEVICE_CPU && value <= VRAMD_DEVICE_CUDA_HOST;
  return *valid ? static_cast<VramdDeviceKind>(value) : VRAMD_DEVICE_CPU;
}

namespace {

constexpr uint8_t kInFrame = 0;
constexpr uint8_t kOnGpu = 1;

void EncodeTensorHead(WireWriter& w, const char* name, VramdDataType datatype,
                      const int64_t* shape, size_t rank, uint8_t place) {
  w.Str(name != nullptr ? name : "");
  w.U32(static_cast<uint32_t>(datatype));
  w.U32(static_cast<uint32_t>(rank));
  for (size_t i = 0; i < rank; ++i) w.I64(shape[i]);
  w.U8(place);
}

}  // namespace

void EncodeTensor(WireWriter& w, const char* name, VramdDataType datatype, const int64_t* shape,
                  size_t rank, const void* data, size_t byte_size) {
  EncodeTensorHead(w, name, datatype, shape, rank, kInFrame);
  w.AlignedBytes(data, byte_size);
}

void EncodeGpuTensor(WireWriter& w, const char* name, VramdDataType datatype,
                     const int64_t* shape, size_t rank, size_t byte_size, int32_t gpu,
                     const memory::IpcExport& ipc, uint64_t device_allocation) {
  EncodeTensorHead(w, name, datatype, shape, rank, kOnGpu);
  w.I32(gpu);
  w.U64(byte_size);
  w.Str(std::string_view(reinterpret_cast<const char*>(ipc.handle.data()), ipc.handle.size()));
  w.U64(ipc.offset);
  w.U64(device_allocation);
}

WireTensor DecodeTensor(WireReader& r) {
  WireTensor t;
  t.name = std::string(r.Str("tensor name"));
  const uint32_t type = r.U32("tensor datatype");
  if (r.ok() && (type <= VRAMD_TYPE_INVALID || type > VRAMD_TYPE_BF16)) {
    r.Refuse("tensor datatype", fmt::format("is {}, not a known datatype", type));
  }
  t.datatype = r.ok() ? static_cast<VramdDataType>(type) : VRAMD_TYPE_INVALID;
  const uint32_t rank = r.Count("tensor rank", 8);
  if (rank > kMaxRank) r.Refuse("tensor rank", fmt::format("is {}, over {}", rank, kMaxRank));
  t.shape.reserve(rank);
  for (uint32_t i = 0; i < rank && r.ok(); ++i) t.shape.push_back(r.I64("tensor shape"));
  const uint8_t place = r.U8("tensor place");
  if (place == kInFrame) {
    t.data = r.AlignedBytes("tensor bytes", &t.byte_size);
    return t;
  }
  if (place != kOnGpu) {
    r.Refuse("tensor place", fmt::format("is {}, neither in the frame (0) nor on a GPU (1)", place));
    return t;
  }
  t.gpu = r.I32("tensor gpu");
  if (r.ok() && t.gpu < 0) r.Refuse("tensor gpu", fmt::format("is {}, not a CUDA ordinal", t.gpu));
  t.byte_size = r.U64("tensor byte size");
  const std::string_view handle = r.Str("tensor ipc handle");
  if (r.ok() && handle.size() != t.ipc.handle.size()) {
    r.Refuse("tensor ipc handle",
             fmt::format("has {} bytes, not {}", handle.size(), t.ipc.handle.size()));
  }
  if (r.ok()) std::memcpy(t.ipc.handle.data(), handle.data(), t.ipc.handle.size());
  t.ipc.offset = r.U64("tensor ipc offset");
  t.device_allocation = r.U64("tensor device allocation");
  return t;
}

std::vector<WireTensor> DecodeTensors(WireReader& r) {
  // A tensor takes at least its name's length, type, rank and byte count: 20 bytes.
  const uint32_t n = r.Count("tensor count", 20);
  std::vector<WireTensor> out;
  out.reserve(n);
  for (uint32_t i = 0; i < n && r.ok(); ++i) out.push_back(DecodeTensor(r));
  if (!r.ok()) out.clear();
  return out;
}

void EncodeModelInfo(WireWriter& w, const WireModelInfo& info) {
  w.Str(info.name);
  w.I64(info.version);
  w.Str(info.model_dir);
  w.Str(info.version_dir);
  w.Str(info.config_json);
  w.U64(info.owner);
}

WireModelInfo DecodeModelInfo(WireReader& r) {
  WireModelInfo info;
  info.name = std::string(r.Str("name"));
  info.version = r.I64("version");
  info.model_dir = std::string(r.Str("model_dir"));
  info.version_dir = std::string(r.Str("version_dir"));
  info.config_json = std::string(r.Str("config_json"));
  info.owner = r.U64("owner");
  return info;
}

void EncodeInstanceInfo(WireWriter& w, const WireInstanceInfo& info) {
  w.U32(info.slot);
  w.Str(info.name);
  w.I32(info.index);
  w.I32(info.kind);
  w.I32(info.device_id);
  w.U64(info.owner);
}

WireInstanceInfo DecodeInstanceInfo(WireReader& r) {
  WireInstanceInfo info;
  info.slot = r.U32("slot");
  info.name = std::string(r.Str("name"));
  info.index = r.I32("index");
  info.kind = r.I32("kind");
  info.device_id = r.I32("device_id");
  info.owner = r.U64("owner");
  return info;
}

Status EncodeRequest(WireWriter& w, const VramdRequest& q, uint64_t responder) {
  w.Str(q.id != nullptr ? q.id : "");
  w.U64(responder);
  w.U32(q.flags);
  w.U64(q.correlation_id);
  w.OptStr(q.correlation_id_string);
  w.U64(q.timeout_us);
  w.U64(q.owner);
  w.Str(q.parameters_json != nullptr ? std::string_view(q.parameters_json, q.parameters_json_size)
                                      : std::string_view("{}"));
  EncodeStrings(w, q.requested_outputs, q.requested_output_count);
  w.U32(static_cast<uint32_t>(q.input_count));
  for (size_t i = 0; i < q.input_count; ++i) {
    const VramdTensor& t = q.inputs[i];
    const bool on_gpu = q.input_memory != nullptr && q.input_memory[i].kind == VRAMD_DEVICE_GPU;
    if (!on_gpu || t.byte_size == 0) {
      EncodeTensor(w, t.name, t.datatype, t.shape, t.rank, on_gpu ? nullptr : t.data,
                   on_gpu ? 0 : t.byte_size);
      continue;
    }
    const int32_t gpu = q.input_memory[i].device_id;
    auto exported = memory::ExportDeviceMemory(gpu, t.data);
    if (!exported.ok()) {
      return exported.status().WithContext(
          fmt::format("input '{}' on GPU {}: exporting it to the host", t.name, gpu));
    }
    EncodeGpuTensor(w, t.name, t.datatype, t.shape, t.rank, t.byte_size, gpu, *exported, 0);
  }
  const bool gpu_out = q.struct_size > offsetof(VramdRequest, preferred_output_memory) &&
                       q.preferred_output_memory.kind == VRAMD_DEVICE_GPU;
  w.I32(gpu_out ? VRAMD_DEVICE_GPU : VRAMD_DEVICE_CPU);
  w.I32(gpu_out ? q.preferred_output_memory.device_id : -1);
  const bool traced = q.struct_size >= offsetof(VramdRequest, traceparent) + sizeof(q.traceparent);
  w.OptStr(traced ? q.traceparent : nullptr);
  return Status::Ok();
}

void DecodeRequest(WireReader& r, WireRequest* q) {
  q->id = std::string(r.Str("id"));
  q->responder = r.U64("responder");
  q->flags = r.U32("flags");
  q->correlation_id = r.U64("correlation_id");
  q->correlation_id_string = DecodeOptStr(r, "correlation_id_string");
  q->timeout_us = r.U64("timeout_us");
  q->owner = r.U64("owner");
  q->parameters_json = std::string(r.Str("parameters_json"));
  q->requested_outputs = DecodeStrings(r, "requested_outputs");
  q->inputs = DecodeTensors(r);
  const int32_t kind = r.I32("preferred output kind");
  const int32_t device = r.I32("preferred output device");
  // Anything but a GPU reads as host memory, the default.
  q->preferred_output_memory = kind == VRAMD_DEVICE_GPU ? VramdMemory{VRAMD_DEVICE_GPU, device}
                                                        : VramdMemory{VRAMD_DEVICE_CPU, -1};
  q->traceparent = DecodeOptStr(r, "traceparent");
}

Status WireRequest::Bind() {
  tensors.clear();
  memory.clear();
  requested_output_names.clear();
  CloseMappings();
  for (const WireTensor& t : inputs) {
    const void* data = t.data;
    if (t.gpu >= 0) {
      auto mapped = memory::ImportedMemory::Open(t.gpu, t.ipc.handle);
      if (!mapped.ok()) {
        return mapped.status().WithContext(
            fmt::format("input '{}': opening vramd's GPU {} memory", t.name, t.gpu));
      }
      data = (*mapped)->base() + t.ipc.offset;
      mappings.push_back(std::move(mapped).value());
    }
    tensors.push_back(VramdTensor{t.name.c_str(), t.datatype, t.shape.data(), t.shape.size(),
                                  data, t.byte_size});
    memory.push_back(t.gpu >= 0 ? VramdMemory{VRAMD_DEVICE_GPU, t.gpu}
                                : VramdMemory{VRAMD_DEVICE_CPU, -1});
  }
  for (const std::string& s : requested_outputs) requested_output_names.push_back(s.c_str());
  request = VramdRequest{};
  request.struct_size = sizeof(VramdRequest);
  request.id = id.c_str();
  request.inputs = tensors.data();
  request.input_count = tensors.size();
  request.owner = owner;
  request.parameters_json = parameters_json.c_str();
  request.parameters_json_size = parameters_json.size();
  request.requested_outputs = requested_output_names.data();
  request.requested_output_count = requested_output_names.size();
  request.flags = flags;
  request.correlation_id = correlation_id;
  request.correlation_id_string =
      correlation_id_string.has_value() ? correlation_id_string->c_str() : nullptr;
  request.timeout_us = timeout_us;
  request.input_memory = memory.data();
  request.preferred_output_memory = preferred_output_memory;
  request.traceparent = traceparent.has_value() ? traceparent->c_str() : nullptr;
  return Status::Ok();
}

void WireRequest::CloseMappings() {
  for (const auto& mapping : mappings) {
    // A kernel the model queued may still read the input; nothing to do with a failure but go
    // on closing (the mapping must not outlive the call).
    static_cast<void>(memory::SynchronizeDevice(mapping->ordinal()));
  }
  mappings.clear();
}

WireRespond DecodeRespond(WireReader& r) {
  WireRespond out;
  out.responder = r.U64("responder");
  out.code = CodeFromWire(r.U32("code"));
  out.message = std::string(r.Str("message"));
  out.flags = r.U32("flags");
  out.has_response = r.U8("has_response") != 0;
  out.parameters_json = std::string(r.Str("parameters_json"));
  out.outputs = DecodeTensors(r);
  return out;
}

void EncodeInferCall(WireWriter& w, uint64_t context, const VramdInferCall& c,
                     std::span<const CallInputPlace> places) {
  w.U64(context);
  w.Str(c.model != nullptr ? c.model : "");
  w.I64(c.version);
  w.OptStr(c.id);
  w.U32(static_cast<uint32_t>(c.input_count));
  for (size_t i = 0; i < c.input_count; ++i) {
    const VramdTensor& t = c.inputs[i];
    if (i < places.size() && places[i].gpu >= 0) {
      EncodeGpuTensor(w, t.name, t.datatype, t.shape, t.rank, t.byte_size, places[i].gpu,
                      places[i].ipc, places[i].device_allocation);
    } else {
      EncodeTensor(w, t.name, t.datatype, t.shape, t.rank, t.data, t.byte_size);
    }
  }
  EncodeStrings(w, c.requested_outputs, c.requested_output_count);
  w.OptStr(c.parameters_json);
  w.U32(c.flags);
  w.U64(c.correlation_id);
  w.OptStr(c.correlation_id_string);
  w.U64(c.timeout_us);
  w.I32(c.preferred_output_memory.kind);
  w.I32(c.preferred_output_memory.device_id);
  w.I32(c.decoupled);
  w.U64(c.parent_owner);
  const bool kept = c.struct_size >= offsetof(VramdInferCall, inputs_outlive_call) + sizeof(int32_t) &&
                    c.inputs_outlive_call != 0;
  w.U8(kept ? 1 : 0);
  const bool traced = c.struct_size >= offsetof(VramdInferCall, traceparent) + sizeof(c.traceparent);
  w.OptStr(traced ? c.traceparent : nullptr);
}

WireInferCall DecodeInferCall(WireReader& r) {
  WireInferCall c;
  c.context = r.U64("context");
  c.model = std::string(r.Str("model"));
  c.version = r.I64("version");
  c.id = DecodeOptStr(r, "id");
  c.inputs = DecodeTensors(r);
  c.requested_outputs = DecodeStrings(r, "requested_outputs");
  c.parameters_json = DecodeOptStr(r, "parameters_json");
  c.flags = r.U32("flags");
  c.correlation_id = r.U64("correlation_id");
  c.correlation_id_string = DecodeOptStr(r, "correlation_id_string");
  c.timeout_us = r.U64("timeout_us");
  c.preferred_kind = r.I32("preferred_kind");
  c.preferred_device = r.I32("preferred_device");
  c.decoupled = r.I32("decoupled");
  c.parent_owner = r.U64("parent_owner");
  c.inputs_outlive_call = r.U8("inputs_outlive_call") != 0;
  c.traceparent = DecodeOptStr(r, "traceparent");
  return c;
}

}  // namespace vramd::backends::remote
