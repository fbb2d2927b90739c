// Log lines that client input cannot forge.
//
// vramd's log messages quote what clients send: model names from percent-decoded URLs ("%0A"
// is a newline) and request bodies, and error texts that repeat them. A newline in one would
// end the line and start another that reads as the server's own ("2026-01-01 ... info loaded
// model 'x'"). So the logger's formatter writes every message with its control characters
// escaped: one log call is always one line. The pattern's own text (time, level, the final
// newline) is untouched. No vramd log call means to write several lines; one that quotes a
// multi-line text (e.g. a backend's error with a traceback) shows it on one line with \n.
//
// Thread safety: LogEscaped is a pure function; an EscapingFormatter is used as spdlog uses
// formatters (a sink calls it under its own lock).
#pragma once

#include <spdlog/formatter.h>

#include <memory>
#include <string>
#include <string_view>

namespace vramd {

// `text` with the characters that could end or rewrite a log line escaped: \n, \r and \t as
// themselves, other C0 controls and DEL as \xHH (ESC would start a terminal escape sequence),
// and, in UTF-8, the C1 controls U+0080-U+009F and the line and paragraph separators
// U+2028/U+2029 as \uHHHH. All other bytes, invalid UTF-8 included, stay as they are. A
// backslash is not escaped: the output is for people reading logs, not for parsing back.
std::string LogEscaped(std::string_view text);

// True when LogEscaped(text) differs from text.
bool NeedsLogEscaping(std::string_view text);

// A formatter that escapes each message's payload (LogEscaped) and formats the rest with
// `inner` (e.g. a spdlog::pattern_formatter), colour range included.
class EscapingFormatter final : public spdlog::formatter {
 public:
  explicit EscapingFormatter(std::unique_ptr<spdlog::formatter> inner);

  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override;
  std::unique_ptr<spdlog::formatter> clone() const override;

 private:
  std::unique_ptr<spdlog::formatter> inner_;
};

// The level threshold for Triton's log switches: verbose -> debug; else info, or above it
// where the switches turn levels off (a threshold: turning one off turns off those below).
spdlog::level::level_enum LogLevelFor(bool verbose, bool info, bool warning, bool error);

// EscapingFormatter over a spdlog::pattern_formatter for `pattern`; give it to
// spdlog::set_formatter (or a logger's) in place of set_pattern. `utc`: the pattern's time
// fields in UTC (else local time).
std::unique_ptr<spdlog::formatter> MakeEscapingFormatter(const std::string& pattern,
                                                         bool utc = false);

}  // namespace vramd
