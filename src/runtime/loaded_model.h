// LoadedModel: one version of a model, loaded: the backend's model-level state, the instances
// of its instance_group, and the scheduler whose instance threads run its requests.
//
// Requests: InferAsync validates a request and hands it to the Scheduler (scheduler.h): one
// thread per instance takes work from the version's queue; without dynamic_batching an idle
// instance runs a request at once on the caller's thread (the fast path); with it, requests
// are batched along dim 0 (dynamic_batcher.h, batch_executor.h) under the queue policy.
// Infer is the blocking form of InferAsync.
//
// Memory: the version has a ledger owner (a child of the model's), each instance one under it,
// and each request one under the instance that runs it (batch_executor.h says how a batch is
// charged). Destroying the LoadedModel stops accepting requests (later ones get Unavailable),
// runs what is queued, joins the instance threads, then destroys the instances and the
// backend model, closing their owners: whatever they still hold is reported as a leak.
//
// Readiness: loaded is ready, unless the backend checks its instances (CheckReady).
//
// Sleeping (sleep_gate.h; docs/memory.md): a version whose backend can sleep may be put to
// sleep (Sleep) and woken (Wake); an execution of a sleeping version wakes it first, on its
// instance thread, and a sleeping version runs nothing inline on the caller's thread (the
// wake may take seconds). Its sleep settings come from the config (sleep_settings.h).
//
// Statistics: every request submitted is counted once, as a success or a failure, in
// statistics() (inference_statistics.h); so is every execution.
//
// Where a version is destroyed: where its last reference goes, except on one of its own
// instance threads (destroying it there would join that thread from itself): then on the
// thread of the VersionReaper given to HoldVersionInOutcomes (an outcome holding its version
// is what can take the last reference there).
//
// Thread safety: InferAsync and Infer may be called from any number of threads. A
// VersionReaper's Destroy may be called from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "backends/backend.h"
#include "backends/server_services.h"
#include "config/model_config.pb.h"
#include "core/infer_request.h"
#include "core/load_timing.h"
#include "core/mutex.h"
#include "core/status.h"
#include "memory/ledger.h"
#include "memory/quota.h"
#include "runtime/batch_executor.h"
#include "runtime/infer_outcome.h"
#include "runtime/inference_statistics.h"
#include "runtime/memory_context.h"
#include "runtime/readiness_probe.h"
#include "runtime/request_owner.h"
#include "runtime/request_scheduler.h"
#include "runtime/scheduler.h"
#include "runtime/sleep_gate.h"
#include "runtime/sleep_settings.h"

namespace vramd::runtime {

class LoadedModel;

// The config parameter that bounds what one version of a model holds per device
// (docs/memory.md, "Quotas"): parameters { key: "vramd.memory_quota" value { string_value:
// "cuda:0=2GiB,cpu=512MiB" } }; a size alone bounds each GPU. The version's owner opens with
// it, so its instances and requests are bounded together; a reload's new version has its own.
inline constexpr std::string_view kMemoryQuotaParameter = "vramd.memory_quota";
// The quota the config gives (empty without the parameter); InvalidArgument naming the
// parameter when its value does not parse.
Result<memory::MemoryQuota> MemoryQuotaOfConfig(const config::ModelConfig& config);

// A thread that destroys the versions handed to it, in the order given. Its destructor
// destroys what it still holds, then joins the thread. REQUIRES: every version that may be
// handed to it (HoldVersionInOutcomes) has been shut down before the reaper is destroyed, so
// none can be handed to it afterwards.
class VersionReaper {
 public:
  VersionReaper();
  ~VersionReaper();
  VersionReaper(const VersionReaper&) = delete;
  VersionReaper& operator=(const VersionReaper&) = delete;

  void Destroy(std::unique_ptr<LoadedModel> doomed) EXCLUDES(mu_);

 private:
  void Run(std::stop_token stop) EXCLUDES(mu_);

  Mutex mu_;  // a leaf: nothing is acquired, and no version destroyed, while it is held
  std::condition_variable_any wake_;  // waited on with mu_ (and the thread's stop token)
  std::vector<std::unique_ptr<LoadedModel>> doomed_ GUARDED_BY(mu_);
  std::jthread thread_;  // last: starts once the rest is initialized
};

class LoadedModel : public std::enable_shared_from_this<LoadedModel> {
 public:
  // Loads version `version` of the model in `model_dir` with `config` (validated and
  // normalized): finds its backend, loads the model, creates every instance. Any failure
  // releases what was created and names the model (and the version,
  // unless the model's backend itself is missing).
  // What `memory` points to must outlive the LoadedModel; `model_owner` is the model's owner.
  // The backend and the instances' creation record their phases in `timing` (may be null).
  // `services` (may be null; must outlive the LoadedModel) is what the backend's models may ask
  // of the server (backends/server_services.h).
  static Result<std::shared_ptr<LoadedModel>> Load(std::shared_ptr<const config::ModelConfig> config,
                                                   const std::filesystem::path& model_dir,
                                                   int64_t version, const MemoryContext& memory,
                                                   memory::OwnerId model_owner,
                                                   LoadTiming* timing = nullptr,
                                                   backends::ServerServices* services = nullptr);

