// Test support: a ModelConfig from config.pbtxt text, failing the test when it does not parse.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "config/model_config_parser.h"

namespace vramd::testing {

inline config::ModelConfig ConfigFromText(const std::string& text) {
  auto parsed = config::ParseModelConfigText(text, "config.pbtxt");
  EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
  return parsed.ok() ? parsed->config : config::ModelConfig();
}

}  // namespace vramd::testing
