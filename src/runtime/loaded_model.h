// LoadedModel: one version of a model, loaded: the backend's model-level state and the
// instances of its instance_group, ready to run requests.
//
// Memory: the version has a ledger owner (a child of the model's), each instance one under it,
// and each request one under the instance that runs it. Destroying the LoadedModel destroys
// the instances, then the backend model, closing their owners: whatever they still hold is
// reported as a leak.
//
// Thread safety: Infer may be called from any number of threads; each call borrows one free
// instance for the length of its execution and waits while all are busy.
#pragma once

#include <atomic>
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
#include "memory/ledger.h"
#include "runtime/memory_context.h"
#include "runtime/request_owner.h"

namespace vramd::runtime {

// What Infer returns. Members are destroyed in reverse order: the response first, then the
// request's owner, whose closing checks that the request left nothing behind. Keep it alive
// until the response has been sent.
struct InferOutcome {
  RequestOwner request_owner;
  InferResponse response;
};

class LoadedModel {
 public:
  // Loads version `version` of the model in `model_dir` with `config` (validated and
  // normalized): finds its backend, loads the model, creates every instance. Any failure
  // releases what was created and names the model (and the version,
  // unless the model's backend itself is missing).
  // What `memory` points to must outlive the LoadedModel; `model_owner` is the model's owner.
  static Result<std::shared_ptr<LoadedModel>> Load(std::shared_ptr<const config::ModelConfig> config,
                                                   const std::filesystem::path& model_dir,
                                                   int64_t version, const MemoryContext& memory,
                                                   memory::OwnerId model_owner);

  ~LoadedModel();
  LoadedModel(const LoadedModel&) = delete;
  LoadedModel& operator=(const LoadedModel&) = delete;

  const std::string& name() const { return config_->name(); }
  int64_t version() const { return version_; }
  const config::ModelConfig& config() const { return *config_; }
  size_t instance_count() const { return instances_.size(); }
  memory::OwnerId owner() const { return owner_.id(); }

  // Validates `request` against the config, runs it on a free instance under a new request
  // owner, and returns the outputs the request asked for (all, when it named none) in the
  // order it named them.
  Result<InferOutcome> Infer(const InferRequest& request);

 private:
  LoadedModel(std::shared_ptr<const config::ModelConfig> config, int64_t version,
              const MemoryContext& memory, memory::OwnerId model_owner);

  // Blocks until an instance is free; the returned index is the caller's until Release.
  size_t Acquire();
  void Release(size_t index);

  struct Instance {
    memory::ScopedOwner owner;  // closed after the backend instance is destroyed
    std::unique_ptr<backends::BackendInstance> backend;
    Instance(memory::ScopedOwner o, std::unique_ptr<backends::BackendInstance> b)
        : owner(std::move(o)), backend(std::move(b)) {}
  };

  const std::shared_ptr<const config::ModelConfig> config_;
  const int64_t version_;
  const MemoryContext memory_;
  // Constant after Load. Destroyed in reverse: instances, then the backend model, then the
  // version's owner is closed.
  memory::ScopedOwner owner_;
  std::unique_ptr<backends::BackendModel> backend_model_;
  std::vector<Instance> instances_;
  std::atomic<uint64_t> request_sequence_{0};

  std::mutex mu_;
  std::condition_variable instance_freed_;
  std::vector<size_t> free_instances_;  // guarded by mu_
};

}  // namespace vramd::runtime
