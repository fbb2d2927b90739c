// How ModelManager runs actions concurrently: different models load in parallel, at most
// --model-load-thread-count at a time; actions on one model are serialized, so its load and
// unload hooks (BackendLoad, the backend model's destructor) never overlap, even when loads and
// unloads of it are requested from many threads at once.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backends/backend.h"
#include "runtime/model_manager.h"
#include "support/scratch_repository.h"

namespace vramd {
namespace {

using Clock = std::chrono::steady_clock;

// Counts the hooks running now, per model and in all, and the most seen at once.
struct HookTracker {
  std::mutex mu;
  std::map<std::string, int> active;       // by model
  std::map<std::string, int> max_active;   // by model
  int loads_now = 0;
  int max_loads = 0;
  std::atomic<int> loads{0};
  std::atomic<int> unloads{0};

  void Enter(const std::string& model, bool load) {
    std::lock_guard lock(mu);
    max_active[model] = std::max(max_active[model], ++active[model]);
    if (load) max_loads = std::max(max_loads, ++loads_now);
  }
  void Exit(const std::string& model, bool load) {
    std::lock_guard lock(mu);
    --active[model];
    if (load) --loads_now;
  }
  void Reset() {
    std::lock_guard lock(mu);
    active.clear();
    max_active.clear();
    loads_now = max_loads = 0;
    loads = unloads = 0;
  }
};

HookTracker& Tracker() {
  static HookTracker tracker;
  return tracker;
}

constexpr auto kHookTime = std::chrono::milliseconds(150);

class TrackedInstance : public backends::BackendInstance {
 public:
  Status Execute(const InferRequest& request, std::vector<Tensor>* outputs) override {
    const Tensor& in = request.inputs[0];
    outputs->push_back(Tensor{"OUTPUT0", in.datatype, in.shape, in.data});
    return Status::Ok();
  }
};

class TrackedModel : public backends::BackendModel {
 public:
  explicit TrackedModel(std::string name) : name_(std::move(name)) {}
  // The unload hook: as slow as a load, so an overlap would be seen.
  ~TrackedModel() override {
    Tracker().Enter(name_, false);
    std::this_thread::sleep_for(kHookTime / 3);
    ++Tracker().unloads;
    Tracker().Exit(name_, false);
  }
  Result<std::unique_ptr<backends::BackendInstance>> CreateInstance(
      const backends::InstanceContext&) override {
    return std::unique_ptr<backends::BackendInstance>(std::make_unique<TrackedInstance>());
  }

 private:
  std::string name_;
};

class TrackedBackend : public backends::Backend {
 public:
  std::string_view name() const override { return "hook_tracking_test"; }
  Result<std::unique_ptr<backends::BackendModel>> LoadModel(
      const backends::ModelContext& ctx) override {
    Tracker().Enter(ctx.name, true);
    std::this_thread::sleep_for(kHookTime);
    ++Tracker().loads;
    Tracker().Exit(ctx.name, true);
    return std::unique_ptr<backends::BackendModel>(std::make_unique<TrackedModel>(ctx.name));
  }
};

const char* kConfig =
    "backend: \"hook_tracking_test\"\n"
    "input [ { name: \"INPUT0\" data_type: TYPE_INT32 dims: [ -1 ] } ]\n"
    "output [ { name: \"OUTPUT0\" data_type: TYPE_INT32 dims: [ -1 ] } ]\n"
    "instance_group [ { kind: KIND_CPU count: 1 } ]\n";

class ModelLoadConcurrencyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static TrackedBackend backend;
    static const bool registered = backends::RegisterBackend(&backend).ok();
    ASSERT_TRUE(registered);
    Tracker().Reset();
    for (const char* m : {"m0", "m1", "m2", "m3"}) repo_.AddModel(m, kConfig, {"1"});
  }

  std::unique_ptr<runtime::ModelManager> Start(runtime::ModelControlMode mode, int threads,
                                               std::vector<std::string> startup = {}) {
    auto o = memory_.Options({repo_.root()});
    o.model_control_mode = mode;
    o.startup_models = std::move(startup);
    o.load_thread_count = threads;
    auto manager = runtime::ModelManager::Create(o);
    EXPECT_TRUE(manager.ok()) << manager.status().ToString();
    return manager.ok() ? std::move(manager).value() : nullptr;
  }

  testing::ScratchRepository repo_;
  testing::TestMemory memory_;
};

TEST_F(ModelLoadConcurrencyTest, StartupLoadsModelsInParallelUpToTheThreadCount) {
  const auto start = Clock::now();
  auto manager = Start(runtime::ModelControlMode::kNone, 4);
  ASSERT_NE(manager, nullptr);
  const auto elapsed = Clock::now() - start;
  EXPECT_EQ(Tracker().loads.load(), 4);
  EXPECT_GE(Tracker().max_loads, 2) << "four models, four load threads: loads overlap";
  // One after another would take 4 x 150 ms.
  EXPECT_LT(elapsed, kHookTime * 4 - kHookTime / 2);
  for (const char* m : {"m0", "m1", "m2", "m3"}) EXPECT_TRUE(manager->Find(m, 0).ok()) << m;
}

TEST_F(ModelLoadConcurrencyTest, OneLoadThreadLoadsOneModelAtATime) {
  auto manager = Start(runtime::ModelControlMode::kNone, 1);
  ASSERT_NE(manager, nullptr);
  EXPECT_EQ(Tracker().loads.load(), 4);
  EXPECT_EQ(Tracker().max_loads, 1);
}

TEST_F(ModelLoadConcurrencyTest, ConcurrentLoadRequestsAreBoundedByTheThreadCount) {
  auto manager = Start(runtime::ModelControlMode::kExplicit, 2);
  ASSERT_NE(manager, nullptr);
  std::vector<std::thread> callers;
  std::atomic<int> failures{0};
  for (const char* m : {"m0", "m1", "m2", "m3"}) {
    callers.emplace_back([&, m] { failures += manager->Load(m).ok() ? 0 : 1; });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(Tracker().loads.load(), 4);
  EXPECT_EQ(Tracker().max_loads, 2);
}

TEST_F(ModelLoadConcurrencyTest, ActionsOnOneModelNeverOverlapItsHooks) {
  auto manager = Start(runtime::ModelControlMode::kExplicit, 4, {"m0"});
  ASSERT_NE(manager, nullptr);
  std::vector<std::thread> callers;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&, t] {
      for (int i = 0; i < 3; ++i) {
        const bool load = (t + i) % 3 != 0;
        failures += (load ? manager->Load("m0") : manager->Unload("m0")).ok() ? 0 : 1;
      }
    });
  }
  // Meanwhile another model loads beside it.
  callers.emplace_back([&] { failures += manager->Load("m1").ok() ? 0 : 1; });
  for (auto& t : callers) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(Tracker().max_active["m0"], 1) << "a load and an unload hook of m0 overlapped";
  EXPECT_GE(Tracker().loads.load(), 9);  // the start-up load, then the 8 loads asked for
  // The history shows only moves the lifecycle allows, ending where the last action left it.
  auto life = manager->Lifecycle("m0");
  ASSERT_TRUE(life.has_value());
  for (const auto& t : life->history) {
    EXPECT_TRUE(runtime::ModelLifecycle::Allowed(t.from, t.to))
        << runtime::LifecycleStateName(t.from) << " -> " << runtime::LifecycleStateName(t.to);
  }
  EXPECT_TRUE(life->state == runtime::LifecycleState::kReady ||
              life->state == runtime::LifecycleState::kUnloaded);
}

}  // namespace
}  // namespace vramd
