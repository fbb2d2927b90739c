// Fuzz target: config.pbtxt text through ParseModelConfigText (protobuf's text format with
// vramd's rewrite for unknown `name [ ... ]` fields, unsupported-field names and error
// positions), then what it accepts through config_checks.h's round trips and validation.
//
// Input: the file's text.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "config/model_config_parser.h"
#include "config_checks.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parsed = vramd::config::ParseModelConfigText(text, "config.pbtxt");
  if (!parsed.ok()) {
    // Every error names the file it is about (model_config_parser.h).
    if (parsed.status().message().find("config.pbtxt") == std::string::npos) {
      vramd::fuzz::Fail("an error that does not name the file: " + parsed.status().ToString());
    }
    return 0;
  }
  vramd::fuzz::CheckAcceptedConfig(parsed->config);
  return 0;
}
