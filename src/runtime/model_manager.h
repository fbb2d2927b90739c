// ModelManager: the models of the repositories, each with its lifecycle (model_lifecycle.h)
// and serving versions, and the lookup the request path uses to find the version that serves
// a request. docs/model-control.md is the user's view of what follows.
//
// Model control modes (Triton's):
//   - none: every model loads at start-up; Load and Unload are refused.
//   - explicit: the start-up models named in Options load; then Load and Unload act.
//   - poll: every model loads at start-up; then a thread scans the repositories every
//     poll_interval and loads, reloads or unloads what changed, once the change is complete
//     (repository/repository_watcher.h gives the rule). Load and Unload are refused.
//
// A (re)load: reads the config (or takes the override; config.pbtxt is auto-completed by the
// model's backend first unless Options::auto_complete_config is off), selects versions, waits until what
// an earlier action retired is destroyed (so a model's load and unload hooks never overlap),
// picks the policy (reload_policy.h), loads every selected version, runs model_warmup, and
// only then publishes them; the versions they replace drain and unload. A load that fails
// leaves the serving versions serving (availability-preserving), releases all it allocated and
// shows its reason in the index. Under resource-preserving, the old versions drain and unload
// first and requests arriving meanwhile wait (Find) up to the model's unavailable wait.
//
// Thread safety: all methods are safe from any thread. The request path takes a shared lock
// long enough to copy a shared_ptr (or to wait out a resource-preserving gap). Actions on one
// model are serialized by its action lock; different models load in parallel, at most
// load_thread_count at a time. The map's lock is never held while loading or unloading.
//
// Lock order. A thread holding one of the manager's locks may acquire only those to its right:
//   poll_mu_  ->  one ActionSlot::mu (a model's action lock)  ->  mu_  ->  parked_mu_
// actions_mu_ and retired_mu_ are leaves: nothing is acquired while either is held. actions_mu_
// is taken with at most poll_mu_ held (ActionGuard), retired_mu_ with at most poll_mu_ and an
// action lock. Never held together: two action locks (a thread acts on one model at a time);
// actions_mu_ and an action lock (ActionGuard lets go of one before it takes the other);
// retired_mu_ and mu_ or parked_mu_. The one exception is TryAction (the memory pressure
// relief, which may run inside a load's action): it takes a second model's action lock, under
// actions_mu_, only when no one holds or waits for it, so it never waits for one. A load slot
// (load_thread_count) is waited for holding an action lock (and poll_mu_, polling), nothing
// else. Beyond an action lock and poll_mu_, no lock of the manager is held while a backend
// loads, a version shuts down or is destroyed, a FindAsync callback runs, or a thread waits
// for retired versions to be destroyed.
// The members below say this order with ACQUIRED_BEFORE (core/thread_annotations.h), but clang
// checks it only under -Wthread-safety-beta, which the build does not turn on (there, parked_mu_
// taken before mu_ fails: "mutex 'mu_' must be acquired before 'parked_mu_'"); the ordinary
// -Wthread-safety build checks GUARDED_BY, REQUIRES and EXCLUDES. An action lock is a mutex per model, which no annotation can name, so
// action_ stands for "one action lock held" (ActionGuard takes both): REQUIRES(action_) checks
// that a method runs inside an ActionGuard, not that the guard is for the same model.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <semaphore>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

#include "config/model_config.pb.h"
#include "repository/repository_watcher.h"
#include "core/load_timing.h"
#include "core/mutex.h"
#include "core/request_trace.h"
#include "core/status.h"
#include "core/thread_annotations.h"
#include "runtime/loaded_model.h"
#include "runtime/memory_context.h"
#include "runtime/model_lifecycle.h"
#include "runtime/override_directory.h"
#include "runtime/reload_policy.h"
#include "runtime/rollback_rules.h"
#include "runtime/sleep_keeper.h"

namespace vramd::repository {
class RepositoryWatcher;
}

