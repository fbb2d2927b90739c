#include "backends/remote/wire.h"

#include <fmt/format.h>

#include <cstring>

namespace vramd::backends::remote {

bool IsKnownMessageType(uint32_t v) {
  return (v >= 1 && v <= 10) || (v >= 20 && v <= 26) || (v >= 30 && v <= 40);
}

std::string MessageTypeName(uint32_t v) {
  switch (static_cast<MessageType>(v)) {
    case MessageType::kReply: return "Reply";
    case MessageType::kModelCreate: return "ModelCreate";
    case MessageType::kInstanceCreate: return "InstanceCreate";
    case MessageType::kInstanceDestroy: return "InstanceDestroy";
    case MessageType::kModelDestroy: return "ModelDestroy";
    case MessageType::kExecute: return "Execute";
    case MessageType::kExecuteRequests: return "ExecuteRequests";
    case MessageType::kInferResult: return "InferResult";
    case MessageType::kInstanceReady: return "InstanceReady";
    case MessageType::kAutoCompleteConfig: return "AutoCompleteConfig";
    case MessageType::kLog: return "Log";
    case MessageType::kRecordLoadPhase: return "RecordLoadPhase";
    case MessageType::kMetricFamilyRelease: return "MetricFamilyRelease";
    case MessageType::kMetricRelease: return "MetricRelease";
    case MessageType::kDeviceFree: return "DeviceFree";
    case MessageType::kInferCancel: return "InferCancel";
    case MessageType::kInferResultRelease: return "InferResultRelease";
    case MessageType::kRespond: return "Respond";
    case MessageType::kIsCancelled: return "IsCancelled";
    case MessageType::kInferAsync: return "InferAsync";
    case MessageType::kLoadModel: return "LoadModel";
    case MessageType::kUnloadModel: return "UnloadModel";
    case MessageType::kIsModelReady: return "IsModelReady";
    case MessageType::kMetricFamilyCreate: return "MetricFamilyCreate";
    case MessageType::kMetricCreate: return "MetricCreate";
    case MessageType::kMetricUpdate: return "MetricUpdate";
    case MessageType::kMetricValue: return "MetricValue";
    case MessageType::kDeviceAllocate: return "DeviceAllocate";
  }
  return fmt::format("unknown({})", v);
}

void WireWriter::Str(std::string_view s) {
  U32(static_cast<uint32_t>(s.size()));
  Raw(s.data(), s.size());
}

void WireWriter::OptStr(const char* s) {
  U8(s != nullptr ? 1 : 0);
  if (s != nullptr) Str(s);
}

size_t WireWriter::ReserveAlignedBytes(size_t size) {
  U64(size);
  const size_t pad = (kTensorAlignment - buffer_.size() % kTensorAlignment) % kTensorAlignment;
  buffer_.append(pad, '\0');
  const size_t at = buffer_.size();
  buffer_.resize(at + size);
  return at;
}

void WireWriter::AlignedBytes(const void* data, size_t size) {
  const size_t at = ReserveAlignedBytes(size);
  if (size > 0) std::memcpy(buffer_.data() + at, data, size);
}

void WireReader::Fail(const char* field, std::string_view why) {
  if (status_.ok()) {
    status_ = Status::InvalidArgument(
        fmt::format("malformed {} message: field '{}' {}", what_, field, why));
  }
  left_ = 0;
}

bool WireReader::Take(void* out, size_t size, const char* field) {
  if (!status_.ok()) {
    std::memset(out, 0, size);
    return false;
  }
  if (left_ < size) {
    std::memset(out, 0, size);
    Fail(field, fmt::format("needs {} bytes, {} left", size, left_));
    return false;
  }
  std::memcpy(out, data_, size);
  data_ += size;
  left_ -= size;
  return true;
}

uint8_t WireReader::U8(const char* f) { uint8_t v; Take(&v, 1, f); return v; }
uint32_t WireReader::U32(const char* f) { uint32_t v; Take(&v, 4, f); return v; }
int32_t WireReader::I32(const char* f) { int32_t v; Take(&v, 4, f); return v; }
uint64_t WireReader::U64(const char* f) { uint64_t v; Take(&v, 8, f); return v; }
int64_t WireReader::I64(const char* f) { int64_t v; Take(&v, 8, f); return v; }
double WireReader::F64(const char* f) { double v; Take(&v, 8, f); return v; }

std::string_view WireReader::Str(const char* field) {
  const uint32_t n = U32(field);
  if (!status_.ok()) return {};
  if (n > left_) {
    Fail(field, fmt::format("says {} bytes, {} left", n, left_));
    return {};
  }
  std::string_view s(reinterpret_cast<const char*>(data_), n);
  data_ += n;
  left_ -= n;
  return s;
}

bool WireReader::OptStr(const char* field, std::string_view* out) {
  *out = {};
  const uint8_t present = U8(field);
  if (present > 1) Fail(field, "has a presence byte that is neither 0 nor 1");
  if (present != 1 || !status_.ok()) return false;
  *out = Str(field);
  return status_.ok();
}

const std::byte* WireReader::AlignedBytes(const char* field, size_t* size) {
  *size = 0;
  const uint64_t n = U64(field);
  if (!status_.ok()) return nullptr;
  const size_t offset = static_cast<size_t>(data_ - begin_);
  const size_t pad = (kTensorAlignment - offset % kTensorAlignment) % kTensorAlignment;
  if (pad > left_ || n > left_ - pad) {
    Fail(field, fmt::format("says {} bytes, {} left", n, left_));
    return nullptr;
  }
  data_ += pad;
  const std::byte* at = data_;
  data_ += n;
  left_ -= pad + n;
  *size = static_cast<size_t>(n);
  return at;
}

uint32_t WireReader::Count(const char* field, size_t min_element_bytes) {
  const uint32_t n = U32(field);
  if (!status_.ok()) return 0;
  if (min_element_bytes > 0 && n > left_ / min_element_bytes) {
    Fail(field, fmt::format("counts {} elements, more than the {} bytes left can hold", n, left_));
    return 0;
  }
  return n;
}

Status WireReader::Finish() {
  if (status_.ok() && left_ != 0) {
    status_ = Status::InvalidArgument(
        fmt::format("malformed {} message: {} bytes left over after its last field", what_, left_));
  }
  return status_;
}

}  // namespace vramd::backends::remote
