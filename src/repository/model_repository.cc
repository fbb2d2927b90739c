#include "repository/model_repository.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <set>
#include <system_error>

namespace vramd::repository {
namespace fs = std::filesystem;

namespace {

bool ParseVersionName(const std::string& name, int64_t* version) {
  if (name.empty() || name.size() > 18 || name[0] == '0') return false;
  auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), *version);
  return ec == std::errc() && end == name.data() + name.size();
}

}  // namespace

Result<std::vector<ModelDirectory>> ScanRepositories(const std::vector<fs::path>& repositories) {
  std::map<std::string, ModelDirectory> models;
  for (const auto& repo : repositories) {
    std::error_code ec;
    if (!fs::is_directory(repo, ec)) {
      return Status::NotFound(fmt::format("model repository '{}' is not a directory", repo.string()));
    }
    for (fs::directory_iterator it(repo, ec), end; !ec && it != end; it.increment(ec)) {
      std::string name = it->path().filename().string();
      if (name.empty() || name[0] == '.' || !it->is_directory(ec)) continue;
      auto [pos, inserted] = models.try_emplace(name, ModelDirectory{name, it->path(), Status()});
      if (!inserted) {
        pos->second.status = Status::InvalidArgument(
            fmt::format("model '{}' appears in more than one repository: '{}' and '{}'", name,
                        pos->second.path.string(), it->path().string()));
      }
    }
    if (ec) {
      return Status::Internal(fmt::format("cannot list model repository '{}': {}", repo.string(),
                                          ec.message()));
    }
  }
  std::vector<ModelDirectory> out;
  out.reserve(models.size());
  for (auto& [name, dir] : models) out.push_back(std::move(dir));
  return out;
}

std::vector<int64_t> ListVersions(const fs::path& model_dir) {
  std::vector<int64_t> versions;
  std::error_code ec;
  for (fs::directory_iterator it(model_dir, ec), end; !ec && it != end; it.increment(ec)) {
    int64_t v = 0;
    if (it->is_directory(ec) && ParseVersionName(it->path().filename().string(), &v)) {
      versions.push_back(v);
    }
  }
  std::sort(versions.begin(), versions.end());
  return versions;
}

std::vector<int64_t> SelectVersions(const config::ModelVersionPolicy& policy,
                                    const std::vector<int64_t>& available) {
  switch (policy.policy_choice_case()) {
    case config::ModelVersionPolicy::kAll:
      return available;
    case config::ModelVersionPolicy::kSpecific: {
      std::set<int64_t> wanted(policy.specific().versions().begin(),
                               policy.specific().versions().end());
      std::vector<int64_t> out;
      for (int64_t v : available)
        if (wanted.count(v)) out.push_back(v);
      return out;
    }
    case config::ModelVersionPolicy::kLatest:
    case config::ModelVersionPolicy::POLICY_CHOICE_NOT_SET:
    default: {
      size_t n = policy.has_latest() && policy.latest().num_versions() > 0
                     ? policy.latest().num_versions()
                     : 1;
      n = std::min(n, available.size());
      return std::vector<int64_t>(available.end() - static_cast<std::ptrdiff_t>(n), available.end());
    }
  }
}

}  // namespace vramd::repository
