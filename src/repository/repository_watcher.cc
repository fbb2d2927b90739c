#include "repository/repository_watcher.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <system_error>
#include <tuple>
#include <utility>

#include "repository/model_repository.h"

namespace vramd::repository {
namespace fs = std::filesystem;

namespace {

bool IsHidden(const fs::path& p) {
  const std::string name = p.filename().string();
  return !name.empty() && name[0] == '.';
}

// A folder's identity, to notice a symlink that leads back to one of its ancestors.
struct DirId {
  dev_t dev;
  ino_t ino;
  bool operator<(const DirId& o) const { return std::tie(dev, ino) < std::tie(o.dev, o.ino); }
};

// Appends the regular files under `dir` (relative paths prefixed by `prefix`) to `files`.
// `ancestors` are the folders on the way down, including `dir`.
Status Walk(const fs::path& dir, const std::string& prefix, std::set<DirId>& ancestors,
            std::vector<FileStamp>& files) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& path = it->path();
    if (IsHidden(path)) continue;
    const std::string rel = prefix + path.filename().string();
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      const int err = errno;
      struct stat lst {};
      // A link whose target is missing, or a loop of links, has no content to fingerprint; a
      // link is a settled state, so it is not a reason to skip the model.
      if ((err == ENOENT || err == ELOOP) && ::lstat(path.c_str(), &lst) == 0 &&
          S_ISLNK(lst.st_mode)) {
        continue;
      }
      // ENOENT without a link: the entry vanished between listing and stat, i.e. the model is
      // being changed right now. EACCES and the rest: unreadable. Either way no fingerprint.
      return Status::Unavailable(
          fmt::format("cannot stat '{}': {}", path.string(), std::strerror(err)));
    }
    if (S_ISDIR(st.st_mode)) {
      auto [pos, inserted] = ancestors.insert(DirId{st.st_dev, st.st_ino});
      if (!inserted) continue;  // a link back to an ancestor: walking it again would never end
      Status s = Walk(path, rel + "/", ancestors, files);
      ancestors.erase(pos);
      VRAMD_RETURN_IF_ERROR(s);
    } else if (S_ISREG(st.st_mode)) {
      files.push_back(FileStamp{
          rel, static_cast<uint64_t>(st.st_size),
          static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec,
          static_cast<uint64_t>(st.st_ino)});
    }
  }
  if (ec) {
    return Status::Unavailable(fmt::format("cannot list '{}': {}", dir.string(), ec.message()));
  }
  return Status::Ok();
}

}  // namespace

std::string_view ChangeKindName(ChangeKind kind) {
  switch (kind) {
    case ChangeKind::kAdded:
      return "added";
    case ChangeKind::kModified:
      return "modified";
    case ChangeKind::kRemoved:
      return "removed";
  }
  return "unknown";
}

Status PublishStaged(const fs::path& staged, const fs::path& destination) {
  if (!IsHidden(staged)) {
    return Status::InvalidArgument(fmt::format(
        "'{}' is not a hidden name (starting with '.'): the repository watcher may already have "
        "seen it half-written",
        staged.string()));
  }
  std::error_code ec;
  fs::rename(staged, destination, ec);
  if (!ec) return Status::Ok();
  const std::string what = fmt::format("cannot rename '{}' to '{}': {}", staged.string(),
                                       destination.string(), ec.message());
  if (ec == std::errc::cross_device_link) {
    return Status::InvalidArgument(what + " (stage it in the same file system)");
  }
  if (ec == std::errc::directory_not_empty || ec == std::errc::is_a_directory ||
      ec == std::errc::not_a_directory || ec == std::errc::file_exists) {
    return Status::AlreadyExists(what);
  }
  if (ec == std::errc::no_such_file_or_directory) return Status::NotFound(what);
  return Status::Internal(what);
}

