// Output tensors and response parameters as JSON text: what the infer and the generate
// response writers share (infer_response_writer.cc defines them). The rules are in
// infer_codec.h ("JSON data, both directions"). Internal to server/http; pure functions.
#pragma once

#include <string>
#include <vector>

#include "core/infer_request.h"
#include "core/status.h"
#include "core/tensor.h"

namespace vramd::http::internal {

// Appends tensor's data as a flat JSON array. A BYTES element that is not valid UTF-8 cannot
// be carried exactly by a JSON string: InvalidArgument naming it.
Status AppendJsonData(std::string* out, const Tensor& tensor);

// Appends one parameter value: true/false, an integer, a double (null for inf and NaN) or a
// string (escaped as AppendJsonString does).
void AppendParameterValue(std::string* out, const decltype(InferParameter::value)& value);

// Appends `"name":value` for each parameter, comma-separated, each name once at its last
// occurrence's value (a later duplicate wins, as ParametersToJson); appends nothing when
// `parameters` is empty. The caller writes the braces or the comma before.
// Returns how many members were appended.
size_t AppendParameterMembers(std::string* out, const std::vector<InferParameter>& parameters);

// The most text AppendParameterMembers can append for `parameters`, separators included.
size_t ParameterMembersBound(const std::vector<InferParameter>& parameters);

}  // namespace vramd::http::internal
