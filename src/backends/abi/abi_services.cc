// The VramdServerApi entry points over backends::ServerServices (abi_bridge.h's
// FillServicesTable): infer_async and the VramdInferResult accessors, model control, and custom
// metrics. Each entry point checks its arguments, hands the call to the ServerApi's services and
// turns the outcome into a VramdCode and message; no exception leaves one (each catches
// everything). A failure of the call itself (a NULL or malformed argument) names the entry
// point; an error of the services (a model's load failing, a counter's refused decrement)
// passes its message unchanged, since those are Triton's texts, which a model may match.
//
// infer_async reads the call's inputs in place when the caller keeps them for the whole call
// (inputs_outlive_call); otherwise it copies them before it returns (the ABI says the backend
// may free them then): host inputs to host memory, GPU inputs to vramd's pool of their GPU
// (charged to parent_owner, else the calling thread's owner), never through the host. A GPU
// input reaches the called model on its GPU when that model's backend takes GPU inputs, and in
// host memory otherwise (runtime/tensor_memory.h). preferred_output_memory becomes the
// request's output_gpu: a GPU output stays on its GPU for a caller that prefers a GPU and
// comes to host for one that prefers the CPU. A call that asks for a cancel token gets one
// (infer_cancel sets its request's CancelFlag, which its model reads as is_cancelled()). A
// result owns its InferResponse, so the tensors it shows stay valid until
// infer_result_release.
//
// Exactly one final result per call that infer_async accepted: a per-call state drops whatever
// would come after the final one. That also covers an exception thrown by the services once the
// request may already be running: infer_async then answers it with the error itself (unless the
// final result already went) and still returns VRAMD_OK.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cstddef>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "backends/abi/abi_bridge.h"
#include "backends/server_services.h"
#include "core/data_type.h"
#include "core/infer_request.h"
#include "core/tensor.h"
#include "memory/cuda_devices.h"

// The opaque handle of include/vramd/backend.h: one response of a call into another model.
struct VramdInferResult {
  vramd::Status status;              // the response's error; OK when it carries outputs
  vramd::InferResponse response;     // owns the tensors the accessors show
  std::string parameters_json;       // the response's parameters, "{}" when none
};

static_assert(sizeof(VramdDeviceKind) == sizeof(int32_t), "a device kind is read as an int32_t");

namespace vramd::backends::abi {
namespace {

// What metric_family_create and metric_create hand out: a reference to the registry's object,
// so the registry exports it until the backend releases the handle (custom_metrics.h).
struct FamilyHandle {
  std::shared_ptr<CustomMetricFamily> family;
};
struct MetricHandle {
  std::shared_ptr<CustomMetric> metric;
};

ServerServices* ServicesOf(void* server) {
  return server == nullptr ? nullptr : static_cast<const ServerApi*>(server)->services();
}

VramdCode Refuse(VramdError* error, VramdCode code, std::string_view message) {
  SetError(error, message);
  return code;
}

VramdCode Relay(VramdError* error, const Status& status) {
  if (status.ok()) return VRAMD_OK;
  SetError(error, status.message());
  return ToVramdCode(status.code());
}

VramdCode NoServices(VramdError* error, std::string_view feature) {
  return Refuse(error, VRAMD_UNSUPPORTED, fmt::format("this server gives backends no {}", feature));
}

// Runs `body`, turning an exception into a code and a message naming `entry`.
template <typename Body>
VramdCode Guarded(const char* entry, VramdError* error, Body body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return Refuse(error, VRAMD_RESOURCE_EXHAUSTED, fmt::format("{}: out of host memory", entry));
  } catch (const std::exception& e) {
    return Refuse(error, VRAMD_INTERNAL, fmt::format("{}: {}", entry, e.what()));
  } catch (...) {
    return Refuse(error, VRAMD_INTERNAL, fmt::format("{}: unknown exception", entry));
  }
}

// ---- infer_async ----

using OnResult = void (*)(void* context, VramdInferResult* result, int32_t final);

// One call's delivery: its callback, and whether the final result went.
struct CallState {
  OnResult on_result = nullptr;
  void* context = nullptr;
  std::atomic<bool> finished{false};

