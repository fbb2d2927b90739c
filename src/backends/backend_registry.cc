// FindBackend and AvailableBackends over the backends built into the server.
//
// The built-in backends are function-local statics: stateless apart from what each LoadModel
// returns, created on first use and never destroyed before exit. When shared-library backends
// arrive (DESIGN.md, decision 5) they join this table.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <mutex>
#include <string>
#include <utility>

#include "backends/add_sub/add_sub_backend.h"
#include "backends/backend.h"
#include "backends/identity/identity_backend.h"
#include "backends/mlp/mlp_backend.h"

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

std::array<Backend*, 3> BuiltinBackends() {
  static IdentityBackend identity;
  static AddSubBackend add_sub;
  static MlpBackend mlp;
  return {&add_sub, &identity, &mlp};  // sorted by name
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
  auto builtin = BuiltinBackends();
  std::vector<Backend*> all(builtin.begin(), builtin.end());
  std::lock_guard lock(RegisteredMutex());
  all.insert(all.end(), Registered().begin(), Registered().end());
  return all;
}

}  // namespace

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
  return Status::NotFound(
      fmt::format("model '{}': backend '{}'{} is not available (available "
                  "backends: {})",
                  config.name(), wanted, origin, AvailableList()));
}

}  // namespace vramd::backends
