// Files that a model's config names (a warmup sample's input_data_file, an output's
// label_filename): where they may be, and how they are read.
//
// A config can come from a load request (a config override in explicit mode), so the paths in
// it are client input. One rule serves every such field, so that the fields cannot drift apart:
//  1. the path is relative, without a root and without ".." components;
//  2. after symlinks resolve, the file is inside the folder the field is relative to (a symlink
//     in the model pointing out of it is refused like "..");
//  3. it is a regular file: a FIFO would block the load (and the unload and shutdown behind it)
//     and a device such as /dev/zero never ends, so neither is ever opened;
//  4. it holds at most the field's byte limit.
// Every refusal is an InvalidArgument naming the field, the path as the config wrote it and why.
//
// Thread safety: free functions; they read the file system only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "core/status.h"

namespace vramd::runtime {

struct ModelFileRule {
  std::string_view field;   // the config field, for messages: "label_filename"
  std::string_view folder;  // what the path is relative to, for messages: "the model directory"
  uintmax_t max_bytes = UINTMAX_MAX;
};

// A file that passed the rule.
struct ModelFile {
  std::filesystem::path path;  // symlinks resolved
  uintmax_t size = 0;
};

// `relative` inside `folder` when `rule` allows it (the four points above). NotFound-like
// cases (no such file) are InvalidArgument too: the config is at fault. Internal when the file
// system cannot answer (e.g. a folder that may not be searched).
Result<ModelFile> ResolveModelFile(const std::filesystem::path& folder, std::string_view relative,
                                   const ModelFileRule& rule);

// The first `n` bytes of `file` (REQUIRES: n <= file.size). The file is opened without
// blocking and checked again through the open descriptor, so one swapped for a FIFO or a
// device after ResolveModelFile is refused rather than waited on. Internal when it cannot be
// read or holds fewer than `n` bytes by now.
Result<std::string> ReadModelFile(const ModelFile& file, size_t n, const ModelFileRule& rule);

}  // namespace vramd::runtime
