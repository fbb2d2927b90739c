// The server's side of the backend C ABI (include/vramd/backend.h): code and device mapping,
// and the VramdServerApi table a backend calls back into. Used for every backend behind the ABI,
// built in or loaded from a library (abi_backend.h).
//
// Every function here that a backend calls is noexcept in effect: exceptions are caught and
// turned into a VramdCode, because none may unwind through the backend's C frames.
#pragma once

#include <atomic>
#include <string>
#include <string_view>
#include <vector>

#include "core/infer_request.h"
#include "core/load_timing.h"
#include "backends/abi/vramd_codes.h"
#include "core/shared_buffer.h"
#include "core/status.h"
#include "core/tensor.h"
#include "memory/allocator.h"
#include "memory/device.h"
#include "vramd/backend.h"

namespace vramd::backends {
class ServerServices;  // backends/server_services.h
}

namespace vramd::backends::abi {

// VRAMD_DEVICE_GPU -> cuda:<id>, CUDA_HOST -> cuda_host, CPU -> cpu; InvalidArgument otherwise.
Result<memory::Device> ToDevice(VramdDeviceKind kind, int32_t device_id);

// `buffer`'s bytes as a tensor's data: returned to its pool when the last reference goes.
SharedBuffer ShareBuffer(memory::Buffer buffer);

// Where a tensor's bytes are, as the ABI says it (Tensor::gpu: kOnHost or a CUDA ordinal).
VramdMemory MemoryOf(const Tensor& tensor);
// InferRequest::output_gpu as VramdRequest::preferred_output_memory (kAnyGpu: GPU -1), and back
// (a GPU with a negative device: kAnyGpu; any other kind: kOnHost).
VramdMemory PreferredOutputMemory(int output_gpu);
int OutputGpuOf(const VramdMemory& preferred);

// What a request shows a backend through the ABI: its VramdRequest and everything the request's
// pointers point into beyond the InferRequest itself (which must outlive it). The request points
// into the view's members: a view is not moved once filled.
struct RequestView {
  std::vector<VramdTensor> inputs;
  std::vector<VramdMemory> input_memory;
  std::vector<const char*> requested_outputs;
  std::string parameters_json;
  std::string traceparent;
  VramdRequest request{};
};
// Fills `view` with `request` as include/vramd/backend.h defines VramdRequest: every field but
// `owner` and `responder`, which belong to how the caller runs it. The one way a request
// reaches a backend, in process or hosted.
void ViewRequest(const InferRequest& request, RequestView* view);

// One VramdServerApi: allocate/free go to `allocator` (charged to the owner the backend names;
// 0 means the calling thread's current owner), log goes to spdlog as "[backend <name>] ...",
// record_load_phase to the LoadTiming set by set_load_timing (nowhere while it is null).
// infer_async, load_model, unload_model, is_model_ready and metric_* go to `services`
// (abi_services.cc; VRAMD_UNSUPPORTED when it is null), which must outlive the ServerApi.
// Must outlive every use of table() by the backend: for a model, until model_destroy returns.
// A null `allocator` (auto_complete_config's table) gives no memory: allocate fails
// (VRAMD_UNAVAILABLE), recharge finds nothing.
class ServerApi {
 public:
  ServerApi(std::string backend_name, memory::Allocator* allocator,
            ServerServices* services = nullptr);
  ServerApi(const ServerApi&) = delete;
  ServerApi& operator=(const ServerApi&) = delete;

  const VramdServerApi* table() const { return &table_; }
  // What the model may ask of the server beyond memory; may be null.
  ServerServices* services() const { return services_; }
  // Where its memory comes from; null for auto_complete_config's table.
  memory::Allocator* allocator() const { return allocator_; }

  // The load in progress, or null between loads; set around model_create and instance_create,
  // which the runtime calls one at a time for a model.
  void set_load_timing(LoadTiming* timing) { timing_.store(timing); }

 private:
  static void Log(void* server, VramdLogLevel level, const char* message);
  static VramdCode Allocate(void* server, VramdOwner owner, VramdDeviceKind kind,
                            int32_t device_id, size_t size, void* stream, void** out,
                            VramdError* error);
  static void Free(void* server, VramdDeviceKind kind, int32_t device_id, void* ptr);
  static void RecordLoadPhase(void* server, const char* phase, double seconds, uint64_t bytes);
  static VramdCode Recharge(void* server, void* ptr, VramdOwner owner, VramdError* error);

  const std::string backend_name_;
  memory::Allocator* const allocator_;
  ServerServices* const services_;
  std::atomic<LoadTiming*> timing_{nullptr};
  VramdServerApi table_{};
};

// Sets the table's entry points over ServerServices (abi_services.cc): infer_async and
// infer_result_*, load_model, unload_model, is_model_ready, metric_family_* and metric_*. Each
// takes its `server` argument as a ServerApi and reaches ServerApi::services().
void FillServicesTable(VramdServerApi* table);

}  // namespace vramd::backends::abi
