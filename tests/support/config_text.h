// Test support: config.pbtxt texts the tests share, and a ModelConfig from such text (failing the
// test when it does not parse).
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

// A model of INT32 INPUT0 -> OUTPUT0 (dims [-1]) on `backend`, with `instances` CPU instances
// and `extra` (more config.pbtxt text) appended.
inline std::string Int32ModelConfig(const std::string& backend, int instances,
                                    const std::string& extra = "") {
  return "backend: \"" + backend + "\"\n"
         "input [ { name: \"INPUT0\" data_type: TYPE_INT32 dims: [ -1 ] } ]\n"
         "output [ { name: \"OUTPUT0\" data_type: TYPE_INT32 dims: [ -1 ] } ]\n"
         "instance_group [ { kind: KIND_CPU count: " + std::to_string(instances) + " } ]\n" +
         extra;
}

}  // namespace vramd::testing
