// Triton's --backend-config settings (`vramd serve --backend-config=<backend>,<setting>=<value>`,
// and the global form `--backend-config=<setting>=<value>`, which applies to every backend),
// kept for the whole process. vramd sets them once, before any model loads.
//
// Triton hands every setting to its backend, which may ignore it. vramd's backend libraries take
// no settings through the C ABI (include/vramd/backend.h); the settings are read server-side:
//   default-hosting = in_process | stub | process_per_instance
//     the hosting of a model of a backend library whose config has no VRAMD_<BACKEND>_HOSTING
//     parameter (remote/hosting.h; docs/remote-backends.md). Default: in_process.
//   stub-call-timeout-ms = <whole number>
//     the call timeout of a hosted model whose config has no VRAMD_STUB_CALL_TIMEOUT_MS
//     parameter (remote/stub.h); 0 for none. Default: 300000.
// Any other setting is logged once, at SetBackendSettings, as ignored.
//
// Thread safety: SetBackendSettings before any model loads; the readers from any thread after.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace vramd::backends {

struct BackendSetting {
  std::string backend;  // "" for a global setting (every backend)
  std::string setting;
  std::string value;

  // As given on the command line: "--backend-config=python,default-hosting=stub".
  std::string Flag() const;
};

// One flag's value: "<backend>,<setting>=<value>", or "<setting>=<value>" when the first '='
// comes before any ',' (global). The value is everything after that '=' (it may hold ',' and
// '='). InvalidArgument naming the flag when the backend name, the setting or the '=' is
// missing, or a setting vramd reads has a value it does not take.
Result<BackendSetting> ParseBackendSetting(std::string_view arg);

// Replaces the process's settings (each already parsed); logs each setting vramd does not read
// as ignored, once. A later setting of one backend and name wins over an earlier one.
void SetBackendSettings(std::vector<BackendSetting> settings);

// The value of `setting` for `backend`: its own (the last given), else the global one, else
// nullopt.
std::optional<std::string> BackendSettingValue(std::string_view backend, std::string_view setting);

}  // namespace vramd::backends