Result<ModelFingerprint> FingerprintModel(const fs::path& model_dir) {
  struct stat st {};
  if (::stat(model_dir.c_str(), &st) != 0) {
    return Status::Unavailable(
        fmt::format("cannot stat model folder '{}': {}", model_dir.string(), std::strerror(errno)));
  }
  if (!S_ISDIR(st.st_mode)) {
    return Status::Unavailable(fmt::format("'{}' is not a folder", model_dir.string()));
  }
  ModelFingerprint fp;
  fp.directory = model_dir;
  std::set<DirId> ancestors{DirId{st.st_dev, st.st_ino}};
  VRAMD_RETURN_IF_ERROR(Walk(model_dir, "", ancestors, fp.files));
  // directory_iterator's order is the file system's; equal states must compare equal.
  std::sort(fp.files.begin(), fp.files.end(),
            [](const FileStamp& a, const FileStamp& b) { return a.relative_path < b.relative_path; });
  // Version folders matter even when empty (a model with no files in its version folder still
  // has that version), which the file list alone would not show.
  fp.versions = ListVersions(model_dir);
  return fp;
}

RepositoryWatcher::RepositoryWatcher(std::vector<fs::path> repositories)
    : repositories_(std::move(repositories)) {}

Result<RepositoryWatcher::Scan> RepositoryWatcher::ScanAll() const {
  VRAMD_ASSIGN_OR_RETURN(auto dirs, ScanRepositories(repositories_));
  Scan scan;
  for (auto& dir : dirs) {
    auto fp = FingerprintModel(dir.path);
    if (!fp.ok()) {
      scan.unreadable.push_back(dir.name);
      continue;
    }
    fp->duplicate = !dir.status.ok();
    scan.present.emplace(dir.name, std::move(fp).value());
  }
  return scan;
}

Status RepositoryWatcher::Baseline() {
  VRAMD_ASSIGN_OR_RETURN(Scan scan, ScanAll());
  acted_ = scan.present;
  previous_.clear();
  for (auto& [name, fp] : scan.present) previous_.emplace(name, std::move(fp));
  has_baseline_ = true;
  return Status::Ok();
}

Result<std::vector<RepositoryChange>> RepositoryWatcher::Poll() {
  if (!has_baseline_) {
    VRAMD_RETURN_IF_ERROR(Baseline());
    return std::vector<RepositoryChange>{};
  }
  auto scanned = ScanAll();
  if (!scanned.ok()) {
    // No observation this time: a change must be seen by two polls that both succeeded.
    previous_.clear();
    return scanned.status();
  }
  Scan& scan = *scanned;
  const std::set<std::string> unreadable(scan.unreadable.begin(), scan.unreadable.end());

  // Every name that may need a decision; std::set keeps the result sorted by name.
  std::set<std::string> names;
  for (const auto& [name, fp] : acted_) names.insert(name);
  for (const auto& [name, seen] : previous_) names.insert(name);
  for (const auto& [name, fp] : scan.present) names.insert(name);

  std::vector<RepositoryChange> changes;
  for (const std::string& name : names) {
    if (unreadable.count(name)) {
      previous_.erase(name);  // skipped: the next readable poll starts a new run
      continue;
    }
    std::optional<ModelFingerprint> now;
    if (auto it = scan.present.find(name); it != scan.present.end()) now = std::move(it->second);

    auto prev = previous_.find(name);
    const bool settled = prev != previous_.end() && prev->second == now;
    auto acted = acted_.find(name);
    if (settled) {
      if (!now) {
        if (acted != acted_.end()) {
          changes.push_back({name, ChangeKind::kRemoved});
          acted_.erase(acted);
          acted = acted_.end();
        }
      } else if (acted == acted_.end()) {
        changes.push_back({name, ChangeKind::kAdded});
        acted = acted_.emplace(name, *now).first;
      } else if (acted->second != *now) {
        changes.push_back({name, ChangeKind::kModified});
        acted->second = *now;
      }
    }
    // Remember what was seen; an absence only matters for a model that is loaded.
    if (now || acted != acted_.end()) {
      previous_[name] = std::move(now);
    } else {
      previous_.erase(name);
    }
  }
  return changes;
}

}  // namespace vramd::repository
