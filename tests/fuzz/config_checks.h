// Properties every ModelConfig that a reader accepted must have, shared by the config.pbtxt and
// the config JSON fuzz targets.
#pragma once

#include "config/model_config.pb.h"

namespace vramd::fuzz {

// Checks, failing (fuzz_support.h's Fail) on the first that does not hold:
//  - JSON round trip: ModelConfigFromJson(ModelConfigToJson(c)) succeeds and equals c
//    (model_config_json.h promises it), and the JSON is valid;
//  - text round trip: protobuf's text form of c reads back through ParseModelConfigText as c;
//  - validation: ValidateAndNormalize either fails leaving c unchanged, or succeeds, and then
//    succeeds again on its own result without changing it (normalizing is idempotent).
void CheckAcceptedConfig(const config::ModelConfig& c);

}  // namespace vramd::fuzz
