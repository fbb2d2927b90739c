#include "runtime/model_manager.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <future>
#include <set>
#include <thread>
#include <tuple>
#include <utility>

#include "backends/backend.h"
#include "config/model_config_parser.h"
#include "core/mutex.h"
#include "repository/model_repository.h"
#include "repository/repository_watcher.h"
#include "runtime/model_services.h"
#include "runtime/model_warmup.h"

namespace vramd::runtime {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Runs work(i) for i in [0, n) on up to `threads` threads.
void ParallelFor(size_t n, int threads, const std::function<void(size_t)>& work) {
  std::atomic<size_t> next{0};
  auto loop = [&] {
    for (size_t i = next++; i < n; i = next++) work(i);
  };
  std::vector<std::jthread> pool;
  const size_t count = std::min<size_t>(n, static_cast<size_t>(std::max(1, threads)));
  for (size_t t = 1; t < count; ++t) pool.emplace_back(loop);
  loop();
}

// Where a load of `config` would place its instances, for the footprint prediction: the backend's
// target, as the load asks it (loaded_model.cc). A backend that cannot be found leaves no GPU:
// that load is refused, naming the backend.
PlacementTarget PlacementTargetOf(const config::ModelConfig& config) {
  auto backend = backends::FindBackend(config);
  return backend.ok() ? PlacementTargetFor(**backend) : PlacementTarget{};
}

struct ModelFiles {
  fs::path dir;
  std::shared_ptr<const config::ModelConfig> config;
  std::vector<int64_t> versions;
};

// Triton's auto-complete of the backend: a config that names neither `backend` nor `platform`
// takes them from the model's file in its highest version folder (default_model_filename, else
// Triton's default names): model.py -> python, model.pt -> pytorch, model.safetensors -> mlp,
// and Triton's other frameworks' files to their backends, so that the error names the backend.
void CompleteBackendFromFiles(const fs::path& dir, config::ModelConfig* config) {
  if (!config->backend().empty() || !config->platform().empty()) return;
  struct Known {
    const char* file;
    const char* backend;
    const char* platform;
  };
  static constexpr Known kKnown[] = {
      {"model.py", "python", ""},          {"model.pt", "pytorch", ""},
      {"model.safetensors", "mlp", ""},    {"model.onnx", "onnxruntime", ""},
      {"model.plan", "tensorrt", ""},      {"model.savedmodel", "", "tensorflow_savedmodel"},
      {"model.graphdef", "", "tensorflow_graphdef"},
  };
  auto versions = repository::ListVersions(dir);
  std::sort(versions.rbegin(), versions.rend());
  const std::string& named = config->default_model_filename();
  for (int64_t version : versions) {
    const fs::path folder = dir / std::to_string(version);
    for (const Known& known : kKnown) {
      std::error_code ec;
      // A default_model_filename replaces the default name of its kind (model.pt -> net.pt).
      const bool match =
          named.empty() ? fs::exists(folder / known.file, ec)
                        : fs::path(named).extension() == fs::path(known.file).extension() &&
                              fs::exists(folder / named, ec);
      if (!match) continue;
      config->set_backend(known.backend);
      config->set_platform(known.platform);
      return;
    }
  }
}

// Triton's auto-complete: the backend from the model's files where the config names none
// (CompleteBackendFromFiles), then the model's backend completes the config (python: the
// model's auto_complete_config) before it is validated. A config whose backend cannot be found
// yet is left alone (validation and the load name what is wrong). Errors name the model.
Status AutoComplete(const fs::path& dir, const std::string& name, config::ModelConfig* config) {
  if (config->name().empty()) config->set_name(name);  // as Triton fills it in first
  CompleteBackendFromFiles(dir, config);
  auto backend = backends::FindBackend(*config);
  if (!backend.ok()) return Status::Ok();
  const auto versions =
      repository::SelectVersions(config->version_policy(), repository::ListVersions(dir));
  Status completed =
      (*backend)->AutoCompleteConfig(dir, versions.empty() ? 0 : versions.back(), config);
  if (!completed.ok()) {
    return Status::InvalidArgument(
        fmt::format("model '{}': auto-completing its config: {}", name, completed.message()));
  }
  return Status::Ok();
}

// Finds `name` in the repositories and reads its config (or takes `config_override`), selects
// its versions. NotFound when no repository has it; InvalidArgument (with file:line where the
// config is at fault) for an unusable model. `config` is set whenever the config was usable.
// `auto_complete`: config.pbtxt (not an override) is auto-completed first (AutoComplete).
// `override_dir` (null: none) is where a load request's files were written: the model loads
// from there, with its config override, whatever the repositories hold.
Status ReadModel(const std::vector<fs::path>& repositories, const std::string& name,
                 std::shared_ptr<const config::ModelConfig> config_override, bool auto_complete,
                 const OverrideDirectory* override_dir, ModelFiles* files) {
  if (override_dir != nullptr) {
    files->dir = override_dir->path();
  } else {
    VRAMD_ASSIGN_OR_RETURN(auto dirs, repository::ScanRepositories(repositories));
    const repository::ModelDirectory* dir = nullptr;
    for (const auto& d : dirs) {
      if (d.name == name) dir = &d;
    }
    if (dir == nullptr) {
      return Status::NotFound("no model repository holds a model of that name");
    }
    if (!dir->status.ok()) return Status::InvalidArgument(dir->status.message());
    files->dir = dir->path;
  }
  auto config = std::make_shared<config::ModelConfig>();
  std::string where = "the config override";
  const fs::path pbtxt = files->dir / "config.pbtxt";
  std::error_code ec;
  const bool has_pbtxt = fs::exists(pbtxt, ec);
  if (config_override != nullptr) {
    *config = *config_override;
    // Triton fills what an override leaves out from the model file (its auto-complete); the
    // model's config.pbtxt says the same for backends that cannot read a signature from their
    // files, so an override of only max_batch_size (Triton's simple_http_model_control.py) keeps
    // the model's backend, inputs and outputs. Each of those is taken whole, or not at all.
    if (auto_complete && has_pbtxt) {
      auto parsed = config::LoadModelConfigFile(pbtxt);
      if (parsed.ok()) {
        const config::ModelConfig& base = parsed->config;
        if (config->backend().empty() && config->platform().empty()) {
          config->set_backend(base.backend());
          config->set_platform(base.platform());
        }
        if (config->input().empty()) *config->mutable_input() = base.input();
        if (config->output().empty()) *config->mutable_output() = base.output();
      }
    }
    if (auto_complete) VRAMD_RETURN_IF_ERROR(AutoComplete(files->dir, name, config.get()));
  } else if (!has_pbtxt && auto_complete) {
    // No config.pbtxt: as Triton, the model's files and its backend's auto-complete say it all.
    where = fmt::format("model '{}' (no config.pbtxt)", name);
    VRAMD_RETURN_IF_ERROR(AutoComplete(files->dir, name, config.get()));
    if (config->backend().empty() && config->platform().empty()) {
      return Status::InvalidArgument(fmt::format(
          "model '{}' has no config.pbtxt, and no file in its version folders tells its backend "
          "(model.py, model.pt, model.safetensors, ...)",
          name));
    }
    if (config->input().empty() && config->output().empty()) {
      return Status::InvalidArgument(fmt::format(
          "model '{}' has no config.pbtxt, and backend '{}' could not tell its inputs and outputs "
          "from its files; write a config.pbtxt",
          name, config->backend().empty() ? config->platform() : config->backend()));
    }
  } else {
    where = pbtxt.string();
    auto parsed = config::LoadModelConfigFile(pbtxt);
    if (!parsed.ok()) {
      if (parsed.status().code() == StatusCode::kNotFound) {
        return Status::InvalidArgument(fmt::format(
            "{} does not exist (auto-complete is off: --disable-auto-complete-config or "
            "--strict-model-config=true)",
            pbtxt.string()));
      }
      return Status::InvalidArgument(parsed.status().message());
    }
    if (!parsed->unsupported_fields.empty()) {
      spdlog::warn("model '{}': {} ignores fields it does not support: {}", name, where,
                   fmt::join(parsed->unsupported_fields, ", "));
    }
    *config = std::move(parsed->config);
    if (auto_complete) VRAMD_RETURN_IF_ERROR(AutoComplete(files->dir, name, config.get()));
  }
  Status valid = config::ValidateAndNormalize(config.get(), name);
  if (!valid.ok()) return Status::InvalidArgument(fmt::format("{}: {}", where, valid.message()));
  files->config = config;
  files->versions =
      repository::SelectVersions(config->version_policy(), repository::ListVersions(files->dir));
  if (files->versions.empty()) {
    return Status::InvalidArgument(fmt::format(
        "model '{}' has no version folder that its version_policy selects in '{}'", name,
        files->dir.string()));
  }
  return Status::Ok();
}

// The step models of model `name` when its config.pbtxt (in the first repository that has the
// model) makes it an ensemble; nullopt otherwise, or when the config is unusable (its load then
// says why).
std::vector<std::string> StepNames(const config::ModelConfig& config) {
  std::vector<std::string> steps;
  for (const auto& step : config.ensemble_scheduling().step()) steps.push_back(step.model_name());
  return steps;
}

std::optional<std::vector<std::string>> EnsembleSteps(const std::vector<fs::path>& repositories,
                                                      std::string_view name) {
  for (const fs::path& repository : repositories) {
    std::error_code ec;
    const fs::path file = repository / std::string(name) / "config.pbtxt";
    if (!fs::is_regular_file(file, ec)) continue;
    auto parsed = config::LoadModelConfigFile(file);
    if (!parsed.ok() || parsed->config.platform() != "ensemble") return std::nullopt;
    return StepNames(parsed->config);
  }
  return std::nullopt;
}

// `names` (indexes into it) in waves to load one after another, each wave's models at once:
// first every model that is not an ensemble, then the ensembles, each in a wave after those of
// its steps that are ensembles of `names` too (an ensemble checks its steps' configs when it
// loads, so they must be loaded first). Ensembles whose steps wait on each other in a cycle come
// last, together; their loads fail naming it.
std::vector<std::vector<size_t>> LoadWaves(const std::vector<fs::path>& repositories,
                                           const std::vector<std::string>& names) {
  std::vector<std::vector<size_t>> waves(1);
  std::map<std::string, std::vector<std::string>, std::less<>> ensembles;
  std::map<std::string, size_t, std::less<>> index;
  for (size_t i = 0; i < names.size(); ++i) {
    auto steps = EnsembleSteps(repositories, names[i]);
    if (steps) {
      ensembles.emplace(names[i], std::move(*steps));
      index.emplace(names[i], i);
    } else {
      waves[0].push_back(i);
    }
  }
  while (!ensembles.empty()) {
    std::vector<std::string> ready;
    for (const auto& [name, steps] : ensembles) {
      bool waits = false;
      for (const auto& step : steps) waits = waits || (step != name && ensembles.count(step) > 0);
      if (!waits) ready.push_back(name);
    }
    if (ready.empty()) {
      for (const auto& [name, steps] : ensembles) ready.push_back(name);
    }
    waves.emplace_back();
    for (const auto& name : ready) {
      waves.back().push_back(index.at(name));
      ensembles.erase(name);
    }
  }
  return waves;
}

// A name longer than a directory name can be cannot be a model: refused before the manager
// keeps anything for it, with a message that does not repeat all of it.
Status CheckModelName(std::string_view name) {
  if (name.size() <= ModelManager::kMaxModelNameBytes) return Status::Ok();
  constexpr size_t kShown = 64;
  return Status::InvalidArgument(fmt::format(
      "model name '{}...' has {} bytes, more than the {} a model directory name can have",
      name.substr(0, kShown), name.size(), ModelManager::kMaxModelNameBytes));
}

}  // namespace

