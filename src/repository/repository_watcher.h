// RepositoryWatcher: the change detector behind Triton's `--model-control-mode poll`. It tells
// the model manager which models to load, reload or unload, and only once a change looks
// complete, so that a model is never loaded from a half-copied directory.
//
// WHAT COUNTS AS A CHANGE
//
// Each model (a sub-folder of a repository, found by ScanRepositories in model_repository.h)
// has a fingerprint: the folder it was found in, whether its name is duplicated across
// repositories, its numeric version folders (ListVersions), and every regular file under it,
// recursively, as (relative path, size, mtime in nanoseconds, inode number); config.pbtxt is one
// of those files. Two scans see the same model state iff the fingerprints are equal. Contents
// are never read: a poll costs a directory walk and a stat() per file, not a read of the
// weights.
//
//   - Hidden entries (a name starting with '.') are ignored at every level: a hidden model
//     folder is not a model (ScanRepositories' rule) and a hidden file or folder inside a model
//     is not part of its fingerprint. This is what keeps a publisher's staging files invisible.
//   - Symbolic links are followed (stat(), as fs::status does): a link to a file contributes the
//     target's size, mtime and inode under the link's own path, a link to a folder is walked
//     like a folder. A link that points at one of its own ancestors is not walked again (no
//     infinite walk); a dangling link, or a loop of links, contributes nothing.
//   - Other entries (fifos, sockets, devices) contribute nothing.
//
// Limitation: a file rewritten in place with the same size within one file-system timestamp
// tick (the kernel stamps mtime from a coarse clock, a few milliseconds) keeps its size, mtime
// and inode, and the rewrite is not seen. Inode numbers can be reused, so delete-then-recreate
// with the same size within one tick can be missed the same way. Publishing by rename() (below)
// never has this problem: the new file is created while the old one still exists, so its inode
// differs.
//
// THE RULE: A CHANGE IS ACTED ON ONLY WHEN COMPLETE
//
// A fingerprint (or a model's absence) is acted on only once two consecutive polls have seen it
// unchanged, so a writer has had at least one poll interval to finish. A model that is still
// changing at every poll is never reported until it settles. Concretely, per model name:
//
//   - settles present, not currently loaded        -> kAdded   (the manager loads it)
//   - settles present, fingerprint differs from
//     the one last acted on (or the baseline)      -> kModified (the manager reloads it)
//   - settles absent (missing in two consecutive
//     polls) while loaded                          -> kRemoved (the manager unloads it), once
//   - settles to the state last acted on           -> nothing (a change that was undone, or a
//     model renamed away and back between polls, costs nothing)
//
// Each settled change is reported once; the watcher then assumes the manager acted on it, and
// what the manager does with it (a reload that fails, say) is not the watcher's business. A
// model that reappears after kRemoved is kAdded again once it settles. Changes come back sorted
// by model name, so a poll's result is deterministic.
//
// "Two polls agree" is a heuristic: a writer that pauses longer than a poll interval part-way
// through looks settled. Only the publish procedure below makes publishing atomic; the rule is
// the safety net for writers that do not follow it.
//
// THE BASELINE
//
// The first scan is the baseline: Baseline() (or the first Poll(), which calls it) reports
// nothing and treats every model present as already loaded, because the manager loaded the
// repository at start-up. A model that was half-written at start-up is the manager's startup
// load's to handle (it loads what it finds, or records the failure); the watcher sees the model
// go on changing, and reports kModified when it settles with a fingerprint different from the
// baseline, so the manager reloads the finished model.
//
// ERRORS AND UNREADABLE MODELS
//
// A repository path that is missing or not a folder makes the whole Poll() return an error
// Status (NotFound, from ScanRepositories); the manager logs it and keeps serving. Nothing is
// reported for that poll, in particular not the removal of every model in a repository that is
// momentarily unmounted, and the poll breaks every model's run of agreeing polls.
//
// A model whose folder (or anything under it) cannot be read this poll, or that changed under
// the walk (a file vanished between listing and stat), is skipped: no change is reported for it
// and its run of agreeing polls restarts. It is not reported as removed: unreadable is not
// absent. A model unreadable at the baseline is not treated as loaded.
//
// RECOMMENDED PUBLISH PROCEDURE (kPublishProcedure below, PublishStaged does the last step)
//
//   1. Write the new version folder, or the whole model folder, under a hidden name (starting
//      with '.') in the same file system as its final place, best in the same parent folder:
//      <repo>/<model>/.3.partial/ for version 3, <repo>/.<model>.partial/ for a new model.
//   2. Finish writing and close every file (fsync them if the machine may crash).
//   3. rename() it into place: <repo>/<model>/3, <repo>/<model>. rename() within one file
//      system is atomic, so the watcher sees nothing or everything.
// To change config.pbtxt, write .config.pbtxt.partial next to it and rename() it over
// config.pbtxt (renaming a file over a file is atomic too). A temporary name that is not hidden
// is visible: at repository level it is a model of that name, inside a model its files are part
// of the fingerprint. A rename across file systems is a copy, hence not atomic, and fails.
//
// Thread safety: a RepositoryWatcher is not thread-safe; one caller (the manager's poll loop)
// calls Baseline() and Poll(). It owns no thread and never sleeps: the caller chooses the
// interval, which is what makes it testable without sleeping.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace vramd::repository {

