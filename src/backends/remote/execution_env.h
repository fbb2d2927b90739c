// ExecutionEnv: Triton's EXECUTION_ENV_PATH model parameter for a backend hosted out of process
// (remote/hosting.h): a conda-pack tar.gz (unpacked into a private directory, removed when the
// ExecutionEnv goes) or a directory, "$$TRITON_MODEL_DIRECTORY" expanded to the model's
// directory. The host process runs with the env's bin/ first on PATH, PYTHONHOME at the env and
// its lib/ first on LD_LIBRARY_PATH, so the backend's embedded Python imports the env's packages.
//
// The env's Python (its lib/python3.N) must be the one the backend library was built against
// (its DT_NEEDED libpython3.N): a different one is refused, naming both, as Triton requires
// the env to match its stub. A library that links no libpython is not checked.
//
// The unpacked copy is under $TMPDIR (or /tmp), not /dev/shm; a vramd killed with SIGKILL leaves
// it there (vramd-env-*), as it leaves any temporary file.
//
// Thread safety: immutable after Prepare.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace vramd::backends::remote {

class ExecutionEnv {
 public:
  // InvalidArgument for a path that is neither a directory nor a .tar.gz, an archive that does
  // not unpack, an env without lib/python3.N, or a Python other than the library's (naming
  // both versions).
  static Result<std::unique_ptr<ExecutionEnv>> Prepare(const std::string& path,
                                                       const std::filesystem::path& model_dir,
                                                       const std::filesystem::path& library);
  ~ExecutionEnv();
  ExecutionEnv(const ExecutionEnv&) = delete;
  ExecutionEnv& operator=(const ExecutionEnv&) = delete;

  const std::filesystem::path& root() const { return root_; }
  // The host's environment entries ("NAME=value").
  std::vector<std::string> Environment() const;

 private:
  ExecutionEnv(std::filesystem::path root, bool owned) : root_(std::move(root)), owned_(owned) {}
  const std::filesystem::path root_;
  const bool owned_;  // a private unpacked copy, removed with this object
};

// "3.11" from the library's DT_NEEDED libpython3.11.so*, nullopt when it needs no libpython;
// InvalidArgument for a file that is not a readable 64-bit ELF.
Result<std::optional<std::string>> LibraryPythonVersion(const std::filesystem::path& library);

}  // namespace vramd::backends::remote
