// The runtime's owners in the ledger: model > version > instance > request, leaks named by
// request id, growth flagged, and nothing left after unload or a failed load.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "backends/backend.h"
#include "runtime/model_manager.h"
#include "support/config_text.h"
#include "support/manager_fixture.h"

namespace vramd {
namespace {
namespace fs = std::filesystem;
using memory::Device;

constexpr size_t kWeights = 1 << 20;
constexpr size_t kWorkspace = 64 << 10;
constexpr size_t kLeakPerRequest = 4096;

// Allocates weights per model and a workspace per instance through the allocator, and on a
// request whose id starts with "leak" allocates 4 KiB under the request and keeps it (the
// history-list leak of PROBLEM.md). Config parameter "fail_load" makes LoadModel fail after
// allocating.
class LeakyInstance : public backends::BackendInstance {
 public:
  explicit LeakyInstance(memory::Buffer workspace) : workspace_(std::move(workspace)) {}
  Status Execute(const InferRequest& request, std::vector<Tensor>* outputs) override {
    auto scratch = allocator_->Allocate(Device::Cpu(), 1024);  // freed before returning: clean
    if (!scratch.ok()) return scratch.status();
    if (request.id.rfind("leak", 0) == 0) {
      auto kept = allocator_->Allocate(Device::Cpu(), kLeakPerRequest);
      if (!kept.ok()) return kept.status();
      history_.push_back(std::move(kept).value());
    }
    const Tensor& in = request.inputs[0];
    outputs->push_back(Tensor{"OUTPUT0", in.datatype, in.shape, in.data});
    return Status::Ok();
  }
  memory::Allocator* allocator_ = nullptr;

 private:
  memory::Buffer workspace_;
  std::vector<memory::Buffer> history_;
};

class LeakyModel : public backends::BackendModel {
 public:
  LeakyModel(memory::Allocator* allocator, memory::Buffer weights)
      : allocator_(allocator), weights_(std::move(weights)) {}
  Result<std::unique_ptr<backends::BackendInstance>> CreateInstance(
      const backends::InstanceContext& ctx) override {
    VRAMD_ASSIGN_OR_RETURN(auto workspace, allocator_->Allocate(Device::Cpu(), kWorkspace));
    auto instance = std::make_unique<LeakyInstance>(std::move(workspace));
    instance->allocator_ = allocator_;
    return std::unique_ptr<backends::BackendInstance>(std::move(instance));
  }

 private:
  memory::Allocator* allocator_;
  memory::Buffer weights_;
};

class LeakyBackend : public backends::Backend {
 public:
  std::string_view name() const override { return "leaky_test"; }
  Result<std::unique_ptr<backends::BackendModel>> LoadModel(
      const backends::ModelContext& ctx) override {
    VRAMD_ASSIGN_OR_RETURN(auto weights, ctx.allocator->Allocate(Device::Cpu(), kWeights));
    if (ctx.config->parameters().count("fail_load")) {
      return Status::Internal("injected load failure");  // `weights` is released here
    }
    return std::unique_ptr<backends::BackendModel>(
        std::make_unique<LeakyModel>(ctx.allocator, std::move(weights)));
  }
};

LeakyBackend* TheBackend() {
  static LeakyBackend backend;
  static bool registered = backends::RegisterBackend(&backend).ok();
  EXPECT_TRUE(registered);
  return &backend;
}

class ModelMemoryTest : public testing::ManagerTest {
 protected:
  void SetUp() override {
    TheBackend();
    AddModel("leaky", 2, false);
  }

  void AddModel(const std::string& name, int instances, bool fail_load) {
    WriteModel(name, testing::Int32ModelConfig(
                         "leaky_test", instances,
                         fail_load ? "parameters { key: \"fail_load\" value { string_value: \"1\" } }\n"
                                   : ""));
  }

  std::unique_ptr<runtime::ModelManager> Start(memory::GrowthDetector* growth = nullptr) {
    auto o = ManagerOptions();
    o.memory.growth = growth;
    return StartManager(o);
  }

