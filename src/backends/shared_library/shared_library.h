// SharedLibrary: an RAII handle for a dlopen'ed library, with dlerror's text in every error.
//
// Thread safety: Open and Symbol are safe from any thread (dlopen/dlsym are thread-safe on
// glibc; dlerror's state is per thread, read right after the failing call).
#pragma once

#include <filesystem>
#include <string>

#include "core/status.h"

namespace vramd::backends {

class SharedLibrary {
 public:
  SharedLibrary() = default;
  ~SharedLibrary();
  SharedLibrary(SharedLibrary&& other) noexcept;
  SharedLibrary& operator=(SharedLibrary&& other) noexcept;
  SharedLibrary(const SharedLibrary&) = delete;
  SharedLibrary& operator=(const SharedLibrary&) = delete;

  // dlopen(path, RTLD_NOW | RTLD_LOCAL): unresolved symbols fail here rather than in the middle
  // of a request, and a backend's symbols cannot clash with another backend's. Internal with
  // dlerror's text on failure.
  static Result<SharedLibrary> Open(const std::filesystem::path& path);

  // The address of `name`; NotFound (with dlerror's text) when the library does not export it.
  Result<void*> Symbol(const char* name) const;

  const std::filesystem::path& path() const { return path_; }

 private:
  void* handle_ = nullptr;
  std::filesystem::path path_;
};

}  // namespace vramd::backends
