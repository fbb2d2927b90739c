#include "repository/repository_watcher.h"

#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/scratch_repository.h"

namespace vramd {
namespace {
namespace fs = std::filesystem;

using repository::ChangeKind;
using repository::RepositoryChange;
using repository::RepositoryWatcher;
using ScratchRepo = testing::ScratchRepository;

const char* kConfig = "backend: \"identity\"\nmax_batch_size: 0\n";
const char* kLongerConfig = "backend: \"identity\"\nmax_batch_size: 8\n# edited\n";

// A poll's result as readable strings ("added m"), or the error, so a failing EXPECT_EQ says
// what came back.
std::vector<std::string> Describe(const Result<std::vector<RepositoryChange>>& result) {
  if (!result.ok()) return {"error " + result.status().ToString()};
  std::vector<std::string> out;
  for (const auto& c : *result) {
    out.push_back(std::string(repository::ChangeKindName(c.kind)) + " " + c.model);
  }
  return out;
}

using Changes = std::vector<std::string>;
const Changes kNone;

void WriteFile(const fs::path& path, const std::string& content) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << content;
}

// Grows a file, as a copy in progress does. The size changes, so the change is visible even
// within one mtime tick.
void AppendFile(const fs::path& path, const std::string& content) {
  std::ofstream(path, std::ios::binary | std::ios::app) << content;
}

// A complete model: config and one version with weights.
void AddFullModel(ScratchRepo& repo, const std::string& name) {
  repo.AddModel(name, kConfig, {"1"});
  WriteFile(repo.root() / name / "1" / "model.bin", "weights");
}

TEST(RepositoryWatcherTest, BaselineReportsNothing) {
  ScratchRepo repo;
  AddFullModel(repo, "a");
  AddFullModel(repo, "b");

  RepositoryWatcher implicit({repo.root()});
  EXPECT_EQ(Describe(implicit.Poll()), kNone);  // the first Poll() is the baseline
  EXPECT_EQ(Describe(implicit.Poll()), kNone);  // present at baseline = already loaded

  RepositoryWatcher explicit_baseline({repo.root()});
  ASSERT_TRUE(explicit_baseline.Baseline().ok());
  EXPECT_EQ(Describe(explicit_baseline.Poll()), kNone);
  EXPECT_EQ(Describe(explicit_baseline.Poll()), kNone);
}

TEST(RepositoryWatcherTest, UnchangedRepositoryStaysQuietOverManyPolls) {
  ScratchRepo repo;
  AddFullModel(repo, "a");
  repo.AddModel("empty_version", kConfig, {"1", "2"});
  RepositoryWatcher watcher({repo.root()});
  ASSERT_TRUE(watcher.Baseline().ok());
  for (int i = 0; i < 100; ++i) ASSERT_EQ(Describe(watcher.Poll()), kNone) << "poll " << i;
}

TEST(RepositoryWatcherTest, NewModelIsAddedOnTheSecondPollThatSeesIt) {
  ScratchRepo repo;
  RepositoryWatcher watcher({repo.root()});
  ASSERT_TRUE(watcher.Baseline().ok());
  AddFullModel(repo, "m");
  EXPECT_EQ(Describe(watcher.Poll()), kNone);  // seen once: the writer may not be done
  EXPECT_EQ(Describe(watcher.Poll()), (Changes{"added m"}));
  EXPECT_EQ(Describe(watcher.Poll()), kNone);  // reported once
  EXPECT_EQ(Describe(watcher.Poll()), kNone);
}

TEST(RepositoryWatcherTest, HalfWrittenVersionIsNotReportedUntilTwoPollsAgree) {
  ScratchRepo repo;
  AddFullModel(repo, "m");
  RepositoryWatcher watcher({repo.root()});
  ASSERT_TRUE(watcher.Baseline().ok());

  const fs::path weights = repo.root() / "m" / "2" / "model.bin";
  WriteFile(weights, "part");
  EXPECT_EQ(Describe(watcher.Poll()), kNone);
  AppendFile(weights, "-more");
  EXPECT_EQ(Describe(watcher.Poll()), kNone);  // differs from the previous poll
  AppendFile(weights, "-rest");
  EXPECT_EQ(Describe(watcher.Poll()), kNone);
  // The copy is done: this poll agrees with the previous one.
  EXPECT_EQ(Describe(watcher.Poll()), (Changes{"modified m"}));
  EXPECT_EQ(Describe(watcher.Poll()), kNone);
}

TEST(RepositoryWatcherTest, ModelStillChangingAtEveryPollIsNeverReported) {
  ScratchRepo repo;
  RepositoryWatcher watcher({repo.root()});
  ASSERT_TRUE(watcher.Baseline().ok());
  repo.AddModel("slow", kConfig, {"1"});
  const fs::path weights = repo.root() / "slow" / "1" / "model.bin";
  WriteFile(weights, "");
  for (int i = 0; i < 20; ++i) {
    AppendFile(weights, "x");
    ASSERT_EQ(Describe(watcher.Poll()), kNone) << "poll " << i;
  }
  EXPECT_EQ(Describe(watcher.Poll()), (Changes{"added slow"}));
}

TEST(RepositoryWatcherTest, ModelHalfWrittenAtStartupIsModifiedWhenItSettles) {
  ScratchRepo repo;
  repo.AddModel("m", kConfig, {"1"});
  const fs::path weights = repo.root() / "m" / "1" / "model.bin";
  WriteFile(weights, "half");
  RepositoryWatcher watcher({repo.root()});
  ASSERT_TRUE(watcher.Baseline().ok());  // the manager loaded (or failed to load) this state
  AppendFile(weights, "-and-the-rest");
  EXPECT_EQ(Describe(watcher.Poll()), kNone);
  EXPECT_EQ(Describe(watcher.Poll()), (Changes{"modified m"}));  // reload the finished model
  EXPECT_EQ(Describe(watcher.Poll()), kNone);
}

TEST(RepositoryWatcherTest, ConfigEditIsModifiedAfterSettle) {
  ScratchRepo repo;
  AddFullModel(repo, "m");
  RepositoryWatcher watcher({repo.root()});
  ASSERT_TRUE(watcher.Baseline().ok());
  WriteFile(repo.root() / "m" / "config.pbtxt", kLongerConfig);
  EXPECT_EQ(Describe(watcher.Poll()), kNone);
  EXPECT_EQ(Describe(watcher.Poll()), (Changes{"modified m"}));
  EXPECT_EQ(Describe(watcher.Poll()), kNone);
}

TEST(RepositoryWatcherTest, ConfigReplacedByRenameIsSeenEvenWithTheSameSizeAndTick) {
  ScratchRepo repo;
  AddFullModel(repo, "m");
  RepositoryWatcher watcher({repo.root()});
  ASSERT_TRUE(watcher.Baseline().ok());
  // Same size and, as when both writes fall in one timestamp tick, the same mtime: only the
  // inode tells the new file apart.
  std::string same_size(kConfig);
  same_size[same_size.size() - 2] = '4';  // max_batch_size: 4
  const fs::path config = repo.root() / "m" / "config.pbtxt";
  const fs::path staged = repo.root() / "m" / ".config.pbtxt.partial";
  WriteFile(staged, same_size);
  fs::last_write_time(staged, fs::last_write_time(config));
  EXPECT_EQ(Describe(watcher.Poll()), kNone);  // hidden: invisible
  ASSERT_TRUE(repository::PublishStaged(staged, config).ok());
  EXPECT_EQ(Describe(watcher.Poll()), kNone);
  EXPECT_EQ(Describe(watcher.Poll()), (Changes{"modified m"}));
}

TEST(RepositoryWatcherTest, HiddenStagingThenRenameIsAddedAfterSettle) {
  ScratchRepo repo;
  RepositoryWatcher watcher({repo.root()});
  ASSERT_TRUE(watcher.Baseline().ok());

  // A whole new model, staged under a hidden name: nothing is seen however long it takes.
  const fs::path staged = repo.root() / ".m.partial";
  WriteFile(staged / "config.pbtxt", kConfig);
  EXPECT_EQ(Describe(watcher.Poll()), kNone);
  WriteFile(staged / "1" / "model.bin", "wei");
  EXPECT_EQ(Describe(watcher.Poll()), kNone);
  AppendFile(staged / "1" / "model.bin", "ghts");
  EXPECT_EQ(Describe(watcher.Poll()), kNone);
  ASSERT_TRUE(repository::PublishStaged(staged, repo.root() / "m").ok());
  EXPECT_EQ(Describe(watcher.Poll()), kNone);
  EXPECT_EQ(Describe(watcher.Poll()), (Changes{"added m"}));

  // A new version of it, staged under a hidden name inside the model.
  const fs::path staged_version = repo.root() / "m" / ".2.partial";
  WriteFile(staged_version / "model.bin", "new");
  EXPECT_EQ(Describe(watcher.Poll()), kNone);
  AppendFile(staged_version / "model.bin", " weights");
  EXPECT_EQ(Describe(watcher.Poll()), kNone);
  EXPECT_EQ(Describe(watcher.Poll()), kNone);
  ASSERT_TRUE(repository::PublishStaged(staged_version, repo.root() / "m" / "2").ok());
  EXPECT_EQ(Describe(watcher.Poll()), kNone);
  EXPECT_EQ(Describe(watcher.Poll()), (Changes{"modified m"}));
  EXPECT_EQ(Describe(watcher.Poll()), kNone);
}

TEST(RepositoryWatcherTest, NewEmptyVersionFolderIsAChange) {
  ScratchRepo repo;
  repo.AddModel("m", kConfig, {"1"});
  RepositoryWatcher watcher({repo.root()});
  ASSERT_TRUE(watcher.Baseline().ok());
  fs::create_directories(repo.root() / "m" / "2");  // no file in it: only the version set shows it
  EXPECT_EQ(Describe(watcher.Poll()), kNone);
  EXPECT_EQ(Describe(watcher.Poll()), (Changes{"modified m"}));
}

TEST(RepositoryWatcherTest, RemovalIsReportedOnce) {
  ScratchRepo repo;
  AddFullModel(repo, "a");
  AddFullModel(repo, "b");
  RepositoryWatcher watcher({repo.root()});
  ASSERT_TRUE(watcher.Baseline().ok());
  fs::remove_all(repo.root() / "a");
  EXPECT_EQ(Describe(watcher.Poll()), kNone);  // absent once: maybe a rename in progress
  EXPECT_EQ(Describe(watcher.Poll()), (Changes{"removed a"}));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(Describe(watcher.Poll()), kNone);
}

TEST(RepositoryWatcherTest, RemovedThenReAddedIsAdded) {
  ScratchRepo repo;
  AddFullModel(repo, "a");
  RepositoryWatcher watcher({repo.root()});
  ASSERT_TRUE(watcher.Baseline().ok());
  fs::remove_all(repo.root() / "a");
  EXPECT_EQ(Describe(watcher.Poll()), kNone);
  EXPECT_EQ(Describe(watcher.Poll()), (Changes{"removed a"}));
  AddFullModel(repo, "a");
  EXPECT_EQ(Describe(watcher.Poll()), kNone);
  EXPECT_EQ(Describe(watcher.Poll()), (Changes{"added a"}));
  EXPECT_EQ(Describe(watcher.Poll()), kNone);
}

TEST(RepositoryWatcherTest, AbsentForOnePollIsNotARemoval) {
  ScratchRepo repo;
  AddFullModel(repo, "a");
  RepositoryWatcher watcher({repo.root()});
  ASSERT_TRUE(watcher.Baseline().ok());
  fs::rename(repo.root() / "a", repo.root() / ".a.away");
  EXPECT_EQ(Describe(watcher.Poll()), kNone);
  fs::rename(repo.root() / ".a.away", repo.root() / "a");
  EXPECT_EQ(Describe(watcher.Poll()), kNone);
  EXPECT_EQ(Describe(watcher.Poll()), kNone);  // settled to what is loaded: nothing to do
}

TEST(RepositoryWatcherTest, MissingRepositoryIsAnError) {
  RepositoryWatcher watcher({"/nonexistent/vramd/repo"});
  auto baseline = watcher.Poll();
  ASSERT_FALSE(baseline.ok());
  EXPECT_EQ(baseline.status().code(), StatusCode::kNotFound);
  EXPECT_NE(baseline.status().message().find("/nonexistent/vramd/repo"), std::string::npos);
  EXPECT_FALSE(watcher.Baseline().ok());
}

TEST(RepositoryWatcherTest, RepositoryGoneForAWhileRemovesNothing) {
  ScratchRepo repo;
  AddFullModel(repo, "a");
  RepositoryWatcher watcher({repo.root()});
  ASSERT_TRUE(watcher.Baseline().ok());
  const fs::path away = repo.root().string() + ".unmounted";
  fs::rename(repo.root(), away);
  for (int i = 0; i < 3; ++i) {
    auto r = watcher.Poll();
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  }
  fs::rename(away, repo.root());
  EXPECT_EQ(Describe(watcher.Poll()), kNone);
  EXPECT_EQ(Describe(watcher.Poll()), kNone);
}

TEST(RepositoryWatcherTest, FailedPollBreaksTheRunOfAgreeingPolls) {
  ScratchRepo repo;
  RepositoryWatcher watcher({repo.root()});
  ASSERT_TRUE(watcher.Baseline().ok());
  AddFullModel(repo, "m");
  EXPECT_EQ(Describe(watcher.Poll()), kNone);
  const fs::path away = repo.root().string() + ".unmounted";
  fs::rename(repo.root(), away);
  EXPECT_FALSE(watcher.Poll().ok());
  fs::rename(away, repo.root());
  EXPECT_EQ(Describe(watcher.Poll()), kNone);  // needs two successful polls in a row
  EXPECT_EQ(Describe(watcher.Poll()), (Changes{"added m"}));
}

TEST(RepositoryWatcherTest, MultipleRepositories) {
  ScratchRepo first, second;
  AddFullModel(first, "x");
  AddFullModel(second, "y");
  RepositoryWatcher watcher({first.root(), second.root()});
  ASSERT_TRUE(watcher.Baseline().ok());

  AddFullModel(second, "z");
  AppendFile(first.root() / "x" / "1" / "model.bin", "+");
  EXPECT_EQ(Describe(watcher.Poll()), kNone);
  EXPECT_EQ(Describe(watcher.Poll()), (Changes{"modified x", "added z"}));

  // Moved to the other repository in one rename: never absent, but served from elsewhere.
  fs::rename(second.root() / "y", first.root() / "y");
  EXPECT_EQ(Describe(watcher.Poll()), kNone);
  EXPECT_EQ(Describe(watcher.Poll()), (Changes{"modified y"}));

  // The same name in both repositories is not servable: the manager must hear of it.
  AddFullModel(second, "x");
  EXPECT_EQ(Describe(watcher.Poll()), kNone);
  EXPECT_EQ(Describe(watcher.Poll()), (Changes{"modified x"}));

  // A missing repository among good ones fails the poll.
  RepositoryWatcher with_missing({first.root(), "/nonexistent/vramd/repo"});
  EXPECT_FALSE(with_missing.Poll().ok());
}

TEST(RepositoryWatcherTest, ChangesAreSortedByName) {
  ScratchRepo first, second;
  AddFullModel(first, "delta");
  AddFullModel(second, "bravo");
  RepositoryWatcher watcher({first.root(), second.root()});
  ASSERT_TRUE(watcher.Baseline().ok());
  AddFullModel(second, "echo");
  AddFullModel(first, "charlie");
  AddFullModel(second, "alpha");
  fs::remove_all(first.root() / "delta");
  WriteFile(second.root() / "bravo" / "config.pbtxt", kLongerConfig);
  EXPECT_EQ(Describe(watcher.Poll()), kNone);
  EXPECT_EQ(Describe(watcher.Poll()), (Changes{"added alpha", "modified bravo", "added charlie",
                                               "removed delta", "added echo"}));
}

TEST(RepositoryWatcherTest, FingerprintIgnoresHiddenEntriesAndFollowsSymlinks) {
  ScratchRepo repo, elsewhere;
  AddFullModel(repo, "m");
  const fs::path m = repo.root() / "m";
  WriteFile(m / ".hidden_file", "x");
  WriteFile(m / ".staging" / "model.bin", "x");
  WriteFile(m / "1" / ".model.bin.tmp", "x");
  const fs::path target = elsewhere.root() / "shared_weights.bin";
  WriteFile(target, "shared");
  fs::create_symlink(target, m / "1" / "linked.bin");
  fs::create_directory_symlink(elsewhere.root(), m / "linked_dir");
  fs::create_directory_symlink(m, m / "1" / "loop");  // back to an ancestor: walked once
  fs::create_symlink(m / "no_such_file", m / "dangling");

  auto fp = repository::FingerprintModel(m);
  ASSERT_TRUE(fp.ok()) << fp.status().ToString();
  std::vector<std::string> paths;
  for (const auto& f : fp->files) paths.push_back(f.relative_path);
  EXPECT_EQ(paths, (std::vector<std::string>{"1/linked.bin", "1/model.bin", "config.pbtxt",
                                             "linked_dir/shared_weights.bin"}));
  EXPECT_EQ(fp->files[0].size, 6u);  // the target's size, not the link's
  EXPECT_EQ(fp->versions, (std::vector<int64_t>{1}));
  EXPECT_EQ(fp->directory, m);

  // Changing a link's target is a change of the model.
  RepositoryWatcher watcher({repo.root()});
  ASSERT_TRUE(watcher.Baseline().ok());
  AppendFile(target, " and more");
  EXPECT_EQ(Describe(watcher.Poll()), kNone);
  EXPECT_EQ(Describe(watcher.Poll()), (Changes{"modified m"}));
  // Hidden files come and go unseen.
  WriteFile(m / ".another", "y");
  fs::remove_all(m / ".staging");
  EXPECT_EQ(Describe(watcher.Poll()), kNone);
  EXPECT_EQ(Describe(watcher.Poll()), kNone);
}

TEST(PublishStagedTest, RefusesVisibleNamesAndNonEmptyFolders) {
  ScratchRepo repo;
  AddFullModel(repo, "m");
  WriteFile(repo.root() / "visible" / "config.pbtxt", kConfig);
  Status s = repository::PublishStaged(repo.root() / "visible", repo.root() / "n");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();

  WriteFile(repo.root() / ".m.partial" / "config.pbtxt", kConfig);
  s = repository::PublishStaged(repo.root() / ".m.partial", repo.root() / "m");
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists) << s.ToString();

