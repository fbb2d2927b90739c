// Reading config.pbtxt into vramd::config::ModelConfig.
//
// The text is parsed with protobuf's text format against model_config.proto, whose field names
// and numbers are Triton's. Fields of Triton's ModelConfig that vramd does not support (for
// example `optimization`, `sequence_batching`) are skipped, and each is recorded so the caller
// can log one warning listing them. Syntax errors and type errors fail with the file name, line
// and column.
//
// Thread safety: free functions without shared state; safe from any thread.
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
  // One entry per skipped field, "<field name> (line N)", in the order met. The name is
  // prefixed by the known fields that enclose it, joined by '.', without list indexes:
  // "optimization (line 12)", "instance_group.profile (line 35)". A skipped message's own
  // contents are not listed. N is the 1-based line of the field's name.
  std::vector<std::string> unsupported_fields;
};

// Parses config text. `file_name` only labels error messages ("<file_name>:<line>:<col>: ...",
// both numbers 1-based). Fails with InvalidArgument on a syntax error, a value of the wrong
// type, a non-repeated field given twice, an enum value the proto does not declare (by name,
// `data_type: TYPE_FOO`, or by number, `data_type: 99`; the latter is reported by field path,
// "<file_name>: input[0].data_type: 99 is not a value of vramd.config.DataType"), or a string
// that is not valid UTF-8 ("<file_name>: input[0].name: not valid UTF-8").
// Note: `name [ ... ]` is read as `name: [ ... ]` (protobuf 3.21 cannot skip an unknown field
// written without the colon); where no space follows the name, columns reported later on that
// line are one more than written.
Result<ParsedModelConfig> ParseModelConfigText(std::string_view text, std::string_view file_name);

// Reads and parses a config.pbtxt; NotFound if the file is missing, Internal if it cannot be
// read, otherwise as ParseModelConfigText with the path as the file name.
Result<ParsedModelConfig> LoadModelConfigFile(const std::filesystem::path& path);

// Checks what the text format cannot: the name (if set) equals `model_dir_name`; tensor names
// are non-empty and unique; data types are set; dims are -1 or positive; reshape element counts
// match; max_batch_size >= 0; instance counts >= 0; dynamic batching sizes fit max_batch_size.
// Then fills defaults the way Triton does: name from the directory, version_policy latest {1},
// one instance_group of count 1 and KIND_AUTO when none is given, count 1 where it is 0, and
// group names "<model>_<index>" where empty.
// Errors are InvalidArgument, "model '<model_dir_name>': <field or tensor>: <what is wrong>", and
// leave *config unchanged. Enum values and UTF-8 are checked again (the config may come from
// JSON or code).
// Reshape rule: dims and reshape.shape must have the same number of -1 entries and the same
// product of fixed dimensions before, between and after them ([16] vs [4,4] and [-1,4] vs
// [-1,2,2] match; [16] vs [4,2] does not). Empty dims are allowed (a scalar, or [batch]).
// preferred_batch_size entries must be in [1, max_batch_size].
Status ValidateAndNormalize(ModelConfig* config, std::string_view model_dir_name);

}  // namespace vramd::config
