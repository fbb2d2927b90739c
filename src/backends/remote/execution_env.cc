#include "backends/remote/execution_env.h"

#include <elf.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <regex>
#include <system_error>

extern char** environ;

namespace vramd::backends::remote {
namespace fs = std::filesystem;
namespace {

std::optional<std::string> EnvPythonVersion(const fs::path& root) {
  std::error_code ec;
  const std::regex name(R"(python(3\.\d+))");
  for (const auto& entry : fs::directory_iterator(root / "lib", ec)) {
    std::smatch m;
    const std::string file = entry.path().filename().string();
    if (std::regex_match(file, m, name) && fs::exists(entry.path() / "os.py", ec)) return m[1].str();
  }
  return std::nullopt;
}

Status Unpack(const fs::path& archive, const fs::path& into) {
  std::vector<std::string> args = {"tar", "-xzf", archive.string(), "-C", into.string()};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid;
  const int rc = ::posix_spawnp(&pid, "tar", nullptr, nullptr, argv.data(), environ);
  if (rc != 0) return Status::Internal(fmt::format("starting tar: {}", std::strerror(rc)));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Status::InvalidArgument(fmt::format("EXECUTION_ENV_PATH '{}' does not unpack (tar -xzf failed)",
                                               archive.string()));
  }
  return Status::Ok();
}

}  // namespace

Result<std::optional<std::string>> LibraryPythonVersion(const fs::path& library) {
  std::ifstream in(library, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto bad = [&] {
    return Status::InvalidArgument(fmt::format("'{}' is not a readable 64-bit ELF library", library.string()));
  };
  if (bytes.size() < sizeof(Elf64_Ehdr) || std::memcmp(bytes.data(), ELFMAG, SELFMAG) != 0 ||
      bytes[EI_CLASS] != ELFCLASS64) {
    return bad();
  }
  Elf64_Ehdr eh;
  std::memcpy(&eh, bytes.data(), sizeof eh);
  if (eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shoff > bytes.size() ||
      static_cast<uint64_t>(eh.e_shnum) * sizeof(Elf64_Shdr) > bytes.size() - eh.e_shoff) {
    return bad();
  }
  auto section = [&](size_t i) {
    Elf64_Shdr sh;
    std::memcpy(&sh, bytes.data() + eh.e_shoff + i * sizeof(Elf64_Shdr), sizeof sh);
    return sh;
  };
  const std::regex name(R"(libpython(3\.\d+)\.so.*)");
  for (size_t i = 0; i < eh.e_shnum; ++i) {
    const Elf64_Shdr dyn = section(i);
    if (dyn.sh_type != SHT_DYNAMIC) continue;
    if (dyn.sh_link >= eh.e_shnum || dyn.sh_offset > bytes.size() || dyn.sh_size > bytes.size() - dyn.sh_offset) {
      return bad();
    }
    const Elf64_Shdr str = section(dyn.sh_link);
    if (str.sh_offset > bytes.size() || str.sh_size > bytes.size() - str.sh_offset) return bad();
    for (size_t off = 0; off + sizeof(Elf64_Dyn) <= dyn.sh_size; off += sizeof(Elf64_Dyn)) {
      Elf64_Dyn d;
      std::memcpy(&d, bytes.data() + dyn.sh_offset + off, sizeof d);
      if (d.d_tag == DT_NULL) break;
      if (d.d_tag != DT_NEEDED || d.d_un.d_val >= str.sh_size) continue;
      const char* s = bytes.data() + str.sh_offset + d.d_un.d_val;
      const std::string needed(s, strnlen(s, str.sh_size - d.d_un.d_val));
      std::smatch m;
      if (std::regex_match(needed, m, name)) return std::optional<std::string>(m[1].str());
    }
  }
  return std::optional<std::string>();
}

Result<std::unique_ptr<ExecutionEnv>> ExecutionEnv::Prepare(const std::string& path_text,
                                                             const fs::path& model_dir,
                                                             const fs::path& library) {
  std::string text = path_text;
  const std::string token = "$$TRITON_MODEL_DIRECTORY";
  for (size_t at; (at = text.find(token)) != std::string::npos;) text.replace(at, token.size(), model_dir.string());
  const fs::path path(text);
  std::error_code ec;
  std::unique_ptr<ExecutionEnv> env;
  if (fs::is_directory(path, ec)) {
    env.reset(new ExecutionEnv(path, false));
  } else if (fs::is_regular_file(path, ec) && (text.ends_with(".tar.gz") || text.ends_with(".tgz"))) {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = (fs::path(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") / "vramd-env-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      return Status::Internal(fmt::format("making a directory for EXECUTION_ENV_PATH '{}': {}", text,
                                          std::strerror(errno)));
    }
    env.reset(new ExecutionEnv(pattern, true));  // removed on every path from here
    VRAMD_RETURN_IF_ERROR(Unpack(path, env->root_));
  } else {
    return Status::InvalidArgument(fmt::format(
        "EXECUTION_ENV_PATH '{}' is neither a directory nor a .tar.gz file (a conda-pack archive)", text));
  }
  const std::optional<std::string> env_python = EnvPythonVersion(env->root_);
  VRAMD_ASSIGN_OR_RETURN(std::optional<std::string> library_python, LibraryPythonVersion(library));
  if (library_python.has_value()) {
    if (!env_python.has_value()) {
      return Status::InvalidArgument(fmt::format(
          "EXECUTION_ENV_PATH '{}' has no Python (no lib/python3.N/os.py); backend library '{}' needs "
          "Python {}", text, library.string(), *library_python));
    }
    if (*env_python != *library_python) {
      return Status::InvalidArgument(fmt::format(
          "EXECUTION_ENV_PATH '{}' has Python {}, but backend library '{}' was built against Python "
          "{}: the env must have the library's Python (rebuild the backend against Python {}, or "
          "pack the env with Python {})",
          text, *env_python, library.string(), *library_python, *env_python, *library_python));
    }
  }
  return env;
}

ExecutionEnv::~ExecutionEnv() {
  if (owned_) {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
}

std::vector<std::string> ExecutionEnv::Environment() const {
  auto prepend = [](const char* name, const fs::path& dir) {
    const char* old = std::getenv(name);
    return fmt::format("{}={}{}{}", name, dir.string(), old != nullptr && *old != '\0' ? ":" : "",
                       old != nullptr ? old : "");
  };
  return {prepend("PATH", root_ / "bin"), fmt::format("PYTHONHOME={}", root_.string()),
          prepend("LD_LIBRARY_PATH", root_ / "lib")};
}

}  // namespace vramd::backends::remote
