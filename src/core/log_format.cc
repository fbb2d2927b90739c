#include "core/log_format.h"

#include <fmt/format.h>
#include <spdlog/details/log_msg.h>
#include <spdlog/pattern_formatter.h>

#include <utility>

namespace vramd {
namespace {

// How many bytes at text[i] form a character LogEscaped rewrites (0: none), and, through
// `code`, the character: a byte for C0/DEL, a code point for the UTF-8 ones.
size_t EscapedAt(std::string_view text, size_t i, unsigned* code) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned c = byte(i);
  if (c < 0x20 || c == 0x7f) {
    *code = c;
    return 1;
  }
  if (c == 0xc2 && i + 1 < text.size() && byte(i + 1) >= 0x80 && byte(i + 1) <= 0x9f) {
    *code = byte(i + 1);  // U+0080..U+009F
    return 2;
  }
  if (c == 0xe2 && i + 2 < text.size() && byte(i + 1) == 0x80 &&
      (byte(i + 2) == 0xa8 || byte(i + 2) == 0xa9)) {
    *code = 0x2000 | (byte(i + 2) - 0x80);  // U+2028, U+2029
    return 3;
  }
  return 0;
}

}  // namespace

bool NeedsLogEscaping(std::string_view text) {
  unsigned code = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (EscapedAt(text, i, &code) > 0) return true;
  }
  return false;
}

std::string LogEscaped(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    unsigned code = 0;
    const size_t n = EscapedAt(text, i, &code);
    if (n == 0) {
      out.push_back(text[i++]);
      continue;
    }
    i += n;
    if (n > 1) {
      out += fmt::format("\\u{:04x}", code);
    } else if (code == '\n') {
      out += "\\n";
    } else if (code == '\r') {
      out += "\\r";
    } else if (code == '\t') {
      out += "\\t";
    } else {
      out += fmt::format("\\x{:02x}", code);
    }
  }
  return out;
}

EscapingFormatter::EscapingFormatter(std::unique_ptr<spdlog::formatter> inner)
    : inner_(std::move(inner)) {}

void EscapingFormatter::format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) {
  const std::string_view payload(msg.payload.data(), msg.payload.size());
  if (!NeedsLogEscaping(payload)) return inner_->format(msg, dest);  // the usual case: no copy
  const std::string escaped = LogEscaped(payload);
  spdlog::details::log_msg copy = msg;
  copy.payload = spdlog::string_view_t(escaped.data(), escaped.size());
  inner_->format(copy, dest);
  // The colour sink reads the range the pattern's %^ %$ marked, from the message it passed.
  msg.color_range_start = copy.color_range_start;
  msg.color_range_end = copy.color_range_end;
}

std::unique_ptr<spdlog::formatter> EscapingFormatter::clone() const {
  return std::make_unique<EscapingFormatter>(inner_->clone());
}

spdlog::level::level_enum LogLevelFor(bool verbose, bool info, bool warning, bool error) {
  if (!error) return spdlog::level::off;
  if (!warning) return spdlog::level::err;
  if (!info) return spdlog::level::warn;
  return verbose ? spdlog::level::debug : spdlog::level::info;
}

std::unique_ptr<spdlog::formatter> MakeEscapingFormatter(const std::string& pattern, bool utc) {
  return std::make_unique<EscapingFormatter>(std::make_unique<spdlog::pattern_formatter>(
      pattern, utc ? spdlog::pattern_time_type::utc : spdlog::pattern_time_type::local));
}

}  // namespace vramd