namespace vramd::runtime {

class CustomMetricsRegistry;  // custom_metrics.h
class ModelServices;          // model_services.h

enum class ModelControlMode { kNone, kPoll, kExplicit };

// One row of the repository index: a version, or the model alone (version 0) when it has no
// version to show.
struct ModelIndexEntry {
  std::string name;
  int64_t version = 0;
  std::string state;  // Triton's: READY, LOADING, UNLOADING or UNAVAILABLE
  LifecycleState lifecycle = LifecycleState::kUnloaded;  // vramd's, exact
  std::string reason;
  // A ready version whose backend can sleep: "awake", "asleep", "falling asleep" or "waking"
  // (sleep_gate.h); empty otherwise. An asleep version is READY (a request wakes it), with the
  // reason saying it sleeps.
  std::string sleep;
};

// What a model's last load did: the policy and why, the footprint predicted and measured,
// and where the time went.
struct LoadReport {
  bool ok = false;
  std::string error;
  std::vector<int64_t> versions;
  ReloadPolicy policy = ReloadPolicy::kAvailabilityPreserving;
  std::string policy_reason;
  Footprint predicted;
  DeviceBytes measured;  // live bytes of the new versions once warmed up (empty on failure)
  std::vector<LoadPhase> phases;  // load_timing.h; the manager adds warmup, switch, drain
  double total_seconds = 0;
  std::chrono::steady_clock::time_point started;  // the phases' clock
  std::chrono::system_clock::time_point finished;
};

// One rollback: which versions went back to which, why, and when.
struct RollbackRecord {
  std::string model;
  std::vector<int64_t> from, to;
  std::string to_model;  // a fallback model, when the rollback went to one (`to` is empty)
  std::string rule;     // rollback_rules.h's names, or "manual" / "webhook"
  std::string figures;  // what the rule saw, or who asked
  std::chrono::steady_clock::time_point started;
  double seconds = 0;
};

struct ModelLifecycleView {
  std::string name;
  LifecycleState state = LifecycleState::kUnloaded;
  std::string reason;
  std::vector<int64_t> serving;  // ready versions
  std::vector<LifecycleTransition> history;
  std::optional<LoadReport> last_load;
  bool held = false;  // no automatic change until released (ModelManager::Hold, a rollback)
  // While a rollback watch runs, what a rollback would go back to: the versions kept loaded
  // (`rollback_kept`, each "warm" or asleep), else the versions it would load again from their
  // files (`rollback_reload`), else the fallback model (empty: none).
  std::vector<int64_t> rollback_kept;
  std::vector<int64_t> rollback_kept_asleep;  // those of rollback_kept not awake
  std::vector<int64_t> rollback_reload;
  std::string rollback_fallback;
  // Set after a rollback to a fallback model: that model answers this one's requests.
  std::string served_by;
};

class ModelManager {
 public:
  // The longest model name Load and Unload accept: a model is a directory, and a directory
  // name has at most NAME_MAX (255) bytes.
  static constexpr size_t kMaxModelNameBytes = 255;

  struct Options {
    std::vector<std::filesystem::path> repositories;
    // Stop at the first model that fails to load and return its error from Create.
    bool exit_on_error = false;
    // Required: where models' memory is accounted. Must outlive the manager.
    MemoryContext memory;
    ModelControlMode model_control_mode = ModelControlMode::kNone;
    // Explicit mode only: the models Create loads ("*" = all); the others wait for Load.
    std::vector<std::string> startup_models;
    // Poll mode: time between two scans of the repositories.
    std::chrono::milliseconds poll_interval{15000};
    // Loads that may run at once (start-up, poll, and concurrent Load calls).
    int load_thread_count = 4;
    // Server-wide reload settings; a model's config parameters override them.
    ReloadSettings reload;
    // How much memory a device ("cpu", "cuda:0") could still give; DeviceFreeBytes when unset.
    std::function<Result<int64_t>(const std::string&)> free_bytes;
    // How long an action waits for requests still holding versions it retired (so that the
    // model's next load does not overlap their unload) before it fails as Unavailable.
    std::chrono::milliseconds retire_timeout{30000};
    // Where models' custom metrics are kept (ModelServices::MetricFamily); null: models get
    // none. Must outlive the manager.
    CustomMetricsRegistry* custom_metrics = nullptr;
    // Triton's auto-complete: a model's backend completes its config.pbtxt (inputs, outputs,
    // max_batch_size, batching: Backend::AutoCompleteConfig) before the config is validated;
    // a config override is taken as given. false: --disable-auto-complete-config.
    bool auto_complete_config = true;
    // Called after each load, reload and unload, once its pools are trimmed (the server looks
    // at its memory then: memory/unattributed_alarm.h); may be empty. From the acting thread.
    std::function<void()> memory_settled;
    // Called once each load or reload attempt ends, ok or not, with its report (a lifecycle
    // trace: server/trace/tracer.h); may be empty. From the loading thread; must not block.
    std::function<void(const std::string& model, const LoadReport& report)> load_finished;
    // Automatic rollback (rollback_rules.h, docs/rollback.md): how often the watches of
    // versions that just went live are checked, and the utilization of the busiest GPU in use
    // (a share, 0..1; nullopt: unknown), read at each check; may be empty.
    std::chrono::milliseconds rollback_check_interval{1000};
    std::function<std::optional<double>()> gpu_utilization;
    // Called once each rollback has switched back (a lifecycle trace, the log's line is the
    // manager's own); may be empty. From the thread that rolled back.
    std::function<void(const RollbackRecord& record)> rolled_back;
    // Traces the calls models make on behalf of traced requests (core/request_trace.h); null:
    // they are not traced. Must outlive the manager.
    ChildTracer* child_tracer = nullptr;
  };