// The procedure above, for --help texts and logs.
inline constexpr std::string_view kPublishProcedure =
    "write the new version folder (or the whole model) under a hidden name starting with '.' "
    "in the same file system, e.g. <repo>/<model>/.3.partial, then rename() it into place "
    "(<repo>/<model>/3); replace config.pbtxt by writing .config.pbtxt.partial and renaming it "
    "over config.pbtxt";

// The last step of the publish procedure: rename() `staged` to `destination`. `staged` must
// have a hidden name (else the watcher may already have seen it half-written) and be in the
// same file system as `destination`. A file replaces an existing file atomically; a folder
// cannot replace a non-empty folder (AlreadyExists): publish a new version folder instead.
Status PublishStaged(const std::filesystem::path& staged,
                     const std::filesystem::path& destination);

enum class ChangeKind { kAdded, kModified, kRemoved };
std::string_view ChangeKindName(ChangeKind kind);  // "added", "modified", "removed"

struct RepositoryChange {
  std::string model;
  ChangeKind kind;
  bool operator==(const RepositoryChange&) const = default;
};

// One regular file of a model's fingerprint.
struct FileStamp {
  std::string relative_path;  // relative to the model folder, '/'-separated
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  uint64_t inode = 0;  // changes when a file is replaced by rename(), even within one mtime tick
  bool operator==(const FileStamp&) const = default;
};

struct ModelFingerprint {
  std::filesystem::path directory;  // moving a model to another repository is a change
  bool duplicate = false;           // the name is also in another repository (not servable)
  std::vector<int64_t> versions;    // ListVersions(directory)
  std::vector<FileStamp> files;     // sorted by relative_path
  bool operator==(const ModelFingerprint&) const = default;
};

// The fingerprint of the model folder `model_dir` (`duplicate` left false), following the rules
// above. An error when the folder or anything under it cannot be read, or something vanished
// during the walk: the caller cannot know what the model looks like this time.
Result<ModelFingerprint> FingerprintModel(const std::filesystem::path& model_dir);

class RepositoryWatcher {
 public:
  explicit RepositoryWatcher(std::vector<std::filesystem::path> repositories);

  // Scans the repositories and takes what it finds as loaded, reporting nothing. Called by the
  // first Poll() when not called before; calling it again re-synchronises with the repositories
  // as they are now (after the manager reloaded everything, say). On error (a repository
  // missing) nothing changes and the watcher stays without a baseline, if it had none.
  Status Baseline();

  // Scans the repositories and returns the models whose change should be acted on now, sorted
  // by name (see the rule above). The first call takes the baseline and returns no change.
  Result<std::vector<RepositoryChange>> Poll();

 private:
  struct Scan {
    std::map<std::string, ModelFingerprint> present;
    std::vector<std::string> unreadable;  // listed in a repository but skipped this poll
  };
  Result<Scan> ScanAll() const;

  std::vector<std::filesystem::path> repositories_;
  bool has_baseline_ = false;
  // What the manager has loaded as far as the watcher knows: the fingerprint of every model
  // last acted on (or present at the baseline).
  std::map<std::string, ModelFingerprint> acted_;
  // What the previous poll saw, per model: a fingerprint, or nullopt for "absent" (kept only
  // for models in acted_, since absence of anything else needs no action). No entry means no
  // usable observation (new name, skipped as unreadable, or a failed poll), so the next poll
  // cannot settle it.
  std::map<std::string, std::optional<ModelFingerprint>> previous_;
};

}  // namespace vramd::repository
