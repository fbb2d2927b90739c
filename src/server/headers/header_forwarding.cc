#include "server/headers/header_forwarding.h"

#include <fmt/format.h>
#include <re2/re2.h>

namespace vramd::server {

Result<HeaderForwarding> HeaderForwarding::Compile(std::string_view flag,
                                                   const std::string& pattern) {
  if (pattern.empty()) {
    return Status::InvalidArgument(fmt::format("{}: the pattern is empty", flag));
  }
  re2::RE2::Options options;
  options.set_case_sensitive(false);
  options.set_log_errors(false);
  auto compiled = std::make_shared<const re2::RE2>(pattern, options);
  if (!compiled->ok()) {
    return Status::InvalidArgument(fmt::format("{}='{}' is not a regular expression: {}", flag,
                                               pattern, compiled->error()));
  }
  return HeaderForwarding(std::move(compiled));
}

bool HeaderForwarding::Matches(std::string_view name) const {
  return re2::RE2::PartialMatch(re2::StringPiece(name.data(), name.size()), *pattern_);
}

namespace {

// The length of the well-formed UTF-8 sequence at the start of `s` (RFC 3629: no overlong
// forms, no surrogates, nothing past U+10FFFF), or 0.
size_t Utf8SequenceLength(std::string_view s) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char lead = byte(0);
  if (lead < 0x80) return 1;
  size_t n = 0;
  unsigned char low = 0x80, high = 0xBF;  // the bounds of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    n = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    n = 3;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    n = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return 0;
  }
  if (s.size() < n || byte(1) < low || byte(1) > high) return 0;
  for (size_t i = 2; i < n; ++i) {
    if (byte(i) < 0x80 || byte(i) > 0xBF) return 0;
  }
  return n;
}

}  // namespace

std::string ValidUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    const size_t n = Utf8SequenceLength(text);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER, for one byte that is not UTF-8
      text.remove_prefix(1);
    } else {
      out.append(text.substr(0, n));
      text.remove_prefix(n);
    }
  }
  return out;
}

std::optional<InferParameter> HeaderForwarding::Parameter(std::string_view name,
                                                         std::string_view value) const {
  if (!Matches(name)) return std::nullopt;
  return InferParameter{ValidUtf8(name), ValidUtf8(value)};
}

void HeaderForwarding::Forward(const std::vector<std::pair<std::string, std::string>>& headers,
                               std::vector<InferParameter>* parameters) const {
  for (const auto& [name, value] : headers) {
    if (auto parameter = Parameter(name, value)) parameters->push_back(std::move(*parameter));
  }
}

}  // namespace vramd::server