  ~LoadedModel();
  LoadedModel(const LoadedModel&) = delete;
  LoadedModel& operator=(const LoadedModel&) = delete;

  const std::string& name() const { return config_->name(); }
  int64_t version() const { return version_; }
  const config::ModelConfig& config() const { return *config_; }
  // The config as placed (KIND_AUTO resolved, gpus filled; instance_placement.h), as the backend
  // was given it and as Triton's config endpoints show a loaded model's.
  const config::ModelConfig& placed_config() const { return *shared_placed_config(); }
  std::shared_ptr<const config::ModelConfig> shared_placed_config() const {
    return backend_config_ != nullptr ? backend_config_ : config_;
  }
  // The config, for a caller that must read it without holding the version (InferRouter).
  std::shared_ptr<const config::ModelConfig> shared_config() const { return config_; }
  size_t instance_count() const { return instances_.size(); }
  memory::OwnerId owner() const { return owner_.id(); }

  // Validates `request` against the config and schedules it; `done` then receives, exactly
  // once, the outputs the request asked for (all, when it named none) in the order it named
  // them, with the request's owner, or an error:
  //   - InvalidArgument from validation (request_validator.h), at once, on this thread;
  //   - Unavailable when the queue is full, the request timed out in the queue, or the
  //     version is unloading (scheduler.h gives the messages, which are Triton's);
  //   - the backend's error, naming the model and version.
  // `done` runs on an instance thread or on this thread, before InferAsync returns (the fast
  // path, or an error); see InferCallback for what it must not do.
  // The request's `timeout_us` is honoured as dynamic_batching.default_queue_policy allows.
  void InferAsync(std::shared_ptr<const InferRequest> request, InferCallback done);

  // InferAsync, except for a version whose Shutdown has begun: then nothing is answered or
  // counted, `*done` is left as it was and the result is false, so the caller can find the
  // version that replaced this one (a reload swaps versions between a caller's lookup and its
  // submit) instead of failing the request.
  // `allow_inline` false: the request is never run on the calling thread (the fast path), for
  // callers on a thread that must not be held by an execution.
  bool TryInferAsync(const std::shared_ptr<const InferRequest>& request, InferCallback* done,
                     bool allow_inline = true);

  // InferAsync, waiting for the outcome. REQUIRES: not called from an instance thread (a
  // callback), which could wait on itself.
  Result<InferOutcome> Infer(const InferRequest& request);

  // Stops accepting requests (later ones get Unavailable "... is unloading"), runs every
  // request already queued, waits for executions in flight and joins the instance threads.
  // Idempotent; the destructor calls it. REQUIRES: not called from a callback.
  void Shutdown();

  // Makes every successful outcome hold this version (InferOutcome::version_hold) until it is
  // destroyed, so the version's owners never close under a request's outputs. An outcome
  // dropped on one of the version's instance threads (in a callback) may then be its last
  // reference: `reaper` destroys it in that case. REQUIRES: called before the version takes
  // requests; `reaper` is not null and outlives the version's instance threads: whoever drops
  // the version's last reference other than outcomes calls Shutdown first, before the reaper
  // is destroyed (ModelManager does; after Shutdown nothing runs on an instance thread).
  void HoldVersionInOutcomes(VersionReaper* reaper) { reaper_ = reaper; }

  // Counters of this version's requests and executions.
  const InferenceStatistics& statistics() const { return stats_; }

  // Whether the version can serve now, for the model ready endpoint: OK, or why not. For a
  // backend that ChecksReadiness() its instances are asked (readiness_probe.h: every one must
  // be ready; no answer within ReadinessProbe::kTimeout is "not ready"), blocking the caller
  // that long at most; otherwise OK at once (loaded is ready).
  Status CheckReady() const;
  // CheckReady without waiting: `done` gets its answer once, at once or later on a thread of
  // the probe's (it must not block for long there, nor hold the version: its last reference
  // must not drop there). A version destroyed meanwhile answers "not ready" as it goes.
  void CheckReadyAsync(std::function<void(Status)> done) const;
  // Whether CheckReady asks the backend (and may block).
  bool ChecksReadiness() const { return readiness_ != nullptr; }
  // The first instance's BackendInstance::Available error, or OK: what CheckReady answers at
  // once, before asking the backend; never blocks.
  Status Available() const;

