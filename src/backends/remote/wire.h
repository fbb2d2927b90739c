// The messages between vramd and a backend host process (vramd_backend_host), and their
// compact binary encoding: little-endian fixed-width integers, strings as a u32 length and the
// bytes, tensors as name, datatype, shape and their bytes (aligned to kTensorAlignment within
// the payload, so that a mapped payload gives a framework aligned data). docs/remote-backends.md
// lists every message and its fields.
//
// Every read is length-checked: WireReader never reads past its payload and, after any short or
// malformed field, every later read returns zero values and status() names the first failure.
// So a corrupt or hostile message is an error (InvalidArgument naming the message and field),
// never a crash or an unbounded allocation (a count larger than what is left cannot be read).
//
// Thread safety: a WireWriter or WireReader is one thread's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace vramd::backends::remote {

// What a frame carries. A call's answer is a kReply with the call's id.
enum class MessageType : uint32_t {
  kReply = 1,
  // vramd -> host (each answered by a kReply).
  kModelCreate = 2,
  kInstanceCreate = 3,
  kInstanceDestroy = 4,
  kModelDestroy = 5,
  kExecute = 6,
  kExecuteRequests = 7,
  // vramd -> host, no answer: one response of an infer_async call.
  kInferResult = 8,
  // vramd -> host (answered by a kReply): the library's instance_ready for one slot.
  kInstanceReady = 9,
  // vramd -> host (answered by a kReply carrying the completed config, if any): the library's
  // auto_complete_config, in a process started for it (Stub::AutoComplete).
  kAutoCompleteConfig = 10,
  // host -> vramd, no answer.
  kLog = 20,
  kRecordLoadPhase = 21,
  kMetricFamilyRelease = 22,
  kMetricRelease = 23,
  // The host is done with a DeviceAllocate's memory (it closed its mapping first).
  kDeviceFree = 24,
  // Cancel an infer_async call (VramdServerApi::infer_cancel) by the host's id for it.
  kInferCancel = 25,
  // The host let go of an infer_async result whose GPU outputs vramd kept for it (their
  // mappings closed first), by vramd's id for it.
  kInferResultRelease = 26,
  // host -> vramd (each answered by a kReply).
  kRespond = 30,
  kIsCancelled = 31,
  kInferAsync = 32,
  kLoadModel = 33,
  kUnloadModel = 34,
  kIsModelReady = 35,
  kMetricFamilyCreate = 36,
  kMetricCreate = 37,
  kMetricUpdate = 38,
  kMetricValue = 39,
  // GPU memory from vramd's pools, charged to an owner in its ledger, handed to the host by
  // CUDA IPC (memory/cuda_ipc.h): the reply carries an id, the handle and the offset.
  kDeviceAllocate = 40,
};

// Whether `value` is one of the types above.
bool IsKnownMessageType(uint32_t value);
// Its name, for errors ("ModelCreate"); "unknown(<n>)" otherwise.
std::string MessageTypeName(uint32_t value);

inline constexpr size_t kTensorAlignment = 64;

class WireWriter {
 public:
  void U8(uint8_t v) { Raw(&v, 1); }
  void U32(uint32_t v) { Raw(&v, 4); }
  void I32(int32_t v) { Raw(&v, 4); }
  void U64(uint64_t v) { Raw(&v, 8); }
  void I64(int64_t v) { Raw(&v, 8); }
  void F64(double v) { Raw(&v, 8); }
  void Str(std::string_view s);
  // A string that may be absent (a NULL char*): a presence byte, then the string.
  void OptStr(const char* s);
  // `size` bytes, preceded by their u64 length and padded so they start at a multiple of
  // kTensorAlignment within the payload.
  void AlignedBytes(const void* data, size_t size);
  // Reserves `size` aligned bytes (as AlignedBytes) and returns their offset in the payload.
  size_t ReserveAlignedBytes(size_t size);

  std::string& buffer() { return buffer_; }
  size_t size() const { return buffer_.size(); }

 private:
  void Raw(const void* data, size_t size) {
    buffer_.append(static_cast<const char*>(data), size);
  }
  std::string buffer_;
};

class WireReader {
 public:
  // `what` names the message in errors. The payload must outlive the reader and every view it
  // returned.
  WireReader(const std::byte* data, size_t size, std::string what)
      : begin_(data), data_(data), left_(size), what_(std::move(what)) {}

  uint8_t U8(const char* field);
  uint32_t U32(const char* field);
  int32_t I32(const char* field);
  uint64_t U64(const char* field);
  int64_t I64(const char* field);
  double F64(const char* field);
  // A view into the payload.
  std::string_view Str(const char* field);
  // nullopt for an absent string.
  bool OptStr(const char* field, std::string_view* out);  // false when absent
  // A view of AlignedBytes' bytes.
  const std::byte* AlignedBytes(const char* field, size_t* size);
  // A count of elements that each take at least `min_element_bytes` of what is left: refused
  // (and 0) when the rest of the payload cannot hold that many.
  uint32_t Count(const char* field, size_t min_element_bytes);

  // Records a failure the decoder found in a field's value (the first failure wins).
  void Refuse(const char* field, std::string_view why) { Fail(field, why); }

  bool ok() const { return status_.ok(); }
  // OK, or the first failure. Finish() also refuses bytes left over.
  const Status& status() const { return status_; }
  Status Finish();

 private:
  bool Take(void* out, size_t size, const char* field);
  void Fail(const char* field, std::string_view why);

  const std::byte* const begin_;
  const std::byte* data_;
  size_t left_;
  std::string what_;
  Status status_;
};

}  // namespace vramd::backends::remote