  s = repository::PublishStaged(repo.root() / ".missing", repo.root() / "n");
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  EXPECT_FALSE(repository::kPublishProcedure.empty());
}

// The unreadable-model scenario: a model folder, then a version folder in it, made unreadable
// (mode 000) while another model changes. Returns what went wrong, empty when all went well.
std::string UnreadableScenario(const fs::path& root) {
  std::string errors;
  auto expect = [&](const Changes& got, const Changes& want, const char* what) {
    if (got != want) {
      errors += std::string(what) + ": got [";
      for (const auto& g : got) errors += g + ";";
      errors += "]\n";
    }
  };
  RepositoryWatcher watcher({root});
  if (Status s = watcher.Baseline(); !s.ok()) return "baseline: " + s.ToString();
  const fs::path locked = root / "locked";
  if (::chmod(locked.c_str(), 0) != 0) return "chmod failed";
  auto fp = repository::FingerprintModel(locked);
  if (fp.ok()) errors += "fingerprint of an unreadable folder succeeded\n";
  for (int i = 0; i < 3; ++i) expect(Describe(watcher.Poll()), kNone, "while locked");
  // Other models are still watched.
  WriteFile(root / "c" / "config.pbtxt", kConfig);
  expect(Describe(watcher.Poll()), kNone, "c seen once");
  expect(Describe(watcher.Poll()), {"added c"}, "c settled");
  ::chmod(locked.c_str(), 0755);
  expect(Describe(watcher.Poll()), kNone, "unlocked 1");
  expect(Describe(watcher.Poll()), kNone, "unlocked 2");  // as at baseline: nothing to do
  // Unreadable below the model folder: the model is skipped just the same.
  const fs::path version = locked / "1";
  ::chmod(version.c_str(), 0);
  expect(Describe(watcher.Poll()), kNone, "version locked 1");
  expect(Describe(watcher.Poll()), kNone, "version locked 2");
  ::chmod(version.c_str(), 0755);
  expect(Describe(watcher.Poll()), kNone, "version unlocked 1");
  expect(Describe(watcher.Poll()), kNone, "version unlocked 2");
  return errors;
}

