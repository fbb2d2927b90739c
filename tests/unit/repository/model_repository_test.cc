#include "repository/model_repository.h"

#include <gtest/gtest.h>
#include <google/protobuf/text_format.h>

#include <fstream>

#include "runtime/model_manager.h"
#include "support/scratch_repository.h"

namespace vramd {
namespace {
namespace fs = std::filesystem;

using ScratchRepo = testing::ScratchRepository;
using Memory = testing::TestMemory;

const char* kIdentityConfig = R"(
backend: "identity"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
)";

TEST(ListVersionsTest, KeepsNumericFoldersWithoutLeadingZero) {
  ScratchRepo repo;
  repo.AddModel("m", kIdentityConfig, {"1", "10", "2", "01", "0", "abc", "3x"});
  std::ofstream(repo.root() / "m" / "7") << "a file, not a folder";
  EXPECT_EQ(repository::ListVersions(repo.root() / "m"), (std::vector<int64_t>{1, 2, 10}));
}

TEST(SelectVersionsTest, LatestAllAndSpecific) {
  const std::vector<int64_t> available{1, 2, 5, 9};
  config::ModelVersionPolicy policy;
  EXPECT_EQ(repository::SelectVersions(policy, available), (std::vector<int64_t>{9}));
  policy.mutable_latest()->set_num_versions(2);
  EXPECT_EQ(repository::SelectVersions(policy, available), (std::vector<int64_t>{5, 9}));
  policy.mutable_latest()->set_num_versions(10);
  EXPECT_EQ(repository::SelectVersions(policy, available), available);
  policy.mutable_all();
  EXPECT_EQ(repository::SelectVersions(policy, available), available);
  policy.mutable_specific()->add_versions(2);
  policy.mutable_specific()->add_versions(4);  // absent: not selected
  policy.mutable_specific()->add_versions(9);
  EXPECT_EQ(repository::SelectVersions(policy, available), (std::vector<int64_t>{2, 9}));
  EXPECT_TRUE(repository::SelectVersions(config::ModelVersionPolicy(), {}).empty());
}

TEST(ScanRepositoriesTest, FindsModelsAcrossRepositoriesAndFlagsDuplicates) {
  ScratchRepo a, b;
  a.AddModel("alpha", kIdentityConfig, {"1"});
  a.AddModel("shared", kIdentityConfig, {"1"});
  a.AddModel(".hidden", kIdentityConfig, {"1"});
  b.AddModel("beta", kIdentityConfig, {"1"});
  b.AddModel("shared", kIdentityConfig, {"1"});
  auto models = repository::ScanRepositories({a.root(), b.root()});
  ASSERT_TRUE(models.ok()) << models.status().ToString();
  ASSERT_EQ(models->size(), 3u);
  EXPECT_EQ((*models)[0].name, "alpha");
  EXPECT_TRUE((*models)[0].status.ok());
  EXPECT_EQ((*models)[1].name, "beta");
  EXPECT_EQ((*models)[2].name, "shared");
  EXPECT_FALSE((*models)[2].status.ok());
  EXPECT_NE((*models)[2].status.message().find("more than one repository"), std::string::npos);
}

TEST(ScanRepositoriesTest, MissingRepositoryIsAnError) {
  auto models = repository::ScanRepositories({"/nonexistent/vramd/repo"});
  ASSERT_FALSE(models.ok());
  EXPECT_EQ(models.status().code(), StatusCode::kNotFound);
  EXPECT_NE(models.status().message().find("/nonexistent/vramd/repo"), std::string::npos);
}

TEST(ModelManagerTest, BrokenModelIsReportedAndOthersServe) {
  ScratchRepo repo;
  repo.AddModel("good", kIdentityConfig, {"1", "2"});
  repo.AddModel("broken", "backend: \"identity\"\ninput [ { name: \"X\" dims: [ 1 }\n", {"1"});
  repo.AddModel("no_versions", kIdentityConfig, {});
  repo.AddModel("no_backend", "backend: \"tensorflow_magic\"\n", {"1"});

  Memory memory;
  auto manager = runtime::ModelManager::Create(memory.Options({repo.root()}, false));
  ASSERT_TRUE(manager.ok()) << manager.status().ToString();
  EXPECT_FALSE((*manager)->AllModelsReady());

  auto good = (*manager)->Find("good", 0);
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_EQ((*good)->version(), 2);  // latest {1} by default
  EXPECT_EQ((*manager)->Find("good", 1).status().code(), StatusCode::kNotFound);
  EXPECT_EQ((*manager)->Find("nope", 0).status().code(), StatusCode::kNotFound);

  auto broken = (*manager)->Find("broken", 0);
  EXPECT_EQ(broken.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(broken.status().message().find("config.pbtxt:2:"), std::string::npos)
      << broken.status().message();

  std::map<std::string, runtime::ModelIndexEntry> index;
  for (auto& e : (*manager)->Index()) index[e.name] = e;
  ASSERT_EQ(index.size(), 4u);
  EXPECT_EQ(index["good"].state, "READY");
  EXPECT_EQ(index["good"].version, 2);
  EXPECT_EQ(index["broken"].state, "UNAVAILABLE");
  EXPECT_NE(index["no_versions"].reason.find("no version folder"), std::string::npos);
  EXPECT_NE(index["no_backend"].reason.find("tensorflow_magic"), std::string::npos);
}

TEST(ModelManagerTest, ExitOnErrorFailsCreate) {
  ScratchRepo repo;
  repo.AddModel("good", kIdentityConfig, {"1"});
  repo.AddModel("broken", "max_batch_size: oops\n", {"1"});
  Memory memory;
  auto manager = runtime::ModelManager::Create(memory.Options({repo.root()}, true));
  ASSERT_FALSE(manager.ok());
  EXPECT_NE(manager.status().message().find("broken"), std::string::npos);
}

TEST(ModelManagerTest, InferRunsOnTheLoadedVersionAndKeepsRequestedOutputs) {
  ScratchRepo repo;
  repo.AddModel("add_sub", R"(
backend: "add_sub"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 2 ] },
        { name: "INPUT1" data_type: TYPE_INT32 dims: [ 2 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 2 ] },
         { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 2 ] } ]
)", {"1"});
  Memory memory;
  auto manager = runtime::ModelManager::Create(memory.Options({repo.root()}, false));
  ASSERT_TRUE(manager.ok());
  auto model = (*manager)->Find("add_sub", 0);
  ASSERT_TRUE(model.ok());

  auto tensor = [](const char* name, std::vector<int32_t> v) {
    return Tensor{name, DataType::kInt32, {static_cast<int64_t>(v.size())},
                  SharedBuffer::CopyOf(v.data(), v.size() * sizeof(int32_t))};
  };
  InferRequest request;
  request.id = "r1";
  request.inputs = {tensor("INPUT0", {5, 7}), tensor("INPUT1", {2, 10})};
  request.outputs = {{"OUTPUT1", false}};
  auto outcome = (*model)->Infer(request);
  ASSERT_TRUE(outcome.ok()) << outcome.status().ToString();
  const InferResponse* response = &outcome->response;
  EXPECT_EQ(response->id, "r1");
  EXPECT_EQ(response->model_version, 1);
  ASSERT_EQ(response->outputs.size(), 1u);
  EXPECT_EQ(response->outputs[0].name, "OUTPUT1");
  const auto* out = reinterpret_cast<const int32_t*>(response->outputs[0].data.data());
  EXPECT_EQ(out[0], 3);
  EXPECT_EQ(out[1], -3);

  request.inputs[1].datatype = DataType::kFp32;
  auto bad = (*model)->Infer(request);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace vramd

namespace vramd {
namespace {

TEST(ModelManagerTest, KindGpuForACpuOnlyBackendIsAClearErrorAndKindAutoRunsOnTheCpu) {
  ScratchRepo repo;
  repo.AddModel("gpu_identity",
                std::string(kIdentityConfig) + "instance_group [ { kind: KIND_GPU } ]\n", {"1"});
  repo.AddModel("auto_identity",
                std::string(kIdentityConfig) + "instance_group [ { kind: KIND_AUTO count: 2 } ]\n",
                {"1"});
  Memory memory;
  auto manager = runtime::ModelManager::Create(memory.Options({repo.root()}, false));
  ASSERT_TRUE(manager.ok());
  auto gpu = (*manager)->Find("gpu_identity", 0);
  ASSERT_FALSE(gpu.ok());
  EXPECT_NE(gpu.status().message().find("backend 'identity' runs on the CPU only"),
            std::string::npos)
      << gpu.status().message();
  auto cpu = (*manager)->Find("auto_identity", 0);
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  EXPECT_EQ((*cpu)->instance_count(), 2u);
}

}  // namespace
}  // namespace vramd
