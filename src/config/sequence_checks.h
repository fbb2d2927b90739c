// The checks a sequence_batching block passes before a model loads (Triton's sequence batcher
// makes the same ones at its own load): control inputs well formed and each kind once, implicit
// state with a type and shape its initial state agrees with, no name given twice among inputs,
// control inputs and state inputs, strategy settings in range, and the features vramd does not
// serve (iterative_sequence, implicit state on a decoupled model) refused, never ignored.
#pragma once

#include <string_view>

#include "config/model_config.pb.h"
#include "core/status.h"

namespace vramd::config {

// OK when `config` has no sequence_batching. Errors are InvalidArgument, prefixed by `model`
// ("model 'm'") and naming the field.
Status CheckSequenceBatching(std::string_view model, const ModelConfig& config);

}  // namespace vramd::config