// Root reads every folder whatever its mode, through two capabilities. Dropping them from the
// effective set of this thread (capabilities are per thread) makes mode 000 mean unreadable;
// they stay permitted, so the destructor raises them again.
class WithoutDacOverride {
 public:
  WithoutDacOverride() {
    if (::syscall(SYS_capget, &header_, saved_) != 0) return;
    __user_cap_data_struct reduced[2] = {saved_[0], saved_[1]};
    reduced[0].effective &= ~((1u << CAP_DAC_OVERRIDE) | (1u << CAP_DAC_READ_SEARCH));
    dropped_ = ::syscall(SYS_capset, &header_, reduced) == 0;
  }
  ~WithoutDacOverride() {
    if (dropped_) ::syscall(SYS_capset, &header_, saved_);
  }
  WithoutDacOverride(const WithoutDacOverride&) = delete;
  WithoutDacOverride& operator=(const WithoutDacOverride&) = delete;

 private:
  __user_cap_header_struct header_{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct saved_[2]{};
  bool dropped_ = false;
};

TEST(RepositoryWatcherTest, UnreadableModelIsSkippedNotRemoved) {
  ScratchRepo repo;
  AddFullModel(repo, "a");
  AddFullModel(repo, "locked");
  const fs::path probe = repo.root() / ".probe";
  fs::create_directory(probe);
  ::chmod(probe.c_str(), 0);
  std::string errors;
  {
    WithoutDacOverride as_ordinary_user;
    // Not access(): it checks root's permitted capabilities, not the effective ones.
    std::error_code ec;
    fs::directory_iterator it(probe, ec);
    if (!ec) {
      GTEST_SKIP() << "a folder with mode 000 is still readable here";
    }
    errors = UnreadableScenario(repo.root());
  }
  EXPECT_EQ(errors, "");
}

}  // namespace
}  // namespace vramd
