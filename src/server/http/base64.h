// Base64 (RFC 4648, the standard alphabet, '=' padding), as Triton's HTTP protocol carries
// binary values in JSON: the CUDA shared memory extension's raw_handle {"b64": "..."}.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace vramd::http {

// The bytes `text` encodes. InvalidArgument naming the first character that is not base64, or
// a length that is not a multiple of 4. Whitespace is not accepted.
Result<std::string> DecodeBase64(std::string_view text);

}  // namespace vramd::http