  // Scans the repositories and loads the start-up models (in parallel). A broken model is
  // recorded (with its file and line where the config is at fault) and the others still load,
  // unless options.exit_on_error. A repository that is missing fails Create. Afterwards the
  // pools are trimmed, so memory used only while loading goes back to the system. In poll
  // mode the polling thread starts.
  static Result<std::unique_ptr<ModelManager>> Create(const Options& options);

  // Stops polling, then unloads every model.
  ~ModelManager();

  // Explicit mode: (re)loads `name` from the repositories, with `config_override` in place of
  // its config.pbtxt when given (validated as one). Returns once the new versions serve, or
  // with the error (the serving versions untouched where the policy kept them). NotFound when
  // no repository holds the model; InvalidArgument in the other modes and for a name longer
  // than kMaxModelNameBytes. A name no repository holds leaves nothing behind in the manager.
  // With `files` (Triton's "file:" load parameters; they need `config_override`), the model
  // loads from a directory of those files instead (override_directory.h), whether or not a
  // repository holds it; the directory goes with the versions loaded from it.
  Status Load(std::string_view name,
              std::shared_ptr<const config::ModelConfig> config_override = nullptr,
              const ModelFileOverrides& files = {}) EXCLUDES(action_, mu_);

  // Explicit mode: stops serving `name`: its versions leave the map, drain what they hold,
  // and unload; the model's ledger owners close and the pools are trimmed. A model that is not
  // loaded (or unknown) is a success, as in Triton, and leaves nothing behind. InvalidArgument
  // in the other modes and for a name longer than kMaxModelNameBytes. With `unload_dependents`
  // (Triton's parameter), the loaded ensembles that use `name` as a step, and theirs, are
  // unloaded first; without it they stay, and their requests fail naming the missing step.
  Status Unload(std::string_view name, bool unload_dependents = false) EXCLUDES(action_, mu_);

  ModelControlMode model_control_mode() const { return mode_; }

  // Sleeping models (docs/memory.md): puts the ready versions of `name` (`version` alone when
  // not 0) to sleep at `level`, each waiting up to `wait` for its executions in flight; or
  // wakes them. NotFound for a model or version that is not ready; Unsupported naming the
  // backend when it cannot sleep; the backend's error otherwise (Sleep: the version stays
  // awake; Wake: it stays asleep). Any control mode: sleeping loads and unloads nothing.
  Status Sleep(std::string_view name, int64_t version, backends::SleepLevel level,
               std::chrono::milliseconds wait) const EXCLUDES(mu_);
  Status Wake(std::string_view name, int64_t version) const EXCLUDES(mu_);
  // The keeper of idle and pressure sleeps (sleep_keeper.h), for its counters.
  const SleepKeeper& sleep_keeper() const { return *keeper_; }

