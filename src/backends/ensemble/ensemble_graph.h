// EnsembleGraph: the data flow of an ensemble's config (platform "ensemble"), checked once at
// load, then walked by every request (ensemble_backend.h).
//
// The ensemble's tensors are named: its inputs, and whatever a step's output_map writes. A step
// runs once every tensor its input_map reads exists; steps that wait on nothing in common run
// at the same time. The checks are Triton's (its ensemble_utils.cc), in vramd's words, each
// naming the step (by index and model) and the tensor:
//   Build, from the ensemble's config alone:
//     - every step names a model, and no model_namespace (reserved);
//     - every tensor a step reads is an ensemble input or some step's output;
//     - no tensor is written twice (by two steps, or by a step and the client as an input);
//     - every ensemble output is written by a step, and every ensemble input is read by one;
//     - the steps form no cycle (the error lists it).
//   CheckStep, against the config its model was loaded with (when the ensemble loads):
//     - each input_map key is an input of the model and each output_map key an output of it;
//     - every input the model needs (not `optional`) is mapped;
//     - the data type of each tensor is the same wherever it is written and read;
//     - dims agree where both sides fix them (-1 matches anything), with the batch dimension
//       of a batching ensemble counted on both sides: a batching ensemble needs batching step
//       models of at least its max_batch_size, and a non-batching one compares full shapes.
//
// Thread safety: immutable after Build and the CheckSteps; read from any thread.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "config/model_config.pb.h"
#include "core/status.h"

namespace vramd::backends::ensemble {

class EnsembleGraph {
 public:
  struct Binding {
    std::string model_tensor;     // the step model's input or output name
    std::string ensemble_tensor;  // the ensemble's tensor
  };
  struct Step {
    std::string model;
    int64_t version = 0;  // 0: whichever version the model's policy serves
    std::vector<Binding> inputs;
    std::vector<Binding> outputs;
    std::vector<size_t> next;  // steps that read one of this step's outputs
    std::vector<size_t> next_reads;  // how many of next[k]'s inputs this step writes
    std::string label;         // "step 1 ('add_sub')", for errors
  };

  // `config` is the ensemble's, validated (model_config_parser.h). InvalidArgument naming what
  // is wrong; the message starts with "ensemble '<name>': ".
  static Result<EnsembleGraph> Build(const config::ModelConfig& config);

  // Checks step `index` against the config its model serves with (see the top of this file).
  // Call it for every step in order() (a step's outputs are known before their readers).
  Status CheckStep(size_t index, const config::ModelConfig& step_config);

  const std::vector<Step>& steps() const { return steps_; }
  // How many of its tensors step i waits for (those not ensemble inputs), per step.
  const std::vector<size_t>& waits() const { return waits_; }
  // Steps that read only ensemble inputs: where every request starts.
  const std::vector<size_t>& first() const { return first_; }
  // The steps in an order where each comes after the steps it reads from.
  const std::vector<size_t>& order() const { return order_; }

 private:
  struct TensorInfo {
    config::DataType type = config::TYPE_INVALID;
    std::vector<int64_t> dims;  // with the batch dimension (-1) first for a batching ensemble
    std::string where;          // who fixed them, for errors
  };

  std::string name_;
  int max_batch_size_ = 0;
  std::vector<Step> steps_;
  std::vector<size_t> waits_;
  std::vector<size_t> first_;
  std::vector<size_t> order_;
  // What is known of each tensor: the ensemble's inputs and outputs from its config, a step's
  // outputs from its model's config as CheckStep reads them.
  std::map<std::string, TensorInfo> known_;
  std::map<std::string, TensorInfo> declared_outputs_;
  std::map<std::string, size_t> producer_;  // tensor -> step index
};

}  // namespace vramd::backends::ensemble
