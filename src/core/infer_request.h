// InferRequest and InferResponse: what a front end hands the runtime and gets back,
// independent of the protocol (HTTP JSON, binary, gRPC) they came in.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace vramd {

struct RequestedOutput {
  std::string name;
  // Return this output in the binary tensor extension's form rather than as JSON data.
  bool binary = false;
  // Triton's classification extension: the top `classification` classes instead of the tensor
  // (runtime/classification.h); 0: the tensor itself.
  uint32_t classification = 0;
};

// A request or response parameter as KServe's and Triton's protocols carry them (HTTP JSON
// values; gRPC's InferParameter oneof).
struct InferParameter {
  std::string name;
  std::variant<bool, int64_t, uint64_t, double, std::string> value;
};

// The request flags, Triton's TRITONSERVER_RequestFlag values.
inline constexpr uint32_t kRequestFlagSequenceStart = 1;
inline constexpr uint32_t kRequestFlagSequenceEnd = 2;

// Set by a front end when its client gave up on a request (it disconnected or cancelled it),
// read by a backend that can stop early (the python backend's is_cancelled()). Shared between
// the two; setting it changes nothing else: the request is still answered exactly once.
class CancelFlag {
 public:
  void Cancel() { cancelled_.store(true, std::memory_order_relaxed); }
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }

 private:
  std::atomic<bool> cancelled_{false};
};

// InferRequest::output_gpu: outputs may stay on whichever GPU the model leaves them on.
inline constexpr int kAnyGpu = -2;

struct InferResponse;
class RequestTrace;  // core/request_trace.h

// Memory a consumer gave for one output (a client's shared-memory region): `data` has exactly
// the output's size, in host memory or on CUDA device `gpu`.
struct OutputBuffer {
  SharedBuffer data;
  int gpu = kOnHost;
};
// InferRequest::output_buffer: the memory for output `name` of `byte_size` bytes, or nothing.
using OutputBufferSource =
    std::function<std::optional<OutputBuffer>(std::string_view name, size_t byte_size)>;

// Where a decoupled model's responses go as it sends them (runtime/request_responder.h): each
// response or error response, in order; the request's InferCallback still runs once, after the
// last (its final flag).
using ResponseStream = std::function<void(Result<InferResponse>)>;

struct InferRequest {
  std::string id;  // echoed in the response; may be empty
  std::string model_name;
  // 0 means "whichever version the model's policy serves", as an empty version in the URL.
  int64_t model_version = 0;
  std::vector<Tensor> inputs;
  // Empty means every output of the model, each returned as `binary_data_output` says.
  std::vector<RequestedOutput> outputs;
  bool binary_data_output = false;
  // The request's own queue timeout in microseconds (KServe request parameter "timeout");
  // 0: none. Honoured only where the model's queue policy allows overriding
  // (runtime/request_queue.h).
  uint64_t timeout_us = 0;
  // The client's request parameters, less those vramd consumes itself (binary_data_output,
  // timeout, sequence_id, sequence_start, sequence_end, priority), in the order sent.
  std::vector<InferParameter> parameters;
  uint32_t flags = 0;  // kRequestFlag*
  // The sequence (correlation) id: an integer, or a string when correlation_id_string is set.
  uint64_t correlation_id = 0;
  std::string correlation_id_string;
  // Set by a front end that can take several responses (generate_stream, gRPC streams, a BLS
  // call with decoupled=True); null: the request takes one response, and a decoupled model's
  // first response is its answer (a second one fails the request).
  ResponseStream stream;
  // Null when the front end cannot tell that its client left.
  std::shared_ptr<CancelFlag> cancel;
  // Where the consumer takes outputs: kOnHost (every front end), a CUDA ordinal, or kAnyGpu
  // (whichever GPU the model leaves them on). Only a BLS call sets a GPU; the runtime moves a
  // GPU output to host for a consumer that takes host memory (runtime/tensor_memory.h).
  int output_gpu = kOnHost;
  // Set by a front end whose client placed outputs in its own memory (shared memory): a backend
  // that can writes such an output there directly, and the front end then copies nothing (a
  // joined batch's outputs are made as usual). Null: none.
  OutputBufferSource output_buffer;
  // Set by a front end that samples this request for tracing (core/request_trace.h); null
  // otherwise. Shared by the copies the runtime makes of the request.
  std::shared_ptr<RequestTrace> trace;
  // A call from a model (BLS, an ensemble's step) made on behalf of a traced request: the W3C
  // traceparent of that request's trace (RequestTrace::Traceparent), under which the runtime
  // traces this call as a child (ServerServices::InferAsync). Empty: not traced.
  std::string trace_parent;

  const Tensor* FindInput(std::string_view name) const {
    for (const auto& t : inputs)
      if (t.name == name) return &t;
    return nullptr;
  }
};

struct InferResponse {
  std::string id;
  std::string model_name;
  int64_t model_version = 0;
  std::vector<Tensor> outputs;
  std::vector<InferParameter> parameters;  // a backend's response parameters
};

// `parameters` as a JSON object text ("{}" when empty); a later duplicate name wins.
std::string ParametersToJson(const std::vector<InferParameter>& parameters);
// The inverse: a JSON object whose values are bool, integer, double or string. InvalidArgument
// naming `what` and the member for anything else (a nested object or array, null).
Result<std::vector<InferParameter>> ParametersFromJson(std::string_view json,
                                                       std::string_view what);

}  // namespace vramd