  // Rollback (docs/rollback.md). Puts back what served before the last reload, and holds the
  // model there: a poll does not load the rolled-back change again until Release. What goes
  // back, the first that can: the versions a watch kept loaded (woken first where asleep:
  // beside the bad versions when memory allows, else after they unload); the versions it
  // unloaded, loaded again from their files when those are as they were; the watch's fallback
  // model, which then answers the model's requests. `rule` and `figures` say why (the log
  // line, the lifecycle history, the index reason and vramd_rollbacks_total). InvalidArgument
  // naming why when nothing can go back; NotFound for an unknown model. Any control mode.
  Status Rollback(std::string_view name, std::string rule, std::string figures)
      EXCLUDES(action_, mu_, parked_mu_, retired_mu_);
  // Hold: no automatic change (poll reloads, automatic rollbacks) until released; an explicit
  // load still acts. Release in poll mode also loads a change the hold kept back.
  Status Hold(std::string_view name, bool hold) EXCLUDES(action_, mu_, parked_mu_, retired_mu_);
  // A leak report (the ledger's leak callback): when `owner_path` is under a serving version of
  // a watched model ("server/model:M/version:V/..."), its leak rule fires at the next check.
  // Takes only a lock of its own: safe from any thread, whatever it holds.
  void NoteLeak(const std::string& owner_path, size_t bytes) EXCLUDES(leak_mu_);
  // Rollbacks so far by model and rule, for the metrics page.
  std::map<std::pair<std::string, std::string>, uint64_t> RollbackCounts() const
      EXCLUDES(rollback_mu_);

  // Options::custom_metrics, for the metrics page; may be null.
  CustomMetricsRegistry* custom_metrics() const { return custom_metrics_; }

  // The version serving `name`: `version`, or the highest ready version when it is 0. During a
  // resource-preserving reload it waits for the new versions up to the model's unavailable
  // wait (as FindAsync, blocking). NotFound for an unknown model or version; Unavailable for
  // one that is not ready. For metadata and statistics: requests go through InferRouter
  // (infer_router.h), which never blocks its caller. REQUIRES: not called on the releasing
  // thread (an InferRouter callback or build step), which it may wait for.
  Result<std::shared_ptr<LoadedModel>> Find(std::string_view name, int64_t version) const
      EXCLUDES(mu_, parked_mu_);

  // For tests: what destruction does first, done now: stops the releasing thread, which
  // answers every request parked in a resource-preserving gap (Unavailable), so that a test
  // sees that answer while a reload still holds the gap open. REQUIRES: nothing parks
  // afterwards (it would never be answered).
  void TEST_StopReleasingParked() { releaser_ = std::jthread(); }

 private:
  // The request path's lookups, for InferRouter alone: front ends reach a model through it,
  // so that following a reload stays in runtime/.
  friend class InferRouter;

  // Find's answer when it needs no waiting; nullopt during a resource-preserving gap (then
  // FindAsync parks the caller's work, Find blocks). The request path's cheap first try.
  std::optional<Result<std::shared_ptr<LoadedModel>>> TryFind(std::string_view name,
                                                              int64_t version) const
      EXCLUDES(mu_);
  // Find without blocking the caller: `done` gets Find's answer exactly once: at once, on this
  // thread (waited = false), or, during a resource-preserving gap, once the gap ends or the
  // model's unavailable wait runs out, or when the manager stops, on the manager's releasing
  // thread (waited = true). `done` must not block for long there: it holds up the other parked
  // requests.
  using FindCallback =
      std::function<void(Result<std::shared_ptr<LoadedModel>> found, bool waited)>;
  void FindAsync(std::string_view name, int64_t version, FindCallback done) const
      EXCLUDES(mu_, parked_mu_);

 public:
  // The model's config: as its latest serving version was placed (KIND_AUTO resolved, gpus
  // filled; LoadedModel::placed_config), else as written; NotFound if unknown, Unavailable if
  // the model has no usable config.
  Result<std::shared_ptr<const config::ModelConfig>> FindConfig(std::string_view name) const
      EXCLUDES(mu_);

  // Ready versions of `name`, ascending; NotFound for an unknown model.
  Result<std::vector<int64_t>> ReadyVersions(std::string_view name) const EXCLUDES(mu_);

  // Every ready version of every model, sorted by model name, then version. The pointers keep
  // their versions alive while the caller holds them (for statistics and metrics).
  std::vector<std::shared_ptr<LoadedModel>> LoadedVersions() const EXCLUDES(mu_);

  std::vector<ModelIndexEntry> Index() const EXCLUDES(mu_);

  // The lifecycle of `name` (state, history, last load); unloaded with reason "not loaded" for
  // a model of the repositories never loaded; nullopt for a name no repository holds.
  std::optional<ModelLifecycleView> Lifecycle(std::string_view name) const EXCLUDES(mu_);

  // True when every model found in the repositories (and not unloaded on request) has at least
  // one ready version and none failed (Triton's strict readiness).
  bool AllModelsReady() const EXCLUDES(mu_);

