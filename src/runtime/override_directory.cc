#include "runtime/override_directory.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <system_error>

namespace vramd::runtime {
namespace fs = std::filesystem;
namespace {

Status CheckPath(const std::string& path) {
  auto refuse = [&path](std::string_view why) {
    return Status::InvalidArgument(
        fmt::format("model file '{}': {}; give a path inside the model's directory, e.g. "
                    "'1/model.py'",
                    path, why));
  };
  if (path.empty()) return refuse("the path is empty");
  if (path.front() == '/') return refuse("the path is absolute");
  if (path.find('\0') != std::string::npos) return refuse("the path holds a NUL byte");
  size_t start = 0;
  while (start <= path.size()) {
    const size_t end = std::min(path.find('/', start), path.size());
    const std::string_view part(path.data() + start, end - start);
    if (part.empty()) return refuse("the path has an empty component");
    if (part == "." || part == "..") return refuse("the path has a '.' or '..' component");
    start = end + 1;
  }
  return Status::Ok();
}

}  // namespace

Result<std::shared_ptr<const OverrideDirectory>> OverrideDirectory::Write(
    const std::string& model, const ModelFileOverrides& files, fs::path root) {
  std::set<std::string> seen;
  for (const auto& [path, bytes] : files) {
    VRAMD_RETURN_IF_ERROR(CheckPath(path));
    if (!seen.insert(path).second) {
      return Status::InvalidArgument(fmt::format("model file '{}' is given twice", path));
    }
  }
  std::error_code ec;
  if (root.empty()) root = fs::temp_directory_path(ec) / "vramd-model-files";
  fs::create_directories(root, ec);
  if (ec) {
    return Status::Internal(
        fmt::format("model files for '{}': cannot make '{}': {}", model, root.string(), ec.message()));
  }
  // The model's name, as one safe path component (it is the client's text).
  std::string label = model.substr(0, 64);
  for (char& c : label) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') c = '_';
  }
  std::string pattern = (root / (label + ".XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    return Status::Internal(fmt::format("model files for '{}': cannot make a directory in '{}': {}",
                                        model, root.string(), std::strerror(errno)));
  }
  // From here the tree is removed by the destructor, whatever fails.
  auto dir = std::make_shared<const OverrideDirectory>(Token(), pattern);
  for (const auto& [path, bytes] : files) {
    const fs::path target = dir->path() / path;
    fs::create_directories(target.parent_path(), ec);
    std::ofstream out(target, std::ios::binary | std::ios::trunc);
    if (!ec && out) out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (ec || !out) {
      return Status::Internal(fmt::format("model files for '{}': writing '{}' failed: {}", model,
                                          target.string(),
                                          ec ? ec.message() : std::strerror(errno)));
    }
  }
  return dir;
}

OverrideDirectory::~OverrideDirectory() {
  std::error_code ec;
  fs::remove_all(path_, ec);
  if (ec) spdlog::warn("removing the model files in '{}' failed: {}", path_.string(), ec.message());
}

}  // namespace vramd::runtime
