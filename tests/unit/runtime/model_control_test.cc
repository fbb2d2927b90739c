// Explicit model control: ModelManager::Load and Unload, on a scratch repository. Unload drains
// in-flight requests and leaves nothing of the model in the ledger; a failed reload keeps the
// serving versions; load/unload cycles leave the ledger at its baseline.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "backends/backend.h"
#include "runtime/infer_router.h"
#include "runtime/model_manager.h"
#include "support/config_text.h"
#include "support/manager_fixture.h"

namespace vramd {
namespace {
namespace fs = std::filesystem;
using memory::Device;

constexpr size_t kWeights = 1 << 20;
constexpr size_t kWorkspace = 64 << 10;

// Allocates weights per model and a workspace per instance through the allocator.
class AllocInstance : public backends::BackendInstance {
 public:
  explicit AllocInstance(memory::Buffer workspace) : workspace_(std::move(workspace)) {}
  Status Execute(const InferRequest& request, std::vector<Tensor>* outputs) override {
    const Tensor& in = request.inputs[0];
    outputs->push_back(Tensor{"OUTPUT0", in.datatype, in.shape, in.data});
    return Status::Ok();
  }

 private:
  memory::Buffer workspace_;
};

class AllocModel : public backends::BackendModel {
 public:
  AllocModel(memory::Allocator* allocator, memory::Buffer weights)
      : allocator_(allocator), weights_(std::move(weights)) {}
  Result<std::unique_ptr<backends::BackendInstance>> CreateInstance(
      const backends::InstanceContext&) override {
    VRAMD_ASSIGN_OR_RETURN(auto workspace, allocator_->Allocate(Device::Cpu(), kWorkspace));
    return std::unique_ptr<backends::BackendInstance>(
        std::make_unique<AllocInstance>(std::move(workspace)));
  }

 private:
  memory::Allocator* allocator_;
  memory::Buffer weights_;
};

class AllocBackend : public backends::Backend {
 public:
  std::string_view name() const override { return "control_alloc_test"; }
  Result<std::unique_ptr<backends::BackendModel>> LoadModel(
      const backends::ModelContext& ctx) override {
    VRAMD_ASSIGN_OR_RETURN(auto weights, ctx.allocator->Allocate(Device::Cpu(), kWeights));
    return std::unique_ptr<backends::BackendModel>(
        std::make_unique<AllocModel>(ctx.allocator, std::move(weights)));
  }
};

void RegisterAllocBackend() {
  static AllocBackend backend;
  static bool registered = backends::RegisterBackend(&backend).ok();
  ASSERT_TRUE(registered);
}

std::string Config(const std::string& backend, int instances, int delay_us = 0) {
  return testing::Int32ModelConfig(
      backend, instances,
      delay_us > 0 ? "parameters { key: \"execute_delay_us\" value { string_value: \"" +
                         std::to_string(delay_us) + "\" } }\n"
                   : "");
}

class ModelControlTest : public testing::ManagerTest {
 protected:
  void SetUp() override { RegisterAllocBackend(); }

  std::unique_ptr<runtime::ModelManager> Start(runtime::ModelControlMode mode,
                                               std::vector<std::string> startup = {}) {
    auto o = ManagerOptions();
    o.model_control_mode = mode;
    o.startup_models = std::move(startup);
    return StartManager(o);
  }

  static InferRequest Request(std::string id) { return testing::Int32Request(std::move(id)); }

  bool LedgerHasOwnerNamed(const std::string& name) const {
    for (const auto& o : ledger().Snapshot()) {
      if (o.name == name) return true;
    }
    return false;
  }