  // Poll mode: one scan and the actions it calls for, now (the polling thread calls it too).
  Status PollOnce() EXCLUDES(poll_mu_, action_);

  // For tests: how many names the manager keeps state for (model entries plus action locks).
  // Bounded by the models the repositories have held, plus the names with an action running.
  size_t TEST_TrackedNames() const EXCLUDES(mu_, actions_mu_);

 private:
  using Clock = std::chrono::steady_clock;

  // One load's versions, under one model-level ledger owner.
  struct Versions {
    // Where they loaded from, and the files of their version folders as the load began (a
    // rollback loads them again only while those are unchanged); stamps unset when unreadable.
    std::filesystem::path dir;
    std::optional<std::vector<repository::FileStamp>> stamps;
    // The files the versions loaded from when a load request carried them: first, so removed
    // after everything else here is destroyed.
    std::shared_ptr<const OverrideDirectory> files;
    memory::ScopedOwner owner;  // closed once the versions are destroyed
    std::shared_ptr<const config::ModelConfig> config;  // null when the config is unusable
    std::map<int64_t, std::shared_ptr<LoadedModel>> ready;
    std::map<int64_t, std::string> failed;  // version -> reason
  };

  // How to load versions again that a watch unloaded: what LoadVersions needs, as it was.
  struct ReloadSource {
    std::shared_ptr<const OverrideDirectory> files;  // a load request's files, kept on disk
    std::shared_ptr<const config::ModelConfig> config;
    std::filesystem::path dir;
    std::vector<int64_t> versions;
    std::vector<repository::FileStamp> stamps;
    std::optional<DeviceBytes> measured;
  };
  // `versions`' way back once they unload; nullopt when their files could not be read.
  static std::optional<ReloadSource> SourceOf(const Versions& versions,
                                              std::optional<DeviceBytes> measured);
  // Whether `source`'s version folders are still as they were; InvalidArgument naming a change.
  static Status CheckUnchanged(const std::string& model, const ReloadSource& source);

  // A model: all of it guarded by mu_, changed (gap_waiters aside) with mu_ held exclusively
  // and, the destructor aside, under the model's action lock. Not checked field by field (a
  // field cannot name the manager's mu_); models_, which holds the entries, is GUARDED_BY(mu_).
  struct ModelEntry {
    ModelLifecycle lifecycle;
    Versions serving;
    std::vector<int64_t> loading;  // versions a load in progress is bringing up
    // A resource-preserving reload's gap: nothing serves; Find waits up to gap_wait.
    bool gap = false;
    std::chrono::milliseconds gap_wait{0};
    uint64_t gap_generation = 0;  // counts the gaps that ended
    // FindAsync (and Find) calls parked in the gap and not yet answered: atomic, changed with
    // mu_ held shared; a fall is announced on gap_answered_.
    mutable std::atomic<int> gap_waiters{0};
    bool unloaded_on_request = false;  // not counted by AllModelsReady
    // Rollback: the versions the last reload replaced, kept serving-ready (not shut down; asleep
    // under vramd.rollback.keep "asleep", or when the sleep keeper needed their memory) while
    // `watch` runs on the new ones, or, unloaded (keep "reload", or a resource-preserving
    // reload), how to load them again; all empty when the model does not watch. `held`: no
    // automatic change (Hold, or after a rollback) until released.
    Versions previous;
    std::optional<ReloadSource> previous_files;
    std::optional<RollbackWatch> watch;
    bool held = false;
    bool change_held_back = false;  // a poll saw a change while held
    Clock::time_point cooldown_until{};
    std::optional<DeviceBytes> measured;  // the last successful load's footprint
    std::optional<LoadReport> last_load;
    // After a rollback to a fallback model: its name. Nothing of this model serves; requests
    // for it go to that model's highest ready version (FindLocked). A load or unload ends it.
    std::string served_by;
  };

  // Versions taken out of the map: their owner closes once none of them is referenced.
  struct Retired {
    std::string model;
    Versions versions;
    std::vector<std::shared_future<void>> destroyed;  // LoadedModel::destroyed()
  };

  // FindAsync calls waiting out a resource-preserving gap.
  struct Parked {
    std::string name;
    int64_t version = 0;
    uint64_t generation = 0;  // of the gap they wait for
    Clock::time_point deadline;
    std::chrono::milliseconds wait{0};
    FindCallback done;
  };

