#include "backends/backend_config.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <mutex>
#include <utility>

namespace vramd::backends {
namespace {

// The settings read server-side, and the values each takes.
struct KnownSetting {
  std::string_view name;
  std::vector<std::string_view> values;  // empty: a whole number (digits only)
  std::string_view reader;  // for the log: who reads it
};
const std::vector<KnownSetting>& Known() {
  static const auto* known = new std::vector<KnownSetting>{
      {"default-hosting", {"in_process", "stub", "process_per_instance"},
       "the hosting of a model whose config has no VRAMD_<BACKEND>_HOSTING parameter"},
      {"stub-call-timeout-ms", {},
       "the call timeout of a hosted model whose config has no VRAMD_STUB_CALL_TIMEOUT_MS "
       "parameter"},
  };
  return *known;
}

const KnownSetting* FindKnown(std::string_view name) {
  for (const KnownSetting& k : Known()) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

std::mutex mu;
std::vector<BackendSetting>& Settings() {
  static auto* settings = new std::vector<BackendSetting>;
  return *settings;
}

}  // namespace

std::string BackendSetting::Flag() const {
  return backend.empty() ? fmt::format("--backend-config={}={}", setting, value)
                         : fmt::format("--backend-config={},{}={}", backend, setting, value);
}

Result<BackendSetting> ParseBackendSetting(std::string_view arg) {
  const auto bad = [&](std::string_view why) {
    return Status::InvalidArgument(fmt::format(
        "--backend-config={}: {}; the flag takes <backend>,<setting>=<value>, or "
        "<setting>=<value> for every backend", arg, why));
  };
  const size_t eq = arg.find('=');
  if (eq == std::string_view::npos) return bad("no '='");
  BackendSetting s;
  const size_t comma = arg.substr(0, eq).find(',');
  if (comma != std::string_view::npos) {
    s.backend = std::string(arg.substr(0, comma));
    if (s.backend.empty()) return bad("the backend name before ',' is empty");
    s.setting = std::string(arg.substr(comma + 1, eq - comma - 1));
  } else {
    s.setting = std::string(arg.substr(0, eq));
  }
  if (s.setting.empty()) return bad("the setting name before '=' is empty");
  s.value = std::string(arg.substr(eq + 1));
  if (const KnownSetting* k = FindKnown(s.setting); k != nullptr && k->values.empty()) {
    // At most 9 digits: whatever reads it gets a number that fits in an int32.
    if (s.value.empty() || s.value.size() > 9 ||
        s.value.find_first_not_of("0123456789") != std::string::npos) {
      return Status::InvalidArgument(fmt::format("{}: {} is \"{}\"; it takes a whole number",
                                                 s.Flag(), s.setting, s.value));
    }
  } else if (k != nullptr) {
    bool ok = false;
    for (std::string_view v : k->values) ok = ok || v == s.value;
    if (!ok) {
      std::string list;
      for (size_t i = 0; i < k->values.size(); ++i) {
        list += fmt::format("{}{}", i == 0 ? "" : i + 1 == k->values.size() ? " or " : ", ",
                            k->values[i]);
      }
      return Status::InvalidArgument(fmt::format("{}: {} is \"{}\"; it takes {}", s.Flag(),
                                                 s.setting, s.value, list));
    }
  }
  return s;
}

void SetBackendSettings(std::vector<BackendSetting> settings) {
  for (const BackendSetting& s : settings) {
    if (FindKnown(s.setting) == nullptr) {
      std::string known;
      for (const KnownSetting& k : Known()) known += (known.empty() ? "" : ", ") + std::string(k.name);
      spdlog::warn("{}: ignored: vramd's backends read no setting '{}' (those read: {})", s.Flag(),
                   s.setting, known);
    } else {
      spdlog::info("{}: {}, for {}", s.Flag(), FindKnown(s.setting)->reader,
                   s.backend.empty() ? "every backend" : "backend '" + s.backend + "'");
    }
  }
  std::lock_guard lock(mu);
  Settings() = std::move(settings);
}

std::optional<std::string> BackendSettingValue(std::string_view backend, std::string_view setting) {
  std::lock_guard lock(mu);
  std::optional<std::string> own, global;
  for (const BackendSetting& s : Settings()) {
    if (s.setting != setting) continue;
    if (s.backend == backend) own = s.value;
    if (s.backend.empty()) global = s.value;
  }
  return own.has_value() ? own : global;
}

}  // namespace vramd::backends
