// Backends as shared libraries: where a backend's library is, and loading it into an AbiBackend
// (abi/abi_backend.h) through its entry point, vramd_backend_get_api (include/vramd/backend.h).
//
// Libraries are loaded once per path and never unloaded (as in Triton): a backend may keep
// threads or static state that outlive its last model.
//
// Thread safety: safe from any thread.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "backends/backend.h"

namespace vramd::backends {

// The library of backend `name`: <backend_directory>/<name>/libvramd_<name>.so.
std::filesystem::path SharedLibraryBackendPath(const std::filesystem::path& backend_directory,
                                               std::string_view name);

// The backend `name` from its library under `backend_directory`, loaded on first use and kept
// for the process's lifetime (one load per library path). Errors, each naming the path:
// NotFound when the library does not exist (naming the backend directory too) or does not
// export the entry point, Internal with dlerror's text when dlopen fails, InvalidArgument for
// an ABI mismatch or a table AbiBackend refuses. Failures are not remembered, so a library
// installed later is found by the next load.
Result<Backend*> LoadSharedLibraryBackend(const std::filesystem::path& backend_directory,
                                          const std::string& name);

}  // namespace vramd::backends
