// Test support: a model repository in a fresh temporary folder, removed when the test ends, and
// the memory a ModelManager needs.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

#include "memory/allocator.h"
#include "memory/ledger.h"
#include "runtime/model_manager.h"

namespace vramd::testing {

class ScratchRepository {
 public:
  ScratchRepository() {
    root_ = std::filesystem::temp_directory_path() /
            ("vramd-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++));
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_);
  }
  ~ScratchRepository() { std::filesystem::remove_all(root_); }
  ScratchRepository(const ScratchRepository&) = delete;
  ScratchRepository& operator=(const ScratchRepository&) = delete;

  const std::filesystem::path& root() const { return root_; }

  // <root>/<name>/config.pbtxt holding `config`, and one folder per entry of `version_dirs`.
  void AddModel(const std::string& name, const std::string& config,
                std::initializer_list<const char*> version_dirs) {
    std::filesystem::create_directories(root_ / name);
    std::ofstream(root_ / name / "config.pbtxt") << config;
    for (const char* v : version_dirs) std::filesystem::create_directories(root_ / name / v);
  }

 private:
  static inline int counter_ = 0;
  std::filesystem::path root_;
};

// A ledger and an allocator for the models a test loads.
struct TestMemory {
  memory::Ledger ledger;
  memory::Allocator allocator{&ledger};

  runtime::ModelManager::Options Options(std::vector<std::filesystem::path> repositories,
                                         bool exit_on_error = false) {
    runtime::ModelManager::Options o;
    o.repositories = std::move(repositories);
    o.exit_on_error = exit_on_error;
    o.memory = {&ledger, &allocator, nullptr};
    return o;
  }
};

}  // namespace vramd::testing
