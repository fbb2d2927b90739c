// Checking an InferRequest against its model's config before it reaches a backend.
#pragma once

#include <string>

#include "config/model_config.pb.h"
#include "core/infer_request.h"
#include "core/status.h"

namespace vramd::runtime {

// OK when `request` fits `config`; otherwise an InvalidArgument whose message names the tensor,
// what the config expects and what came. Checks: every input is known, sent once, and every
// non-optional input is present; datatypes match; the shape matches dims (a -1 dim takes any
// size) and, with max_batch_size > 0, has a leading batch dimension in [1, max_batch_size],
// the same for every input;
// byte sizes equal elements x type size (BYTES: well-formed and the right element count);
// requested outputs exist and are not repeated.
Status ValidateInferRequest(const config::ModelConfig& config, const InferRequest& request);

// The config's input named `name`, or null.
const config::ModelInput* FindConfigInput(const config::ModelConfig& config,
                                          const std::string& name);

// "A, B, C" (the config's input names), or "none", for error messages.
std::string ConfigInputNames(const config::ModelConfig& config);

}  // namespace vramd::runtime