// For the analysis, it holds manager.action_ (model_manager.h says why). A constructor and a
// destructor are not analyzed, so taking actions_mu_ and the slot's mutex here is unchecked.
class SCOPED_CAPABILITY ModelManager::ActionGuard {
 public:
  ActionGuard(ModelManager& manager, std::string_view name) ACQUIRE(manager.action_)
      : manager_(manager) {
    {
      MutexLock lock(manager_.actions_mu_);
      slot_ = manager_.actions_.try_emplace(std::string(name)).first;
      ++slot_->second.users;
    }
    // Outside actions_mu_: waiting here must not hold up other models' actions. The slot
    // stays put meanwhile: a map node lives until erased, and users > 0 keeps it.
    slot_->second.mu.Lock();
  }
  ~ActionGuard() RELEASE() {
    slot_->second.mu.Unlock();
    MutexLock lock(manager_.actions_mu_);
    if (--slot_->second.users == 0) manager_.actions_.erase(slot_);
  }
  ActionGuard(const ActionGuard&) = delete;
  ActionGuard& operator=(const ActionGuard&) = delete;

 private:
  ModelManager& manager_;
  std::map<std::string, ActionSlot, std::less<>>::iterator slot_;
};

ModelManager::ModelManager(const Options& options)
    : memory_(options.memory),
      mode_(options.model_control_mode),
      repositories_(options.repositories),
      reload_defaults_(options.reload),
      free_bytes_(options.free_bytes
                      ? options.free_bytes
                      : [allocator = options.memory.allocator](const std::string& device) {
                          return DeviceFreeBytes(device, allocator);
                        }),
      retire_timeout_(options.retire_timeout),
      poll_interval_(options.poll_interval),
      load_thread_count_(std::max(1, options.load_thread_count)),
      auto_complete_config_(options.auto_complete_config),
      custom_metrics_(options.custom_metrics),
      memory_settled_(options.memory_settled),
      load_finished_(options.load_finished),
      rollback_check_interval_(options.rollback_check_interval),
      gpu_utilization_(options.gpu_utilization),
      rolled_back_(options.rolled_back),
      services_(std::make_unique<ModelServices>(this, options.custom_metrics,
                                                options.child_tracer)),
      load_slots_(std::max(1, options.load_thread_count)),
      keeper_(std::make_unique<SleepKeeper>([this] { return SleepCandidates(); },
                                            options.memory.ledger)),
      releaser_([this](std::stop_token stop) { ReleaseParked(stop); }) {
  // One manager per allocator relieves its pressure (tests may make several).
  if (memory_.allocator->pressure_relief() == nullptr) {
    memory_.allocator->SetPressureRelief(&relief_);
    installed_relief_ = true;
  }
}

Result<std::unique_ptr<ModelManager>> ModelManager::Create(const Options& options) {
  if (options.memory.ledger == nullptr || options.memory.allocator == nullptr) {
    return Status::Internal("ModelManager needs a ledger and an allocator");
  }
  std::unique_ptr<ModelManager> manager(new ModelManager(options));
  if (options.model_control_mode == ModelControlMode::kPoll) {
    // The baseline comes before the start-up scan, so a change made while loading is seen.
    manager->watcher_ = std::make_unique<repository::RepositoryWatcher>(options.repositories);
    MutexLock poll(manager->poll_mu_);  // no other thread has the manager yet: never waits
    VRAMD_RETURN_IF_ERROR(manager->watcher_->Baseline());
  }
  VRAMD_ASSIGN_OR_RETURN(auto dirs, repository::ScanRepositories(options.repositories));
  const bool explicit_mode = options.model_control_mode == ModelControlMode::kExplicit;
  std::set<std::string, std::less<>> startup(options.startup_models.begin(),
                                             options.startup_models.end());
  const bool all = !explicit_mode || startup.count("*") > 0;
  if (explicit_mode && !all) {
    for (const auto& name : startup) {
      bool found = false;
      for (const auto& dir : dirs) found = found || dir.name == name;
      if (found) continue;
      std::string message = fmt::format(
          "failed to load '{}': no model repository holds a model of that name", name);
      spdlog::error("{}", message);
      if (options.exit_on_error) return Status::NotFound(message);
    }
  }
  // In explicit mode an ensemble named at start-up brings its step models (Triton's
  // dependencies), and theirs: each name's config is read once.
  std::vector<std::string> unread(all ? startup.end() : startup.begin(), startup.end());
  while (!unread.empty()) {
    const std::string name = std::move(unread.back());
    unread.pop_back();
    for (std::string& step :
         EnsembleSteps(options.repositories, name).value_or(std::vector<std::string>{})) {
      if (startup.insert(step).second) unread.push_back(std::move(step));
    }
  }
  std::vector<std::string> names;
  for (const auto& dir : dirs) {
    if (all || startup.count(dir.name) > 0) names.push_back(dir.name);
  }
  std::vector<Status> results(names.size());
  for (const std::vector<size_t>& wave : LoadWaves(options.repositories, names)) {
    ParallelFor(wave.size(), manager->load_thread_count_, [&](size_t w) {
      const size_t i = wave[w];
      ActionGuard action(*manager, names[i]);
      manager->load_slots_.acquire();
      results[i] = manager->LoadLocked(names[i], nullptr);
      manager->load_slots_.release();
    });
  }
  for (const auto& status : results) {
    if (!status.ok() && options.exit_on_error) return status;
  }
  ModelManager* raw = manager.get();
  manager->rollback_monitor_ =
      std::jthread([raw](std::stop_token stop) { raw->MonitorRollbacks(stop); });
  if (manager->watcher_ != nullptr) {
    manager->poller_ = std::jthread([raw](std::stop_token stop) { raw->PollUntilStopped(stop); });
  }
  return manager;
}

namespace {

// A thread's loop: `step` every `period` until `stop`. The period is waited for on a condition
// no one notifies: only a stop ends it early.
template <typename Step>
void EveryPeriodUntilStopped(const std::stop_token& stop, std::chrono::milliseconds period,
                             Step step) {
  Mutex mu;
  std::condition_variable_any wake;
  MutexLock lock(mu);
  while (!stop.stop_requested()) {
    lock.WaitUntil(wake, stop, std::chrono::steady_clock::now() + period, [] { return false; });
    if (stop.stop_requested()) break;
    step();
  }
}

}  // namespace

void ModelManager::PollUntilStopped(std::stop_token stop) {
  EveryPeriodUntilStopped(stop, poll_interval_, [this] {
    Status polled = PollOnce();
    if (!polled.ok()) spdlog::error("repository poll: {}", polled.message());
  });
}

ModelManager::~ModelManager() {
  poller_ = std::jthread();  // stops and joins the polling thread first
  rollback_monitor_ = std::jthread();
  releaser_ = std::jthread();  // answers the requests still parked in a gap
  std::vector<std::pair<std::string, Versions>> serving;
  {
    WriterLock lock(mu_);
    for (auto& [name, entry] : models_) {
      serving.emplace_back(name, std::move(entry.serving));
      if (!entry.previous.ready.empty()) serving.emplace_back(name, std::move(entry.previous));
    }
    models_.clear();
  }
  // As an unload does: shut the versions down, then wait (bounded) until each is destroyed,
  // wherever its last reference goes, before the owners close. Every version is shut down
  // from here on, so none can reach reaper_ once this returns.
  for (auto& [name, versions] : serving) Retire(name, std::move(versions));
  serving.clear();
  if (AwaitRetired(std::nullopt, Clock::now() + retire_timeout_) > 0) {
    spdlog::warn("model manager destroyed while versions are still held by requests");
  }
  std::vector<Retired> left;
  {
    MutexLock lock(retired_mu_);
    left.swap(retired_);
  }
  left.clear();  // closes the owners (filing leak reports for what they still hold), unlocked
  // Waits for a relief call in progress; none can start: no version of this manager is left.
  if (installed_relief_) memory_.allocator->SetPressureRelief(nullptr);
  keeper_.reset();
}

Result<std::vector<std::shared_ptr<LoadedModel>>> ModelManager::ReadyVersionsOf(
    std::string_view name, int64_t version) const {
  std::vector<std::shared_ptr<LoadedModel>> versions;
  {
    ReaderLock lock(mu_);
    auto it = models_.find(name);
    if (it == models_.end() || it->second.serving.ready.empty()) {
      return Status::NotFound(fmt::format("model '{}' is not loaded", name));
    }
    for (const auto& [v, model] : it->second.serving.ready) {
      if (version == 0 || v == version) versions.push_back(model);
    }
  }
  if (versions.empty()) {
    return Status::NotFound(fmt::format("model '{}' has no ready version {}", name, version));
  }
  return versions;
}

Status ModelManager::Sleep(std::string_view name, int64_t version, backends::SleepLevel level,
                           std::chrono::milliseconds wait) const {
  VRAMD_ASSIGN_OR_RETURN(auto versions, ReadyVersionsOf(name, version));
  const auto deadline = SleepGate::Clock::now() + wait;
  for (const auto& model : versions) {
    if (!model->CanSleep()) return Status::Unsupported(model->CannotSleepReason());
  }
  for (const auto& model : versions) VRAMD_RETURN_IF_ERROR(model->Sleep(level, deadline));
  return Status::Ok();
}

Status ModelManager::Wake(std::string_view name, int64_t version) const {
  VRAMD_ASSIGN_OR_RETURN(auto versions, ReadyVersionsOf(name, version));
  for (const auto& model : versions) {
    if (!model->CanSleep()) continue;  // never asleep
    VRAMD_RETURN_IF_ERROR(model->Wake());
  }
  keeper_->Poke();  // its idle time starts again
  return Status::Ok();
}

Status ModelManager::CheckMode(std::string_view action) const {
  if (mode_ == ModelControlMode::kExplicit) return Status::Ok();
  return Status::InvalidArgument(fmt::format(
      "explicit model {} is not allowed if polling is enabled (the model control mode is '{}'; "
      "start vramd with --model-control-mode explicit)",
      action, mode_ == ModelControlMode::kPoll ? "poll" : "none"));
}

size_t ModelManager::TEST_TrackedNames() const {
  size_t names = 0;
  {
    ReaderLock lock(mu_);
    names += models_.size();
  }
  MutexLock lock(actions_mu_);
  return names + actions_.size();
}

void ModelManager::EndGap(ModelEntry& entry) {
  if (!entry.gap) return;
  entry.gap = false;
  ++entry.gap_generation;
}

