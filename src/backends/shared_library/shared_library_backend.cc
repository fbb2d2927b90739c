#include "backends/shared_library/shared_library_backend.h"

#include <fmt/format.h>

#include <map>
#include <memory>
#include <mutex>
#include <system_error>
#include <utility>

#include "backends/abi/abi_backend.h"
#include "backends/remote/hosting.h"
#include "backends/shared_library/shared_library.h"
#include "vramd/backend.h"

namespace vramd::backends {

std::filesystem::path SharedLibraryBackendPath(const std::filesystem::path& backend_directory,
                                               std::string_view name) {
  return backend_directory / std::string(name) / fmt::format("libvramd_{}.so", name);
}

Result<Backend*> LoadSharedLibraryBackend(const std::filesystem::path& backend_directory,
                                          const std::string& name) {
  // Loaded libraries and the backends over their tables, by path; never unloaded (see the
  // header), so neither member's destructor ever runs. The lock is held across the load so two
  // models asking for the same backend at once load it once.
  struct Loaded {
    SharedLibrary library;
    std::unique_ptr<Backend> backend;  // its table lives in `library`
  };
  static std::mutex mu;
  static auto* loaded = new std::map<std::filesystem::path, Loaded>;
  const std::filesystem::path path = SharedLibraryBackendPath(backend_directory, name);
  std::lock_guard lock(mu);
  if (auto it = loaded->find(path); it != loaded->end()) return it->second.backend.get();

  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return Status::NotFound(fmt::format("backend library '{}' does not exist (backend directory "
                                        "'{}', set by --backend-directory)",
                                        path.string(), backend_directory.string()));
  }
  VRAMD_ASSIGN_OR_RETURN(SharedLibrary library, SharedLibrary::Open(path));
  VRAMD_ASSIGN_OR_RETURN(void* entry, library.Symbol(VRAMD_BACKEND_ENTRY_POINT));
  const VramdBackendApi* api =
      reinterpret_cast<VramdBackendGetApiFn>(entry)(VRAMD_BACKEND_ABI_VERSION);
  VRAMD_ASSIGN_OR_RETURN(auto abi, AbiBackend::Create(api, name, library.path()));
  // Models whose config asks for it are hosted out of process (remote/hosting.h).
  std::unique_ptr<Backend> backend =
      std::make_unique<remote::HostingBackend>(std::move(abi), library.path());
  Backend* raw = backend.get();
  loaded->emplace(path, Loaded{std::move(library), std::move(backend)});
  return raw;
}

}  // namespace vramd::backends
