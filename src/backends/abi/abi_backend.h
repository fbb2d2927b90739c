// AbiBackend: the internal Backend interface over a backend's C table (include/vramd/backend.h).
// Every real backend reaches the runtime through it, whether its table is linked into the server
// (the built-ins) or comes from a library that shared_library_backend.h loaded.
//
// Ownership: each BackendModel owns the backend's model handle and the VramdServerApi it was
// given; each instance holds its model (shared), so model_destroy runs only after the last
// instance_destroy whatever order the runtime drops them in. An AbiBackend does not hold the
// library its table lives in: the loader keeps it (shared_library_backend.h keeps every library
// it loaded, and their AbiBackends, for the process's lifetime, as Triton does: a backend may
// keep threads or static state that outlive its last model).
//
// Errors: a library's failures are prefixed "backend '<name>': ", since its messages cannot be
// trusted to say where they come from; a built-in's pass through unchanged, as its messages
// already name the model, backend or instance.
//
// Requests: a library's execute gets the request's ledger owner in VramdRequest::owner, which
// opens the runtime's lazy per-request owner. A built-in's gets 0 (allocate's "the calling
// thread's current owner", the same owner), so the request path of the built-ins, which take no
// memory per request, opens no ledger entry.
//
// Thread safety: Create is safe from any thread; the Backend/BackendModel/BackendInstance
// methods follow backend.h.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "backends/backend.h"
#include "vramd/backend.h"

namespace vramd::backends {

class AbiBackend final : public Backend {
 public:
  // Checks `api`: not NULL, abi_version equal to ours (naming both), struct_size large enough
  // for the entry points (fields appended since may be missing: an older library), every entry
  // point set, and the table's name equal to `name`; InvalidArgument otherwise.
  // `library` is the path of the library the table lives in (named in errors; REQUIRES: the
  // caller keeps that library loaded as long as the backend), or nullopt for a table linked
  // into the server.
  static Result<std::unique_ptr<AbiBackend>> Create(
      const VramdBackendApi* api, std::string name,
      std::optional<std::filesystem::path> library);

  std::string_view name() const override { return name_; }
  bool SupportsGpu() const override { return api_->supports_gpu != 0; }
  // The table's execute_on_instance_threads; false for a table that ends before it.
  bool ExecutesOnInstanceThreads() const override;
  // Whether the table sets execute_requests (a table that ends before it does not).
  bool TakesRequestLists() const override;
  // The table sets accepts_gpu_inputs (and execute_requests).
  bool AcceptsGpuInputs() const override;
  // Whether the table sets instance_ready (a table that ends before it does not).
  bool ChecksReadiness() const override;
  // Whether the table has model_sleep and model_wake (BackendModel::CanSleep, per model).
  bool ModelsCanSleep() const;
  // Whether the table sets sleeps_in_place (BackendModel::SleepsInPlace).
  bool ModelsSleepInPlace() const;
  // The table's auto_complete_config, when it sets one: the config as JSON in, the completed
  // JSON parsed back (unvalidated: the caller validates). Its errors are the backend's (named,
  // for a library; the caller names the model); a reply that is not a config is
  // InvalidArgument saying so.
  Status AutoCompleteConfig(const std::filesystem::path& model_dir, int64_t version,
                            config::ModelConfig* config) override;
  Result<std::unique_ptr<BackendModel>> LoadModel(const ModelContext& ctx) override;

  // The table every call goes through.
  const VramdBackendApi* api() const { return api_; }
  bool linked() const { return !library_.has_value(); }

 private:
  AbiBackend(const VramdBackendApi* api, std::string name,
             std::optional<std::filesystem::path> library);

  const std::optional<std::filesystem::path> library_;  // where api_ lives, if not linked in
  const std::string name_;
  const VramdBackendApi* const api_;
  const std::string error_context_;  // FromVramd's: "" for a built-in (see above)
};

}  // namespace vramd::backends
