// HTTP content codings of request and response bodies (internal to server/http): Triton's
// clients compress a request with `Content-Encoding: gzip` or `deflate` and ask for a
// compressed answer with `Accept-Encoding`.
//
// Limits: a compressed body expands by up to about 1000x, so decoding stops as soon as the
// output passes the caller's limit (the server's body limit, applied to the decoded size) and
// never holds more than that.
//
// `deflate` is the zlib format (RFC 1950), as HTTP defines it and Triton's clients send it;
// a raw deflate stream (RFC 1951), which some clients send under that name, is accepted too.
//
// Thread safety: free functions without shared state.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace vramd::http {

enum class ContentCoding { kIdentity, kGzip, kDeflate };

// "identity", "gzip" or "deflate".
std::string_view CodingName(ContentCoding coding);

// The coding a Content-Encoding header names: "identity" (or empty), "gzip" (or "x-gzip"),
// "deflate", in any case, spaces around. Unsupported naming the value for any other, and
// for a list of codings (a body coded twice).
Result<ContentCoding> ParseContentEncoding(std::string_view header);

// The coding to answer with for an Accept-Encoding header: of gzip and deflate, the one the
// client weighs highest (q=0 excludes; "*" stands for any not named; gzip on a tie); identity
// when neither is acceptable or the header is absent (empty).
ContentCoding ChooseResponseCoding(std::string_view accept_encoding);

// Decodes `body`. InvalidArgument naming the coding and zlib's reason for data that is not
// well-formed (truncated, a bad checksum, bytes after the end); ResourceExhausted when the
// decoded bytes would pass `max_bytes`.
Result<std::string> DecodeBody(ContentCoding coding, std::string_view body, size_t max_bytes);

// Encodes `body` (zlib's default level); nullopt if zlib fails (the caller answers
// uncoded). Identity returns it unchanged.
std::optional<std::string> EncodeBody(ContentCoding coding, std::string_view body);

}  // namespace vramd::http
