#include "backends/shared_library/shared_library.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <utility>

namespace vramd::backends {
namespace {

std::string LastDlError() {
  const char* text = dlerror();
  return text != nullptr ? text : "unknown dlerror";
}

}  // namespace

SharedLibrary::~SharedLibrary() {
  if (handle_ != nullptr) dlclose(handle_);
}

SharedLibrary::SharedLibrary(SharedLibrary&& other) noexcept { *this = std::move(other); }

SharedLibrary& SharedLibrary::operator=(SharedLibrary&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) dlclose(handle_);
    handle_ = std::exchange(other.handle_, nullptr);
    path_ = std::move(other.path_);
  }
  return *this;
}

Result<SharedLibrary> SharedLibrary::Open(const std::filesystem::path& path) {
  dlerror();  // clears a stale error, so the one read below is this call's
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return Status::Internal(fmt::format("cannot load '{}': {}", path.string(), LastDlError()));
  }
  SharedLibrary lib;
  lib.handle_ = handle;
  lib.path_ = path;
  return lib;
}

Result<void*> SharedLibrary::Symbol(const char* name) const {
  if (handle_ == nullptr) return Status::Internal("Symbol() on a library that is not open");
  dlerror();
  void* address = dlsym(handle_, name);
  if (address == nullptr) {
    // A symbol may legitimately be at address 0 only for odd linker tricks; backends export
    // functions, so null is treated as missing.
    return Status::NotFound(fmt::format("'{}' does not export '{}': {}", path_.string(), name,
                                        LastDlError()));
  }
  return address;
}

}  // namespace vramd::backends