  static InferRequest Request(std::string id) { return testing::Int32Request(std::move(id)); }

  std::map<std::string, memory::OwnerSnapshot> OwnersByPath() const {
    std::map<std::string, memory::OwnerSnapshot> out;
    for (auto& o : ledger().Snapshot()) out[ledger().OwnerPath(o.id)] = o;
    return out;
  }

};

TEST_F(ModelMemoryTest, OwnersFollowModelVersionInstance) {
  auto manager = Start();
  auto owners = OwnersByPath();
  ASSERT_TRUE(owners.count("server/model:leaky"));
  ASSERT_TRUE(owners.count("server/model:leaky/version:1"));
  EXPECT_EQ(owners["server/model:leaky/version:1"].self.live_bytes, int64_t(kWeights));
  EXPECT_EQ(owners["server/model:leaky/version:1"].subtree_live_bytes,
            int64_t(kWeights + 2 * kWorkspace));
  EXPECT_EQ(owners["server/model:leaky/version:1/instance:leaky_0_0"].self.live_bytes,
            int64_t(kWorkspace));
  EXPECT_EQ(owners["server/model:leaky/version:1/instance:leaky_0_1"].self.live_bytes,
            int64_t(kWorkspace));
}

TEST_F(ModelMemoryTest, CleanRequestLeavesNoOwnerAndNoLeak) {
  auto manager = Start();
  auto model = manager->Find("leaky", 0);
  ASSERT_TRUE(model.ok());
  size_t owners_before = ledger().Snapshot().size();
  for (int i = 0; i < 100; ++i) {
    auto outcome = (*model)->Infer(Request("clean-" + std::to_string(i)));
    ASSERT_TRUE(outcome.ok()) << outcome.status().ToString();
  }
  EXPECT_EQ(ledger().Snapshot().size(), owners_before);
  EXPECT_TRUE(ledger().Leaks().empty());
  EXPECT_EQ(ledger().leaked_bytes_total(), 0u);
}

TEST_F(ModelMemoryTest, LeakIsReportedWithTheRequestId) {
  auto manager = Start();
  auto model = manager->Find("leaky", 0);
  ASSERT_TRUE(model.ok());
  { auto outcome = (*model)->Infer(Request("leak-42")); ASSERT_TRUE(outcome.ok()); }
  auto leaks = ledger().Leaks();
  ASSERT_EQ(leaks.size(), 1u);
  EXPECT_NE(leaks[0].owner_path.find("request:leak-42"), std::string::npos) << leaks[0].owner_path;
  EXPECT_NE(leaks[0].owner_path.find("model:leaky/version:1/instance:"), std::string::npos);
  EXPECT_EQ(leaks[0].bytes, kLeakPerRequest);
  EXPECT_EQ(leaks[0].count, 1u);
  EXPECT_EQ(ledger().leaked_bytes_total(), kLeakPerRequest);

  // Unloading frees the instance's history: the leak's memory is no longer live, and nothing of
  // the model remains in the ledger.
  model = Status::NotFound("dropped");
  manager.reset();
  EXPECT_EQ(ledger().Leaks()[0].still_live_bytes, 0u);
  EXPECT_EQ(*ledger().SubtreeLiveBytes(ledger().root()), 0);
  EXPECT_EQ(ledger().Snapshot().size(), 1u);  // the root alone
}

TEST_F(ModelMemoryTest, GrowthDetectorFlagsTheStaircase) {
  memory::GrowthDetector growth(5);
  // One instance, so every request lands on the same one.
  fs::remove_all(root());
  AddModel("leaky", 1, false);
  auto manager = Start(&growth);
  auto model = manager->Find("leaky", 0);
  ASSERT_TRUE(model.ok());
  auto instance_path = "server/model:leaky/version:1/instance:leaky_0_0";
  memory::OwnerId instance = OwnersByPath()[instance_path].id;
  // Clean requests: flat. Then 4 leaking requests, each fed to the detector by the runtime as
  // a rise. One more rise observed by hand is the fifth in a row and is flagged; had the
  // runtime fed nothing, it would be the detector's first sight of the instance.
  for (int i = 0; i < 10; ++i) ASSERT_TRUE((*model)->Infer(Request("ok")).ok());
  for (int i = 0; i < 4; ++i) ASSERT_TRUE((*model)->Infer(Request("leak")).ok());
  int64_t live = *ledger().SubtreeLiveBytes(instance);
  EXPECT_EQ(live, int64_t(kWorkspace + 4 * kLeakPerRequest));
  auto flagged = growth.Observe(instance, live + 1);
  ASSERT_TRUE(flagged.has_value());
  EXPECT_EQ(flagged->consecutive_rises, 5);
  EXPECT_EQ(flagged->from_bytes, int64_t(kWorkspace));
}

TEST_F(ModelMemoryTest, FailedLoadLeavesNothing) {
  AddModel("broken_load", 1, true);
  auto manager = Start();
  auto index = manager->Index();
  bool found = false;
  for (auto& e : index) {
    if (e.name == "broken_load") {
      found = true;
      EXPECT_NE(e.reason.find("injected load failure"), std::string::npos);
    }
  }
  EXPECT_TRUE(found);
  for (auto& [path, o] : OwnersByPath()) {
    EXPECT_EQ(path.find("broken_load/version"), std::string::npos) << path << " survived";
  }
  EXPECT_TRUE(ledger().Leaks().empty());
  // The failed load's weights went back to the pool, and the pool was trimmed after loading:
  // no segment is left that holds nothing.
  auto pool = memory_.allocator.Pool(Device::Cpu());
  ASSERT_TRUE(pool.ok());
  for (const auto& segment : (*pool)->Snapshot()) {
    bool used = false;
    for (const auto& block : segment.blocks) used = used || block.allocated;
    EXPECT_TRUE(used) << "a fully free segment of " << segment.size << " bytes is still cached";
  }
}

// A manager in explicit mode under a cpu budget that holds two idle leaky_test versions and a
// little more, starting with "w", which a rollback watch keeps on reload (its reloads beside the
// serving versions, whatever the budget leaves). Other models are added before Start.
class BudgetedManagerTest : public ::testing::Test {
 protected:
  static constexpr int64_t kVersion = kWeights + kWorkspace;  // one instance, idle

