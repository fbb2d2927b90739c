// Classifier: Triton's classification extension. An output that a request asks for with the
// parameter "classification": k comes back as its k highest values instead of the tensor, as
// BYTES strings "<value>:<index>[:<label>]", highest first (equal values: lower index first),
// shaped [batch, k] for a batching model and [k] otherwise (k is capped at the number of
// classes). <index> is the position in the output's elements after the batch dimension; the
// label is line <index> of the output's `label_filename` in the model directory, when it has one.
//
// Thread safety: const after Load.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "config/model_config.pb.h"
#include "core/status.h"
#include "core/tensor.h"

namespace vramd::runtime {

class Classifier {
 public:
  Classifier() = default;  // no labels, no batching

  // Reads the label file of every output of `config` that names one, from `model_dir`; a file
  // that cannot be read is an InvalidArgument naming the output and the path.
  static Result<Classifier> Load(const config::ModelConfig& config,
                                 const std::filesystem::path& model_dir);

  // One request's `output` as its `count` top classes. InvalidArgument for a BYTES output or
  // a count of 0.
  Result<Tensor> Classify(const Tensor& output, uint32_t count) const;

 private:
  bool batched_ = false;
  std::map<std::string, std::vector<std::string>> labels_;  // by output name
};

}  // namespace vramd::runtime
