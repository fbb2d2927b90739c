// Fuzz target: a config override's JSON (the repository extension's load parameter "config")
// through ModelConfigFromJson, then what it accepts through config_checks.h's round trips and
// validation. repository_api_fuzzer.cc reaches the same reader through the routes, far more
// slowly (each accepted override is loaded); this one goes deep into the reader itself.
//
// Input: the JSON text.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "config/model_config_json.h"
#include "config_checks.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parsed = vramd::config::ModelConfigFromJson(
      std::string_view(reinterpret_cast<const char*>(data), size));
  if (!parsed.ok()) {
    if (parsed.status().message().empty()) vramd::fuzz::Fail("an error without a message");
    return 0;
  }
  vramd::fuzz::CheckAcceptedConfig(*parsed);
  return 0;
}
