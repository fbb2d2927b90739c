// A model's lifecycle (the JSON of GET /v2/repository/models/{m}/lifecycle) as text a person
// reads, for `vramctl lifecycle`: the state and reason, the serving versions, the last load
// (policy and why, footprint predicted and measured, phases with their rates) and the recent
// transitions. Like the memory report's text, it works from the JSON and leaves out fields it
// does not find.
//
// Thread safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace vramd::metrics {

// InvalidArgument when `json` is not a JSON object.
Result<std::string> RenderLifecycleText(std::string_view json, size_t history_rows = 8);

}  // namespace vramd::metrics
