// Triton's generate extension (docs/protocol/extension_generate.md in triton-inference-server/
// server): the request and response JSON of POST v2/models/{m}[/versions/{v}]/generate and
// .../generate_stream, and the server-sent event that carries each streamed response.
//
// Request: one JSON object. Each member whose name is one of the model's inputs becomes that
// input; every other member becomes a request parameter, except "parameters", an object whose
// members are mapped the same way (so an input can be given there too). This is Triton's
// mapping (HTTPAPIServer::GenerateRequestClass::ConvertGenerateRequest), with its rules:
//   - an input's value is a scalar or a flat array of scalars, of the input's datatype as the
//     KServe JSON "data" rules say (infer_codec.h), strings for BYTES;
//   - its shape comes from the model's (dims, after a batch dimension of -1 when the model
//     batches): the element count is divided by each fixed dimension from the innermost out,
//     the innermost -1 takes what is left and any other -1 is 1; a count that does not fit is
//     InvalidArgument "the schema can not convert input '<name>' to tensor with proper shape";
//   - a parameter's value is a boolean, a number or a string (null, arrays and objects are
//     InvalidArgument naming it). Unlike the infer endpoint, no key is consumed or reserved
//     here (Triton's generate passes sequence_id, timeout, ... to the model as they are).
//   - "parameters" that is not an object, or a model input named "parameters", is an
//     InvalidArgument.
// Inputs the model needs but the request lacks are the validator's to report, as for infer.
//
// Response: {model_name, model_version (a string), id (when set), one member per response
// parameter, one member per output}, an output written as a JSON scalar when it has exactly
// one element and as a flat array otherwise (Triton strips the array of a 1-element output),
// BYTES elements as strings (UTF-8 only, as infer_codec.h says).
//
// Functions here are pure: no I/O, safe from any thread.
#pragma once

#include <string>
#include <string_view>

#include "config/model_config.pb.h"
#include "core/infer_request.h"
#include "core/status.h"

namespace vramd::http {

// The request `body` makes for a version whose config is `config`. model_name and
// model_version are left for the caller, as ParseInferRequest does.
Result<InferRequest> ParseGenerateRequest(std::string_view body, const config::ModelConfig& config);

// One response as the generate JSON object. `model_name` and `model_version` stand in where
// the response leaves them empty (0). Fails only for a BYTES output that is not valid UTF-8.
Result<std::string> EncodeGenerateResponse(const InferResponse& response,
                                           std::string_view model_name, int64_t model_version);

// `json` as one server-sent event: "data: <json>\n\n". REQUIRES: `json` has no line break
// outside its strings (what vramd writes never has one: JSON escapes them in strings).
std::string SseEvent(std::string_view json);

}  // namespace vramd::http
