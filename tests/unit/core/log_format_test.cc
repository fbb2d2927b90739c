// Tests for core/log_format.h: escaping, and a logger whose lines client input cannot forge.
#include "core/log_format.h"

#include <gtest/gtest.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/ostream_sink.h>

#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace vramd {
namespace {

TEST(LogEscapedTest, PlainTextIsUnchanged) {
  for (const char* text :
       {"", "loaded model 'resnet50' version(s) 1", "naïve 模型 \\n quoted"}) {
    EXPECT_EQ(LogEscaped(text), text);
    EXPECT_FALSE(NeedsLogEscaping(text)) << text;
  }
}

TEST(LogEscapedTest, LineBreaksAndOtherControlsAreEscaped) {
  EXPECT_EQ(LogEscaped("x\nforged line"), "x\\nforged line");
  EXPECT_EQ(LogEscaped("a\r\nb\tc"), "a\\r\\nb\\tc");
  EXPECT_EQ(LogEscaped(std::string("nul\0bell\a", 9)), "nul\\x00bell\\x07");
  EXPECT_EQ(LogEscaped("\x1b[31mred\x7f"), "\\x1b[31mred\\x7f");
  EXPECT_TRUE(NeedsLogEscaping("x\n"));
  EXPECT_TRUE(NeedsLogEscaping("\x1f"));
}

TEST(LogEscapedTest, UnicodeControlsAndSeparatorsAreEscaped) {
  EXPECT_EQ(LogEscaped("a\xc2\x85" "b"), "a\\u0085b");          // NEL
  EXPECT_EQ(LogEscaped("\xc2\x9b" "31m"), "\\u009b31m");         // CSI
  EXPECT_EQ(LogEscaped("a\xe2\x80\xa8" "b\xe2\x80\xa9"), "a\\u2028b\\u2029");
  // Neighbours that are ordinary characters stay: U+00A0, U+2027, and a truncated sequence.
  EXPECT_EQ(LogEscaped("\xc2\xa0\xe2\x80\xa7\xe2\x80"), "\xc2\xa0\xe2\x80\xa7\xe2\x80");
  EXPECT_EQ(LogEscaped("\xff\xfe"), "\xff\xfe");  // invalid UTF-8 is left alone
}

// A logger writing to a string with vramd's pattern and formatter.
struct CapturedLogger {
  std::ostringstream out;
  std::shared_ptr<spdlog::logger> logger;

  CapturedLogger() {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
    sink->set_formatter(MakeEscapingFormatter("%l %v"));
    logger = std::make_shared<spdlog::logger>("test", sink);
  }

  std::vector<std::string> Lines() const {
    std::vector<std::string> lines;
    std::istringstream in(out.str());
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }
};

TEST(EscapingFormatterTest, EachLogCallIsOneLineWhateverTheArgumentsHold) {
  CapturedLogger captured;
  const std::string name = "x\nforged line";
  captured.logger->error("failed to load '{}': no model repository holds a model of that name",
                         name);
  captured.logger->info("loaded model '{}'", "evil\r\ninfo ready");
  captured.logger->info("plain");
  EXPECT_EQ(captured.Lines(),
            (std::vector<std::string>{
                "error failed to load 'x\\nforged line': no model repository holds a model of "
                "that name",
                "info loaded model 'evil\\r\\ninfo ready'", "info plain"}));
}

TEST(EscapingFormatterTest, ClonesEscapeToo) {
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  auto formatter = MakeEscapingFormatter("%v");
  sink->set_formatter(formatter->clone());
  spdlog::logger("test", sink).info("a\nb");
  EXPECT_EQ(out.str(), "a\\nb\n");
}

}  // namespace
}  // namespace vramd
