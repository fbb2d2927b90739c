#include "runtime/model_manager.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <mutex>
#include <set>
#include <thread>

#include "config/model_config_parser.h"
#include "repository/model_repository.h"

namespace vramd::runtime {
namespace fs = std::filesystem;

std::string_view ModelStateName(ModelState state) {
  return state == ModelState::kReady ? "READY" : "UNAVAILABLE";
}

ModelManager::ModelEntry ModelManager::LoadModel(const fs::path& model_dir,
                                                 const std::string& name) const {
  ModelEntry entry;
  auto parsed = config::LoadModelConfigFile(model_dir / "config.pbtxt");
  if (!parsed.ok()) {
    entry.reason = parsed.status().message();
    return entry;
  }
  if (!parsed->unsupported_fields.empty()) {
    spdlog::warn("model '{}': {} ignores fields it does not support: {}", name,
                 (model_dir / "config.pbtxt").string(), fmt::join(parsed->unsupported_fields, ", "));
  }
  auto config = std::make_shared<config::ModelConfig>(std::move(parsed->config));
  Status valid = config::ValidateAndNormalize(config.get(), name);
  if (!valid.ok()) {
    entry.reason = fmt::format("{}: {}", (model_dir / "config.pbtxt").string(), valid.message());
    return entry;
  }
  entry.config = config;

  std::vector<int64_t> versions =
      repository::SelectVersions(config->version_policy(), repository::ListVersions(model_dir));
  if (versions.empty()) {
    entry.reason = fmt::format("model '{}' has no version folder that its version_policy selects "
                               "in '{}'", name, model_dir.string());
    return entry;
  }
  entry.owner = memory::ScopedOwner(memory_.ledger, memory_.ledger->root(),
                                    memory::OwnerKind::kModel, name);
  for (int64_t v : versions) {
    auto loaded = LoadedModel::Load(config, model_dir, v, memory_, entry.owner.id());
    if (loaded.ok()) {
      entry.ready.emplace(v, std::move(loaded).value());
    } else {
      entry.failed.emplace(v, loaded.status().message());
    }
  }
  return entry;
}

Result<std::unique_ptr<ModelManager>> ModelManager::Create(const Options& options) {
  if (options.memory.ledger == nullptr || options.memory.allocator == nullptr) {
    return Status::Internal("ModelManager needs a ledger and an allocator");
  }
  VRAMD_ASSIGN_OR_RETURN(auto dirs, repository::ScanRepositories(options.repositories));
  std::unique_ptr<ModelManager> manager(new ModelManager(options));
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
  for (const auto& dir : dirs) {
    if (!all && startup.count(dir.name) == 0) continue;
    ModelEntry entry;
    if (!dir.status.ok()) {
      entry.reason = dir.status.message();
    } else {
      entry = manager->LoadModel(dir.path, dir.name);
    }
    if (!entry.reason.empty()) {
      spdlog::error("failed to load model '{}': {}", dir.name, entry.reason);
      if (options.exit_on_error) {
        return Status::InvalidArgument(fmt::format("failed to load model '{}': {}", dir.name, entry.reason));
      }
    }
    for (const auto& [v, reason] : entry.failed) {
      spdlog::error("failed to load: {}", reason);  // the reason names model and version
      if (options.exit_on_error) return Status::InvalidArgument(reason);
    }
    for (const auto& [v, model] : entry.ready) {
      spdlog::info("loaded model '{}' version {} ({} instance(s), backend '{}')", dir.name, v,
                   model->instance_count(),
                   model->config().backend().empty() ? model->config().platform()
                                                     : model->config().backend());
    }
    std::unique_lock lock(manager->mu_);
    manager->models_.emplace(dir.name, std::move(entry));
  }
  // Loading leaves cached free blocks behind (host staging images of weights uploaded to a GPU,
  // failed loads): hand them back rather than hold them for the server's lifetime.
  size_t trimmed = options.memory.allocator->TrimAll();
  if (trimmed > 0) spdlog::info("returned {} bytes of cached load-time memory", trimmed);
  return manager;
}

ModelManager::~ModelManager() {
  std::unique_lock lock(mu_);
  models_.clear();  // versions first, then what was retired
}

std::shared_ptr<std::mutex> ModelManager::ActionLock(std::string_view name) {
  std::lock_guard lock(actions_mu_);
  auto it = actions_.find(name);
  if (it == actions_.end()) {
    it = actions_.emplace(std::string(name), std::make_shared<std::mutex>()).first;
  }
  return it->second;
}

void ModelManager::Retire(ModelEntry entry) {
  Retired retired;
  retired.owner = std::move(entry.owner);
  // Drain first: requests already queued run; later ones are refused as unloading. Shutting
  // down here also means no instance thread ever destroys its own LoadedModel.
  for (auto& [v, model] : entry.ready) {
    model->Shutdown();
    retired.versions.push_back(model);
  }
  entry.ready.clear();  // the last reference, unless a request still holds one
  const std::vector<std::weak_ptr<LoadedModel>> versions = retired.versions;
  {
    std::lock_guard lock(retired_mu_);
    retired_.push_back(std::move(retired));
  }
  // A request that was answered drops its reference right after its callback: wait a moment
  // (up to 2 s) so that the owner usually closes before this returns.
  for (int i = 0; i < 2000; ++i) {
    bool gone = true;
    for (const auto& w : versions) gone = gone && w.expired();
    if (gone) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  SweepRetired();
}

void ModelManager::SweepRetired() {
  std::vector<Retired> done;
  {
    std::lock_guard lock(retired_mu_);
    for (auto it = retired_.begin(); it != retired_.end();) {
      bool gone = true;
      for (const auto& w : it->versions) gone = gone && w.expired();
      if (gone) {
        done.push_back(std::move(*it));
        it = retired_.erase(it);
      } else {
        ++it;
      }
    }
  }
  done.clear();  // closes the owners, outside the lock
}

Status ModelManager::Load(std::string_view name) {
  if (mode_ != ModelControlMode::kExplicit) {
    return Status::InvalidArgument(
        "explicit model load / unload is not allowed if polling is enabled (the model control "
        "mode is 'none'; start vramd with --model-control-mode explicit)");
  }
  auto action = ActionLock(name);
  std::lock_guard action_lock(*action);
  VRAMD_ASSIGN_OR_RETURN(auto dirs, repository::ScanRepositories(repositories_));
  const repository::ModelDirectory* dir = nullptr;
  for (const auto& d : dirs) {
    if (d.name == name) dir = &d;
  }
  if (dir == nullptr) {
    return Status::NotFound(fmt::format(
        "failed to load '{}': no model repository holds a model of that name", name));
  }
  ModelEntry entry;
  if (!dir->status.ok()) {
    entry.reason = dir->status.message();
  } else {
    entry = LoadModel(dir->path, dir->name);
  }
  std::string error = entry.reason;
  if (error.empty() && !entry.failed.empty()) error = entry.failed.rbegin()->second;
  if (error.empty() && entry.ready.empty()) error = "no version loaded";
  if (!error.empty()) {
    spdlog::error("failed to load model '{}': {}", name, error);
    ModelEntry failed;  // the failed attempt, or the serving entry kept, goes back to the map
    bool keep_serving = false;
    {
      std::unique_lock lock(mu_);
      auto it = models_.find(name);
      keep_serving = it != models_.end() && !it->second.ready.empty();
      if (keep_serving) {
        it->second.load_error = error;
      } else if (it != models_.end()) {
        std::swap(it->second, entry);  // `entry` now holds the old (empty) entry
      } else {
        models_.emplace(std::string(name), std::move(entry));
      }
    }
    if (keep_serving) Retire(std::move(entry));  // the failed attempt's partial versions
    memory_.allocator->TrimAll();
    return Status::InvalidArgument(fmt::format("failed to load '{}': {}", name, error));
  }
  for (const auto& [v, model] : entry.ready) {
    spdlog::info("loaded model '{}' version {} ({} instance(s))", name, v,
                 model->instance_count());
  }
  {
    std::unique_lock lock(mu_);
    auto it = models_.find(name);
    if (it != models_.end()) {
      std::swap(it->second, entry);  // `entry` now holds the replaced versions
    } else {
      models_.emplace(std::string(name), std::move(entry));
      entry = ModelEntry();
    }
  }
  Retire(std::move(entry));
  size_t trimmed = memory_.allocator->TrimAll();
  if (trimmed > 0) spdlog::info("returned {} bytes of cached load-time memory", trimmed);
  return Status::Ok();
}

Status ModelManager::Unload(std::string_view name) {
  if (mode_ != ModelControlMode::kExplicit) {
    return Status::InvalidArgument(
        "explicit model load / unload is not allowed if polling is enabled (the model control "
        "mode is 'none'; start vramd with --model-control-mode explicit)");
  }
  auto action = ActionLock(name);
  std::lock_guard action_lock(*action);
  ModelEntry old;
  {
    std::unique_lock lock(mu_);
    auto it = models_.find(name);
    if (it == models_.end()) return Status::Ok();  // not loaded: nothing to do (Triton's answer)
    std::swap(it->second, old);
    it->second.reason = "unloaded";
    it->second.unloaded = true;
  }
  const bool had_versions = !old.ready.empty();
  Retire(std::move(old));
  size_t trimmed = memory_.allocator->TrimAll();
  if (had_versions) spdlog::info("unloaded model '{}'; returned {} bytes", name, trimmed);
  return Status::Ok();
}

Result<std::shared_ptr<LoadedModel>> ModelManager::Find(std::string_view name,
                                                        int64_t version) const {
  std::shared_lock lock(mu_);
  auto it = models_.find(name);
  if (it == models_.end()) {
    return Status::NotFound(fmt::format("Request for unknown model: '{}' is not found", name));
  }
  const ModelEntry& entry = it->second;
  if (version == 0) {
    if (entry.ready.empty()) {
      // Say why: the model's own reason, else the newest version's failure.
      std::string why = !entry.reason.empty()       ? entry.reason
                        : !entry.failed.empty() ? entry.failed.rbegin()->second
                                                : "";
      return Status::Unavailable(
          fmt::format("model '{}' has no ready version{}", name, why.empty() ? "" : ": " + why));
    }
    return entry.ready.rbegin()->second;
  }
  auto v = entry.ready.find(version);
  if (v != entry.ready.end()) return v->second;
  auto f = entry.failed.find(version);
  if (f != entry.failed.end()) {
    return Status::Unavailable(
        fmt::format("model '{}' version {} is not ready: {}", name, version, f->second));
  }
  return Status::NotFound(
      fmt::format("Request for unknown model: '{}' version {} is not found", name, version));
}

Result<std::shared_ptr<const config::ModelConfig>> ModelManager::FindConfig(
    std::string_view name) const {
  std::shared_lock lock(mu_);
  auto it = models_.find(name);
  if (it == models_.end()) {
    return Status::NotFound(fmt::format("Request for unknown model: '{}' is not found", name));
  }
  if (!it->second.config) {
    return Status::Unavailable(
        fmt::format("model '{}' has no usable config: {}", name, it->second.reason));
  }
  return it->second.config;
}

Result<std::vector<int64_t>> ModelManager::ReadyVersions(std::string_view name) const {
  std::shared_lock lock(mu_);
  auto it = models_.find(name);
  if (it == models_.end()) {
    return Status::NotFound(fmt::format("Request for unknown model: '{}' is not found", name));
  }
  std::vector<int64_t> versions;
  for (const auto& [v, m] : it->second.ready) versions.push_back(v);
  return versions;
}

std::vector<std::shared_ptr<LoadedModel>> ModelManager::LoadedVersions() const {
  std::shared_lock lock(mu_);
  std::vector<std::shared_ptr<LoadedModel>> loaded;
  for (const auto& [name, entry] : models_) {  // models_ and ready are ordered maps
    for (const auto& [v, model] : entry.ready) loaded.push_back(model);
  }
  return loaded;
}

std::vector<ModelIndexEntry> ModelManager::Index() const {
  std::shared_lock lock(mu_);
  std::vector<ModelIndexEntry> index;
  for (const auto& [name, entry] : models_) {
    if (!entry.reason.empty()) {
      index.push_back({name, 0, ModelState::kUnavailable, entry.reason});
      continue;
    }
    // Versions in ascending order, ready and failed interleaved.
    std::map<int64_t, ModelIndexEntry> rows;
    const std::string serving_reason =
        entry.load_error.empty() ? "" : "serving; last load failed: " + entry.load_error;
    for (const auto& [v, m] : entry.ready) rows[v] = {name, v, ModelState::kReady, serving_reason};
    for (const auto& [v, why] : entry.failed) rows[v] = {name, v, ModelState::kUnavailable, why};
    for (auto& [v, row] : rows) index.push_back(std::move(row));
  }
  return index;
}

bool ModelManager::AllModelsReady() const {
  std::shared_lock lock(mu_);
  for (const auto& [name, entry] : models_) {
    if (entry.unloaded) continue;
    if (!entry.reason.empty() || !entry.failed.empty() || entry.ready.empty()) return false;
  }
  return true;
}

}  // namespace vramd::runtime
