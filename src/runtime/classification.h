// Classifier: Triton's classification extension. An output that a request asks for with the
// parameter "classification": k comes back as its k highest values instead of the tensor, as
// BYTES strings "<value>:<index>[:<label>]", highest first (equal values: lower index first),
// shaped [batch, k] for a batching model and [k] otherwise (k is capped at the number of
// classes). <index> is the position in the output's elements after the batch dimension; the
// label is line <index> of the output's `label_filename` in the model directory, when it has one
// (and may not point outside it: see Load).
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

// The largest label file read: a label a line, 16 MiB holds millions of classes.
inline constexpr uintmax_t kMaxLabelFileBytes = uintmax_t{16} << 20;

class Classifier {
 public:
  Classifier() = default;  // no labels, no batching

  // Reads the label file of every output of `config` that names one, from `model_dir`. The
  // path follows model_file.h's rule (relative, no "..", a regular file inside `model_dir` once
  // symlinks resolve, at most kMaxLabelFileBytes): a file that breaks it is an InvalidArgument
  // naming the output, the file and why; one that cannot be read, an Internal.
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
