// ModelConfig as JSON, the way Triton's GET /v2/models/{m}/config answers: proto field names,
// enums by name, 64-bit integers as JSON numbers (protobuf's own JSON printer writes them as
// strings; Triton converts them back), and every field of the supported subset printed,
// defaults included.
//
// Thread safety: free functions without shared state; safe from any thread.
#pragma once

#include <string>
#include <string_view>

#include "config/model_config.pb.h"
#include "core/status.h"

namespace vramd::config {

// Compact JSON. Fields are in .proto declaration order. Scalars, enums, repeated fields ([])
// and maps ({}) always appear; a singular message (e.g. an input's `reshape`) only when set, so
// its presence keeps its meaning; a oneof only its set member. Map keys are JSON strings, in
// order (numerically for integer keys): "priority_queue_policy":{"1":{...}}. Enum numbers the
// proto does not declare are printed as numbers.
std::string ModelConfigToJson(const ModelConfig& config);

// Parses Triton-style config JSON (numbers or strings for 64-bit integers; proto or lowerCamel
// field names; unknown fields ignored), for the repository extension's config override.
// InvalidArgument for malformed JSON (with the byte offset), a value of the wrong type, or an
// enum value the proto does not declare (by name or number, named by field path). The result is
// not validated: call ValidateAndNormalize. ToJson(FromJson(x)) reproduces the message exactly.
Result<ModelConfig> ModelConfigFromJson(std::string_view json);

}  // namespace vramd::config
