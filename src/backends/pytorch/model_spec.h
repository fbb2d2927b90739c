// ModelSpec: what the pytorch backend needs from a model's config, read from the config JSON
// vramd hands every backend (include/vramd/backend.h, VramdModelInfo::config_json), and checked
// before any file is opened so that a config the backend cannot serve fails with the field named.
//
// This file knows nothing of LibTorch: it is the part of the backend the unit tests build
// without it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "vramd/backend.h"

namespace vramd::pytorch {

struct TensorSpec {
  std::string name;
  VramdDataType datatype = VRAMD_TYPE_INVALID;
  // The shape the backend sees, without the batch dimension (the config's `reshape` when it
  // has one, else `dims`); -1 is any size.
  std::vector<int64_t> dims;
  bool optional = false;
  // The position Triton's naming convention gives it: "<anything>__<index>", else nullopt.
  std::optional<int> convention_index;
};

struct ModelSpec {
  std::string name;
  int64_t max_batch_size = 0;
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
  std::string model_filename = "model.pt";  // default_model_filename, else Triton's default
  // Triton's pytorch parameters vramd honours (docs/pytorch.md).
  bool inference_mode = true;            // INFERENCE_MODE
  bool optimized_execution = true;       // !DISABLE_OPTIMIZED_EXECUTION
  std::optional<int> intra_op_threads;   // INTRA_OP_THREAD_COUNT
  // Parameters Triton's backend knows that change nothing here, named in one warning.
  std::vector<std::string> ignored_parameters;
};

// Parses and checks `json`. On failure returns nullopt and writes a message naming the field
// (for example "input 'x': data_type TYPE_STRING is not supported by the pytorch backend").
std::optional<ModelSpec> ParseModelSpec(const char* json, size_t size, std::string* error);

// "INPUT__3" -> 3; names without the "__<digits>" suffix -> nullopt.
std::optional<int> ConventionIndex(const std::string& name);

// Triton's config type name ("TYPE_FP32") -> the ABI type; VRAMD_TYPE_INVALID if unknown.
VramdDataType DataTypeFromConfig(const std::string& type);
// The ABI type -> its KServe name ("FP32"), for messages.
const char* DataTypeName(VramdDataType type);

}  // namespace vramd::pytorch
