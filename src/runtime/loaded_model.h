// LoadedModel: one version of a model, loaded: the backend's model-level state and the
// instances of its instance_group, ready to run requests.
//
// Thread safety: Infer may be called from any number of threads; each call borrows one free
// instance for the length of its execution and waits while all are busy.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "config/model_config.pb.h"
#include "core/infer_request.h"
#include "core/status.h"

namespace vramd::runtime {

class LoadedModel {
 public:
  // Loads version `version` of the model in `model_dir` with `config` (validated and
  // normalized): finds its backend, loads the model, creates every instance. Any failure
  // releases what was created and names the model (and the version,
  // unless the model's backend itself is missing).
  static Result<std::shared_ptr<LoadedModel>> Load(std::shared_ptr<const config::ModelConfig> config,
                                                   const std::filesystem::path& model_dir,
                                                   int64_t version);

  ~LoadedModel();
  LoadedModel(const LoadedModel&) = delete;
  LoadedModel& operator=(const LoadedModel&) = delete;

  const std::string& name() const { return config_->name(); }
  int64_t version() const { return version_; }
  const config::ModelConfig& config() const { return *config_; }
  size_t instance_count() const { return instances_.size(); }

  // Validates `request` against the config, runs it on a free instance, and returns the
  // outputs the request asked for (all, when it named none) in the order it named them.
  Result<InferResponse> Infer(const InferRequest& request);

 private:
  LoadedModel(std::shared_ptr<const config::ModelConfig> config, int64_t version);

  // Blocks until an instance is free; the returned index is the caller's until Release.
  size_t Acquire();
  void Release(size_t index);

  const std::shared_ptr<const config::ModelConfig> config_;
  const int64_t version_;
  // Constant after Load. Instances are destroyed before the model they came from.
  std::unique_ptr<backends::BackendModel> backend_model_;
  std::vector<std::unique_ptr<backends::BackendInstance>> instances_;

  std::mutex mu_;
  std::condition_variable instance_freed_;
  std::vector<size_t> free_instances_;  // guarded by mu_
};

}  // namespace vramd::runtime
