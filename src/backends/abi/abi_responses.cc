#include "backends/abi/abi_responses.h"

#include <fmt/format.h>

#include <atomic>
#include <cstring>
#include <exception>
#include <new>
#include <utility>

#include "backends/abi/abi_bridge.h"
#include "core/data_type.h"
#include "memory/cuda_devices.h"

// The opaque handles of include/vramd/backend.h, defined at global scope where the C
// declarations put them.
struct VramdResponder {
  explicit VramdResponder(const vramd::backends::ListedRequest& listed)
      : responder(listed.responder),
        open_owner(listed.open_owner),
        owner_context(listed.owner_context) {}
  std::shared_ptr<vramd::backends::Responder> responder;
  // The request's ledger owner (ListedRequest::OpenOwner), for outputs in GPU memory.
  vramd::memory::OwnerId (*open_owner)(void* context);
  void* owner_context;
  std::atomic<int> references{2};     // the execute_requests call's and the backend's
  std::atomic<bool> finished{false};  // its final flag was taken (by respond or a failed call)

  void Unref() {
    if (references.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::unique_ptr<VramdResponder> last(this);  // made by NewResponder's unique_ptr
    }
  }
};

struct VramdResponse {
  VramdResponder* responder;  // valid until respond: the backend holds it until then
  std::vector<vramd::Tensor> outputs;
  std::vector<vramd::InferParameter> parameters;
};

