// Low-level JSON text writing: string literals that are valid JSON whatever the bytes, and
// numbers. The rules are in infer_codec.h ("JSON data, both directions"). Internal to
// server/http; the number writers are inline because they run once per tensor element.
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace vramd::http::internal {

// Appends `bytes` as a JSON string literal, quotes included: valid UTF-8 passes through,
// '"', '\\' and control characters use JSON escapes, and each byte that is not part of a
// valid UTF-8 sequence (RFC 3629) becomes \u00XX. For text meant for people (names, ids,
// error messages), where a valid document matters more than exact bytes.
void AppendJsonString(std::string* out, std::string_view bytes);

// AppendJsonString for data that must arrive exactly: appends the literal and returns nullopt
// when `bytes` are valid UTF-8; otherwise returns the offset of the first byte that is not
// part of a valid sequence, and what was appended is unspecified (the caller discards it).
std::optional<size_t> AppendExactJsonString(std::string* out, std::string_view bytes);

// Appends `value` in decimal.
template <typename Int>
inline void AppendInteger(std::string* out, Int value) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof(buf), value);
  out->append(buf, r.ptr);
}

// Shortest round-trip text for `value` in its own type; null for inf and NaN; ".0" added to
// integral values so readers see a float.
template <typename Float>
inline void AppendFloating(std::string* out, Float value) {
  if (!std::isfinite(value)) {
    out->append("null");
    return;
  }
  char buf[40];
  const auto r = std::to_chars(buf, buf + sizeof(buf), value);
  out->append(buf, r.ptr);
  if (std::none_of(buf, r.ptr, [](char c) { return c == '.' || c == 'e'; })) out->append(".0");
}

}  // namespace vramd::http::internal
