// The Triton-style model repository on disk: <repository>/<model>/config.pbtxt and numeric
// version folders <repository>/<model>/<version>/.
//
// Rules (Triton's): a model is any sub-folder of a repository not starting with '.'; version
// folders are numeric with no leading zero; other entries are ignored. The same model name in
// two repositories is an error for that name. Functions here only read the file system.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "config/model_config.pb.h"
#include "core/status.h"

namespace vramd::repository {

struct ModelDirectory {
  std::string name;
  std::filesystem::path path;
  // Not OK when this entry cannot be served as found (a duplicate name); kept so the index
  // can report it.
  Status status;
};

// Models found in `repositories`, sorted by name. A repository that does not exist or is not
// a folder is an error for the whole scan (as Triton refuses to start).
Result<std::vector<ModelDirectory>> ScanRepositories(
    const std::vector<std::filesystem::path>& repositories);

// Version numbers found under `model_dir`, ascending.
std::vector<int64_t> ListVersions(const std::filesystem::path& model_dir);

// The versions `policy` selects from `available` (ascending): latest N (default 1), all, or
// the specific ones that exist. Result ascending.
std::vector<int64_t> SelectVersions(const config::ModelVersionPolicy& policy,
                                    const std::vector<int64_t>& available);

}  // namespace vramd::repository