void ModelManager::Update(const std::string& name, const std::function<void(ModelEntry&)>& change) {
  {
    WriterLock lock(mu_);
    change(models_[name]);
  }
  {
    MutexLock parked(parked_mu_);
    parked_dirty_ = true;
  }
  parked_cv_.notify_all();
}

ModelManager::Versions ModelManager::LoadVersions(
    const std::string& name, std::shared_ptr<const config::ModelConfig> config,
    const fs::path& model_dir, const std::vector<int64_t>& versions, LoadTiming* timing) const {
  Versions loaded;
  loaded.config = config;
  loaded.dir = model_dir;
  loaded.owner = memory::ScopedOwner(memory_.ledger, memory_.ledger->root(),
                                     memory::OwnerKind::kModel, name);
  for (int64_t v : versions) {
    auto model = LoadedModel::Load(config, model_dir, v, memory_, loaded.owner.id(), timing,
                                   services_.get());
    if (!model.ok()) {
      loaded.failed.emplace(v, model.status().message());
      continue;
    }
    (*model)->HoldVersionInOutcomes(&reaper_);  // Retire shuts versions down before release
    const auto warmup_start = Clock::now();
    Status warmed = RunModelWarmup(**model, model_dir);
    if (timing != nullptr && config->model_warmup_size() > 0) {
      timing->Add("warmup", SecondsSince(warmup_start));
    }
    if (!warmed.ok()) {
      loaded.failed.emplace(
          v, fmt::format("model '{}' version {}: model_warmup failed: {}", name, v,
                         warmed.message()));
      continue;  // destroying the version releases what it holds
    }
    loaded.ready.emplace(v, std::move(model).value());
  }
  return loaded;
}

void ModelManager::Retire(const std::string& model, Versions versions) {
  Retired retired;
  retired.model = model;
  // Drain first: requests already queued run; later ones are refused and go to the version
  // that replaced these (TryInferAsync). Shutting down here also means no instance thread ever
  // destroys its own LoadedModel.
  for (auto& [v, loaded] : versions.ready) {
    loaded->Shutdown();
    retired.destroyed.push_back(loaded->destroyed());
  }
  versions.ready.clear();  // the last reference, unless a request still holds one
  retired.versions = std::move(versions);
  {
    MutexLock lock(retired_mu_);
    retired_.push_back(std::move(retired));
  }
  SweepRetired();
}

namespace {

bool IsReady(const std::shared_future<void>& destroyed) {
  return destroyed.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

}  // namespace

void ModelManager::SweepRetired() {
  std::vector<Retired> done;
  {
    MutexLock lock(retired_mu_);
    for (auto it = retired_.begin(); it != retired_.end();) {
      bool gone = true;
      for (const auto& d : it->destroyed) gone = gone && IsReady(d);
      if (gone) {
        done.push_back(std::move(*it));
        it = retired_.erase(it);
      } else {
        ++it;
      }
    }
  }
  done.clear();  // closes the owners (filing leak reports for what they still hold), unlocked
}

size_t ModelManager::AwaitRetired(std::optional<std::string_view> model,
                                  Clock::time_point deadline) {
  // No entry of `model` joins the list meanwhile: its actions are serialized, and only they
  // (or the destructor, which is alone) retire its versions.
  std::vector<std::shared_future<void>> pending;
  {
    MutexLock lock(retired_mu_);
    for (const auto& r : retired_) {
      if (model && r.model != *model) continue;
      pending.insert(pending.end(), r.destroyed.begin(), r.destroyed.end());
    }
  }
  size_t alive = 0;
  for (const auto& d : pending) {
    if (d.wait_until(deadline) != std::future_status::ready) ++alive;
  }
  // Done only once a sweep has taken (and closed) every retired entry: a version destroyed is
  // not done before its model-level owner is closed.
  SweepRetired();
  return alive;
}

Status ModelManager::WaitRetired(const std::string& model) {
  const size_t alive = AwaitRetired(model, Clock::now() + retire_timeout_);
  if (alive == 0) return Status::Ok();
  return Status::Unavailable(fmt::format(
      "model '{}': {} version(s) it replaced are still held by requests after {} ms", model,
      alive, retire_timeout_.count()));
}

Status ModelManager::Load(std::string_view name,
                          std::shared_ptr<const config::ModelConfig> config_override,
                          const ModelFileOverrides& files) {
  VRAMD_RETURN_IF_ERROR(CheckMode("load"));
  VRAMD_RETURN_IF_ERROR(CheckModelName(name));
  if (!files.empty() && config_override == nullptr) {
    return Status::InvalidArgument(fmt::format(
        "failed to load '{}': model files ('file:' parameters) need a 'config' parameter too",
        name));
  }
  if (config_override != nullptr && !config_override->name().empty() &&
      config_override->name() != name) {
    return Status::InvalidArgument(fmt::format(
        "failed to load '{}': the config override names model '{}'", name,
        config_override->name()));
  }
  const std::string model(name);
  VRAMD_RETURN_IF_ERROR(LoadEnsembleSteps(model, config_override.get()));
  ActionGuard action(*this, model);
  load_slots_.acquire();
  Status status = LoadLocked(model, std::move(config_override), files);
  load_slots_.release();
  return status;
}

Status ModelManager::LoadEnsembleSteps(const std::string& name,
                                       const config::ModelConfig* config_override,
                                       int depth) {
  std::vector<std::string> steps;
  if (config_override != nullptr) {
    if (config_override->platform() != "ensemble") return Status::Ok();
    steps = StepNames(*config_override);
  } else {
    steps = EnsembleSteps(repositories_, name).value_or(std::vector<std::string>{});
  }
  // Deeper than any sensible nesting: a cycle of ensembles, whose own load says so.
  constexpr int kMaxDepth = 16;
  for (const std::string& step : steps) {
    if (step == name || depth >= kMaxDepth) continue;
    auto ready = ReadyVersions(step);
    if (ready.ok() && !ready->empty()) continue;
    VRAMD_RETURN_IF_ERROR(LoadEnsembleSteps(step, nullptr, depth + 1));
    ActionGuard action(*this, step);
    load_slots_.acquire();
    Status status = LoadLocked(step, nullptr);
    load_slots_.release();
    if (!status.ok()) {
      std::string_view why = status.message();
      const std::string prefix = fmt::format("failed to load '{}': ", step);
      if (why.substr(0, prefix.size()) == prefix) why.remove_prefix(prefix.size());
      return Status(status.code(), fmt::format("failed to load '{}': its step model '{}' did not "
                                               "load: {}",
                                               name, step, why));
    }
  }
  return Status::Ok();
}

namespace {

// How long a reload waits for the requests parked in the model's previous gap to get their
// answer before it opens a new gap (LetGapWaitersLook).
constexpr auto kGapWaitersGrace = std::chrono::milliseconds(100);

// Whether `fallback` can answer `model`'s requests: the same inputs and outputs (names, data
// types, shapes) and batching; InvalidArgument naming the first difference.
Status SameInterface(const config::ModelConfig& model, const config::ModelConfig& fallback) {
  const std::string who =
      fmt::format("fallback model '{}' cannot answer for '{}'", fallback.name(), model.name());
  if (model.max_batch_size() != fallback.max_batch_size()) {
    return Status::InvalidArgument(fmt::format("{}: max_batch_size {} against {}", who,
                                               fallback.max_batch_size(), model.max_batch_size()));
  }
  auto same = [&](const auto& mine, const auto& theirs, const char* kind) -> Status {
    for (const auto& tensor : mine) {
      auto match = std::find_if(theirs.begin(), theirs.end(),
                                [&](const auto& t) { return t.name() == tensor.name(); });
      if (match == theirs.end()) {
        return Status::InvalidArgument(fmt::format("{}: it has no {} '{}'", who, kind,
                                                   tensor.name()));
      }
      if (match->data_type() != tensor.data_type() ||
          !std::equal(match->dims().begin(), match->dims().end(), tensor.dims().begin(),
                      tensor.dims().end())) {
        return Status::InvalidArgument(fmt::format(
            "{}: its {} '{}' differs in data type or shape", who, kind, tensor.name()));
      }
    }
    if (mine.size() != theirs.size()) {
      return Status::InvalidArgument(
          fmt::format("{}: it has {} {}s, not {}", who, theirs.size(), kind, mine.size()));
    }
    return Status::Ok();
  };
  VRAMD_RETURN_IF_ERROR(same(model.input(), fallback.input(), "input"));
  return same(model.output(), fallback.output(), "output");
}

// How long the versions a rollback watch keeps asleep (vramd.rollback.keep "asleep") may take
// to finish the executions they were given before the switch; after it they stay awake.
constexpr auto kKeptSleepWait = std::chrono::seconds(5);

// The files of `versions`' folders under `dir` (FingerprintModel's stamps, the folders' own);
// nullopt when they cannot be read.
std::optional<std::vector<repository::FileStamp>> VersionFileStamps(
    const fs::path& dir, const std::vector<int64_t>& versions) {
  auto fingerprint = repository::FingerprintModel(dir);
  if (!fingerprint.ok()) return std::nullopt;
  std::vector<repository::FileStamp> stamps;
  for (auto& file : fingerprint->files) {
    for (int64_t v : versions) {
      const std::string folder = std::to_string(v) + "/";
      if (file.relative_path.compare(0, folder.size(), folder) == 0) {
        stamps.push_back(std::move(file));
        break;
      }
    }
  }
  return stamps;
}

std::vector<int64_t> VersionNumbers(const std::map<int64_t, std::shared_ptr<LoadedModel>>& ready) {
  std::vector<int64_t> versions;
  for (const auto& [v, model] : ready) versions.push_back(v);
  return versions;
}

}  // namespace

class ModelManager::LoadRun {
 public:
  LoadRun(ModelManager& manager, const std::string& name) : manager_(manager), name_(name) {}
  LoadRun(const LoadRun&) = delete;
  LoadRun& operator=(const LoadRun&) = delete;

  // The steps below that wait for retired versions or open a gap REQUIRE the model's action
  // lock through manager_, which the analysis cannot tell from the LoadLocked caller's `this`:
  // LoadLocked, which REQUIRES(action_) itself, says so with this (it checks nothing).
  void ActionHeld() const ASSERT_CAPABILITY(manager_.action_) {}

  // Prepare: notes what serves now, reads the config (or takes the override), selects the
  // versions and the reload settings, and waits until what an earlier action retired is
  // destroyed (so the model's unload and load hooks never overlap). A failure is recorded
  // (Reject) and returned for the caller.
  Status Prepare(std::shared_ptr<const config::ModelConfig> config_override,
                 const ModelFileOverrides& files) REQUIRES(manager_.action_) {
    {
      ReaderLock lock(manager_.mu_);
      if (auto it = manager_.models_.find(name_); it != manager_.models_.end()) {
        serving_ = !it->second.serving.ready.empty();
        measured_ = it->second.measured;
      }
    }
    if (!files.empty()) {
      auto written = OverrideDirectory::Write(name_, files);
      if (!written.ok()) return Reject(written.status(), nullptr);
      override_dir_ = std::move(written).value();
    }
    Status read = ReadModel(manager_.repositories_, name_, std::move(config_override),
                            manager_.auto_complete_config_, override_dir_.get(), &files_);
    if (!read.ok()) return Reject(read, files_.config);
    auto settings = ReloadSettingsFromConfig(*files_.config, manager_.reload_defaults_);
    if (!settings.ok()) return Reject(settings.status(), files_.config);
    settings_ = *settings;
    Status quiet = manager_.WaitRetired(name_);
    if (!quiet.ok()) return Reject(quiet, nullptr);
    return Status::Ok();
  }