  void Deliver(Result<InferResponse> response, bool final) noexcept {
    if (finished.load(std::memory_order_acquire)) return;  // nothing after the final result
    if (final && finished.exchange(true, std::memory_order_acq_rel)) return;
    VramdInferResult* result = nullptr;
    try {
      result = new VramdInferResult;
      if (response.ok()) {
        result->response = std::move(response).value();
        result->parameters_json = ParametersToJson(result->response.parameters);
      } else {
        result->status = response.status();
        result->parameters_json = "{}";
      }
    } catch (...) {
      // Building the result ran out of memory: the backend still gets an answer, if any can
      // be made; a final result lost would leave it waiting, so say so in the log.
      delete result;
      result = new (std::nothrow) VramdInferResult;
      if (result == nullptr) {
        spdlog::error("infer_async: out of host memory for a result; a response is lost");
        return;
      }
      try {
        result->status = Status::ResourceExhausted("infer_async: out of host memory for a result");
        result->parameters_json = "{}";
      } catch (...) {
      }
    }
    on_result(context, result, final ? 1 : 0);
  }
};

// Where the call's fields appended within version 1 end: a call's struct_size covers them or not.
constexpr size_t kCancelTokenEnd = offsetof(VramdInferCall, cancel_token) + sizeof(void**);
constexpr size_t kInputsKeptEnd = offsetof(VramdInferCall, inputs_outlive_call) + sizeof(int32_t);
constexpr size_t kTraceparentEnd = offsetof(VramdInferCall, traceparent) + sizeof(const char*);

// A copy of `size` bytes at `data` on GPU `device` in vramd's pool of that GPU, charged to
// `owner` (kNoOwner: the calling thread's).
Result<SharedBuffer> CopyToPool(memory::Allocator* allocator, memory::Device device,
                                const void* data, size_t size, memory::OwnerId owner) {
  if (size == 0) return SharedBuffer();
  if (allocator == nullptr) return Status::Unavailable("this server table allocates no memory");
  auto buffer = allocator->Allocate(device, size, /*stream=*/0, owner);
  if (!buffer.ok()) return buffer.status();
  VRAMD_RETURN_IF_ERROR(memory::CopyBytes(device, buffer->data(), device, data, size, nullptr));
  return ShareBuffer(std::move(buffer).value());
}

// Checks the call and makes its request; an error is the call's own (malformed) fault.
Result<std::shared_ptr<InferRequest>> RequestOf(void* server, const VramdInferCall& call) {
  if (call.model == nullptr) return Status::InvalidArgument("infer_async: `model` is NULL");
  if (call.version < 0) {
    return Status::InvalidArgument(
        fmt::format("infer_async: version {} is negative (0: the highest ready)", call.version));
  }
  if (call.input_count > 0 && call.inputs == nullptr) {
    return Status::InvalidArgument("infer_async: `inputs` is NULL with input_count > 0");
  }
  if (call.requested_output_count > 0 && call.requested_outputs == nullptr) {
    return Status::InvalidArgument(
        "infer_async: `requested_outputs` is NULL with requested_output_count > 0");
  }
  const bool kept = call.struct_size >= kInputsKeptEnd && call.inputs_outlive_call != 0;
  auto request = std::make_shared<InferRequest>();
  request->id = call.id != nullptr ? call.id : "";
  request->model_name = call.model;
  request->model_version = call.version;
  request->inputs.reserve(call.input_count);
  for (size_t i = 0; i < call.input_count; ++i) {
    const VramdTensor& in = call.inputs[i];
    if (in.name == nullptr) {
      return Status::InvalidArgument(fmt::format("infer_async: input {} has a NULL name", i));
    }
    if (in.datatype <= VRAMD_TYPE_INVALID || in.datatype > VRAMD_TYPE_BF16) {
      return Status::InvalidArgument(fmt::format("infer_async: input '{}': unknown datatype {}",
                                                 in.name, static_cast<int>(in.datatype)));
    }
    if (in.shape == nullptr && in.rank > 0) {
      return Status::InvalidArgument(
          fmt::format("infer_async: input '{}': `shape` is NULL with rank > 0", in.name));
    }
    if (in.data == nullptr && in.byte_size > 0) {
      return Status::InvalidArgument(
          fmt::format("infer_async: input '{}': `data` is NULL with byte_size > 0", in.name));
    }
    SharedBuffer data;
    int gpu = kOnHost;
    // Read as the integer a library wrote: a value the enum lacks must not be loaded as one.
    int32_t kind = VRAMD_DEVICE_CPU;
    if (call.input_memory != nullptr) std::memcpy(&kind, &call.input_memory[i].kind, sizeof kind);
    if (kind != VRAMD_DEVICE_CPU && kind != VRAMD_DEVICE_CUDA_HOST && kind != VRAMD_DEVICE_GPU) {
      return Status::InvalidArgument(
          fmt::format("infer_async: input '{}': unknown memory kind {}", in.name, kind));
    }
    const auto* bytes = static_cast<const std::byte*>(in.data);
    if (kind == VRAMD_DEVICE_GPU) {
      auto device = ToDevice(VRAMD_DEVICE_GPU, call.input_memory[i].device_id);
      if (!device.ok()) return device.status().WithContext(fmt::format("infer_async: input '{}'", in.name));
      gpu = device->index;
      if (gpu >= memory::CudaDeviceCount()) {
        return Status::Unavailable(fmt::format(
            "infer_async: input '{}' is on cuda:{}, which this server does not see ({} CUDA "
            "devices)", in.name, gpu, memory::CudaDeviceCount()));
      }
      if (kept) {
        // The caller ordered its producer's work before the legacy default stream (ABI:
        // infer_async reads inputs as copy does, ordered on that stream); the called model
        // reads on streams of its own, so the input must be complete first.
        VRAMD_RETURN_IF_ERROR(memory::SynchronizeStream(gpu, nullptr).WithContext(
            fmt::format("infer_async: input '{}'", in.name)));
        data = SharedBuffer::View(nullptr, bytes, in.byte_size);
      } else {
        const memory::OwnerId owner = static_cast<memory::OwnerId>(call.parent_owner);
        auto copied = CopyToPool(static_cast<const ServerApi*>(server)->allocator(), *device,
                                 in.data, in.byte_size, owner);
        if (!copied.ok()) {
          return copied.status().WithContext(fmt::format("infer_async: input '{}'", in.name));
        }
        data = std::move(copied).value();
      }
    } else {
      data = kept ? SharedBuffer::View(nullptr, bytes, in.byte_size)
                  : SharedBuffer::CopyOf(in.data, in.byte_size);
    }
    Tensor tensor{in.name, static_cast<DataType>(static_cast<int>(in.datatype)),
                  Shape(in.shape, in.shape + in.rank), std::move(data)};
    tensor.gpu = gpu;
    request->inputs.push_back(std::move(tensor));
  }
  for (size_t i = 0; i < call.requested_output_count; ++i) {
    if (call.requested_outputs[i] == nullptr) {
      return Status::InvalidArgument(
          fmt::format("infer_async: requested output {} is NULL", i));
    }
    request->outputs.push_back(RequestedOutput{call.requested_outputs[i]});
  }
  if (call.parameters_json != nullptr && call.parameters_json[0] != '\0') {
    VRAMD_ASSIGN_OR_RETURN(request->parameters,
                           ParametersFromJson(call.parameters_json, "infer_async parameters"));
  }
  request->flags = call.flags;
  request->correlation_id = call.correlation_id;
  if (call.correlation_id_string != nullptr) {
    request->correlation_id_string = call.correlation_id_string;
  }
  request->timeout_us = call.timeout_us;
  request->output_gpu = OutputGpuOf(call.preferred_output_memory);
  if (call.struct_size >= kTraceparentEnd && call.traceparent != nullptr) {
    request->trace_parent = call.traceparent;
  }
  return request;
}

VramdCode InferAsync(void* server, const VramdInferCall* call, OnResult on_result, void* context,
                     VramdError* error) {
  if (call != nullptr && call->struct_size >= kCancelTokenEnd && call->cancel_token != nullptr) {
    *call->cancel_token = nullptr;  // until the call is accepted
  }
  return Guarded("infer_async", error, [&]() -> VramdCode {
    ServerServices* services = ServicesOf(server);
    if (services == nullptr) return NoServices(error, "calls into other models (infer_async)");
    // The fields read here end with `decoupled`; parent_owner, after it, is not used yet.
    constexpr size_t kNeeded = offsetof(VramdInferCall, decoupled) + sizeof(int32_t);
    if (call == nullptr || call->struct_size < kNeeded) {
      return Refuse(error, VRAMD_INVALID_ARGUMENT,
                    fmt::format("infer_async: `call` is NULL or its struct_size is under {}",
                                kNeeded));
    }
    if (on_result == nullptr) {
      return Refuse(error, VRAMD_INVALID_ARGUMENT, "infer_async: `on_result` is NULL");
    }
    auto request = RequestOf(server, *call);
    if (!request.ok()) return Relay(error, request.status());
    auto state = std::make_shared<CallState>();
    state->on_result = on_result;
    state->context = context;
    // The token exists before the call may run (its final result may come before infer_async
    // returns), and only once the call is accepted: a refusal above stores NULL.
    if (call->struct_size >= kCancelTokenEnd && call->cancel_token != nullptr) {
      auto flag = std::make_shared<CancelFlag>();
      request.value()->cancel = flag;
      *call->cancel_token = new std::shared_ptr<CancelFlag>(std::move(flag));
    }
    try {
      services->InferAsync(std::move(request).value(), call->decoupled != 0,
                           [state](Result<InferResponse> response, bool final) {
                             state->Deliver(std::move(response), final);
                           });
    } catch (const std::exception& e) {
      // The call was accepted and may be running already: it is answered through on_result
      // (unless its final result went), and infer_async itself succeeds.
      state->Deliver(Status::Internal(fmt::format("infer_async: {}", e.what())), true);
    } catch (...) {
      state->Deliver(Status::Internal("infer_async: unknown exception"), true);
    }
    return VRAMD_OK;
  });
}

VramdCode InferResultError(void* /*server*/, const VramdInferResult* result,
                           const char** message) {
  if (result == nullptr) {
    if (message != nullptr) *message = "infer_result_error: `result` is NULL";
    return VRAMD_INVALID_ARGUMENT;
  }
  if (message != nullptr) *message = result->status.message().c_str();
  return result->status.ok() ? VRAMD_OK : ToVramdCode(result->status.code());
}

size_t InferResultOutputCount(void* /*server*/, const VramdInferResult* result) {
  return result == nullptr ? 0 : result->response.outputs.size();
}

VramdCode InferResultOutput(void* /*server*/, const VramdInferResult* result, size_t index,
                            VramdTensor* tensor, VramdMemory* memory, VramdError* error) {
  if (result == nullptr || tensor == nullptr) {
    return Refuse(error, VRAMD_INVALID_ARGUMENT, "infer_result_output: `result` or `tensor` is NULL");
  }
  const auto& outputs = result->response.outputs;
  if (index >= outputs.size()) {
    return Refuse(error, VRAMD_NOT_FOUND,
                  fmt::format("infer_result_output: index {} is past the result's {} outputs",
                              index, outputs.size()));
  }
  const Tensor& t = outputs[index];
  *tensor = VramdTensor{t.name.c_str(), static_cast<VramdDataType>(static_cast<int>(t.datatype)),
                        t.shape.data(), t.shape.size(), t.data.data(), t.data.size()};
  if (memory != nullptr) *memory = MemoryOf(t);
  return VRAMD_OK;
}

const char* InferResultParameters(void* /*server*/, const VramdInferResult* result) {
  return result == nullptr ? "{}" : result->parameters_json.c_str();
}

void InferResultRelease(void* /*server*/, VramdInferResult* result) { delete result; }

// A cancel token is a heap-held reference to the call's request's CancelFlag: the flag lives
// as long as either the request or the token.
void InferCancel(void* /*server*/, void* token) {
  if (token != nullptr) (*static_cast<std::shared_ptr<CancelFlag>*>(token))->Cancel();
}

void InferCancelRelease(void* /*server*/, void* token) {
  delete static_cast<std::shared_ptr<CancelFlag>*>(token);
}

// ---- model control ----

VramdCode LoadModel(void* server, const char* model, const char* config_json, VramdError* error) {
  return Guarded("load_model", error, [&]() -> VramdCode {
    ServerServices* services = ServicesOf(server);
    if (services == nullptr) return NoServices(error, "model control (load_model)");
    if (model == nullptr) return Refuse(error, VRAMD_INVALID_ARGUMENT, "load_model: `model` is NULL");
    return Relay(error, services->LoadModel(model, config_json != nullptr ? config_json : ""));
  });
}

VramdCode LoadModelFiles(void* server, const char* model, const char* config_json,
                         const VramdModelFile* files, size_t file_count, VramdError* error) {
  return Guarded("load_model_files", error, [&]() -> VramdCode {
    ServerServices* services = ServicesOf(server);
    if (services == nullptr) return NoServices(error, "model control (load_model_files)");
    if (model == nullptr) {
      return Refuse(error, VRAMD_INVALID_ARGUMENT, "load_model_files: `model` is NULL");
    }
    if (files == nullptr && file_count > 0) {
      return Refuse(error, VRAMD_INVALID_ARGUMENT, "load_model_files: `files` is NULL");
    }
    ServerServices::ModelFiles copied;
    for (size_t i = 0; i < file_count; ++i) {
      const VramdModelFile& f = files[i];
      if (f.path == nullptr || (f.data == nullptr && f.size > 0)) {
        return Refuse(error, VRAMD_INVALID_ARGUMENT,
                      fmt::format("load_model_files: file {} has a NULL path or data", i));
      }
      copied.emplace_back(f.path, std::string(static_cast<const char*>(f.data), f.size));
    }
    return Relay(error, services->LoadModel(model, config_json != nullptr ? config_json : "",
                                            copied));
  });
}

VramdCode UnloadModel(void* server, const char* model, int32_t unload_dependents,
                      VramdError* error) {
  return Guarded("unload_model", error, [&]() -> VramdCode {
    ServerServices* services = ServicesOf(server);
    if (services == nullptr) return NoServices(error, "model control (unload_model)");
    if (model == nullptr) {
      return Refuse(error, VRAMD_INVALID_ARGUMENT, "unload_model: `model` is NULL");
    }
    return Relay(error, services->UnloadModel(model, unload_dependents != 0));
  });
}

int32_t IsModelReady(void* server, const char* model, int64_t version) {
  try {
    ServerServices* services = ServicesOf(server);
    if (services == nullptr || model == nullptr) return 0;
    return services->IsModelReady(model, version) ? 1 : 0;
  } catch (...) {
    return 0;  // no way to say more: a model the server cannot answer for is not ready
  }
}

// ---- custom metrics ----

VramdCode MetricFamilyCreate(void* server, const char* name, const char* description,
                             int32_t kind, void** family, VramdError* error) {
  return Guarded("metric_family_create", error, [&]() -> VramdCode {
    if (family != nullptr) *family = nullptr;
    ServerServices* services = ServicesOf(server);
    if (services == nullptr) return NoServices(error, "custom metrics (metric_family_create)");
    if (name == nullptr || family == nullptr) {
      return Refuse(error, VRAMD_INVALID_ARGUMENT,
                    "metric_family_create: `name` or `family` is NULL");
    }
    if (kind < 0 || kind > 2) {
      return Refuse(error, VRAMD_INVALID_ARGUMENT,
                    fmt::format("metric_family_create: unknown kind {} (0 counter, 1 gauge, "
                                "2 histogram)",
                                kind));
    }
    auto made = services->MetricFamily(name, description != nullptr ? description : "",
                                       static_cast<MetricKind>(kind));
    if (!made.ok()) return Relay(error, made.status());
    *family = new FamilyHandle{std::move(made).value()};
    return VRAMD_OK;
  });
}

void MetricFamilyRelease(void* /*server*/, void* family) {
  delete static_cast<FamilyHandle*>(family);
}

// `labels_json`: a JSON object of string values (Triton's labels are string parameters).
Result<std::vector<std::pair<std::string, std::string>>> LabelsOf(const char* labels_json) {
  std::vector<std::pair<std::string, std::string>> labels;
  if (labels_json == nullptr || labels_json[0] == '\0') return labels;
  VRAMD_ASSIGN_OR_RETURN(auto parameters, ParametersFromJson(labels_json, "metric labels"));
  for (auto& p : parameters) {
    auto* text = std::get_if<std::string>(&p.value);
    if (text == nullptr) {
      // Triton's text (core src/metric_family.cc, Metric::Metric).
      return Status::InvalidArgument(fmt::format(
          "Parameter [{}] must have a type of TRITONSERVER_PARAMETER_STRING to be added as a "
          "label.",
          p.name));
    }
    labels.emplace_back(std::move(p.name), std::move(*text));
  }
  return labels;
}

VramdCode MetricCreate(void* /*server*/, void* family, const char* labels_json,
                       const double* buckets, size_t bucket_count, void** metric,
                       VramdError* error) {
  return Guarded("metric_create", error, [&]() -> VramdCode {
    if (metric != nullptr) *metric = nullptr;
    if (family == nullptr || metric == nullptr) {
      return Refuse(error, VRAMD_INVALID_ARGUMENT, "metric_create: `family` or `metric` is NULL");
    }
    if (buckets == nullptr && bucket_count > 0) {
      return Refuse(error, VRAMD_INVALID_ARGUMENT,
                    "metric_create: `buckets` is NULL with bucket_count > 0");
    }
    auto labels = LabelsOf(labels_json);
    if (!labels.ok()) return Relay(error, labels.status());
    auto made = static_cast<FamilyHandle*>(family)->family->Metric(
        std::move(labels).value(),
        std::vector<double>(buckets, buckets + (buckets != nullptr ? bucket_count : 0)));
    if (!made.ok()) return Relay(error, made.status());
    *metric = new MetricHandle{std::move(made).value()};
    return VRAMD_OK;
  });
}

void MetricRelease(void* /*server*/, void* metric) { delete static_cast<MetricHandle*>(metric); }

VramdCode MetricUpdate(void* /*server*/, void* metric, int32_t op, double value,
                       VramdError* error) {
  return Guarded("metric_update", error, [&]() -> VramdCode {
    if (metric == nullptr) return Refuse(error, VRAMD_INVALID_ARGUMENT, "metric_update: `metric` is NULL");
    CustomMetric& m = *static_cast<MetricHandle*>(metric)->metric;
    switch (op) {
      case 0: return Relay(error, m.Increment(value));
      case 1: return Relay(error, m.Set(value));
      case 2: return Relay(error, m.Observe(value));
    }
    return Refuse(error, VRAMD_INVALID_ARGUMENT,
                  fmt::format("metric_update: unknown op {} (0 increment, 1 set, 2 observe)", op));
  });
}

VramdCode MetricValue(void* /*server*/, void* metric, double* value, VramdError* error) {
  return Guarded("metric_value", error, [&]() -> VramdCode {
    if (metric == nullptr || value == nullptr) {
      return Refuse(error, VRAMD_INVALID_ARGUMENT, "metric_value: `metric` or `value` is NULL");
    }
    auto read = static_cast<MetricHandle*>(metric)->metric->Value();
    if (!read.ok()) return Relay(error, read.status());
    *value = *read;
    return VRAMD_OK;
  });
}

}  // namespace

void FillServicesTable(VramdServerApi* table) {
  table->infer_async = &InferAsync;
  table->infer_result_error = &InferResultError;
  table->infer_result_output_count = &InferResultOutputCount;
  table->infer_result_output = &InferResultOutput;
  table->infer_result_parameters = &InferResultParameters;
  table->infer_result_release = &InferResultRelease;
  table->load_model = &LoadModel;
  table->unload_model = &UnloadModel;
  table->is_model_ready = &IsModelReady;
  table->metric_family_create = &MetricFamilyCreate;
  table->metric_family_release = &MetricFamilyRelease;
  table->metric_create = &MetricCreate;
  table->metric_release = &MetricRelease;
  table->metric_update = &MetricUpdate;
  table->metric_value = &MetricValue;
  table->infer_cancel = &InferCancel;
  table->infer_cancel_release = &InferCancelRelease;
  table->load_model_files = &LoadModelFiles;
}

}  // namespace vramd::backends::abi
