// An input's JSON "data" array turned into tensor bytes: the rules are in infer_codec.h
// ("JSON data, both directions"). Internal to server/http.
#pragma once

#include "core/status.h"
#include "core/tensor.h"
#include "server/http/request_json.h"

namespace vramd::http::internal {

// Converts `data` (flat or nested) into tensor->data per tensor->datatype and shape, which
// must already be set. Errors are InvalidArgument naming the input and, where one is at
// fault, the element index.
Status ParseJsonData(const JsonValue& data, Tensor* tensor);

}  // namespace vramd::http::internal