  // Predicts the footprint and chooses the policy (reload_policy.h).
  void ChoosePolicy() {
    report_.versions = files_.versions;
    report_.predicted = PredictFootprint(*files_.config, files_.dir, files_.versions, measured_,
                                         PlacementTargetOf(*files_.config));
    decision_ =
        ChooseReloadPolicy(settings_, report_.predicted, serving_, manager_.free_bytes_);
    report_.policy = decision_.policy;
    report_.policy_reason = decision_.reason;
    spdlog::info("loading model '{}' version(s) {}: {} ({})", name_,
                 fmt::join(files_.versions, ","), ReloadPolicyName(decision_.policy),
                 decision_.reason);
  }

  // Whether the serving versions go before the new ones load.
  bool DrainsFirst() const {
    return serving_ && decision_.policy == ReloadPolicy::kResourcePreserving;
  }

  // Drain (resource-preserving): the serving versions leave the map, drain and unload, and
  // their memory is returned before the new ones load; requests arriving meanwhile wait in
  // the gap (Find) up to the model's unavailable wait.
  void Drain() REQUIRES(manager_.action_) {
    manager_.LetGapWaitersLook(name_);
    const auto drain_start = Clock::now();
    Versions old, kept;
    manager_.Update(name_, [&](ModelEntry& entry) {
      entry.lifecycle.TransitionOrLog(name_, VersionNumbers(entry.serving.ready),
                                      LifecycleState::kDraining,
                                      "resource-preserving reload: " + decision_.reason);
      entry.gap = true;
      entry.gap_wait = settings_.unavailable_wait;
      old = TakeServing(entry);
      kept = EndWatch(entry);  // a rollback watch's versions go too: memory is short
    });
    if (!kept.ready.empty()) manager_.Retire(name_, std::move(kept));
    // What a rollback watch of the new versions could load again (memory is short: nothing
    // stays loaded).
    drained_source_ = SourceOf(old, measured_);
    Status gone = manager_.DrainAndUnload(name_, std::move(old), "unloading the old versions");
    manager_.SettleMemory();
    timing_.Add("drain_unload", SecondsSince(drain_start));
    // The load goes on: the old versions are out of the map, and the new ones may still fit.
    if (!gone.ok()) spdlog::error("{}", gone.message());
  }

  // Attempt: loads every selected version and warms each one up, beside the serving versions
  // (availability-preserving) or in their place. The attempt failed if any version did.
  Versions Attempt() {
    manager_.Update(name_, [&](ModelEntry& entry) {
      entry.lifecycle.TransitionOrLog(
          name_, files_.versions, LifecycleState::kLoading,
          fmt::format("loading version(s) {} ({})", fmt::join(files_.versions, ","),
                      ReloadPolicyName(decision_.policy)));
      entry.loading = files_.versions;
      entry.unloaded_on_request = false;
    });
    // Taken before the load, so that a file changed while it loads counts as changed.
    auto stamps = VersionFileStamps(files_.dir, files_.versions);
    Versions attempt =
        manager_.LoadVersions(name_, files_.config, files_.dir, files_.versions, &timing_);
    attempt.files = override_dir_;
    attempt.stamps = std::move(stamps);
    return attempt;
  }

  // Switch: publishes the attempt (new requests go to it from here on); the versions it
  // replaces drain and are destroyed before the load returns.
  Status Switch(Versions attempt) REQUIRES(manager_.action_) {
    std::vector<memory::OwnerId> owners;
    for (const auto& [v, model] : attempt.ready) owners.push_back(model->owner());
    report_.measured = MeasureFootprint(*manager_.memory_.ledger, owners);
    const auto switch_start = Clock::now();
    // Rollback watching (docs/rollback.md): the versions replaced stay loaded (warm or asleep,
    // as vramd.rollback.keep says) beside the new ones until the watch ends, or, unloaded, are
    // remembered with their files; a model with none of that and no fallback model is not
    // watched.
    std::optional<RollbackSettings> rollback;
    if (attempt.config != nullptr) {
      auto parsed = RollbackSettingsFromConfig(*attempt.config);
      if (!parsed.ok()) {
        spdlog::warn("model '{}': {}; not watched for rollback", name_, parsed.status().message());
      } else if (parsed->enabled) {
        rollback = *parsed;
      }
    }
    Versions old, older;
    std::string watched;  // what the watch can go back to, for the log; empty: not watched
    std::vector<std::shared_ptr<LoadedModel>> to_sleep;
    manager_.Update(name_, [&](ModelEntry& entry) REQUIRES(manager_.mu_) {
      old = std::move(entry.serving);
      entry.serving = std::move(attempt);
      entry.loading.clear();
      manager_.EndGap(entry);
      const std::optional<DeviceBytes> old_measured = entry.measured;
      entry.measured = report_.measured;
      entry.lifecycle.TransitionOrLog(name_, files_.versions, LifecycleState::kReady, "");
      older = EndWatch(entry);
      entry.served_by.clear();
      if (!rollback) return;
      if (!old.ready.empty() && rollback->keep != RollbackKeep::kReload) {
        watched = fmt::format("version(s) {} stay loaded ({})",
                              fmt::join(VersionNumbers(old.ready), ","),
                              RollbackKeepName(rollback->keep));
        if (rollback->keep == RollbackKeep::kAsleep) {
          for (const auto& [v, model] : old.ready) to_sleep.push_back(model);
        }
        entry.previous = std::move(old);
        old = Versions();
      } else if (!old.ready.empty()) {
        entry.previous_files = SourceOf(old, old_measured);
      } else if (drained_source_) {
        entry.previous_files = std::move(drained_source_);
      }
      if (entry.previous_files) {
        watched = fmt::format("version(s) {} load again from their files",
                              fmt::join(entry.previous_files->versions, ","));
      }
      if (!rollback->fallback_model.empty()) {
        watched += fmt::format("{}fallback model '{}'", watched.empty() ? "" : ", else ",
                               rollback->fallback_model);
      }
      if (!watched.empty()) entry.watch.emplace(*rollback, Clock::now());
    });
    if (!watched.empty()) {
      spdlog::info("model '{}': watched for rollback for {} s; a rollback goes back to: {}",
                   name_, rollback->watch.count(), watched);
    } else if (rollback) {
      spdlog::info("model '{}': not watched for rollback: nothing to go back to (no version "
                   "served before, and no vramd.rollback.fallback_model)",
                   name_);
    }
    // keep "asleep": the kept versions give their device memory back now; requests queued on
    // them before the switch still run (one arriving after the sleep wakes the version).
    for (const auto& model : to_sleep) {
      if (!model->CanSleep()) {
        spdlog::warn("model '{}' version {}: kept warm for rollback, not asleep: {}", name_,
                     model->version(), model->CannotSleepReason());
        continue;
      }
      Status slept =
          model->Sleep(model->sleep_settings().level, Clock::now() + kKeptSleepWait);
      if (!slept.ok()) {
        spdlog::warn("model '{}' version {}: kept warm for rollback, not asleep: {}", name_,
                     model->version(), slept.message());
      }
    }
    if (!older.ready.empty()) manager_.Retire(name_, std::move(older));
    timing_.Add("switch", SecondsSince(switch_start));
    for (const auto& [v, model] : old.ready) {
      spdlog::info("model '{}': version {} replaced; it drains", name_, v);
    }
    const auto retire_start = Clock::now();
    const bool had_old = !old.ready.empty();
    manager_.Retire(name_, std::move(old));
    if (had_old) {
      // Logged, not returned: the new versions serve, which is what the caller asked for.
      Status gone = manager_.WaitRetired(name_);
      if (!gone.ok()) spdlog::warn("{}", gone.message());
      timing_.Add("retire_old", SecondsSince(retire_start));
    }
    size_t trimmed = manager_.SettleMemory();
    if (trimmed > 0) spdlog::info("returned {} bytes of cached load-time memory", trimmed);
    Finish(/*ok=*/true, "");
    std::string phases;
    for (const auto& phase : report_.phases) {
      phases += fmt::format(" {}={:.3f}s", phase.name, phase.seconds);
    }
    spdlog::info("loaded model '{}' version(s) {} in {:.3f}s:{}", name_,
                 fmt::join(files_.versions, ","), report_.total_seconds, phases);
    return Status::Ok();
  }

  // Fail: the attempt goes; the serving versions stay where there are any (the model stays
  // ready, the failure its reason), else what loaded serves and the failures show.
  Status Fail(Versions attempt) REQUIRES(manager_.action_) {
    const std::string error = attempt.failed.rbegin()->second;
    spdlog::error("failed to load model '{}': {}", name_, error);
    Versions discard;
    manager_.Update(name_, [&](ModelEntry& entry) REQUIRES(manager_.mu_) {
      entry.loading.clear();
      manager_.EndGap(entry);
      if (!entry.serving.ready.empty()) {
        entry.lifecycle.TransitionOrLog(name_, files_.versions, LifecycleState::kReady,
                                        "serving; last load failed: " + error);
        discard = std::move(attempt);  // the serving versions stay; the attempt goes
      } else {
        // Nothing to preserve: what loaded serves, and the failures show.
        const bool any = !attempt.ready.empty();
        discard = std::move(entry.serving);
        entry.serving = std::move(attempt);
        entry.lifecycle.TransitionOrLog(name_, files_.versions,
                                        any ? LifecycleState::kReady : LifecycleState::kFailed,
                                        error);
      }
    });
    manager_.Retire(name_, std::move(discard));
    // Logged, not returned: the load's own error is the answer.
    Status gone = manager_.WaitRetired(name_);
    if (!gone.ok()) spdlog::warn("{}", gone.message());
    manager_.SettleMemory();
    Finish(/*ok=*/false, error);
    return Status::InvalidArgument(fmt::format("failed to load '{}': {}", name_, error));
  }

