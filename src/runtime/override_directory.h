// OverrideDirectory: a model directory made from the files a load request carries (Triton's
// "file:<path>" load parameters, which come with a "config" override), so a client can load a
// model the repositories do not hold, or replace one's files, without writing to the repository.
//
// The files are written under <root>/<model>.XXXXXX/ (root: $TMPDIR/vramd-model-files, made if
// missing), the model loads from there, and the versions loaded from it keep it (the manager
// holds it with them): the tree is removed when the last of them is gone, after its unload or
// after the load that replaced them. Paths are checked before anything is written: relative,
// no "." or ".." component, no empty one, each at most once; nothing escapes the directory.
//
// Thread safety: Write may be called from any thread; an OverrideDirectory is immutable.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace vramd::runtime {

// Each file: its path relative to the model's directory ("1/model.py") and its bytes.
using ModelFileOverrides = std::vector<std::pair<std::string, std::string>>;

class OverrideDirectory {
 public:
  // Writes `files` into a new directory for `model` under `root` (empty: the default above).
  // InvalidArgument naming the first path that is not acceptable (nothing written); Internal
  // naming the path and the system's error when writing fails (what was written is removed).
  static Result<std::shared_ptr<const OverrideDirectory>> Write(const std::string& model,
                                                                const ModelFileOverrides& files,
                                                                std::filesystem::path root = {});
  // Public for make_shared; only Write can make a Token.
  class Token {
    explicit Token() = default;
    friend class OverrideDirectory;
  };
  OverrideDirectory(Token, std::filesystem::path path) : path_(std::move(path)) {}
  ~OverrideDirectory();
  OverrideDirectory(const OverrideDirectory&) = delete;
  OverrideDirectory& operator=(const OverrideDirectory&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  const std::filesystem::path path_;
};

}  // namespace vramd::runtime
