// HostingBackend: a Backend decorator over a backend library that hosts models out of vramd's
// process when their config asks for it (docs/remote-backends.md), and passes every other model
// to the in-process backend unchanged. shared_library_backend.cc wraps every library's backend
// in one, so no library needs to know (the python backend is the first user; the core stays
// free of Python).
//
// The choice, per model, from its config's parameters:
//   VRAMD_<BACKEND>_HOSTING (VRAMD_PYTHON_HOSTING for backend "python"):
//     "in_process"            the default (unless --backend-config's default-hosting says
//                             otherwise: backends/backend_config.h): the library in vramd's
//                             process (DESIGN.md 6);
//     "stub"                  one host process per model and device, running all that model's
//                             instances on the device as threads (one extra CUDA context per
//                             model per GPU, never per instance);
//     "process_per_instance"  one host process per instance: Triton's python backend exactly.
//   EXECUTION_ENV_PATH (Triton's): a conda-pack env for the host (remote/execution_env.h); it
//     makes "stub" the default, and "in_process" with it is refused.
//   VRAMD_STUB_CALL_TIMEOUT_MS: how long a call into a hosted model's process may take before
//     the process counts as hung and is killed (remote/stub.h); "0" for no limit. Default: the
//     backend's --backend-config stub-call-timeout-ms, else kDefaultCallTimeout (5 minutes).
// Anything else is InvalidArgument naming the key and the values.
//
// Hosted models go through remote/stub.h; their instances keep the library's
// execute / execute_requests contract, so the runtime sees the same backend either way.
//
// Thread safety: as Backend.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "backends/backend.h"

namespace vramd::backends::remote {

enum class HostingMode { kInProcess, kStub, kProcessPerInstance };

struct Hosting {
  HostingMode mode = HostingMode::kInProcess;
  std::string execution_env;  // EXECUTION_ENV_PATH, "" for none
};

// The model's hosting, read from its config as above.
Result<Hosting> ChooseHosting(const config::ModelConfig& config, std::string_view backend);

// The config parameter key for `backend`: "VRAMD_" + upper-case name + "_HOSTING".
std::string HostingKey(std::string_view backend);

inline constexpr std::string_view kCallTimeoutKey = "VRAMD_STUB_CALL_TIMEOUT_MS";
inline constexpr std::string_view kCallTimeoutSetting = "stub-call-timeout-ms";  // --backend-config
// A hosted model's call timeout, read as above (0: none).
Result<std::chrono::milliseconds> ChooseCallTimeout(const config::ModelConfig& config,
                                                    std::string_view backend);

// Where vramd_backend_host is: $VRAMD_BACKEND_HOST, else vramd_backend_host in the backend
// directory above the library's own (<backend-directory>/<name>/lib.so), else where the build
// put it. NotFound naming the places tried.
Result<std::filesystem::path> BackendHostExecutable(const std::filesystem::path& library);

class HostingBackend final : public Backend {
 public:
  HostingBackend(std::unique_ptr<Backend> in_process, std::filesystem::path library);

  std::string_view name() const override { return in_process_->name(); }
  bool SupportsGpu() const override { return in_process_->SupportsGpu(); }
  bool ExecutesOnInstanceThreads() const override { return in_process_->ExecutesOnInstanceThreads(); }
  bool TakesRequestLists() const override { return in_process_->TakesRequestLists(); }
  bool AcceptsGpuInputs() const override { return in_process_->AcceptsGpuInputs(); }
  bool ChecksReadiness() const override { return in_process_->ChecksReadiness(); }
  // Where the model will run: in vramd's process for in-process hosting, otherwise in a host
  // process started for it (Stub::AutoComplete) with the model's EXECUTION_ENV_PATH, as Triton
  // runs it in the stub.
  Status AutoCompleteConfig(const std::filesystem::path& model_dir, int64_t version,
                            config::ModelConfig* config) override;
  Result<std::unique_ptr<BackendModel>> LoadModel(const ModelContext& ctx) override;

 private:
  const std::unique_ptr<Backend> in_process_;
  const std::filesystem::path library_;
};

}  // namespace vramd::backends::remote