 private:
  // Records a failure that came before anything was unloaded or loaded: the serving versions
  // (if any) serve on; otherwise the model shows as failed, keeping `config` when it was
  // usable. A name no repository holds and the manager never knew leaves nothing behind.
  Status Reject(const Status& error, std::shared_ptr<const config::ModelConfig> config) {
    const std::string message = fmt::format("failed to load '{}': {}", name_, error.message());
    spdlog::error("{}", message);
    report_.error = error.message();
    report_.total_seconds = SecondsSince(start_);
    report_.started = start_;
    report_.finished = std::chrono::system_clock::now();
    if (manager_.load_finished_) manager_.load_finished_(name_, report_);
    bool known = false;
    {
      ReaderLock lock(manager_.mu_);
      known = manager_.models_.count(name_) > 0;
    }
    if (!known && error.code() == StatusCode::kNotFound) return Status::NotFound(message);
    manager_.Update(name_, [&](ModelEntry& entry) {
      entry.last_load = report_;
      if (serving_) {
        entry.lifecycle.set_reason("serving; last load failed: " + error.message());
        return;
      }
      entry.lifecycle.TransitionOrLog(name_, files_.versions, LifecycleState::kLoading,
                                      "loading");
      entry.lifecycle.TransitionOrLog(name_, files_.versions, LifecycleState::kFailed,
                                      error.message());
      entry.unloaded_on_request = false;
      if (config != nullptr) entry.serving.config = std::move(config);
    });
    return error.code() == StatusCode::kNotFound ? Status::NotFound(message)
                                                 : Status(error.code(), message);
  }

  // Completes the report of a load that got as far as loading, and files it with the model.
  void Finish(bool ok, const std::string& error) {
    report_.ok = ok;
    report_.error = error;
    report_.phases = timing_.phases();
    report_.total_seconds = SecondsSince(start_);
    report_.started = start_;
    report_.finished = std::chrono::system_clock::now();
    manager_.Update(name_, [&](ModelEntry& entry) { entry.last_load = report_; });
    if (manager_.load_finished_) manager_.load_finished_(name_, report_);
  }