  struct ActionSlot {
    Mutex mu;  // the action lock proper: held for a whole action on the model
    // Guards holding or waiting for `mu`; changed under actions_mu_ (not checked: a field
    // cannot name the manager's actions_mu_; actions_ itself is GUARDED_BY it).
    int users = 0;
  };
  // Not a mutex: what the analysis knows of the action locks (see the top of this file).
  struct CAPABILITY("action lock") ActionCapability {};
  // A model's action lock, held for the guard's life (for the analysis: action_). The lock
  // exists only while a guard holds or waits for it, so a name that never becomes a model
  // leaves nothing behind.
  class ActionGuard;
  // One (re)load of a model in named steps (model_manager.cc): prepare, drain (resource-
  // preserving), attempt, then switch or fail. Lives for one LoadLocked call.
  class LoadRun;

  explicit ModelManager(const Options& options);

  // The methods below that act on one model REQUIRE its action lock (an ActionGuard).
  // The load proper, under the model's action lock and a load slot: LoadRun's steps in order.
  Status LoadLocked(const std::string& name,
                    std::shared_ptr<const config::ModelConfig> config_override,
                    const ModelFileOverrides& files = {}) REQUIRES(action_);
  Status UnloadLocked(const std::string& name, bool on_request) REQUIRES(action_);
  // Explicit mode: loads the step models of ensemble `name` (its override's, else its
  // config.pbtxt's) that have no ready version, theirs first; an error names the step.
  Status LoadEnsembleSteps(const std::string& name, const config::ModelConfig* config_override,
                           int depth = 0) EXCLUDES(action_, mu_);
  // Loads `versions` with `config` into a fresh Versions; warms each ready one up.
  Versions LoadVersions(const std::string& name, std::shared_ptr<const config::ModelConfig> config,
                        const std::filesystem::path& model_dir,
                        const std::vector<int64_t>& versions, LoadTiming* timing) const
      EXCLUDES(mu_, parked_mu_, retired_mu_);
  // The unload half of Unload and of a resource-preserving reload, for versions already taken
  // out of the map with the model draining: retires `old`, moves the model to unloading with
  // `reason`, and waits for the versions' destruction (WaitRetired, whose error it returns).
  Status DrainAndUnload(const std::string& name, Versions old, std::string reason)
      REQUIRES(action_);
  // Shuts `versions` down (queued requests run) and hands them to the retired list, whose
  // owner closes once no request holds them.
  void Retire(const std::string& model, Versions versions)
      EXCLUDES(mu_, parked_mu_, retired_mu_);
  // Closes the owners of retired versions that are destroyed.
  void SweepRetired() EXCLUDES(retired_mu_);
  // Waits until nothing retired of `model` is alive, up to retire_timeout; Unavailable, with
  // how many are left, after that.
  Status WaitRetired(const std::string& model) REQUIRES(action_);
  // Waits until every retired version (of `model`, or of all models when nullopt) is destroyed
  // or `deadline` passes, then sweeps; how many are still alive. With `model`, under its
  // action lock (so nothing of it joins the list meanwhile); without, alone (the destructor).
  size_t AwaitRetired(std::optional<std::string_view> model, Clock::time_point deadline)
      EXCLUDES(mu_, parked_mu_, retired_mu_);
  // Before a new gap opens: lets the requests parked in the model's previous gap get their
  // answer first, for at most kGapWaitersGrace (model_manager.cc).
  void LetGapWaitersLook(const std::string& name) REQUIRES(action_) EXCLUDES(mu_, parked_mu_);
  // Ends a resource-preserving gap (if one is open).
  void EndGap(ModelEntry& entry) REQUIRES(mu_);
  // Applies `change` to the model's entry with mu_ held exclusively and wakes the releasing
  // thread. `change` must not block, log aside (it runs under the map lock). A std::function
  // hides that from the analysis: a `change` that calls a REQUIRES(mu_) helper says
  // REQUIRES(mu_) itself, as a wait's predicate does (core/mutex.h).
  void Update(const std::string& name, const std::function<void(ModelEntry&)>& change)
      EXCLUDES(mu_, parked_mu_);
  // The ready versions of `name` (`version` alone when not 0); NotFound when there are none.
  Result<std::vector<std::shared_ptr<LoadedModel>>> ReadyVersionsOf(std::string_view name,
                                                                    int64_t version) const
      EXCLUDES(mu_);
  // Find's answer without waiting.
  Result<std::shared_ptr<LoadedModel>> FindLocked(std::string_view name, int64_t version) const
      REQUIRES_SHARED(mu_);
  // The releasing thread: answers parked FindAsync calls when their gap ends or times out.
  void ReleaseParked(std::stop_token stop) EXCLUDES(mu_, parked_mu_);
  // What the sleep keeper may put to sleep: the ready versions (LoadedVersions) and those a
  // rollback watch keeps, which it finds idle first (they serve nothing).
  std::vector<std::shared_ptr<LoadedModel>> SleepCandidates() const EXCLUDES(mu_);
  // Relief's second way (the allocator's thread, inside its relief call): unloads the versions
  // that one model's rollback watch keeps awake on `device`, of a model other than `asking`'s
  // and whose action lock is free, and returns once they are destroyed. The watch goes on:
  // a rollback loads them again from their files. Versions that could not be loaded again
  // (no file stamps) are not released. Whether any were.
  bool ReleaseKept(memory::Device device, size_t size, memory::OwnerId asking)
      EXCLUDES(mu_, parked_mu_, retired_mu_, actions_mu_);
  // Runs `action` (which may be annotated REQUIRES(action_)) under `name`'s action lock if no
  // one holds or waits for it; whether it ran.
  // For ReleaseKept, which may run inside another model's action and so never waits for a
  // second action lock (the lock order at the top of this file).
  bool TryAction(const std::string& name, const std::function<void()>& action)
      EXCLUDES(actions_mu_);
  // The rollback monitor: every rollback_check_interval, feeds each watch its versions'
  // statistics and the GPU utilization, ends watches whose time is up (retiring the versions
  // they kept), and rolls back where a rule fired.
  void MonitorRollbacks(std::stop_token stop) EXCLUDES(action_, mu_, parked_mu_, retired_mu_);
  // Rollback's three ways back (under the model's action lock); each switches the model and
  // fills record.to, or fails leaving the serving versions serving where it can.
  Status PutBackKept(const std::string& model, RollbackRecord& record, Versions* bad)
      REQUIRES(action_) EXCLUDES(mu_, parked_mu_, retired_mu_);
  Status PutBackFromFiles(const std::string& model, const ReloadSource& source,
                          RollbackRecord& record, Versions* bad)
      REQUIRES(action_) EXCLUDES(mu_, parked_mu_, retired_mu_);
  Status SwitchToFallback(const std::string& model, const std::string& fallback,
                          RollbackRecord& record, Versions* bad)
      REQUIRES(action_) EXCLUDES(mu_, parked_mu_);
  // The bad versions leave the map first (a resource-preserving gap opens; requests wait in it
  // up to `wait`) and unload; then `bring_back` makes what goes back, published with the gap's
  // end. Its error, if any, is returned after the gap ends with nothing serving.
  Status PutBackAfterUnloading(const std::string& model, RollbackRecord& record,
                               std::chrono::milliseconds wait,
                               const std::function<Result<Versions>()>& bring_back)
      REQUIRES(action_) EXCLUDES(mu_, parked_mu_, retired_mu_);
  // Takes the serving versions out of `entry`, leaving their config (metadata and the index
  // still describe the model while nothing serves).
  static Versions TakeServing(ModelEntry& entry);
  // Ends the model's rollback watch: returns the versions it kept loaded (the caller retires
  // them) and forgets the rest (the files it could load again, the rules).
  static Versions EndWatch(ModelEntry& entry);
  // The entry's side of every rollback: the watch ends, the model is held and cools down.
  void MarkRolledBack(ModelEntry& entry, const RollbackRecord& record) REQUIRES(mu_);
  void CheckRollbacks() EXCLUDES(action_, mu_, parked_mu_, retired_mu_);
  // The polling thread: PollOnce every poll_interval until stopped.
  void PollUntilStopped(std::stop_token stop) EXCLUDES(poll_mu_, action_);
  Status CheckMode(std::string_view action) const;

