// ModelManager: the models of the repositories, each version with its state, and the lookup
// the request path uses to find the version that serves a request.
//
// This first manager loads at start-up only (model control mode "none"); the lifecycle state
// machine and reloads build on it. Thread safety: all methods are safe from any thread; the
// request path takes a shared lock only long enough to copy a shared_ptr.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "config/model_config.pb.h"
#include "core/status.h"
#include "runtime/loaded_model.h"
#include "runtime/memory_context.h"

namespace vramd::runtime {

enum class ModelState { kReady, kUnavailable };
std::string_view ModelStateName(ModelState state);  // "READY", "UNAVAILABLE" as Triton's index

// One row of the repository index: a version, or the model alone when no version could be
// loaded (version 0).
struct ModelIndexEntry {
  std::string name;
  int64_t version = 0;
  ModelState state = ModelState::kUnavailable;
  std::string reason;  // empty when ready
};

class ModelManager {
 public:
  struct Options {
    std::vector<std::filesystem::path> repositories;
    // Stop at the first model that fails to load and return its error from Create.
    bool exit_on_error = false;
    // Required: where models' memory is accounted. Must outlive the manager.
    MemoryContext memory;
  };

  // Scans the repositories and loads every model's selected versions. A broken model is
  // recorded (with its file and line where the config is at fault) and the others still load,
  // unless options.exit_on_error. A repository that is missing fails Create. Afterwards the
  // pools are trimmed, so memory used only while loading goes back to the system.
  static Result<std::unique_ptr<ModelManager>> Create(const Options& options);

  // The version serving `name`: `version`, or the highest ready version when it is 0.
  // NotFound for an unknown model or version; Unavailable for one that is not ready.
  Result<std::shared_ptr<LoadedModel>> Find(std::string_view name, int64_t version) const;

  // The model's config (the one its versions were loaded with); NotFound if unknown, and
  // Unavailable if the model has no usable config.
  Result<std::shared_ptr<const config::ModelConfig>> FindConfig(std::string_view name) const;

  // Ready versions of `name`, ascending; NotFound for an unknown model.
  Result<std::vector<int64_t>> ReadyVersions(std::string_view name) const;

  // Every ready version of every model, sorted by model name, then version. The pointers keep
  // their versions alive while the caller holds them (for statistics and metrics).
  std::vector<std::shared_ptr<LoadedModel>> LoadedVersions() const;

  std::vector<ModelIndexEntry> Index() const;

  // True when every model found in the repositories has at least one ready version and none
  // failed (Triton's strict readiness).
  bool AllModelsReady() const;

 private:
  struct ModelEntry {
    memory::ScopedOwner owner;  // the model's ledger owner; closed after its versions unload
    std::shared_ptr<const config::ModelConfig> config;  // null when the config is unusable
    std::map<int64_t, std::shared_ptr<LoadedModel>> ready;
    std::map<int64_t, std::string> failed;  // version -> reason
    std::string reason;  // why the model as a whole is unavailable; empty otherwise
  };

  explicit ModelManager(const MemoryContext& memory) : memory_(memory) {}
  ModelEntry LoadModel(const std::filesystem::path& model_dir, const std::string& name) const;

  const MemoryContext memory_;

  mutable std::shared_mutex mu_;
  std::map<std::string, ModelEntry, std::less<>> models_;  // guarded by mu_
};

}  // namespace vramd::runtime