  BudgetedManagerTest() : ledger_(Budget()), allocator_(&ledger_) {
    TheBackend();
    repo_.AddModel(
        "w",
        testing::Int32ModelConfig(
            "leaky_test", 1,
            "parameters { key: \"vramd.rollback.watch_s\" value { string_value: \"600\" } }\n"
            "parameters { key: \"vramd.reload_policy\" value { string_value: "
            "\"availability_preserving\" } }\n"),
        {"1"});
  }

  static memory::Ledger::Options Budget() {
    memory::Ledger::Options options;
    options.budget = {memory::QuotaLimit{Device::Cpu(), 2 * kVersion + (256 << 10)}};
    return options;
  }

  runtime::ModelManager& Start() {
    runtime::ModelManager::Options options;
    options.repositories = {repo_.root()};
    options.model_control_mode = runtime::ModelControlMode::kExplicit;
    options.startup_models = {"w"};
    options.memory = {&ledger_, &allocator_, nullptr};
    auto made = runtime::ModelManager::Create(options);
    EXPECT_TRUE(made.ok()) << made.status().ToString();
    manager_ = std::move(made).value();
    return *manager_;
  }

  // Version `v` of w, loaded: the one before stays loaded, kept by the watch.
  void ReloadW(int v) {
    fs::create_directory(repo_.root() / "w" / std::to_string(v));
    Status reloaded = manager_->Load("w", nullptr);
    ASSERT_TRUE(reloaded.ok()) << reloaded.ToString();
  }

  int64_t Live(const std::string& path) const {
    for (const auto& owner : ledger_.Snapshot()) {
      if (ledger_.OwnerPath(owner.id) == path) return owner.subtree_live_bytes;
    }
    return 0;
  }