  // Constant after construction.
  const MemoryContext memory_;
  const ModelControlMode mode_;
  const std::vector<std::filesystem::path> repositories_;
  const ReloadSettings reload_defaults_;
  const std::function<Result<int64_t>(const std::string&)> free_bytes_;
  const std::chrono::milliseconds retire_timeout_;
  const std::chrono::milliseconds poll_interval_;
  const int load_thread_count_;
  const bool auto_complete_config_;
  CustomMetricsRegistry* const custom_metrics_;
  const std::function<void()> memory_settled_;
  const std::function<void(const std::string&, const LoadReport&)> load_finished_;
  // Trims the pools (what a load or unload used and freed goes back) and calls memory_settled_;
  // returns the bytes trimmed.
  size_t SettleMemory();
  // What the versions' backends may ask of the server, given to every LoadedModel::Load; made
  // here because it needs `this`. Destroyed after the threads below and after the destructor
  // unloaded every version, so after every model that holds it.
  const std::unique_ptr<ModelServices> services_;

  // Synchronized by itself: taken and given back under an action lock.
  std::counting_semaphore<> load_slots_;

  // The lock order at the top of this file, as far as annotations say it (checked only under
  // -Wthread-safety-beta; actions_mu_ and retired_mu_ are leaves, which no annotation says).
  // A leaf.
  mutable Mutex actions_mu_;
  std::map<std::string, ActionSlot, std::less<>> actions_ GUARDED_BY(actions_mu_);

