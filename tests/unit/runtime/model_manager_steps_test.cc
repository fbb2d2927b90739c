// The manager's lifecycle steps, where they wait and who destroys a version:
//   - a refused lifecycle transition is logged, once and on one line, with the model, the
//     versions, both states and the reason (ModelLifecycle::TransitionOrLog);
//   - an Unload (and the manager's destructor) waits for a version a request still holds: it
//     does not return while the reference is held, and when it returns the version's
//     destruction has run;
//   - a version whose last reference drops on one of its own instance threads is destroyed by
//     the VersionReaper, on neither that thread nor the caller's, and the reaper's thread is
//     joined: the process has no more threads afterwards than before.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backends/backend.h"
#include "config/model_config_parser.h"
#include "runtime/loaded_model.h"
#include "runtime/model_lifecycle.h"
#include "runtime/model_manager.h"
#include "support/captured_log.h"
#include "support/reload_harness.h"
#include "support/scratch_repository.h"

namespace vramd {
namespace {

using namespace std::chrono_literals;
using runtime::LifecycleState;

using testing::CapturedLog;

TEST(TransitionOrLogTest, LogsARefusalWithModelVersionsAndBothStates) {
  CapturedLog log;
  runtime::ModelLifecycle life;
  const std::vector<int64_t> versions = {1, 3};
  EXPECT_FALSE(life.TransitionOrLog("bad\nname", versions, LifecycleState::kReady, "warmed up"));
  EXPECT_EQ(life.state(), LifecycleState::kUnloaded) << "a refused move changes nothing";
  EXPECT_TRUE(life.history().empty());
  EXPECT_EQ(log.text(),
            "error model 'bad\\nname' version(s) 1,3: lifecycle transition from unloaded to "
            "ready refused (reason 'warmed up'); it stays unloaded\n");
}

TEST(TransitionOrLogTest, AnAllowedMoveLogsNothing) {
  CapturedLog log;
  runtime::ModelLifecycle life;
  EXPECT_TRUE(life.TransitionOrLog("m", {}, LifecycleState::kLoading, "loading"));
  EXPECT_EQ(life.state(), LifecycleState::kLoading);
  EXPECT_FALSE(life.TransitionOrLog("m", {}, LifecycleState::kUnloading));
  EXPECT_EQ(log.text(),
            "error model 'm': lifecycle transition from loading to unloading refused (reason "
            "''); it stays loading\n")
      << "a model's own action names no version";
}

// A backend whose model notes when (and on which thread) its destruction ran.
struct Destruction {
  std::mutex mu;
  int destroyed = 0;  // guarded by mu
  std::thread::id thread;  // guarded by mu
};
Destruction destruction;

class EchoInstance : public backends::BackendInstance {
 public:
  Status Execute(const InferRequest& request, std::vector<Tensor>* outputs) override {
    const Tensor& in = request.inputs[0];
    outputs->push_back(Tensor{"OUTPUT0", in.datatype, in.shape, in.data});
    return Status::Ok();
  }
};

class NotingModel : public backends::BackendModel {
 public:
  ~NotingModel() override {
    std::lock_guard lock(destruction.mu);
    ++destruction.destroyed;
    destruction.thread = std::this_thread::get_id();
  }
  Result<std::unique_ptr<backends::BackendInstance>> CreateInstance(
      const backends::InstanceContext&) override {
    return std::unique_ptr<backends::BackendInstance>(std::make_unique<EchoInstance>());
  }
};

class NotingBackend : public backends::Backend {
 public:
  std::string_view name() const override { return "steps_noting_test"; }
  Result<std::unique_ptr<backends::BackendModel>> LoadModel(
      const backends::ModelContext&) override {
    return std::unique_ptr<backends::BackendModel>(std::make_unique<NotingModel>());
  }
};

void RegisterNotingBackend() {
  static NotingBackend backend;
  static bool registered = backends::RegisterBackend(&backend).ok();
  ASSERT_TRUE(registered);
}

constexpr char kConfig[] =
    "backend: \"steps_noting_test\"\n"
    "input [ { name: \"INPUT0\" data_type: TYPE_INT32 dims: [ -1 ] } ]\n"
    "output [ { name: \"OUTPUT0\" data_type: TYPE_INT32 dims: [ -1 ] } ]\n"
    "instance_group [ { kind: KIND_CPU count: 1 } ]\n";

int DestroyedCount() {
  std::lock_guard lock(destruction.mu);
  return destruction.destroyed;
}

std::shared_ptr<InferRequest> Request() {
  auto r = std::make_shared<InferRequest>();
  const int32_t v[2] = {4, 5};
  r->inputs.push_back(
      Tensor{"INPUT0", DataType::kInt32, Shape{2}, SharedBuffer::CopyOf(v, sizeof(v))});
  return r;
}

class ManagerWaitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RegisterNotingBackend();
    repo_.AddModel("m", kConfig, {"1"});
    auto o = memory_.Options({repo_.root()});
    o.model_control_mode = runtime::ModelControlMode::kExplicit;
    auto manager = runtime::ModelManager::Create(o);
    ASSERT_TRUE(manager.ok()) << manager.status().ToString();
    manager_ = std::move(manager).value();
    ASSERT_TRUE(manager_->Load("m").ok());
  }

