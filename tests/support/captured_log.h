// Test support: the default logger writes into a string for the scope of a CapturedLog, with
// the server's escaping formatter ("%l %v": level, then the message).
#pragma once

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <sstream>
#include <string>

#include "core/log_format.h"

namespace vramd::testing {

class CapturedLog {
 public:
  CapturedLog() : saved_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    sink->set_formatter(MakeEscapingFormatter("%l %v"));
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("captured", sink));
  }
  ~CapturedLog() { spdlog::set_default_logger(saved_); }
  CapturedLog(const CapturedLog&) = delete;
  CapturedLog& operator=(const CapturedLog&) = delete;

  // What was logged so far. Read it once the threads that log are done.
  std::string text() const { return out_.str(); }

 private:
  std::shared_ptr<spdlog::logger> saved_;
  std::ostringstream out_;
};

}  // namespace vramd::testing
