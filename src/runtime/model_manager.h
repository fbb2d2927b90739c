// ModelManager: the models of the repositories, each version with its state, and the lookup
// the request path uses to find the version that serves a request.
//
// Model control modes (Triton's): "none" loads every model at start-up and refuses Load and
// Unload; "explicit" loads the start-up models named in Options and then loads and unloads
// models on request. Thread safety: all methods are safe from any thread; the request path
// takes a shared lock only long enough to copy a shared_ptr. Load and Unload of one model are
// serialized by a per-model action lock; the map's lock is never held while loading.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
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
enum class ModelControlMode { kNone, kExplicit };
std::string_view ModelStateName(ModelState state);  // "READY", "UNAVAILABLE" as Triton's index

// One row of the repository index: a version, or the model alone when no version could be
// loaded (version 0).
struct ModelIndexEntry {
  std::string name;
  int64_t version = 0;
  ModelState state = ModelState::kUnavailable;
  // Empty when ready, unless a later Load of the model failed while these versions kept
  // serving (then "serving; last load failed: ..."). "unloaded" after Unload.
  std::string reason;
};

class ModelManager {
 public:
  struct Options {
    std::vector<std::filesystem::path> repositories;
    // Stop at the first model that fails to load and return its error from Create.
    bool exit_on_error = false;
    // Required: where models' memory is accounted. Must outlive the manager.
    MemoryContext memory;
    ModelControlMode model_control_mode = ModelControlMode::kNone;
    // Explicit mode only: the models Create loads ("*" = all); the others wait for Load.
    std::vector<std::string> startup_models;
  };

  // Scans the repositories and loads every model's selected versions. A broken model is
  // recorded (with its file and line where the config is at fault) and the others still load,
  // unless options.exit_on_error. A repository that is missing fails Create. Afterwards the
  // pools are trimmed, so memory used only while loading goes back to the system.
  static Result<std::unique_ptr<ModelManager>> Create(const Options& options);

  ~ModelManager();

  // Explicit mode: re-scans the repositories for `name`, reads its config and loads the
  // versions its policy selects. On success they replace the model's serving versions at once
  // (the old ones are shut down once what is queued on them has run; requests holding them
  // finish). On failure the serving versions are untouched, the failure shows in Index, and
  // the error is returned (with file:line for a config at fault). NotFound when no repository
  // holds the model. InvalidArgument in mode none.
  Status Load(std::string_view name);

  // Explicit mode: stops serving `name`: its versions leave the map, each drains what is
  // queued, and once the last reference is gone the model's ledger owners close; then the
  // pools are trimmed. Afterwards Index shows the model UNAVAILABLE, reason "unloaded". A model
  // that is not loaded (or unknown) is a success, as in Triton. InvalidArgument in mode none.
  Status Unload(std::string_view name);

  ModelControlMode model_control_mode() const { return mode_; }

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
    std::string load_error;  // a later Load's failure while `ready` kept serving
    bool unloaded = false;   // by Unload: not counted by AllModelsReady
  };

  // The owner of versions taken out of the map: closed once none of them is referenced.
  struct Retired {
    memory::ScopedOwner owner;
    std::vector<std::weak_ptr<LoadedModel>> versions;
  };

  ModelManager(const Options& options)
      : memory_(options.memory), mode_(options.model_control_mode),
        repositories_(options.repositories) {}
  ModelEntry LoadModel(const std::filesystem::path& model_dir, const std::string& name) const;
  std::shared_ptr<std::mutex> ActionLock(std::string_view name);
  // Shuts down `entry`'s versions, drops them and closes its owner once they are gone
  // (waiting up to a moment for requests that still hold them; later sweeps close it else).
  void Retire(ModelEntry entry);
  void SweepRetired();

  const MemoryContext memory_;
  const ModelControlMode mode_;
  const std::vector<std::filesystem::path> repositories_;

  std::mutex actions_mu_;
  std::map<std::string, std::shared_ptr<std::mutex>, std::less<>> actions_;  // by actions_mu_
  std::mutex retired_mu_;
  std::vector<Retired> retired_;  // guarded by retired_mu_

  mutable std::shared_mutex mu_;
  std::map<std::string, ModelEntry, std::less<>> models_;  // guarded by mu_
};

}  // namespace vramd::runtime