  bool InState(LifecycleState state) const {
    auto life = manager_->Lifecycle("m");
    return life && life->state == state;
  }

  testing::ScratchRepository repo_;
  testing::TestMemory memory_;
  std::unique_ptr<runtime::ModelManager> manager_;
};

TEST_F(ManagerWaitsTest, UnloadReturnsOnlyOnceTheHeldVersionIsDestroyed) {
  auto held = manager_->Find("m", 0);
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  const int before = DestroyedCount();
  std::atomic<int> destroyed_at_return{-1};
  auto unloaded = std::async(std::launch::async, [&] {
    Status s = manager_->Unload("m");
    destroyed_at_return = DestroyedCount() - before;
    return s;
  });
  // The unload is waiting for the version once the model is unloading (or, wrongly, done).
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!InState(LifecycleState::kUnloading) &&
         unloaded.wait_for(1ms) != std::future_status::ready) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the model never went unloading";
  }
  EXPECT_NE(unloaded.wait_for(0s), std::future_status::ready)
      << "Unload returned while a request still held the version";
  held = Status::Internal("dropped");  // the last reference
  ASSERT_EQ(unloaded.wait_for(30s), std::future_status::ready) << "Unload never returned";
  EXPECT_TRUE(unloaded.get().ok());
  EXPECT_EQ(destroyed_at_return.load(), 1) << "Unload returned before the destruction ran";
  EXPECT_EQ(manager_->Lifecycle("m")->state, LifecycleState::kUnloaded);
}

TEST_F(ManagerWaitsTest, DestructorReturnsOnlyOnceTheHeldVersionIsDestroyed) {
  auto held = manager_->Find("m", 0);
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  const int before = DestroyedCount();
  std::atomic<int> destroyed_at_return{-1};
  auto gone = std::async(std::launch::async, [&] {
    manager_.reset();
    destroyed_at_return = DestroyedCount() - before;
  });
  EXPECT_NE(gone.wait_for(100ms), std::future_status::ready)
      << "the manager was destroyed while a request still held a version";
  held = Status::Internal("dropped");
  ASSERT_EQ(gone.wait_for(30s), std::future_status::ready) << "the destructor never returned";
  EXPECT_EQ(destroyed_at_return.load(), 1);
}

// The last reference is an outcome dropped in its callback, on the version's instance thread:
// the reaper destroys the version, on its own thread, and is joined when it goes.
TEST(VersionReaperTest, DestroysAVersionReleasedOnItsOwnInstanceThread) {
  RegisterNotingBackend();
  memory::Ledger ledger;
  memory::Allocator allocator{&ledger};
  const size_t threads_before = testing::ThreadCount();
  {
    auto reaper = std::make_unique<runtime::VersionReaper>();
    memory::ScopedOwner owner(&ledger, memory::kNoOwner, memory::OwnerKind::kModel, "m");
    auto parsed = config::ParseModelConfigText(kConfig, "config.pbtxt");
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    auto config = std::make_shared<config::ModelConfig>(parsed->config);
    ASSERT_TRUE(config::ValidateAndNormalize(config.get(), "m").ok());
    auto loaded = runtime::LoadedModel::Load(config, "/nonexistent/m", 1,
                                             {&ledger, &allocator, nullptr}, owner.id());
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    std::shared_ptr<runtime::LoadedModel> model = std::move(loaded).value();
    model->HoldVersionInOutcomes(reaper.get());
    std::shared_future<void> destroyed = model->destroyed();
    const int before = DestroyedCount();

    std::promise<std::thread::id> entered;  // the callback runs, holding the outcome
    std::promise<void> released;            // the test let go of its reference
    std::shared_future<void> released_seen = released.get_future().share();
    // A new version's first execution runs on an instance thread (scheduler.h).
    model->InferAsync(Request(), [&entered, released_seen](Result<runtime::InferOutcome> got) {
      Result<runtime::InferOutcome> outcome = std::move(got);
      const bool holds = outcome.ok() && outcome->version_hold != nullptr;
      entered.set_value(holds ? std::this_thread::get_id() : std::thread::id());
      released_seen.wait();
    });  // `outcome`, the last reference, goes here, on the instance thread
    const std::thread::id instance_thread = entered.get_future().get();
    ASSERT_NE(instance_thread, std::thread::id()) << "the outcome does not hold its version";
    model.reset();
    EXPECT_NE(destroyed.wait_for(0s), std::future_status::ready)
        << "destroyed while an outcome still held it";
    released.set_value();
    ASSERT_EQ(destroyed.wait_for(30s), std::future_status::ready) << "never destroyed";
    EXPECT_EQ(DestroyedCount() - before, 1);
    {
      std::lock_guard lock(destruction.mu);
      EXPECT_NE(destruction.thread, instance_thread);
      EXPECT_NE(destruction.thread, std::this_thread::get_id());
    }
    reaper.reset();  // joins its thread
  }
  EXPECT_LE(testing::ThreadCountSettledAtMost(threads_before), threads_before)
      << "a thread outlived the version and its reaper";
}

}  // namespace
}  // namespace vramd