  ModelManager& manager_;
  const std::string& name_;
  const Clock::time_point start_ = Clock::now();
  LoadTiming timing_;
  LoadReport report_;
  bool serving_ = false;  // some version served when the load began
  std::optional<DeviceBytes> measured_;  // the last successful load's footprint
  ModelFiles files_;
  // The directory a load request's files were written to (null: the repository's); the
  // versions loaded from it hold it too.
  std::shared_ptr<const OverrideDirectory> override_dir_;
  ReloadSettings settings_;
  ReloadDecision decision_;
  // Drain's: the unloaded versions' way back, for a rollback watch of the new ones.
  std::optional<ReloadSource> drained_source_;
};

Status ModelManager::LoadLocked(const std::string& name,
                                std::shared_ptr<const config::ModelConfig> config_override,
                                const ModelFileOverrides& files) {
  LoadRun load(*this, name);
  load.ActionHeld();  // load.manager_ is *this
  VRAMD_RETURN_IF_ERROR(load.Prepare(std::move(config_override), files));
  load.ChoosePolicy();
  if (load.DrainsFirst()) load.Drain();
  Versions attempt = load.Attempt();
  if (!attempt.failed.empty()) return load.Fail(std::move(attempt));
  Status switched = load.Switch(std::move(attempt));
  keeper_->Poke();  // new versions may have an idle time
  return switched;
}

void ModelManager::LetGapWaitersLook(const std::string& name) {
  // Requests that waited out the previous gap look first, so that back-to-back reloads cannot
  // starve them; bounded, since the releasing thread may be held up by a slow callback and
  // must not stall the reload.
  const std::atomic<int>* waiters = nullptr;
  {
    ReaderLock lock(mu_);
    auto it = models_.find(name);
    if (it == models_.end() || it->second.gap_waiters.load() == 0) return;
    // Stays valid unlocked: a map node lives until erased, and an entry is erased only under
    // its model's action lock (held here) or by the destructor.
    waiters = &it->second.gap_waiters;
  }
  MutexLock parked(parked_mu_);
  parked.WaitUntil(gap_answered_, Clock::now() + kGapWaitersGrace,
                   [waiters] { return waiters->load() == 0; });
}

Status ModelManager::DrainAndUnload(const std::string& name, Versions old, std::string reason) {
  const std::vector<int64_t> versions = VersionNumbers(old.ready);
  Retire(name, std::move(old));
  Update(name, [&](ModelEntry& entry) {
    // Not draining: a failed model had nothing to drain (or the move to draining was refused,
    // and logged).
    if (entry.lifecycle.state() != LifecycleState::kDraining) return;
    entry.lifecycle.TransitionOrLog(name, versions, LifecycleState::kUnloading,
                                    std::move(reason));
  });
  return WaitRetired(name);
}

Status ModelManager::Unload(std::string_view name, bool unload_dependents) {
  VRAMD_RETURN_IF_ERROR(CheckMode("unload"));
  VRAMD_RETURN_IF_ERROR(CheckModelName(name));
  const std::string model(name);
  if (unload_dependents) {
    std::set<std::string> dependents;
    for (const auto& version : LoadedVersions()) {
      const config::ModelConfig& config = version->config();
      for (const auto& step : config.ensemble_scheduling().step()) {
        if (step.model_name() == model && config.name() != model) dependents.insert(config.name());
      }
    }
    for (const std::string& dependent : dependents) {
      VRAMD_RETURN_IF_ERROR(Unload(dependent, /*unload_dependents=*/true));
    }
  }
  ActionGuard action(*this, model);
  return UnloadLocked(model, /*on_request=*/true);
}

Status ModelManager::UnloadLocked(const std::string& name, bool on_request) {
  // on_request: Unload (else the poller, for a model gone from the repository); either way the
  // model no longer counts for readiness.
  Versions old, kept;
  bool known = false;
  Update(name, [&](ModelEntry& entry) {
    known = entry.lifecycle.state() != LifecycleState::kUnloaded;
    if (!known) return;
    if (entry.lifecycle.state() == LifecycleState::kReady) {
      entry.lifecycle.TransitionOrLog(name, VersionNumbers(entry.serving.ready),
                                      LifecycleState::kDraining, "unloading");
    }
    old = std::move(entry.serving);
    entry.serving = Versions();
    kept = EndWatch(entry);
    entry.served_by.clear();
  });
  if (!kept.ready.empty()) Retire(name, std::move(kept));
  {
    // An Unload of a name never seen leaves no entry behind.
    WriterLock lock(mu_);
    if (auto it = models_.find(name); it != models_.end() && !known && on_request) {
      if (it->second.lifecycle.history().empty()) models_.erase(it);
    }
  }
  if (!known) return Status::Ok();  // not loaded: nothing to do (Triton's answer)
  const std::vector<int64_t> versions = VersionNumbers(old.ready);
  // Logged, not returned: nothing serves any more, which is what Unload promises; versions a
  // request still holds are destroyed (and their owners closed) once it lets go.
  Status gone = DrainAndUnload(name, std::move(old), "unloading");
  if (!gone.ok()) spdlog::warn("{}", gone.message());
  size_t trimmed = SettleMemory();
  Update(name, [&](ModelEntry& entry) {
    entry.lifecycle.TransitionOrLog(name, versions, LifecycleState::kUnloaded, "unloaded");
    entry.unloaded_on_request = true;
  });
  if (!versions.empty()) spdlog::info("unloaded model '{}'; returned {} bytes", name, trimmed);
  return Status::Ok();
}

size_t ModelManager::SettleMemory() {
  const size_t trimmed = memory_.allocator->TrimAll();
  if (memory_settled_) memory_settled_();
  return trimmed;
}

Status ModelManager::Rollback(std::string_view name, std::string rule, std::string figures) {
  VRAMD_RETURN_IF_ERROR(CheckModelName(name));
  const std::string model(name);
  ActionGuard action(*this, model);
  RollbackRecord record;
  record.model = model;
  record.rule = std::move(rule);
  record.figures = std::move(figures);
  record.started = Clock::now();
  bool kept = false;
  std::optional<ReloadSource> source;
  std::string fallback;
  {
    // Under the model's action lock nothing else changes its entry until the way back does.
    ReaderLock lock(mu_);
    auto it = models_.find(model);
    if (it == models_.end() || it->second.serving.ready.empty()) {
      if (it != models_.end() && !it->second.served_by.empty()) {
        return Status::InvalidArgument(
            fmt::format("rollback of '{}': it was rolled back already; model '{}' answers for it",
                        model, it->second.served_by));
      }
      return Status::NotFound(fmt::format("rollback of '{}': the model is not loaded", model));
    }
    const ModelEntry& entry = it->second;
    record.from = VersionNumbers(entry.serving.ready);
    kept = !entry.previous.ready.empty();
    source = entry.previous_files;
    if (entry.watch) fallback = entry.watch->settings().fallback_model;
  }
  Versions bad;
  Status back = Status::InvalidArgument(fmt::format(
      "rollback of '{}': nothing to go back to: no version is kept or can be loaded again (a "
      "model keeps the versions a reload replaced while vramd.rollback.* parameters watch it), "
      "and no vramd.rollback.fallback_model",
      model));
  if (kept) {
    back = PutBackKept(model, record, &bad);
  } else if (source) {
    back = PutBackFromFiles(model, *source, record, &bad);
  }
  if (!back.ok() && !fallback.empty()) {
    if (kept || source) {
      spdlog::warn("model '{}': {}; going to fallback model '{}'", model, back.message(),
                   fallback);
    }
    Status switched = SwitchToFallback(model, fallback, record, &bad);
    if (!switched.ok()) {
      back = Status::InvalidArgument(fmt::format("{}; {}", back.message(), switched.message()));
    } else {
      back = Status::Ok();
    }
  }
  if (!back.ok()) return back;
  const std::string to = record.to_model.empty()
                             ? fmt::format("version(s) {}", fmt::join(record.to, ","))
                             : fmt::format("fallback model '{}'", record.to_model);
  spdlog::warn("model '{}': rolled back from version(s) {} to {}: rule {}: {}; held until "
               "released (vramctl release {})",
               model, fmt::join(record.from, ","), to, record.rule, record.figures, model);
  {
    MutexLock lock(rollback_mu_);
    ++rollback_counts_[{model, record.rule}];
  }
  Retire(model, std::move(bad));
  Status gone = WaitRetired(model);
  if (!gone.ok()) spdlog::warn("{}", gone.message());
  SettleMemory();
  keeper_->Poke();
  record.seconds = SecondsSince(record.started);
  if (rolled_back_) rolled_back_(record);
  return Status::Ok();
}

ModelManager::Versions ModelManager::TakeServing(ModelEntry& entry) {
  Versions taken = std::exchange(entry.serving, Versions());
  entry.serving.config = taken.config;
  return taken;
}

ModelManager::Versions ModelManager::EndWatch(ModelEntry& entry) {
  entry.previous_files.reset();
  entry.watch.reset();
  return std::exchange(entry.previous, Versions());
}

void ModelManager::MarkRolledBack(ModelEntry& entry, const RollbackRecord& record) {
  const std::chrono::seconds cooldown =
      entry.watch ? entry.watch->settings().cooldown : std::chrono::seconds(0);
  entry.watch.reset();
  entry.previous_files.reset();
  entry.held = true;
  entry.cooldown_until = record.started + cooldown;
  const std::string to = record.to_model.empty()
                             ? fmt::format("{}", fmt::join(record.to, ","))
                             : fmt::format("fallback model '{}'", record.to_model);
  entry.lifecycle.TransitionOrLog(
      record.model, record.to, LifecycleState::kReady,
      fmt::format("rolled back from version(s) {} to {}: {}: {}", fmt::join(record.from, ","),
                  to, record.rule, record.figures));
}

Status ModelManager::PutBackKept(const std::string& model, RollbackRecord& record,
                                 Versions* bad) {
  // Versions kept asleep wake first: beside the bad ones, which serve meanwhile, when memory
  // allows (the allocator may put other models' idle versions to sleep for it).
  std::vector<std::shared_ptr<LoadedModel>> asleep;
  std::chrono::milliseconds wait = reload_defaults_.unavailable_wait;
  {
    ReaderLock lock(mu_);
    const ModelEntry& entry = models_.find(model)->second;
    for (const auto& [v, version] : entry.previous.ready) {
      if (version->sleep_gate().state() != SleepGate::State::kAwake) asleep.push_back(version);
    }
    if (entry.previous.config != nullptr) {
      auto settings = ReloadSettingsFromConfig(*entry.previous.config, reload_defaults_);
      if (settings.ok()) wait = settings->unavailable_wait;
    }
  }
  Status woke = Status::Ok();
  for (const auto& version : asleep) {
    woke = version->Wake();
    if (!woke.ok()) break;
  }
  if (woke.ok()) {
    Update(model, [&](ModelEntry& entry) REQUIRES(mu_) {
      record.to = VersionNumbers(entry.previous.ready);
      *bad = std::move(entry.serving);
      entry.serving = std::exchange(entry.previous, Versions());
      entry.lifecycle.TransitionOrLog(model, record.from, LifecycleState::kLoading,
                                      "rolling back: " + record.rule);
      MarkRolledBack(entry, record);
    });
    return Status::Ok();
  }
  spdlog::info("model '{}': the kept version(s) cannot wake beside the bad ones ({}); those "
               "unload first",
               model, woke.message());
  return PutBackAfterUnloading(model, record, wait, [&]() -> Result<Versions> {
    Versions kept_versions;
    Update(model,
           [&](ModelEntry& entry) { kept_versions = std::exchange(entry.previous, Versions()); });
    for (const auto& [v, version] : kept_versions.ready) {
      // Put back even so: the version stays asleep and each request tries to wake it again.
      Status again = version->Wake();
      if (!again.ok()) {
        spdlog::error("model '{}' version {}: put back asleep: {}", model, v, again.message());
      }
    }
    return kept_versions;
  });
}

Status ModelManager::PutBackFromFiles(const std::string& model, const ReloadSource& source,
                                      RollbackRecord& record, Versions* bad) {
  VRAMD_RETURN_IF_ERROR(CheckUnchanged(model, source));
  ReloadSettings settings = reload_defaults_;
  if (auto parsed = ReloadSettingsFromConfig(*source.config, reload_defaults_); parsed.ok()) {
    settings = *parsed;
  }
  const Footprint predicted = PredictFootprint(*source.config, source.dir, source.versions,
                                               source.measured, PlacementTargetOf(*source.config));
  const ReloadDecision decision =
      ChooseReloadPolicy(settings, predicted, /*serving=*/true, free_bytes_);
  spdlog::info("model '{}': rolling back: loading version(s) {} again from {} ({}: {})", model,
               fmt::join(source.versions, ","), source.dir.string(),
               ReloadPolicyName(decision.policy), decision.reason);
  // Loads the versions again; an error naming the first that failed (what loaded is retired).
  auto load = [&]() REQUIRES(action_) -> Result<Versions> {
    load_slots_.acquire();
    Versions loaded = LoadVersions(model, source.config, source.dir, source.versions, nullptr);
    load_slots_.release();
    loaded.files = source.files;
    loaded.stamps = source.stamps;
    if (loaded.failed.empty()) return loaded;
    const std::string error = fmt::format("loading version(s) {} again failed: {}",
                                          fmt::join(source.versions, ","),
                                          loaded.failed.begin()->second);
    Retire(model, std::move(loaded));
    Status gone = WaitRetired(model);
    if (!gone.ok()) spdlog::warn("{}", gone.message());
    return Status::Unavailable(error);
  };
  if (decision.policy == ReloadPolicy::kResourcePreserving) {
    return PutBackAfterUnloading(model, record, settings.unavailable_wait, load);
  }
  Update(model, [&](ModelEntry& entry) {
    entry.lifecycle.TransitionOrLog(model, source.versions, LifecycleState::kLoading,
                                    "rolling back: " + record.rule);
  });
  auto loaded = load();
  if (!loaded.ok()) {
    Update(model, [&](ModelEntry& entry) {
      entry.lifecycle.TransitionOrLog(model, record.from, LifecycleState::kReady,
                                      "serving; rollback failed: " + loaded.status().message());
    });
    return loaded.status();
  }
  Update(model, [&](ModelEntry& entry) REQUIRES(mu_) {
    record.to = VersionNumbers(loaded->ready);
    *bad = std::move(entry.serving);
    entry.serving = std::move(*loaded);
    MarkRolledBack(entry, record);
  });
  return Status::Ok();
}

Status ModelManager::PutBackAfterUnloading(const std::string& model, RollbackRecord& record,
                                           std::chrono::milliseconds wait,
                                           const std::function<Result<Versions>()>& bring_back) {
  LetGapWaitersLook(model);
  Versions bad;
  Update(model, [&](ModelEntry& entry) {
    entry.lifecycle.TransitionOrLog(model, record.from, LifecycleState::kDraining,
                                    "rolling back: " + record.rule +
                                        ": the bad version(s) unload first (memory is short)");
    entry.gap = true;
    entry.gap_wait = wait;
    bad = TakeServing(entry);
  });
  Status gone = DrainAndUnload(model, std::move(bad), "rolling back: unloading the bad version(s)");
  if (!gone.ok()) spdlog::error("{}", gone.message());
  SettleMemory();
  Update(model, [&](ModelEntry& entry) {
    entry.lifecycle.TransitionOrLog(model, record.from, LifecycleState::kLoading,
                                    "rolling back: " + record.rule);
  });
  Result<Versions> back = bring_back();
  Status result = Status::Ok();
  Update(model, [&](ModelEntry& entry) REQUIRES(mu_) {
    EndGap(entry);
    if (back.ok()) {
      record.to = VersionNumbers(back->ready);
      entry.serving = std::move(*back);
      MarkRolledBack(entry, record);
      return;
    }
    result = back.status();
    entry.previous_files.reset();
    entry.held = true;
    entry.lifecycle.TransitionOrLog(model, record.from, LifecycleState::kFailed,
                                    "rollback failed: " + result.message());
  });
  return result;
}

Status ModelManager::SwitchToFallback(const std::string& model, const std::string& fallback,
                                      RollbackRecord& record, Versions* bad) {
  {
    ReaderLock lock(mu_);
    auto it = models_.find(fallback);
    if (it == models_.end() || it->second.serving.ready.empty()) {
      return Status::Unavailable(
          fmt::format("fallback model '{}' has no ready version", fallback));
    }
    if (!it->second.served_by.empty()) {
      return Status::Unavailable(fmt::format(
          "fallback model '{}' was rolled back to model '{}' itself", fallback,
          it->second.served_by));
    }
    const auto mine = models_.find(model)->second.serving.config;
    const auto theirs = it->second.serving.ready.rbegin()->second->shared_config();
    if (mine != nullptr) VRAMD_RETURN_IF_ERROR(SameInterface(*mine, *theirs));
  }
  Update(model, [&](ModelEntry& entry) REQUIRES(mu_) {
    record.to_model = fallback;
    record.to.clear();
    *bad = TakeServing(entry);
    entry.previous_files.reset();
    entry.served_by = fallback;
    entry.lifecycle.TransitionOrLog(model, record.from, LifecycleState::kLoading,
                                    "rolling back: " + record.rule);
    MarkRolledBack(entry, record);
  });
  return Status::Ok();
}

std::optional<ModelManager::ReloadSource> ModelManager::SourceOf(
    const Versions& versions, std::optional<DeviceBytes> measured) {
  if (versions.ready.empty() || versions.config == nullptr || !versions.stamps) {
    return std::nullopt;
  }
  ReloadSource source;
  source.files = versions.files;
  source.config = versions.config;
  source.dir = versions.dir;
  source.versions = VersionNumbers(versions.ready);
  source.stamps = *versions.stamps;
  source.measured = std::move(measured);
  return source;
}

Status ModelManager::CheckUnchanged(const std::string& model, const ReloadSource& source) {
  auto now = VersionFileStamps(source.dir, source.versions);
  if (!now) {
    return Status::Unavailable(fmt::format(
        "version(s) {} of '{}' cannot be loaded again: '{}' cannot be read",
        fmt::join(source.versions, ","), model, source.dir.string()));
  }
  if (*now == source.stamps) return Status::Ok();
  // Name the first difference: a file changed, added or gone.
  std::map<std::string, const repository::FileStamp*> then;
  for (const auto& stamp : source.stamps) then[stamp.relative_path] = &stamp;
  std::string what;
  for (const auto& stamp : *now) {
    auto it = then.find(stamp.relative_path);
    if (it == then.end()) {
      what = fmt::format("'{}' was added", stamp.relative_path);
      break;
    }
    if (!(*it->second == stamp)) {
      what = fmt::format("'{}' changed", stamp.relative_path);
      break;
    }
    then.erase(it);
  }
  if (what.empty() && !then.empty()) what = fmt::format("'{}' is gone", then.begin()->first);
  return Status::InvalidArgument(fmt::format(
      "version(s) {} of '{}' cannot be loaded again: their files changed since they served ({} "
      "in {})",
      fmt::join(source.versions, ","), model, what, source.dir.string()));
}

Status ModelManager::Hold(std::string_view name, bool hold) {
  VRAMD_RETURN_IF_ERROR(CheckModelName(name));
  const std::string model(name);
  bool reload = false;
  {
    ActionGuard action(*this, model);
    {
      ReaderLock lock(mu_);
      if (models_.find(model) == models_.end()) {
        return Status::NotFound(fmt::format("model '{}' is not known", model));
      }
    }
    Update(model, [&](ModelEntry& entry) {
      entry.held = hold;
      if (!hold) {
        reload = entry.change_held_back && mode_ == ModelControlMode::kPoll;
        entry.change_held_back = false;
      }
    });
    spdlog::info("model '{}': {}", model, hold ? "held: no automatic change until released"
                                               : "released");
    if (reload) {
      spdlog::info("model '{}': loading the change its hold kept back", model);
      load_slots_.acquire();
      Status loaded = LoadLocked(model, nullptr);
      load_slots_.release();
      if (!loaded.ok()) return loaded;
    }
  }
  return Status::Ok();
}

void ModelManager::NoteLeak(const std::string& owner_path, size_t bytes) {
  // "server/model:NAME/version:V[/...]"; a model name holds no '/' (a directory name).
  constexpr std::string_view kModel = "server/model:";
  if (owner_path.compare(0, kModel.size(), kModel) != 0) return;
  const size_t name_end = owner_path.find('/', kModel.size());
  if (name_end == std::string::npos) return;
  constexpr std::string_view kVersion = "/version:";
  if (owner_path.compare(name_end, kVersion.size(), kVersion) != 0) return;
  const size_t v_start = name_end + kVersion.size();
  const size_t v_end = std::min(owner_path.find('/', v_start), owner_path.size());
  int64_t version = 0;
  auto [end, error] =
      std::from_chars(owner_path.data() + v_start, owner_path.data() + v_end, version);
  if (error != std::errc() || end != owner_path.data() + v_end) return;
  MutexLock lock(leak_mu_);
  pending_leaks_.emplace_back(owner_path.substr(kModel.size(), name_end - kModel.size()), version,
                              fmt::format("{} leaked {} bytes", owner_path, bytes));
}

std::map<std::pair<std::string, std::string>, uint64_t> ModelManager::RollbackCounts() const {
  MutexLock lock(rollback_mu_);
  return rollback_counts_;
}

void ModelManager::MonitorRollbacks(std::stop_token stop) {
  EveryPeriodUntilStopped(stop, rollback_check_interval_, [this] { CheckRollbacks(); });
}

void ModelManager::CheckRollbacks() {
  const auto now = Clock::now();
  std::optional<double> gpu;
  bool gpu_read = false;
  std::vector<std::pair<std::string, RollbackVerdict>> fired;
  std::vector<std::pair<std::string, Versions>> ended;
  std::vector<std::tuple<std::string, int64_t, std::string>> leaks;
  {
    MutexLock lock(leak_mu_);
    leaks.swap(pending_leaks_);
  }
  {
    WriterLock lock(mu_);
    for (auto& [name, version, what] : leaks) {
      auto it = models_.find(name);
      if (it != models_.end() && it->second.watch && it->second.serving.ready.count(version)) {
        it->second.watch->OnLeak(std::move(what));
      }
    }
    for (auto& [name, entry] : models_) {
      if (!entry.watch) continue;
      RollbackWatch& watch = *entry.watch;
      if (!watch.Watching(now)) {
        spdlog::info("model '{}': rollback watch over; the versions it kept are unloaded", name);
        ended.emplace_back(name, EndWatch(entry));
        continue;
      }
      RollbackWatch::RequestSample sample;
      for (const auto& [v, version] : entry.serving.ready) {
        const InferenceStatsSnapshot stats = version->statistics().Snapshot();
        sample.requests += stats.success.count + stats.fail.count;
        sample.out_of_memory += version->statistics().out_of_memory();
        sample.errors += stats.fail.count -
                         stats.fail_by_reason[static_cast<size_t>(FailureReason::kCanceled)];
        const LatencyHistogram::Counts latency = version->statistics().latency().Read();
        for (int b = 0; b < LatencyHistogram::kBuckets; ++b) sample.latency[b] += latency[b];
      }
      watch.OnSample(now, sample);
      if (watch.settings().max_gpu_util && gpu_utilization_) {
        if (!gpu_read) {
          gpu = gpu_utilization_();
          gpu_read = true;
        }
        if (gpu) watch.OnGpuUtilization(now, *gpu);
      }
      if (entry.held || now < entry.cooldown_until) continue;
      if (auto verdict = watch.Check(now)) fired.emplace_back(name, std::move(*verdict));
    }
  }
  for (auto& [name, versions] : ended) {
    ActionGuard action(*this, name);
    Retire(name, std::move(versions));
    Status gone = WaitRetired(name);
    if (!gone.ok()) spdlog::warn("{}", gone.message());
    SettleMemory();
  }
  for (auto& [name, verdict] : fired) {
    Status rolled = Rollback(name, verdict.rule, verdict.figures);
    if (!rolled.ok()) spdlog::error("{}", rolled.message());
  }
}

Status ModelManager::PollOnce() {
  if (watcher_ == nullptr) return Status::InvalidArgument("the model control mode is not poll");
  MutexLock poll(poll_mu_);
  VRAMD_ASSIGN_OR_RETURN(auto changes, watcher_->Poll());
  std::vector<std::string> changed;
  for (const auto& change : changes) changed.push_back(change.model);
  for (const std::vector<size_t>& wave : LoadWaves(repositories_, changed)) {
    ParallelFor(wave.size(), load_thread_count_, [&](size_t w) {
      const auto& change = changes[wave[w]];
      ActionGuard action(*this, change.model);
      if (change.kind == repository::ChangeKind::kRemoved) {
        spdlog::info("repository poll: model '{}' was removed; unloading it", change.model);
        Status unloaded = UnloadLocked(change.model, /*on_request=*/false);
        if (!unloaded.ok()) spdlog::error("repository poll: {}", unloaded.message());
        return;
      }
      bool held = false;
      {
        ReaderLock lock(mu_);
        auto it = models_.find(change.model);
        held = it != models_.end() && it->second.held;
      }
      if (held) {
        Update(change.model, [](ModelEntry& entry) { entry.change_held_back = true; });
        spdlog::warn("repository poll: model '{}' changed, but it is held (after a rollback, or "
                     "by request): not loaded until released (vramctl release {})",
                     change.model, change.model);
        return;
      }
      spdlog::info("repository poll: model '{}' {}; loading it", change.model,
                   change.kind == repository::ChangeKind::kAdded ? "appeared" : "changed");
      load_slots_.acquire();
      // Not returned: one model's failure must not hide the others' changes; LoadLocked has
      // logged it and the index shows it.
      (void)LoadLocked(change.model, nullptr);
      load_slots_.release();
    });
  }
  return Status::Ok();
}

namespace {

Status GapTimeout(std::string_view name, std::chrono::milliseconds wait) {
  return Status::Unavailable(fmt::format(
      "model '{}' is unavailable: a resource-preserving reload is in progress and it was not "
      "ready within {} ms",
      name, wait.count()));
}

// What a request parked in a gap gets when the manager stops first.
Status ShuttingDown() { return Status::Unavailable("the server is shutting down"); }

}  // namespace

Result<std::shared_ptr<LoadedModel>> ModelManager::FindLocked(std::string_view name,
                                                              int64_t version) const {
  auto it = models_.find(name);
  if (it == models_.end() || (it->second.lifecycle.state() == LifecycleState::kUnloaded &&
                              it->second.lifecycle.history().empty())) {
    return Status::NotFound(fmt::format("Request for unknown model: '{}' is not found", name));
  }
  const ModelEntry& entry = it->second;
  const Versions& serving = entry.serving;
  if (!entry.served_by.empty() && serving.ready.empty()) {
    // Rolled back to a fallback model: its highest ready version answers (one step: the
    // fallback's own fallback is not followed).
    if (version != 0) {
      return Status::NotFound(fmt::format(
          "model '{}' version {} is not served: after a rollback, model '{}' answers for '{}' "
          "(ask for no version)",
          name, version, entry.served_by, name));
    }
    auto fallback = models_.find(entry.served_by);
    if (fallback == models_.end() || fallback->second.serving.ready.empty()) {
      return Status::Unavailable(fmt::format(
          "model '{}' is served by fallback model '{}' after a rollback, which has no ready "
          "version",
          name, entry.served_by));
    }
    return fallback->second.serving.ready.rbegin()->second;
  }
  if (version == 0) {
    if (serving.ready.empty()) {
      const std::string& why = entry.lifecycle.reason();
      return Status::Unavailable(fmt::format("model '{}' has no ready version ({}{}{})", name,
                                             LifecycleStateName(entry.lifecycle.state()),
                                             why.empty() ? "" : ": ", why));
    }
    return serving.ready.rbegin()->second;
  }
  auto v = serving.ready.find(version);
  if (v != serving.ready.end()) return v->second;
  auto f = serving.failed.find(version);
  if (f != serving.failed.end()) {
    return Status::Unavailable(
        fmt::format("model '{}' version {} is not ready: {}", name, version, f->second));
  }
  return Status::NotFound(
      fmt::format("Request for unknown model: '{}' version {} is not found", name, version));
}

Result<std::shared_ptr<LoadedModel>> ModelManager::Find(std::string_view name,
                                                        int64_t version) const {
  if (auto found = TryFind(name, version)) return std::move(*found);
  // A resource-preserving gap: the same parking as FindAsync, waited for here. Shared with
  // the callback, which may still be returning from set_value when get() does.
  auto answer = std::make_shared<std::promise<Result<std::shared_ptr<LoadedModel>>>>();
  auto future = answer->get_future();
  FindAsync(name, version, [answer](Result<std::shared_ptr<LoadedModel>> found, bool) {
    answer->set_value(std::move(found));
  });
  return future.get();
}

std::optional<Result<std::shared_ptr<LoadedModel>>> ModelManager::TryFind(std::string_view name,
                                                                          int64_t version) const {
  ReaderLock lock(mu_);
  auto it = models_.find(name);
  if (it != models_.end() && it->second.gap) return std::nullopt;
  return FindLocked(name, version);
}

void ModelManager::FindAsync(std::string_view name, int64_t version, FindCallback done) const {
  Result<std::shared_ptr<LoadedModel>> found = Status::Internal("unset");
  {
    ReaderLock lock(mu_);
    auto it = models_.find(name);
    if (it != models_.end() && it->second.gap) {
      ++it->second.gap_waiters;  // the next gap waits until this request has been answered
      MutexLock parked(parked_mu_);
      parked_.push_back({std::string(name), version, it->second.gap_generation,
                         Clock::now() + it->second.gap_wait, it->second.gap_wait,
                         std::move(done)});
      parked_dirty_ = true;  // a new deadline to wait for
      parked_cv_.notify_all();
      return;
    }
    found = FindLocked(name, version);
  }
  done(std::move(found), /*waited=*/false);
}

void ModelManager::ReleaseParked(std::stop_token stop) {
  while (!stop.stop_requested()) {
    std::vector<Parked> waiting;
    {
      MutexLock parked(parked_mu_);
      auto earliest = Clock::time_point::max();
      for (const auto& p : parked_) earliest = std::min(earliest, p.deadline);
      parked.WaitUntil(parked_cv_, stop, earliest,
                       [this]() REQUIRES(parked_mu_) { return parked_dirty_; });
      parked_dirty_ = false;
      waiting.swap(parked_);  // looked at below without parked_mu_ (FindAsync takes it under mu_)
    }
    // Those whose gap ended (or whose wait ran out) are answered outside the locks.
    std::vector<std::pair<Parked, Result<std::shared_ptr<LoadedModel>>>> ready;
    std::vector<Parked> still;
    {
      ReaderLock lock(mu_);
      const auto now = Clock::now();
      for (auto& p : waiting) {
        auto it = models_.find(p.name);
        const bool ended = it == models_.end() || it->second.gap_generation != p.generation;
        if (!ended && now < p.deadline && !stop.stop_requested()) {
          still.push_back(std::move(p));
          continue;
        }
        // Stopping before its wait ran out is no timeout: say why it ends.
        Result<std::shared_ptr<LoadedModel>> result =
            now < p.deadline ? ShuttingDown() : GapTimeout(p.name, p.wait);
        if (ended) result = FindLocked(p.name, p.version);
        if (it != models_.end()) --it->second.gap_waiters;
        ready.emplace_back(std::move(p), std::move(result));
      }
    }
    {
      // Taken even with nothing to put back: a reload waiting in LetGapWaitersLook checks
      // gap_waiters under parked_mu_, so the fall above is seen or this notification is.
      MutexLock parked(parked_mu_);
      for (auto& p : still) parked_.push_back(std::move(p));
    }
    if (!ready.empty()) gap_answered_.notify_all();
    for (auto& [p, result] : ready) p.done(std::move(result), /*waited=*/true);
  }
  // Stopping: whoever is still parked gets an answer.
  std::vector<Parked> left;
  {
    MutexLock parked(parked_mu_);
    left.swap(parked_);
  }
  for (auto& p : left) p.done(ShuttingDown(), true);
}

Result<std::shared_ptr<const config::ModelConfig>> ModelManager::FindConfig(
    std::string_view name) const {
  ReaderLock lock(mu_);
  auto it = models_.find(name);
  if (it == models_.end()) {
    return Status::NotFound(fmt::format("Request for unknown model: '{}' is not found", name));
  }
  // A loaded model's config as placed (KIND_AUTO resolved, gpus filled), as Triton shows it.
  if (!it->second.serving.ready.empty()) {
    return it->second.serving.ready.rbegin()->second->shared_placed_config();
  }
  if (!it->second.serving.config) {
    return Status::Unavailable(fmt::format("model '{}' has no usable config: {}", name,
                                           it->second.lifecycle.reason()));
  }
  return it->second.serving.config;
}

Result<std::vector<int64_t>> ModelManager::ReadyVersions(std::string_view name) const {
  ReaderLock lock(mu_);
  auto it = models_.find(name);
  if (it == models_.end()) {
    return Status::NotFound(fmt::format("Request for unknown model: '{}' is not found", name));
  }
  std::vector<int64_t> versions;
  for (const auto& [v, m] : it->second.serving.ready) versions.push_back(v);
  return versions;
}

std::vector<std::shared_ptr<LoadedModel>> ModelManager::LoadedVersions() const {
  ReaderLock lock(mu_);
  std::vector<std::shared_ptr<LoadedModel>> loaded;
  for (const auto& [name, entry] : models_) {  // models_ and ready are ordered maps
    for (const auto& [v, model] : entry.serving.ready) loaded.push_back(model);
  }
  return loaded;
}

std::vector<std::shared_ptr<LoadedModel>> ModelManager::SleepCandidates() const {
  std::vector<std::shared_ptr<LoadedModel>> versions = LoadedVersions();
  ReaderLock lock(mu_);
  for (const auto& [name, entry] : models_) {
    for (const auto& [v, model] : entry.previous.ready) versions.push_back(model);
  }
  return versions;
}

bool ModelManager::ReleaseKept(memory::Device device, size_t size, memory::OwnerId asking) {
  const std::string asker = memory_.ledger->OwnerPath(asking);
  // Models other than the asker's whose watch keeps a version awake on the device.
  std::vector<std::string> holders;
  {
    ReaderLock lock(mu_);
    for (const auto& [name, entry] : models_) {
      for (const auto& [v, version] : entry.previous.ready) {
        if (version->sleep_gate().state() != SleepGate::State::kAwake ||
            !version->UsesDevice(device)) {
          continue;
        }
        const std::string model = memory_.ledger->OwnerPath(version->model_owner()) + "/";
        if (asker.compare(0, model.size(), model) != 0) holders.push_back(name);
        break;
      }
    }
  }
  for (const std::string& name : holders) {
    Versions kept;
    std::vector<int64_t> numbers;
    const bool acted = TryAction(name, [&]() REQUIRES(action_) {
      Update(name, [&](ModelEntry& entry) REQUIRES(mu_) {
        std::vector<memory::OwnerId> owners;
        for (const auto& [v, version] : entry.previous.ready) owners.push_back(version->owner());
        auto source = SourceOf(entry.previous, MeasureFootprint(*memory_.ledger, owners));
        if (!source) return;  // no way to load them again: kept
        numbers = VersionNumbers(entry.previous.ready);
        kept = std::exchange(entry.previous, Versions());
        entry.previous_files = std::move(source);
      });
      if (numbers.empty()) return;
      spdlog::info("model '{}': version(s) {} kept for rollback are unloaded to make room for {} "
                   "bytes on {} for {}, as no idle version could sleep for it; a rollback loads "
                   "them again from their files",
                   name, fmt::join(numbers, ","), size, device.ToString(), asker);
      Retire(name, std::move(kept));
      Status gone = WaitRetired(name);
      if (!gone.ok()) spdlog::warn("{}", gone.message());
      // Their segments go back to the device, as after a sleep, for an allocation the pool's
      // cached blocks do not fit.
      memory_.allocator->TrimAll();
    });
    if (acted && !numbers.empty()) return true;
  }
  return false;
}

bool ModelManager::TryAction(const std::string& name, const std::function<void()>& action) {
  std::map<std::string, ActionSlot, std::less<>>::iterator slot;
  {
    MutexLock lock(actions_mu_);
    bool made = false;
    std::tie(slot, made) = actions_.try_emplace(name);
    if (!made) return false;  // held, or waited for
    slot->second.users = 1;
    // Cannot wait: no one else can have found the slot yet.
    slot->second.mu.Lock();
  }
  action();
  slot->second.mu.Unlock();
  MutexLock lock(actions_mu_);
  if (--slot->second.users == 0) actions_.erase(slot);
  return true;
}

std::vector<ModelIndexEntry> ModelManager::Index() const {
  // Models of the repositories that were never loaded (explicit mode) are listed too, as
  // Triton lists them; scanned before taking the lock.
  std::set<std::string, std::less<>> on_disk;
  if (auto dirs = repository::ScanRepositories(repositories_); dirs.ok()) {
    for (const auto& dir : *dirs) on_disk.insert(dir.name);
  }
  ReaderLock lock(mu_);
  std::vector<ModelIndexEntry> index;
  for (const auto& name : on_disk) {
    auto it = models_.find(name);
    if (it != models_.end() && !it->second.lifecycle.history().empty()) continue;
    index.push_back({name, 0, std::string(TritonStateName(LifecycleState::kUnloaded)),
                     LifecycleState::kUnloaded, "not loaded"});
  }
  for (const auto& [name, entry] : models_) {
    const LifecycleState state = entry.lifecycle.state();
    if (state == LifecycleState::kUnloaded && entry.lifecycle.history().empty()) continue;
    std::map<int64_t, ModelIndexEntry> rows;  // ascending versions
    // Serving versions are READY while a reload loads beside them; they are what drains.
    const LifecycleState serving_state =
        state == LifecycleState::kLoading ? LifecycleState::kReady : state;
    for (const auto& [v, m] : entry.serving.ready) {
      rows[v] = {name, v, std::string(TritonStateName(serving_state)), serving_state,
                 entry.lifecycle.reason()};
      // A ready version whose instances know they cannot serve (a hosted model restarting its
      // process) is not READY to a client; its lifecycle is unchanged (the manager did not move it).
      if (m->CanSleep()) {
        const SleepGate& gate = m->sleep_gate();
        const SleepGate::State sleep = gate.state();
        rows[v].sleep = SleepStateName(sleep);
        if (serving_state == LifecycleState::kReady && sleep != SleepGate::State::kAwake) {
          rows[v].reason = sleep == SleepGate::State::kAsleep
                               ? fmt::format("sleeping (level {}); a request wakes it",
                                             static_cast<int>(gate.level()))
                               : std::string(SleepStateName(sleep));
        }
      }
      if (serving_state == LifecycleState::kReady) {
        if (Status available = m->Available(); !available.ok()) {
          rows[v].state = std::string(TritonStateName(LifecycleState::kFailed));
          rows[v].reason = available.message();
        }
      }
    }
    for (const auto& [v, why] : entry.serving.failed) {
      rows[v] = {name, v, std::string(TritonStateName(LifecycleState::kFailed)),
                 LifecycleState::kFailed, why};
    }
    for (int64_t v : entry.loading) {
      if (rows.count(v) > 0) continue;  // a reload of a serving version: it shows as serving
      rows[v] = {name, v, std::string(TritonStateName(LifecycleState::kLoading)),
                 LifecycleState::kLoading, entry.lifecycle.reason()};
    }
    if (rows.empty()) {
      index.push_back({name, 0, std::string(TritonStateName(state)), state,
                       entry.lifecycle.reason()});
      continue;
    }
    for (auto& [v, row] : rows) index.push_back(std::move(row));
  }
  std::stable_sort(index.begin(), index.end(),
                   [](const ModelIndexEntry& a, const ModelIndexEntry& b) { return a.name < b.name; });
  return index;
}

std::optional<ModelLifecycleView> ModelManager::Lifecycle(std::string_view name) const {
  {
    ReaderLock lock(mu_);
    if (auto it = models_.find(name); it != models_.end()) {
      const ModelEntry& entry = it->second;
      ModelLifecycleView view;
      view.name = std::string(name);
      view.state = entry.lifecycle.state();
      view.reason = entry.lifecycle.reason();
      for (const auto& [v, m] : entry.serving.ready) view.serving.push_back(v);
      view.history.assign(entry.lifecycle.history().begin(), entry.lifecycle.history().end());
      view.last_load = entry.last_load;
      view.held = entry.held;
      for (const auto& [v, m] : entry.previous.ready) {
        view.rollback_kept.push_back(v);
        if (m->sleep_gate().state() != SleepGate::State::kAwake) {
          view.rollback_kept_asleep.push_back(v);
        }
      }
      if (entry.previous_files) view.rollback_reload = entry.previous_files->versions;
      if (entry.watch) view.rollback_fallback = entry.watch->settings().fallback_model;
      view.served_by = entry.served_by;
      return view;
    }
  }
  // A model of the repositories that was never loaded (explicit mode): unloaded, as the index
  // lists it. Scanned without the lock.
  auto dirs = repository::ScanRepositories(repositories_);
  if (!dirs.ok()) return std::nullopt;
  for (const auto& dir : *dirs) {
    if (dir.name != name) continue;
    ModelLifecycleView view;
    view.name = std::string(name);
    view.reason = "not loaded";
    return view;
  }
  return std::nullopt;
}

bool ModelManager::AllModelsReady() const {
  ReaderLock lock(mu_);
  for (const auto& [name, entry] : models_) {
    if (entry.unloaded_on_request) continue;
    if (entry.lifecycle.state() == LifecycleState::kUnloaded &&
        entry.lifecycle.history().empty()) {
      continue;
    }
    if (!entry.served_by.empty()) {
      // Rolled back to a fallback model: ready while that model serves.
      auto fallback = models_.find(entry.served_by);
      if (fallback == models_.end() || fallback->second.serving.ready.empty()) return false;
      continue;
    }
    if (entry.serving.ready.empty() || !entry.serving.failed.empty()) return false;
    if (entry.lifecycle.state() != LifecycleState::kReady &&
        entry.lifecycle.state() != LifecycleState::kLoading) {
      return false;
    }
  }
  return true;
}

}  // namespace vramd::runtime
