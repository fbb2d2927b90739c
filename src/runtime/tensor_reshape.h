// TensorReshape: Triton's `reshape` on a config's inputs and outputs (ModelInput and
// ModelOutput field 5). Clients send and receive tensors shaped by `dims`; a backend sees an
// input shaped by its `reshape` and produces an output shaped by its `reshape`. Only shapes
// change, never bytes, and a batching model's batch dimension stays first either way.
//
// A -1 in `dims` stands for the same size as the -1 at the same rank in `reshape`, in order:
// the config parser has checked that both have as many, with the same fixed products between
// them (model_config_parser.cc, CheckReshape), so the element count is kept.
//
// Thread safety: const after From.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "config/model_config.pb.h"
#include "core/status.h"
#include "core/tensor.h"

namespace vramd::runtime {

class TensorReshape {
 public:
  TensorReshape() = default;  // reshapes nothing
  static TensorReshape From(const config::ModelConfig& config);

  // Whether any input or output has a reshape.
  bool empty() const { return inputs_.empty() && outputs_.empty(); }

  // Rewrites the shapes of `inputs` (validated against `dims`) to what the backend sees.
  void ToBackend(std::vector<Tensor>* inputs) const;

  // Rewrites the shapes of a backend's `outputs` to what clients see. An output already shaped
  // by its `dims` is left as it is (a backend that knows nothing of reshape); one shaped by
  // neither is an Internal error naming it and both shapes.
  Status FromBackend(std::vector<Tensor>* outputs) const;

 private:
  struct Rule {
    Shape dims;
    Shape reshape;
  };
  bool batched_ = false;
  std::map<std::string, Rule> inputs_;
  std::map<std::string, Rule> outputs_;
};

}  // namespace vramd::runtime
