#include "backends/remote/messages.h"

#include <fmt/format.h>

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

void EncodeTensor(WireWriter& w, const char* name, VramdDataType datatype, const int64_t* shape,
                  size_t rank, const void* data, size_t byte_size) {
  w.Str(name != nullptr ? name : "");
  w.U32(static_cast<uint32_t>(datatype));
  w.U32(static_cast<uint32_t>(rank));
  for (size_t i = 0; i < rank; ++i) w.I64(shape[i]);
  w.AlignedBytes(data, byte_size);
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
  t.data = r.AlignedBytes("tensor bytes", &t.byte_size);
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

void EncodeRequest(WireWriter& w, const VramdRequest& q, uint64_t responder) {
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
    EncodeTensor(w, t.name, t.datatype, t.shape, t.rank, t.data, t.byte_size);
  }
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
}

void WireRequest::Bind() {
  tensors.clear();
  memory.clear();
  requested_output_names.clear();
  for (const WireTensor& t : inputs) {
    tensors.push_back(VramdTensor{t.name.c_str(), t.datatype, t.shape.data(), t.shape.size(),
                                  t.data, t.byte_size});
    memory.push_back(VramdMemory{VRAMD_DEVICE_CPU, -1});
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

void EncodeInferCall(WireWriter& w, uint64_t context, const VramdInferCall& c) {
  w.U64(context);
  w.Str(c.model != nullptr ? c.model : "");
  w.I64(c.version);
  w.OptStr(c.id);
  w.U32(static_cast<uint32_t>(c.input_count));
  for (size_t i = 0; i < c.input_count; ++i) {
    const VramdTensor& t = c.inputs[i];
    EncodeTensor(w, t.name, t.datatype, t.shape, t.rank, t.data, t.byte_size);
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
  return c;
}

}  // namespace vramd::backends::remote