  // One model's action lock held (ActionGuard); see ActionCapability.
  ActionCapability action_ ACQUIRED_BEFORE(mu_, retired_mu_);

  mutable SharedMutex mu_ ACQUIRED_BEFORE(parked_mu_);
  std::map<std::string, ModelEntry, std::less<>> models_ GUARDED_BY(mu_);

  // A leaf.
  Mutex retired_mu_;
  std::vector<Retired> retired_ GUARDED_BY(retired_mu_);

  // Taken under mu_ by FindAsync, never the other way round.
  mutable Mutex parked_mu_;
  mutable std::condition_variable_any parked_cv_;  // wakes the releasing thread; parked_mu_
  std::condition_variable gap_answered_;  // a ModelEntry::gap_waiters fell; with parked_mu_
  mutable std::vector<Parked> parked_ GUARDED_BY(parked_mu_);
  mutable bool parked_dirty_ GUARDED_BY(parked_mu_) = false;  // an entry changed

  // The first lock of the order; serializes PollOnce.
  Mutex poll_mu_ ACQUIRED_BEFORE(action_, actions_mu_);
  // Poll mode only; set by Create before the polling thread starts, used under poll_mu_.
  std::unique_ptr<repository::RepositoryWatcher> watcher_ PT_GUARDED_BY(poll_mu_);

  // Idle sleeps, and sleeps under memory pressure (relief_): its thread stops before the
  // versions unload.
  std::unique_ptr<SleepKeeper> keeper_;
  // The allocator's pressure relief while installed_relief_ (memory/allocator.h): the sleep
  // keeper puts an idle version of another model to sleep; when none can sleep, the versions
  // another model's rollback watch keeps awake are released (ReleaseKept). Sleeping comes first:
  // a wake undoes it, where a released version must be loaded again for a rollback.
  class Relief final : public memory::Allocator::PressureRelief {
   public:
    explicit Relief(ModelManager* manager) : manager_(manager) {}
    bool Relieve(memory::Device device, size_t size, memory::OwnerId asking) override {
      return manager_->keeper_->Relieve(device, size, asking) ||
             manager_->ReleaseKept(device, size, asking);
    }

   private:
    ModelManager* const manager_;
  };
  Relief relief_{this};
  bool installed_relief_ = false;  // constant after construction

  // Threads, last: stopped (and joined) first.
  // Destroys a version whose last reference drops on one of its own instance threads
  // (LoadedModel::HoldVersionInOutcomes); the destructor shuts every version down before it.
  mutable VersionReaper reaper_;  // synchronized by itself
  const std::chrono::milliseconds rollback_check_interval_;
  const std::function<std::optional<double>()> gpu_utilization_;
  const std::function<void(const RollbackRecord&)> rolled_back_;
  // Leak reports waiting for the next check (NoteLeak): model, version, what leaked. A leaf lock.
  Mutex leak_mu_;
  std::vector<std::tuple<std::string, int64_t, std::string>> pending_leaks_ GUARDED_BY(leak_mu_);
  mutable Mutex rollback_mu_;
  std::map<std::pair<std::string, std::string>, uint64_t> rollback_counts_
      GUARDED_BY(rollback_mu_);
  std::jthread releaser_;  // answers parked FindAsync calls
  std::jthread rollback_monitor_;
  std::jthread poller_;  // last: stops (and joins) first
};

}  // namespace vramd::runtime
