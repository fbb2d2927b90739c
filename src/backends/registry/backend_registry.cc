// FindBackend and AvailableBackends over the backends built into the server.
//
// The built-in backends implement the C ABI (include/vramd/backend.h) and are linked in: each
// gives its table, wrapped in an AbiBackend on first use and never destroyed, the same bridge a
// library's table goes through. A backend that is neither built in nor registered is looked for
// as a shared library under the backend directory (shared_library/shared_library_backend.h).
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backends/abi/abi_backend.h"
#include "backends/add_sub/add_sub_backend.h"
#include "backends/backend.h"
#include "backends/identity/identity_backend.h"
#include "backends/ensemble/ensemble_backend.h"
#include "backends/mlp/mlp_backend.h"
#include "backends/shared_library/shared_library_backend.h"

namespace vramd::backends {
namespace {

// Triton's platform names and the backend that serves each, as Triton maps them.
constexpr std::array<std::pair<std::string_view, std::string_view>, 6> kPlatforms = {{
    {"tensorrt_plan", "tensorrt"},
    {"tensorflow_graphdef", "tensorflow"},
    {"tensorflow_savedmodel", "tensorflow"},
    {"onnxruntime_onnx", "onnxruntime"},
    {"pytorch_libtorch", "pytorch"},
    {"ensemble", "ensemble"},
}};

const std::vector<Backend*>& BuiltinBackends() {
  static const auto* builtins = [] {
    auto* backends = new std::vector<Backend*>;
    for (const VramdBackendApi* api : {AddSubBackendApi(), IdentityBackendApi(), MlpBackendApi()}) {
      // A built-in's table is checked as a library's is; one that fails is a bug in it, which
      // leaves that backend out (its models fail to load, naming it) rather than the server.
      auto backend = AbiBackend::Create(api, api->name, std::nullopt);
      if (!backend.ok()) {
        spdlog::error("built-in backend left out: {}", backend.status().message());
        continue;
      }
      backends->push_back(backend->release());
    }
    // Not a model's code but the runtime composing models: written against backend.h itself.
    backends->push_back(EnsembleBackend());
    return backends;
  }();
  return *builtins;
}

std::string AvailableList() { return fmt::format("{}", fmt::join(AvailableBackends(), ", ")); }

// Backends registered at run time (tests today; shared-library backends later).
std::mutex& RegisteredMutex() {
  static std::mutex mu;
  return mu;
}
std::vector<Backend*>& Registered() {  // guarded by RegisteredMutex()
  static std::vector<Backend*> backends;
  return backends;
}

std::vector<Backend*> AllBackends() {
  const auto& builtin = BuiltinBackends();
  std::vector<Backend*> all(builtin.begin(), builtin.end());
  std::lock_guard lock(RegisteredMutex());
  all.insert(all.end(), Registered().begin(), Registered().end());
  return all;
}

// The backend directory; process-wide because it is one server flag, set before any load.
std::mutex& DirectoryMutex() {
  static std::mutex mu;
  return mu;
}
std::filesystem::path& Directory() {  // guarded by DirectoryMutex()
  static std::filesystem::path directory(kDefaultBackendDirectory);
  return directory;
}

// A backend name becomes a path component: one that could leave the backend directory
// ("..", "a/b") or hide ("" or ".x") is refused rather than looked up.
bool IsLibraryName(const std::string& name) {
  if (name.empty() || name[0] == '.') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
}

}  // namespace

void SetBackendDirectory(std::filesystem::path directory) {
  std::lock_guard lock(DirectoryMutex());
  Directory() = std::move(directory);
}

std::filesystem::path BackendDirectory() {
  std::lock_guard lock(DirectoryMutex());
  return Directory();
}

std::vector<std::string> AvailableBackends() {
  std::vector<std::string> names;
  for (Backend* b : AllBackends()) names.emplace_back(b->name());
  std::sort(names.begin(), names.end());
  return names;
}

Status RegisterBackend(Backend* backend) {
  for (Backend* b : AllBackends()) {
    if (b->name() == backend->name()) {
      return Status::AlreadyExists(fmt::format("backend '{}' is already registered", b->name()));
    }
  }
  std::lock_guard lock(RegisteredMutex());
  Registered().push_back(backend);
  return Status::Ok();
}

Result<Backend*> FindBackend(const config::ModelConfig& config) {
  std::string wanted = config.backend();
  std::string origin;
  // Both named: a platform Triton serves with one of these backends must name that one (as
  // Triton checks the pair); the backend is what vramd then loads.
  if (!wanted.empty() && !config.platform().empty()) {
    for (const auto& [platform, backend] : kPlatforms) {
      if (platform == config.platform() && backend != wanted &&
          std::any_of(kPlatforms.begin(), kPlatforms.end(),
                      [&](const auto& p) { return p.second == wanted; })) {
        return Status::InvalidArgument(fmt::format(
            "model '{}': platform '{}' is served by backend '{}', not by backend '{}' as the "
            "config also says; set one of them",
            config.name(), config.platform(), backend, wanted));
      }
    }
  }
  if (wanted.empty()) {
    if (config.platform().empty()) {
      return Status::InvalidArgument(
          fmt::format("model '{}' sets neither 'backend' nor 'platform' (available backends: {})",
                      config.name(), AvailableList()));
    }
    for (const auto& [platform, backend] : kPlatforms) {
      if (platform == config.platform()) wanted = backend;
    }
    if (wanted.empty()) {
      return Status::NotFound(
          fmt::format("model '{}': unknown platform '{}' (available backends: {})", config.name(),
                      config.platform(), AvailableList()));
    }
    origin = fmt::format(" (from platform '{}')", config.platform());
  }
  for (Backend* b : AllBackends()) {
    if (b->name() == wanted) return b;
  }
  if (!IsLibraryName(wanted)) {
    return Status::NotFound(
        fmt::format("model '{}': backend '{}'{} is not available and is not a valid backend "
                    "library name (available backends: {})",
                    config.name(), wanted, origin, AvailableList()));
  }
  // Not built in: the backend's shared library. Its error names the path tried; the code is
  // kept (NotFound for a missing library, InvalidArgument for an ABI mismatch).
  auto library = LoadSharedLibraryBackend(BackendDirectory(), wanted);
  if (library.ok()) return library;
  return Status(library.status().code(),
                fmt::format("model '{}': backend '{}'{} is not available: {} (available "
                            "backends: {})",
                            config.name(), wanted, origin, library.status().message(),
                            AvailableList()));
}

}  // namespace vramd::backends