  static const runtime::ModelIndexEntry* Row(const std::vector<runtime::ModelIndexEntry>& index,
                                             const std::string& name) {
    for (const auto& e : index) {
      if (e.name == name) return &e;
    }
    return nullptr;
  }

};

TEST_F(ModelControlTest, NoneModeLoadsEverythingAndRefusesControl) {
  WriteModel("a", Config("identity", 1));
  WriteModel("b", Config("identity", 1));
  auto manager = Start(runtime::ModelControlMode::kNone);
  EXPECT_TRUE(manager->Find("a", 0).ok());
  EXPECT_TRUE(manager->Find("b", 0).ok());
  Status load = manager->Load("a");
  EXPECT_EQ(load.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(load.message().find("not allowed"), std::string::npos) << load.message();
  EXPECT_EQ(manager->Unload("a").code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(manager->Find("a", 0).ok());
}

TEST_F(ModelControlTest, ExplicitLoadUnloadCycle) {
  WriteModel("a", Config("identity", 1));
  WriteModel("b", Config("identity", 1));
  auto manager = Start(runtime::ModelControlMode::kExplicit, {"a"});
  EXPECT_TRUE(manager->Find("a", 0).ok());
  EXPECT_EQ(manager->Find("b", 0).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(manager->AllModelsReady());

  ASSERT_TRUE(manager->Load("b").ok());
  auto b = manager->Find("b", 0);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_TRUE((*b)->Infer(Request("r")).ok());
  b = Status::NotFound("dropped");

  ASSERT_TRUE(manager->Unload("b").ok());
  auto gone = manager->Find("b", 0);
  EXPECT_EQ(gone.status().code(), StatusCode::kUnavailable);
  const auto index = manager->Index();
  const auto* row = Row(index, "b");
  ASSERT_NE(row, nullptr);
  EXPECT_EQ(row->state, "UNAVAILABLE");
  EXPECT_EQ(row->reason, "unloaded");
  EXPECT_TRUE(manager->AllModelsReady());  // an unloaded model does not count
  EXPECT_FALSE(LedgerHasOwnerNamed("b"));

  // Unloading again, or a model that never loaded, is a success (as Triton).
  EXPECT_TRUE(manager->Unload("b").ok());
  EXPECT_TRUE(manager->Unload("never_heard_of").ok());

  // Unknown on load: NotFound naming it.
  Status unknown = manager->Load("nope");
  EXPECT_EQ(unknown.code(), StatusCode::kNotFound);
  EXPECT_NE(unknown.message().find("'nope'"), std::string::npos) << unknown.message();

  // And back again.
  ASSERT_TRUE(manager->Load("b").ok());
  EXPECT_TRUE(manager->Find("b", 0).ok());
  EXPECT_EQ(Row(manager->Index(), "b")->state, "READY");
}

TEST_F(ModelControlTest, NamesNoRepositoryHoldsLeaveNothingBehind) {
  // Each distinct name sent to load or unload used to keep an action lock forever (~100 bytes
  // plus the name): a client could grow the server without bound.
  WriteModel("a", Config("identity", 1));
  auto manager = Start(runtime::ModelControlMode::kExplicit, {"a"});
  ASSERT_TRUE(manager->Load("a").ok());
  ASSERT_TRUE(manager->Unload("a").ok());
  const size_t baseline = manager->TEST_TrackedNames();
  const size_t rows = manager->Index().size();
  for (int i = 0; i < 2000; ++i) {
    const std::string name = "ghost-" + std::to_string(i) + std::string(200, 'x');
    Status load = manager->Load(name);
    ASSERT_EQ(load.code(), StatusCode::kNotFound) << load.ToString();
    ASSERT_NE(load.message().find("'" + name + "'"), std::string::npos) << load.message();
    ASSERT_TRUE(manager->Unload(name).ok());
    ASSERT_TRUE(manager->Unload("other-" + std::to_string(i)).ok());
  }
  EXPECT_EQ(manager->TEST_TrackedNames(), baseline);
  EXPECT_EQ(manager->Index().size(), rows);
  EXPECT_FALSE(manager->Lifecycle("ghost-0" + std::string(200, 'x')).has_value());
  // The real model is still under control.
  ASSERT_TRUE(manager->Load("a").ok());
  EXPECT_TRUE(manager->Find("a", 0).ok());
  EXPECT_EQ(manager->TEST_TrackedNames(), baseline);
}

TEST_F(ModelControlTest, NamesLongerThanADirectoryNameAreRefused) {
  auto manager = Start(runtime::ModelControlMode::kExplicit);
  const size_t baseline = manager->TEST_TrackedNames();
  const std::string long_name(4096, 'n');
  for (Status s : {manager->Load(long_name), manager->Unload(long_name)}) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("has 4096 bytes, more than the 255"), std::string::npos)
        << s.message();
    EXPECT_LT(s.message().size(), 200u) << "the message repeats the whole name";
  }
  // 255 bytes could be a directory: an unknown one is the usual NotFound.
  EXPECT_EQ(manager->Load(std::string(255, 'n')).code(), StatusCode::kNotFound);
  EXPECT_EQ(manager->TEST_TrackedNames(), baseline);
}

TEST_F(ModelControlTest, StarLoadsEverythingAtStartup) {
  WriteModel("a", Config("identity", 1));
  WriteModel("b", Config("identity", 1));
  auto manager = Start(runtime::ModelControlMode::kExplicit, {"*"});
  EXPECT_TRUE(manager->Find("a", 0).ok());
  EXPECT_TRUE(manager->Find("b", 0).ok());
}

TEST_F(ModelControlTest, UnloadDrainsInFlightRequests) {
  WriteModel("slow", Config("identity", 1, 300000));  // 300 ms per execution
  auto manager = Start(runtime::ModelControlMode::kExplicit, {"slow"});
  auto model = manager->Find("slow", 0);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  std::promise<Result<runtime::InferOutcome>> first_promise, second_promise;
  auto first = first_promise.get_future();
  auto second = second_promise.get_future();
  std::thread caller([m = *model, &first_promise] {
    first_promise.set_value(m->Infer(Request("in-flight")));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the first is executing
  (*model)->InferAsync(std::make_shared<InferRequest>(Request("queued")),
                       [&second_promise](Result<runtime::InferOutcome> outcome) {
                         second_promise.set_value(std::move(outcome));
                       });
  model = Status::NotFound("dropped");  // only the caller thread holds the version now

  auto started = std::chrono::steady_clock::now();
  auto unload = std::async(std::launch::async, [&] { return manager->Unload("slow"); });
  caller.join();
  auto a = first.get();
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  auto b = second.get();
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  // The outcomes hold the version (their outputs belong to its request owners): the unload
  // finishes only once they are dropped.
  EXPECT_EQ(unload.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout);
  a = Status::NotFound("dropped");
  b = Status::NotFound("dropped");
  ASSERT_TRUE(unload.get().ok());
  EXPECT_GE(std::chrono::steady_clock::now() - started, std::chrono::milliseconds(200));

  EXPECT_EQ(manager->Find("slow", 0).status().code(), StatusCode::kUnavailable);
  EXPECT_FALSE(LedgerHasOwnerNamed("slow"));
  EXPECT_EQ(*ledger().SubtreeLiveBytes(ledger().root()), 0);
  EXPECT_TRUE(ledger().Leaks().empty());
}

TEST_F(ModelControlTest, BrokenReloadKeepsTheServingVersion) {
  WriteModel("m", Config("identity", 1));
  auto manager = Start(runtime::ModelControlMode::kExplicit, {"m"});
  auto before = manager->Find("m", 0);
  ASSERT_TRUE(before.ok());
  const runtime::LoadedModel* serving = before->get();
  before = Status::NotFound("dropped");

  std::ofstream(root() / "m" / "config.pbtxt") << "backend: \"identity\"\ninput [ { name: \"X\" dims: [ 1 }\n";
  Status load = manager->Load("m");
  ASSERT_FALSE(load.ok());
  EXPECT_NE(load.message().find("config.pbtxt:"), std::string::npos) << load.message();
  auto after = manager->Find("m", 0);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(after->get(), serving);
  EXPECT_TRUE((*after)->Infer(Request("still")).ok());
  const auto index = manager->Index();
  const auto* row = Row(index, "m");
  ASSERT_NE(row, nullptr);
  EXPECT_EQ(row->state, "READY");
  EXPECT_NE(row->reason.find("last load failed"), std::string::npos) << row->reason;

  // A good config again: the reload replaces the version (released first, so that the old
  // version's owner closes before Load returns).
  after = Status::NotFound("dropped");
  std::ofstream(root() / "m" / "config.pbtxt") << Config("identity", 2);
  ASSERT_TRUE(manager->Load("m").ok());
  after = manager->Find("m", 0);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ((*after)->instance_count(), 2u);
  EXPECT_TRUE(Row(manager->Index(), "m")->reason.empty());
  after = Status::NotFound("dropped");
  int models = 0;
  for (const auto& o : ledger().Snapshot()) models += o.name == "m";
  EXPECT_EQ(models, 1);  // the replaced version's model owner closed
  EXPECT_TRUE(ledger().Leaks().empty());
}

TEST_F(ModelControlTest, CyclesLeaveTheLedgerAtBaseline) {
  WriteModel("alloc", Config("control_alloc_test", 2));
  auto manager = Start(runtime::ModelControlMode::kExplicit, {});
  const int64_t baseline = *ledger().SubtreeLiveBytes(ledger().root());
  const size_t owners = ledger().Snapshot().size();
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(manager->Load("alloc").ok()) << i;
    if (i % 2 == 0) {
      ASSERT_TRUE(manager->Load("alloc").ok()) << i;  // a reload too
    }
    EXPECT_EQ(*ledger().SubtreeLiveBytes(ledger().root()),
              baseline + int64_t(kWeights + 2 * kWorkspace));
    {
      auto model = manager->Find("alloc", 0);
      ASSERT_TRUE(model.ok());
      ASSERT_TRUE((*model)->Infer(Request("c" + std::to_string(i))).ok());
    }
    ASSERT_TRUE(manager->Unload("alloc").ok()) << i;
    EXPECT_EQ(*ledger().SubtreeLiveBytes(ledger().root()), baseline) << i;
  }
  EXPECT_EQ(ledger().Snapshot().size(), owners);
  EXPECT_TRUE(ledger().Leaks().empty());
  EXPECT_EQ(ledger().leaked_bytes_total(), 0u);
}

// A slow resource-preserving reload: every load runs a warmup execution of 300 ms, and
// requests wait at most `wait_ms` in the gap.
std::string SlowResourcePreservingConfig(int wait_ms) {
  return Config("identity", 1, 300000) +
         "parameters { key: \"vramd.reload_policy\" value { string_value: "
         "\"resource_preserving\" } }\n"
         "parameters { key: \"vramd.reload_unavailable_wait_ms\" value { string_value: \"" +
         std::to_string(wait_ms) + "\" } }\n"
         "model_warmup [ { name: \"w\" batch_size: 1 inputs { key: \"INPUT0\" value { "
         "data_type: TYPE_INT32 dims: [ 2 ] zero_data: true } } } ]\n";
}

// A request through InferRouter in a resource-preserving gap: the call returns at once, and the
// answer comes later. Where the build step ran shows where the version lookup was answered: on
// the caller's thread at once, or on the manager's releasing thread after the gap.
struct ParkedInfer {
  std::promise<Status> answer;
  int64_t version = 0;  // of the response
  std::thread::id build_thread;
  std::chrono::steady_clock::duration call_time{};
};

void InferInGap(runtime::ModelManager& manager, const std::string& name, InferRequest request,
                const std::shared_ptr<ParkedInfer>& parked) {
  // The gap lasts from the old version's drain to the new one's warmup (300 ms of loading).
  for (int i = 0; i < 2000; ++i) {
    auto life = manager.Lifecycle(name);
    if (life && life->serving.empty() &&
        (life->state == runtime::LifecycleState::kDraining ||
         life->state == runtime::LifecycleState::kUnloading ||
         life->state == runtime::LifecycleState::kLoading)) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const auto start = std::chrono::steady_clock::now();
  runtime::InferRouter(&manager).InferAsync(
      name, 0, std::make_shared<InferRequest>(),
      [parked, request](const config::ModelConfig&) -> Result<InferRequest> {
        parked->build_thread = std::this_thread::get_id();
        return request;
      },
      [parked](Result<runtime::InferOutcome> outcome) {
        if (outcome.ok()) parked->version = outcome->response.model_version;
        parked->answer.set_value(outcome.status());
      });
  parked->call_time = std::chrono::steady_clock::now() - start;
}

TEST_F(ModelControlTest, InferAsyncParksARequestInAResourcePreservingGapWithoutBlocking) {
  WriteModel("slow", SlowResourcePreservingConfig(5000));
  auto manager = Start(runtime::ModelControlMode::kExplicit, {"slow"});
  auto reload = std::async(std::launch::async, [&] { return manager->Load("slow"); });
  auto parked = std::make_shared<ParkedInfer>();
  InferInGap(*manager, "slow", Request("parked"), parked);
  EXPECT_LT(parked->call_time, std::chrono::milliseconds(100)) << "InferAsync blocked its caller";
  auto future = parked->answer.get_future();
  ASSERT_EQ(future.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  Status status = future.get();
  EXPECT_TRUE(status.ok()) << status.ToString();
  EXPECT_NE(parked->build_thread, std::this_thread::get_id()) << "the lookup did not wait";
  EXPECT_EQ(parked->version, 1);
  ASSERT_TRUE(reload.get().ok());
  // Outside a gap the lookup is answered at once, on the caller's thread.
  std::thread::id build_thread;
  auto answered = std::make_shared<std::promise<Status>>();
  runtime::InferRouter(manager.get())
      .InferAsync(
          "slow", 0, std::make_shared<InferRequest>(),
          [&build_thread](const config::ModelConfig&) -> Result<InferRequest> {
            build_thread = std::this_thread::get_id();
            return Request("immediate");
          },
          [answered](Result<runtime::InferOutcome> outcome) {
            answered->set_value(outcome.status());
          });
  EXPECT_EQ(build_thread, std::this_thread::get_id());
  EXPECT_TRUE(answered->get_future().get().ok());
}

TEST_F(ModelControlTest, InferAsyncInAGapLongerThanTheWaitGetsTheDocumentedError) {
  WriteModel("slow", SlowResourcePreservingConfig(50));  // the reload's gap lasts 300 ms or more
  auto manager = Start(runtime::ModelControlMode::kExplicit, {"slow"});
  auto reload = std::async(std::launch::async, [&] { return manager->Load("slow"); });
  auto parked = std::make_shared<ParkedInfer>();
  InferInGap(*manager, "slow", Request("parked"), parked);
  auto future = parked->answer.get_future();
  ASSERT_EQ(future.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  Status status = future.get();
  EXPECT_EQ(status.code(), StatusCode::kUnavailable);
  EXPECT_NE(status.message().find("a resource-preserving reload is in progress and it was not "
                                  "ready within 50 ms"),
            std::string::npos)
      << status.message();
  EXPECT_EQ(parked->build_thread, std::thread::id()) << "built for no version";
  ASSERT_TRUE(reload.get().ok());
}

}  // namespace
}  // namespace vramd
