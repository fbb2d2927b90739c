// InferRequest and InferResponse: what a front end hands the runtime and gets back,
// independent of the protocol (HTTP JSON, binary, gRPC) they came in.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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
};

}  // namespace vramd
