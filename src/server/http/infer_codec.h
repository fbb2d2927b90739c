// The KServe v2 inference body in both directions, with Triton's binary tensor data extension.
//
// Request: a JSON object {id?, parameters?, inputs: [{name, shape, datatype, parameters?,
// data?}], outputs?: [{name, parameters?}]}, optionally followed by raw tensor bytes when the
// HTTP header Inference-Header-Content-Length gives the JSON's length. An input with parameter
// binary_data_size takes that many bytes from the binary part, in the order inputs appear.
// Response: JSON, with the outputs the request asked for in binary form appended after it.
//
// JSON data, both directions:
//   - "data" is an array, flat or nested to any shape (at most 64 levels); it is flattened in
//     row-major order and must hold exactly as many elements as the shape.
//   - BOOL: true/false. Integer types: JSON integers in the type's range (1.0 and 1e2 are not
//     integers). FP16/BF16/FP32/FP64: any JSON number, rounded to nearest even (FP16/BF16
//     straight from the parsed double). A finite number that overflows the type (1e39 for
//     FP32, 65520 for FP16) is an error rather than infinity; underflow to 0 is accepted.
//   - BYTES: JSON strings, stored serialized (core/tensor.h). Input strings are not checked
//     for UTF-8.
//   - Infinity and NaN: JSON has no spelling for them. Input cannot express them (null and
//     "NaN" are rejected; send binary data). Output writes them as null, so the body stays
//     valid JSON; ask for binary output to get them exactly.
//   - Floats are written in the shortest form that reads back to the same value of the
//     tensor's type (FP32 as a float, so 0.1f is "0.1"; FP16/BF16 via float), with ".0"
//     added to integral values ("2.0"); integers in full.
//   - BYTES output elements are sent exactly or not at all. One that is valid UTF-8 (RFC
//     3629) is written as itself, with '"', '\\' and control characters (NUL included) as
//     JSON escapes, so a reader gets back exactly those bytes. One that is not (arbitrary
//     binary, a truncated sequence, an overlong form, an encoded surrogate) has no exact
//     spelling in a JSON string, whose content is Unicode text: the response is then a 400
//     naming the output, the element and the first bad byte, and telling the client to ask
//     for that output as binary data, which carries any bytes. Triton writes such bytes raw
//     into the string (rapidjson without encoding validation), which makes the whole body
//     invalid UTF-8, so conforming readers (Python's json, tritonclient's HTTP client) fail on
//     all of it; escaping each bad byte (as \u00XX, U+FFFD or a lone surrogate) would keep
//     the document valid but hand the client different bytes, or bytes some readers refuse,
//     without a word. Triton refuses the types it cannot write as JSON (FP16, BF16) the same
//     way: INVALID_ARG, "Please use the binary data format for output".
//   - Other output strings (names, id, error messages) are text for people: they are escaped
//     the same way, except that each byte that is not part of a valid UTF-8 sequence becomes
//     \u00XX, so the body is valid JSON whatever the bytes (a reader sees U+00XX there).
//
// Functions here are pure: no I/O, safe from any thread.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/infer_request.h"
#include "core/status.h"
#include "server/shared_memory/shared_memory_regions.h"

namespace vramd::http {

// Parses an infer request body. `json_length` is Inference-Header-Content-Length when the
// header was sent (REQUIRES: it is not 0; a raw binary body is ParseRawBinaryRequest's; a 0
// is answered with InvalidArgument). Binary tensor data is not copied: input buffers are
// views into `body`, which they keep alive.
// Every malformed body is an InvalidArgument whose message names the field or tensor at fault:
// invalid JSON, missing or mistyped fields, unknown datatype, data that does not fit the shape
// or type (naming the element index), binary sizes that do not add up to the body (giving
// both numbers), a binary_data_size that does not match shape and datatype, malformed BYTES
// binary data, duplicate input or output names. A tensor with shared-memory parameters
// (shared_memory_region, shared_memory_byte_size, optionally shared_memory_offset: Triton's
// system shared memory extension) is in a region of `shm->regions`: an input is read there in
// place (its range and size checked as binary data is); an output's placement is appended to
// `shm->outputs` (its region and range checked now) for the encoder to write it there. With
// `shm` (or its regions) null such parameters are Unsupported. An output's "classification" parameter (Triton's
// classification extension) must be a positive integer; the runtime applies it
// (runtime/classification.h).
// Request-level parameters, as Triton's HTTP front end reads them: binary_data_output (bool);
// timeout (microseconds, a non-negative integer, into InferRequest::timeout_us); priority (a
// non-negative integer, checked and dropped: one priority level); sequence_id (a non-negative
// integer into correlation_id, or a string into correlation_id_string); sequence_start and
// sequence_end (bool, into flags). A key starting with "triton_" is refused (Triton reserves
// them). Every other key goes into InferRequest::parameters in the order sent, duplicates
// kept: a boolean, a string, an integer (int64, or uint64 above INT64_MAX) or another number
// (double); null, an array or an object is an InvalidArgument naming the key.
// Each RequestedOutput.binary is its parameter binary_data if given, else binary_data_output.
// model_name and model_version of the result are left for the caller (they come from the URL).
struct SharedMemoryContext {
  const shared_memory::SharedMemoryRegions* regions = nullptr;
  std::vector<shared_memory::TensorPlacement>* outputs = nullptr;  // filled by the parse
};
Result<InferRequest> ParseInferRequest(std::shared_ptr<const std::string> body,
                                       std::optional<size_t> json_length,
                                       const SharedMemoryContext* shm = nullptr);

struct EncodedBody {
  std::string body;
  // Set when binary output data follows the JSON: the value for Inference-Header-Content-Length.
  std::optional<size_t> json_length;
};

// Encodes a response: {model_name, model_version (as a string), id (if the response, or else
// the request, has one), parameters (the response's, when it has any; a later duplicate name
// wins), outputs: [{name, datatype, shape, data | parameters.binary_data_size}]},
// outputs in the response's order. An output goes in binary form if the request listed it
// with parameter binary_data true, or did not list it and set binary_data_output; binary
// outputs' bytes follow the JSON in output order, and json_length is set whenever there is at
// least one. Every data type has a JSON form (see the top of this file), BYTES only for UTF-8.
// The body is allocated once, at an upper bound of its size, and written in one pass.
// Fails only with the InvalidArgument above, for a BYTES output to be written as JSON that is
// not valid UTF-8.
// REQUIRES: each output's data fits its shape and datatype (the runtime checks backend
// outputs). If not, the JSON data stops at the end of the buffer (a malformed BYTES output is
// written as []), so the body is still valid JSON.
// Outputs with a placement in `placed` are written into `regions` and listed with their
// shared_memory_* parameters (the byte size written) and no data.
Result<EncodedBody> EncodeInferResponse(const InferResponse& response,
                                        const InferRequest& request,
                                        const std::vector<shared_memory::TensorPlacement>* placed = nullptr,
                                        const shared_memory::SharedMemoryRegions* regions = nullptr);

// {"error": "<message>"}, escaped as above.
std::string EncodeError(std::string_view message);

}  // namespace vramd::http
