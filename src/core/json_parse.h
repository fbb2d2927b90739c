// ParseJson: how vramd parses a JSON document it did not write (request bodies, config
// overrides, file headers, answers read by vramctl).
//
// rapidjson's default parser recurses once per nesting level, so about 100k `[` in a request
// overflow the stack; and code that walks a document afterwards (CheckJsonObject, protobuf's
// JSON reader, a deep copy) recurses the same way. So ParseJson parses iteratively (no
// recursion however deep the text) and refuses a document nesting deeper than
// JsonLimits::max_depth before it is built, which bounds every later walk; and it refuses text
// longer than JsonLimits::max_bytes before parsing it. (The inference request parser has its
// own streaming path: server/http/infer_request_parser.cc.)
//
// Thread safety: a free function.
#pragma once

#include <rapidjson/document.h>

#include <cstddef>
#include <string_view>

#include "core/status.h"

namespace vramd {

struct JsonLimits {
  // Arrays and objects may nest this deep; the top-level value is level 1. A model config
  // nests about 6 levels, a repository request 2: 64 leaves room without letting the
  // nesting itself become the cost.
  size_t max_depth = 64;
  // Longest text parsed; a model config or a repository request is a few KiB.
  size_t max_bytes = size_t{16} << 20;
  // Refuse invalid UTF-8 in strings (rapidjson's kParseValidateEncodingFlag).
  bool validate_utf8 = false;
};

// The document `text` holds. InvalidArgument when it is not valid JSON, nests deeper than
// limits.max_depth or is longer than limits.max_bytes; each message starts with `what` (e.g.
// "model config JSON"), names the limit and, where it applies, the byte offset, e.g.
//   "<what> is not valid JSON at offset 13: Missing a comma or '}' after an object member."
//   "<what> nests deeper than 64 levels (at offset 64)"
//   "<what> has 17825792 bytes, over the limit of 16777216 bytes"
// Strings are copied into the document, which does not refer to `text` afterwards.
Result<rapidjson::Document> ParseJson(std::string_view text, std::string_view what,
                                      const JsonLimits& limits = {});

}  // namespace vramd
