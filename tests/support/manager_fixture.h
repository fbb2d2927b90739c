// Test support: the fixture of a ModelManager test (a scratch repository, the memory its models
// are accounted in, a manager over them) and the INT32 request the model-control tests send.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <utility>

#include "core/shared_buffer.h"
#include "core/infer_request.h"
#include "core/tensor.h"
#include "runtime/model_manager.h"
#include "support/scratch_repository.h"

namespace vramd::testing {

// INPUT0 = [1, 2] (INT32), for models of support/config_text.h's Int32ModelConfig.
inline InferRequest Int32Request(std::string id) {
  InferRequest r;
  r.id = std::move(id);
  int32_t v[2] = {1, 2};
  r.inputs.push_back(Tensor{"INPUT0", DataType::kInt32, {2}, SharedBuffer::CopyOf(v, sizeof v)});
  return r;
}

class ManagerTest : public ::testing::Test {
 protected:
  const std::filesystem::path& root() const { return repo_.root(); }
  memory::Ledger& ledger() { return memory_.ledger; }
  const memory::Ledger& ledger() const { return memory_.ledger; }

  // <root>/<name>/config.pbtxt holding `config`, and version 1.
  void WriteModel(const std::string& name, const std::string& config) {
    repo_.AddModel(name, config, {"1"});
  }

  // Options for a manager over the scratch repository and the test's memory.
  runtime::ModelManager::Options ManagerOptions() { return memory_.Options({repo_.root()}); }

  // A manager made with `options`; fails the test (and returns null) when Create fails.
  std::unique_ptr<runtime::ModelManager> StartManager(const runtime::ModelManager::Options& options) {
    auto manager = runtime::ModelManager::Create(options);
    EXPECT_TRUE(manager.ok()) << manager.status().ToString();
    return manager.ok() ? std::move(manager).value() : nullptr;
  }

  ScratchRepository repo_;
  TestMemory memory_;
};

}  // namespace vramd::testing