  memory::Ledger ledger_;
  memory::Allocator allocator_;
  testing::ScratchRepository repo_;
  std::unique_ptr<runtime::ModelManager> manager_;
};

// A load that does not fit unloads the versions another model's rollback watch keeps awake,
// when nothing can sleep for it (leaky_test cannot sleep). The watch goes on: a rollback loads
// them again from their files.
TEST_F(BudgetedManagerTest, ALoadThatDoesNotFitReleasesAnotherModelsKeptVersions) {
  repo_.AddModel("x", testing::Int32ModelConfig("leaky_test", 1), {"1"});
  runtime::ModelManager& manager = Start();
  ReloadW(2);
  auto view = manager.Lifecycle("w");
  ASSERT_TRUE(view.has_value());
  EXPECT_EQ(view->rollback_kept, std::vector<int64_t>{1});
  EXPECT_EQ(Live("server/model:w/version:1"), kVersion);

  // x does not fit beside both: w's kept version 1 is unloaded for it, and x loads.
  Status x = manager.Load("x", nullptr);
  ASSERT_TRUE(x.ok()) << x.ToString();
  view = manager.Lifecycle("w");
  EXPECT_TRUE(view->rollback_kept.empty());
  EXPECT_EQ(view->rollback_reload, std::vector<int64_t>{1}) << "the watch goes on";
  EXPECT_EQ(view->serving, std::vector<int64_t>{2});
  EXPECT_EQ(Live("server/model:w/version:1"), 0);
  EXPECT_EQ(Live("server/model:x/version:1"), kVersion);
  EXPECT_TRUE(manager.Find("w", 0).ok());

  // A rollback loads version 1 again from its files once there is room for it.
  ASSERT_TRUE(manager.Unload("x").ok());
  Status back = manager.Rollback("w", "manual", "");
  ASSERT_TRUE(back.ok()) << back.ToString();
  EXPECT_EQ(manager.Lifecycle("w")->serving, std::vector<int64_t>{1});
  auto w = manager.Find("w", 0);
  ASSERT_TRUE(w.ok());
  EXPECT_TRUE((*w)->Infer(testing::Int32Request("after")).ok());
  EXPECT_TRUE(ledger_.Leaks().empty());
}

// A model's own kept versions never make room for it: they are its way back.
TEST_F(BudgetedManagerTest, AModelsOwnKeptVersionsAreNotReleasedForIt) {
  runtime::ModelManager& manager = Start();
  ReloadW(2);
  // Version 3 does not fit beside 2 and the kept 1, which is w's own: the load fails.
  fs::create_directory(repo_.root() / "w" / "3");
  Status third = manager.Load("w", nullptr);
  EXPECT_FALSE(third.ok());
  EXPECT_THAT(third.message(), ::testing::HasSubstr("memory budget"));
  auto view = manager.Lifecycle("w");
  ASSERT_TRUE(view.has_value());
  EXPECT_EQ(view->serving, std::vector<int64_t>{2});
  EXPECT_EQ(view->rollback_kept, std::vector<int64_t>{1});
}

// "auto" counts what the budget leaves, not what the host has: with w and a filling it, a's
// reload unloads version 1 first (resource-preserving) and succeeds, where loading version 2
// beside it could not fit.
TEST_F(BudgetedManagerTest, AutoReloadPolicyCountsWhatTheBudgetLeaves) {
  repo_.AddModel("a", testing::Int32ModelConfig("leaky_test", 1), {"1"});
  runtime::ModelManager& manager = Start();
  ASSERT_TRUE(manager.Load("a", nullptr).ok());
  fs::create_directory(repo_.root() / "a" / "2");
  Status reloaded = manager.Load("a", nullptr);
  ASSERT_TRUE(reloaded.ok()) << reloaded.ToString();
  auto view = manager.Lifecycle("a");
  ASSERT_TRUE(view.has_value() && view->last_load.has_value());
  EXPECT_EQ(view->last_load->policy, runtime::ReloadPolicy::kResourcePreserving)
      << view->last_load->policy_reason;
  EXPECT_EQ(view->serving, std::vector<int64_t>{2});
}

}  // namespace
}  // namespace vramd