namespace vramd::backends::abi {
namespace {

// An entry point's body, with every exception turned into a code and message (none may unwind
// into the backend's C frames).
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

VramdCode Fail(VramdError* error, const Status& status) {
  SetError(error, status.message());
  return ToVramdCode(status.code());
}

VramdCode ResponseCreate(void*, VramdResponder* responder, VramdResponse** response,
                         VramdError* error) {
  return Guarded("response_create", error, [&] {
    if (responder == nullptr || response == nullptr) {
      return Fail(error, Status::InvalidArgument("response_create: `responder` or `response` is NULL"));
    }
    *response = std::make_unique<VramdResponse>(VramdResponse{responder, {}, {}})
                    .release();  // the backend's until respond
    return VRAMD_OK;
  });
}

// GPU memory for an output is charged to the request it answers; freed when the tensor's last
// reference goes (a BLS caller may keep it: model_services.h holds the request's owner open
// until then).
memory::OwnerId ResponseOwner(VramdResponse* response) {
  VramdResponder* responder = response->responder;
  return responder->open_owner != nullptr ? responder->open_owner(responder->owner_context)
                                          : memory::kNoOwner;
}

VramdCode ResponseAddOutput(void* server, VramdResponse* response, const char* name,
                            VramdDataType datatype, const int64_t* shape, size_t rank,
                            size_t byte_size, VramdDeviceKind kind, int32_t device_id,
                            void** data, VramdError* error) {
  return Guarded("response_add_output", error, [&] {
    if (data == nullptr || response == nullptr) {
      return Fail(error, Status::InvalidArgument("response_add_output: `response` or `data` is NULL"));
    }
    *data = nullptr;
    // Read as the integer a library wrote: a value the enum lacks must not be loaded as one.
    int32_t memory_kind = VRAMD_DEVICE_CPU;
    std::memcpy(&memory_kind, &kind, sizeof memory_kind);
    if (memory_kind == VRAMD_DEVICE_GPU) {
      memory::Allocator* allocator =
          server == nullptr ? nullptr : static_cast<const ServerApi*>(server)->allocator();
      if (allocator == nullptr) {
        return Fail(error, Status::Unavailable("this server table allocates no memory"));
      }
      auto device = ToDevice(VRAMD_DEVICE_GPU, device_id);
      if (!device.ok()) return Fail(error, device.status());
      auto tensor = NewPooledOutput(*allocator, *device, ResponseOwner(response),
                                    response->outputs, 0, "response_add_output", name, datatype,
                                    shape, rank, byte_size);
      if (!tensor.ok()) return Fail(error, tensor.status());
      *data = const_cast<std::byte*>(tensor->data.data());
      response->outputs.push_back(std::move(tensor).value());
      return VRAMD_OK;
    }
    if (memory_kind != VRAMD_DEVICE_CPU && memory_kind != VRAMD_DEVICE_CUDA_HOST) {
      return Fail(error, Status::InvalidArgument(
                             fmt::format("response_add_output '{}': unknown memory kind {}",
                                         name != nullptr ? name : "(NULL)", memory_kind)));
    }
    auto added = AppendHostOutput(&response->outputs, 0, "response_add_output", name, datatype,
                                  shape, rank, byte_size);
    if (!added.ok()) return Fail(error, added.status());
    *data = *added;
    return VRAMD_OK;
  });
}

VramdCode ResponseSetParameters(void*, VramdResponse* response, const char* json,
                                size_t json_size, VramdError* error) {
  return Guarded("response_set_parameters", error, [&] {
    if (response == nullptr || (json == nullptr && json_size > 0)) {
      return Fail(error, Status::InvalidArgument("response_set_parameters: `response` or `json` is NULL"));
    }
    auto parameters = ParametersFromJson(std::string_view(json != nullptr ? json : "{}",
                                                          json != nullptr ? json_size : 2),
                                         "response parameters");
    if (!parameters.ok()) return Fail(error, parameters.status());
    response->parameters = std::move(parameters).value();
    return VRAMD_OK;
  });
}

void ResponseDelete(void*, VramdResponse* response) {
  std::unique_ptr<VramdResponse> dropped(response);
}

VramdCode Respond(void*, VramdResponder* responder, VramdResponse* response, VramdCode code,
                  const char* message, uint32_t flags, VramdError* error) {
  std::unique_ptr<VramdResponse> owned(response);  // taken in every case
  return Guarded("respond", error, [&] {
    if (responder == nullptr) {
      return Fail(error, Status::InvalidArgument("respond: `responder` is NULL"));
    }
    const bool final = (flags & VRAMD_RESPONSE_FLAG_FINAL) != 0;
    std::optional<Result<BackendResponse>> payload;
    if (code != VRAMD_OK) {
      VramdError text{};
      SetError(&text, message != nullptr ? message : "");
      payload = FromVramd(code, text, "");
    } else if (owned != nullptr) {
      payload = BackendResponse{std::move(owned->outputs), std::move(owned->parameters)};
    }
    if (final && responder->finished.exchange(true)) {
      return Fail(error, Status::InvalidArgument(
                             "respond: the request was already completed (its final response "
                             "was sent)"));
    }
    Status sent = responder->responder->Respond(std::move(payload), final);
    if (!sent.ok()) {
      if (final) responder->finished.store(false);  // refused: the request is still open
      return Fail(error, sent);
    }
    if (final) responder->Unref();  // the backend's reference: the responder is gone to it
    return VRAMD_OK;
  });
}

int32_t IsCancelled(void*, VramdResponder* responder) {
  try {
    return responder != nullptr && responder->responder->IsCancelled() ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

VramdCode Copy(void*, VramdDeviceKind dst_kind, int32_t dst_device, void* dst,
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

}  // namespace

void FillResponseTable(VramdServerApi* table) {
  table->response_create = &ResponseCreate;
  table->response_add_output = &ResponseAddOutput;
  table->response_set_parameters = &ResponseSetParameters;
  table->response_delete = &ResponseDelete;
  table->respond = &Respond;
  table->is_cancelled = &IsCancelled;
  table->copy = &Copy;
}

VramdResponder* NewResponder(const ListedRequest& listed) {
  return std::make_unique<VramdResponder>(listed).release();  // see Unref
}

void ReleaseAfterExecute(VramdResponder* responder, const Status* failed) {
  if (failed != nullptr && !responder->finished.exchange(true)) {
    // Handed back: the backend must not use it again, so its reference goes too.
    // Cannot be refused: the final flag was not taken, and an error is always a response.
    static_cast<void>(
        responder->responder->Respond(std::optional<Result<BackendResponse>>(*failed), true));
    responder->Unref();
  }
  responder->Unref();
}

Result<Tensor> NewOutput(const std::vector<Tensor>& outputs, size_t first, const char* entry,
                         const char* name, VramdDataType datatype, const int64_t* shape,
                         size_t rank, size_t byte_size) {
  if (name == nullptr || (shape == nullptr && rank > 0)) {
    return Status::InvalidArgument(
        fmt::format("{}: `name` is NULL, or `shape` is NULL with rank > 0", entry));
  }
  if (datatype <= VRAMD_TYPE_INVALID || datatype > VRAMD_TYPE_BF16) {
    return Status::InvalidArgument(
        fmt::format("{} '{}': unknown datatype {}", entry, name, static_cast<int>(datatype)));
  }
  const auto type = static_cast<DataType>(static_cast<int>(datatype));
  Shape dims(shape, shape + rank);
  const int64_t elements = ElementCount(dims);
  if (elements < 0) {
    return Status::InvalidArgument(fmt::format("{} '{}': shape {} has a negative dimension",
                                               entry, name, ShapeToString(dims)));
  }
  // A fixed-size type's byte size follows from its shape; a mismatch would send the client a
  // tensor whose data and shape disagree.
  const size_t element_size = DataTypeByteSize(type);
  if (element_size > 0 && static_cast<size_t>(elements) * element_size != byte_size) {
    return Status::InvalidArgument(fmt::format(
        "{} '{}': {} {} needs {} bytes, not {}", entry, name, DataTypeWireName(type),
        ShapeToString(dims), static_cast<size_t>(elements) * element_size, byte_size));
  }
  for (size_t i = first; i < outputs.size(); ++i) {
    if (outputs[i].name == name) {
      return Status::InvalidArgument(fmt::format("{} '{}': added twice", entry, name));
    }
  }
  return Tensor{name, type, std::move(dims), SharedBuffer()};
}

Result<Tensor> NewPooledOutput(memory::Allocator& allocator, memory::Device device,
                               memory::OwnerId owner, const std::vector<Tensor>& outputs,
                               size_t first, const char* entry, const char* name,
                               VramdDataType datatype, const int64_t* shape, size_t rank,
                               size_t byte_size) {
  VRAMD_ASSIGN_OR_RETURN(Tensor tensor,
                         NewOutput(outputs, first, entry, name, datatype, shape, rank, byte_size));
  if (byte_size > 0) {
    auto buffer = allocator.Allocate(device, byte_size, /*stream=*/0, owner);
    if (!buffer.ok()) {
      return buffer.status().WithContext(fmt::format(
          "{} '{}' on {}", entry, tensor.name,
          device.is_cuda() ? fmt::format("GPU {}", device.index) : device.ToString()));
    }
    tensor.data = ShareBuffer(std::move(buffer).value());
  }
  if (device.is_cuda()) tensor.gpu = device.index;
  return tensor;
}

Result<void*> AppendHostOutput(std::vector<Tensor>* outputs, size_t first, const char* entry,
                               const char* name, VramdDataType datatype, const int64_t* shape,
                               size_t rank, size_t byte_size) {
  VRAMD_ASSIGN_OR_RETURN(Tensor tensor,
                         NewOutput(*outputs, first, entry, name, datatype, shape, rank, byte_size));
  tensor.data = SharedBuffer::Allocate(byte_size);
  void* data = tensor.data.mutable_data();  // owned by the buffer, not the vector slot
  outputs->push_back(std::move(tensor));
  return data;
}

}  // namespace vramd::backends::abi
