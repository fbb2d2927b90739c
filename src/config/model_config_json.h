// ModelConfig as JSON, the way Triton's GET /v2/models/{m}/config answers: proto field names,
// enums by name, 64-bit integers as JSON numbers (protobuf's own JSON printer writes them as
// strings; Triton converts them back), and every field of the supported subset printed,
// defaults included.
#pragma once

#include <string>
#include <string_view>

#include "config/model_config.pb.h"
#include "core/status.h"

namespace vramd::config {

std::string ModelConfigToJson(const ModelConfig& config);

// Parses Triton-style config JSON (numbers or strings for 64-bit integers; unknown fields
// ignored), for the repository extension's config override.
Result<ModelConfig> ModelConfigFromJson(std::string_view json);

}  // namespace vramd::config
