// The KServe v2 inference body in both directions, with Triton's binary tensor data extension.
//
// Request: a JSON object {id?, parameters?, inputs: [{name, shape, datatype, parameters?,
// data?}], outputs?: [{name, parameters?}]}, optionally followed by raw tensor bytes when the
// HTTP header Inference-Header-Content-Length gives the JSON's length. An input with parameter
// binary_data_size takes that many bytes from the binary part, in the order inputs appear.
// Response: JSON, with the outputs the request asked for in binary form appended after it.
//
// Functions here are pure: no I/O, safe from any thread.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "core/infer_request.h"
#include "core/status.h"

namespace vramd::http {

// Parses an infer request body. `json_length` is Inference-Header-Content-Length when the
// header was sent (REQUIRES: it is not 0; a raw binary body is ParseRawBinaryRequest's).
// Binary tensor data is not copied: input buffers are views into `body`.
// Every malformed body is an InvalidArgument whose message names the field or tensor at fault:
// invalid JSON, missing or mistyped fields, unknown datatype, data that does not fit the shape
// or type, binary sizes that do not add up to the body, duplicate names.
// model_name and model_version of the result are left for the caller (they come from the URL).
Result<InferRequest> ParseInferRequest(std::shared_ptr<const std::string> body,
                                       std::optional<size_t> json_length);

struct EncodedBody {
  std::string body;
  // Set when binary output data follows the JSON: the value for Inference-Header-Content-Length.
  std::optional<size_t> json_length;
};

// Encodes a response: {model_name, model_version (as a string), id (if the request had one),
// outputs: [{name, datatype, shape, data | parameters.binary_data_size}]}. An output goes in
// binary form if the request listed it with parameter binary_data true, or did not list it and
// set binary_data_output. Every data type has a JSON form: numbers, true/false for BOOL,
// strings for BYTES (non-UTF-8 bytes escaped as \u00XX per byte), FP16/BF16 converted to
// numbers.
EncodedBody EncodeInferResponse(const InferResponse& response, const InferRequest& request);

// {"error": "<message>"}
std::string EncodeError(std::string_view message);

}  // namespace vramd::http