  // Sleeping: see the top of this file. Sleep waits until `deadline` for executions in flight
  // (Unavailable after it); Unsupported for a version whose backend cannot sleep.
  bool CanSleep() const { return sleep_->can_sleep(); }
  // Why it cannot (names the model and the backend); empty when it can.
  const std::string& CannotSleepReason() const { return cannot_sleep_; }
  Status Sleep(backends::SleepLevel level, SleepGate::Clock::time_point deadline) {
    return sleep_->Sleep(level, deadline);
  }
  bool TrySleepIfIdle(backends::SleepLevel level) { return sleep_->TrySleepIfIdle(level); }
  Status Wake() { return sleep_->Wake(); }
  const SleepGate& sleep_gate() const { return *sleep_; }
  const SleepSettings& sleep_settings() const { return sleep_settings_; }
  // Whether an instance of this version runs on `device` (where its weights are).
  bool UsesDevice(memory::Device device) const;
  // The model's ledger owner (the version's parent).
  memory::OwnerId model_owner() const { return model_owner_; }

  // Ready once this version's destruction is complete (its memory returned, its owners
  // closed); wait on it from any thread. Unlike a weak_ptr's expiry, which comes when the last
  // reference goes, before destruction has even begun (and the reaper may run it later, on
  // another thread).
  std::shared_future<void> destroyed() const { return destroyed_.future; }

 private:
  LoadedModel(std::shared_ptr<const config::ModelConfig> config, int64_t version,
              const MemoryContext& memory, memory::OwnerId model_owner, Classifier classifier,
              memory::MemoryQuota quota, SleepSettings sleep_settings);

  // Validates `request`: a QueuedRequest ready to submit, or nullopt once `done` has been
  // given the validation error (counted as a failure).
  std::optional<QueuedRequest> Admit(std::shared_ptr<const InferRequest> request,
                                     InferCallback done);
  // Runs a batch the scheduler formed on instance `index`: as one execution, or, when it
  // could never fit the memory admission governs, as several (PrefixThatFits).
  void RunBatch(size_t index, std::vector<QueuedRequest> batch);
  // Runs `batch` as one execution on instance `index`.
  void RunExecution(size_t index, std::vector<QueuedRequest> batch);
  // How many of `batch`'s first requests to run as one execution on instance `index`: all when
  // the whole is predicted to fit what admission could leave one execution (or nothing says),
  // else the most whose learned peak fits, else 1. REQUIRES: memory_.admission is set.
  size_t PrefixThatFits(size_t index, const std::vector<QueuedRequest>& batch) const;

  struct Instance {
    memory::ScopedOwner owner;  // closed after the backend instance is destroyed
    std::unique_ptr<backends::BackendInstance> backend;
    // What its libraries took outside the pools (released first, before the owner closes).
    memory::NativeCharges native;
    memory::Device device;  // where its executions' memory is admitted (memory/admission.h)
    Instance(memory::ScopedOwner o, std::unique_ptr<backends::BackendInstance> b,
             memory::NativeCharges n, memory::Device d)
        : owner(std::move(o)), backend(std::move(b)), native(std::move(n)), device(d) {}
  };

  // First, so destroyed last: signals the end of the whole destruction.
  struct DestroyedSignal {
    std::promise<void> promise;
    std::shared_future<void> future = promise.get_future().share();
    ~DestroyedSignal() { promise.set_value(); }
  } destroyed_;
  const std::shared_ptr<const config::ModelConfig> config_;
  // config_ as placed (ConfigAsPlaced): what the backend was given; it may keep a pointer.
  std::shared_ptr<const config::ModelConfig> backend_config_;
  const int64_t version_;
  const MemoryContext memory_;
  const memory::OwnerId model_owner_;
  const SleepSettings sleep_settings_;
  InferenceStatistics stats_;  // outlives the scheduler and the executor
  BatchExecutor executor_;
  // Constant after Load. Destroyed in reverse (after the destructor's Shutdown): the
  // scheduler, the instances, then the backend model, then the version's owner is closed.
  memory::ScopedOwner owner_;
  std::unique_ptr<backends::BackendModel> backend_model_;
  // What the backend's libraries took outside the pools while it created the model, one per
  // GPU its instances use (released around backend_model_'s destruction, before owner_ closes).
  std::vector<memory::NativeCharges> native_;
  std::vector<Instance> instances_;
  // Made by Load once the instances exist (never null afterwards); it outlives the scheduler,
  // whose executions pass it.
  std::unique_ptr<SleepGate> sleep_;
  std::string cannot_sleep_;  // set at load
  // Scheduler, or SequenceBatcher for sequence_batching; null until Load has created every
  // instance.
  std::unique_ptr<RequestScheduler> scheduler_;
  // Null for a backend that does not check readiness; destroyed before the instances.
  std::unique_ptr<ReadinessProbe> readiness_;
  // Constant after Load: the backend takes request lists (backend.h), and the model is
  // decoupled (only such backends may be).
  bool request_lists_ = false;
  bool decoupled_ = false;
  bool gpu_inputs_ = false;  // backend_model_->TakesGpuInputs()
  // Set by HoldVersionInOutcomes, constant once requests come: outcomes hold the version.
  VersionReaper* reaper_ = nullptr;
};

}  // namespace vramd::runtime
