// Reading config.pbtxt into vramd::config::ModelConfig.
//
// The text is parsed with protobuf's text format against model_config.proto, whose field names
// and numbers are Triton's. Fields of Triton's ModelConfig that vramd does not support (for
// example `optimization`, `sequence_batching`) are skipped, and each is recorded so the caller
// can log one warning listing them. Syntax errors and type errors fail with the file name, line
// and column.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "config/model_config.pb.h"
#include "core/status.h"

namespace vramd::config {

struct ParsedModelConfig {
  ModelConfig config;
  // One entry per skipped field, "<field name> (line N)", in the order met.
  std::vector<std::string> unsupported_fields;
};

// Parses config text. `file_name` only labels error messages ("<file_name>:<line>:<col>: ...").
Result<ParsedModelConfig> ParseModelConfigText(std::string_view text, std::string_view file_name);

// Reads and parses a config.pbtxt; NotFound if the file is missing.
Result<ParsedModelConfig> LoadModelConfigFile(const std::filesystem::path& path);

// Checks what the text format cannot: the name (if set) equals `model_dir_name`; tensor names
// are non-empty and unique; data types are set; dims are -1 or positive; reshape element counts
// match; max_batch_size >= 0; instance counts >= 0; dynamic batching sizes fit max_batch_size.
// Then fills defaults the way Triton does: name from the directory, version_policy latest {1},
// one instance_group of count 1 and KIND_AUTO when none is given, count 1 where it is 0.
Status ValidateAndNormalize(ModelConfig* config, std::string_view model_dir_name);

}  // namespace vramd::config
