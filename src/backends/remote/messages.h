// The structured parts of the remote-backend messages (wire.h): tensors, model and instance
// info, requests, responses and calls into other models, each with an encoder and a checking
// decoder. Decoded strings are copies (NUL-terminated, for the C ABI); decoded tensor bytes are
// views into the frame's payload, valid while the frame is kept.
//
// Thread safety: plain functions over values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backends/abi/vramd_codes.h"
#include "backends/remote/wire.h"
#include "core/status.h"
#include "memory/cuda_ipc.h"
#include "vramd/backend.h"

namespace vramd::backends::remote {

// VramdCode <-> StatusCode, for both processes (abi/vramd_codes.h).
using abi::ToStatusCode;
using abi::ToVramdCode;

// Values read off the wire as the C enums: a value the enum does not have would be undefined
// behaviour once stored, so it becomes VRAMD_INTERNAL (a code: the error stays an error) or
// VRAMD_DEVICE_CPU with *valid false (a device kind the caller must refuse).
VramdCode CodeFromWire(uint32_t value);
VramdDeviceKind DeviceKindFromWire(int32_t value, bool* valid);

// A tensor's bytes cross in the frame (host memory), or stay on a GPU and cross by reference:
// a CUDA IPC export of the allocation that holds them (memory/cuda_ipc.h; vramd -> host: a
// request's input, opened by the host for the call) or the id of a DeviceAllocate of vramd's
// (host -> vramd: an output the host filled and let go of, which vramd takes over).
struct WireTensor {
  std::string name;
  VramdDataType datatype = VRAMD_TYPE_INVALID;
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;  // into the frame; null for a GPU tensor
  size_t byte_size = 0;
  int32_t gpu = -1;                 // the CUDA ordinal of a GPU tensor; -1 in the frame
  memory::IpcExport ipc;            // a GPU tensor's export (vramd -> host)
  uint64_t device_allocation = 0;   // a GPU tensor's DeviceAllocate id (host -> vramd)
};

void EncodeTensor(WireWriter& w, const char* name, VramdDataType datatype, const int64_t* shape,
                  size_t rank, const void* data, size_t byte_size);
// A GPU tensor by reference: its export (vramd -> host) or its DeviceAllocate id (host ->
// vramd; `ipc` unused then).
void EncodeGpuTensor(WireWriter& w, const char* name, VramdDataType datatype,
                     const int64_t* shape, size_t rank, size_t byte_size, int32_t gpu,
                     const memory::IpcExport& ipc, uint64_t device_allocation);
// Checks the datatype (a known one), the rank (at most kMaxRank) and the sizes.
WireTensor DecodeTensor(WireReader& r);
std::vector<WireTensor> DecodeTensors(WireReader& r);
inline constexpr size_t kMaxRank = 64;

struct WireModelInfo {
  std::string name;
  int64_t version = 0;
  std::string model_dir, version_dir, config_json;
  uint64_t owner = 0;
};
void EncodeModelInfo(WireWriter& w, const WireModelInfo& info);
WireModelInfo DecodeModelInfo(WireReader& r);

struct WireInstanceInfo {
  uint32_t slot = 0;  // the instance's id in this conversation
  std::string name;
  int32_t index = 0;
  int32_t kind = VRAMD_DEVICE_CPU;
  int32_t device_id = -1;
  uint64_t owner = 0;
};
void EncodeInstanceInfo(WireWriter& w, const WireInstanceInfo& info);
WireInstanceInfo DecodeInstanceInfo(WireReader& r);

// A request as the host shows it to a backend: the strings and arrays a VramdRequest points
// into. Not movable once Bind() ran (the VramdRequest points into it).
struct WireRequest {
  std::string id;
  uint64_t responder = 0;
  uint32_t flags = 0;
  uint64_t correlation_id = 0;
  std::optional<std::string> correlation_id_string;
  uint64_t timeout_us = 0;
  uint64_t owner = 0;
  std::string parameters_json;
  std::vector<std::string> requested_outputs;
  std::vector<WireTensor> inputs;
  VramdMemory preferred_output_memory{VRAMD_DEVICE_CPU, -1};
  std::optional<std::string> traceparent;  // VramdRequest::traceparent

  // What Bind() fills.
  std::vector<VramdTensor> tensors;
  std::vector<VramdMemory> memory;
  std::vector<const char*> requested_output_names;
  // The GPU inputs' mappings, opened by Bind, closed by CloseMappings.
  std::vector<std::unique_ptr<memory::ImportedMemory>> mappings;
  VramdRequest request{};
  // Points `request` at the fields, opening each GPU input's export; an error names the input.
  Status Bind();
  // Waits for the work on the mapped inputs' devices, then closes the mappings: before the
  // host answers the call, since vramd may free the inputs once it has (memory/cuda_ipc.h).
  void CloseMappings();
};
// The request fields of an execute or execute_requests call: host inputs in the frame, GPU
// inputs (input_memory) by their CUDA IPC export; the preferred output memory.
Status EncodeRequest(WireWriter& w, const VramdRequest& request, uint64_t responder);
void DecodeRequest(WireReader& r, WireRequest* out);

// One respond call (host -> vramd).
struct WireRespond {
  uint64_t responder = 0;
  VramdCode code = VRAMD_OK;
  std::string message;
  uint32_t flags = 0;
  bool has_response = false;
  std::string parameters_json;  // "" when none were set
  std::vector<WireTensor> outputs;
};
WireRespond DecodeRespond(WireReader& r);

// Where one input of a call into another model crosses (host -> vramd): in the frame, or on a
// GPU by reference: at an offset into memory vramd gave the host (DeviceAllocate; no mapping
// to open, the bytes are in vramd's own pool) or as the host's own CUDA IPC export.
struct CallInputPlace {
  int32_t gpu = -1;                // -1: the bytes cross in the frame
  uint64_t device_allocation = 0;  // vramd's id for the memory that holds them; 0: `ipc` says
  memory::IpcExport ipc;           // the offset into device_allocation, or the host's export
};

// A call into another model (host -> vramd): VramdInferCall's fields; each input in the frame
// or on a GPU by reference (CallInputPlace), and whether the host keeps the inputs until the
// call's final result (VramdInferCall::inputs_outlive_call).
struct WireInferCall {
  uint64_t context = 0;
  std::string model;
  int64_t version = 0;
  std::optional<std::string> id;
  std::vector<WireTensor> inputs;
  std::vector<std::string> requested_outputs;
  std::optional<std::string> parameters_json;
  uint32_t flags = 0;
  uint64_t correlation_id = 0;
  std::optional<std::string> correlation_id_string;
  uint64_t timeout_us = 0;
  int32_t preferred_kind = VRAMD_DEVICE_CPU;
  int32_t preferred_device = -1;
  int32_t decoupled = 0;
  uint64_t parent_owner = 0;
  bool inputs_outlive_call = false;
  std::optional<std::string> traceparent;  // VramdInferCall::traceparent
};
// `places` has one entry per input of `call`, or is empty (all in the frame); a GPU input whose
// place is the frame must already be in host memory (the host stages it).
void EncodeInferCall(WireWriter& w, uint64_t context, const VramdInferCall& call,
                     std::span<const CallInputPlace> places = {});
WireInferCall DecodeInferCall(WireReader& r);

}  // namespace vramd::backends::remote
