// SharedLibraryBackend: the internal Backend interface over a backend library's C table
// (include/vramd/backend.h), and LoadSharedLibraryBackend, which finds and loads such libraries.
//
// Ownership: each BackendModel owns the backend's model handle and the VramdServerApi it was
// given; each instance holds its model (shared), so model_destroy runs only after the last
// instance_destroy whatever order the runtime drops them in. Libraries are never unloaded (as
// in Triton): a backend may keep threads or static state that outlive its last model.
//
// Thread safety: LoadSharedLibraryBackend is safe from any thread; the Backend/BackendModel/
// BackendInstance methods follow backend.h.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "backends/backend.h"
#include "backends/shared_library/shared_library.h"
#include "vramd/backend.h"

namespace vramd::backends {

class SharedLibraryBackend final : public Backend {
 public:
  // Checks `library`'s table (`library_path` is named in errors): the entry point exported and
  // returning a table, abi_version equal to ours (naming both), struct_size large enough,
  // every entry point set, and the table's name equal to `name`.
  static Result<std::unique_ptr<SharedLibraryBackend>> Create(SharedLibrary library,
                                                              std::string name);

  std::string_view name() const override { return name_; }
  bool SupportsGpu() const override { return api_->supports_gpu != 0; }
  Result<std::unique_ptr<BackendModel>> LoadModel(const ModelContext& ctx) override;

 private:
  SharedLibraryBackend(SharedLibrary library, std::string name, const VramdBackendApi* api)
      : library_(std::move(library)), name_(std::move(name)), api_(api) {}

  SharedLibrary library_;
  const std::string name_;
  const VramdBackendApi* const api_;  // lives as long as library_
};

// The library of backend `name`: <backend_directory>/<name>/libvramd_<name>.so.
std::filesystem::path SharedLibraryBackendPath(const std::filesystem::path& backend_directory,
                                               std::string_view name);

// The backend `name` from its library under `backend_directory`, loaded on first use and kept
// for the process's lifetime (one load per library path). Errors, each naming the path:
// NotFound when the library does not exist (naming the backend directory too), Internal with
// dlerror's text when dlopen fails, InvalidArgument for an ABI mismatch. Failures are not
// remembered, so a library installed later is found by the next load.
Result<Backend*> LoadSharedLibraryBackend(const std::filesystem::path& backend_directory,
                                          const std::string& name);

}  // namespace vramd::backends
