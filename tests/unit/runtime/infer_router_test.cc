// InferRouter::InferAsync: each way a request ends, answered exactly once: served, the backend's
// error, a lookup that finds nothing ready, a build step that fails, a version retired between
// lookup and submit (followed to its replacement, or not found when asked for by number), a
// resource-preserving gap that ends, one that outlasts the model's wait, and the manager
// stopping while the request is parked. Gaps are held open by a backend whose loads wait at a
// gate the test opens, so nothing here sleeps or depends on timing.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backends/backend.h"
#include "runtime/infer_router.h"
#include "runtime/model_manager.h"
#include "support/scratch_repository.h"

namespace vramd {
namespace {

using std::chrono::milliseconds;

// Loads of the gated backend pass while the gate is open and wait while it is closed, so a test
// holds a resource-preserving gap open (the old version gone, the new one loading) for as long
// as it needs.
class Gate {
 public:
  void Close() {
    std::lock_guard lock(mu_);
    open_ = false;
    waiting_ = 0;
  }
  void Open() {
    {
      std::lock_guard lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  // Until a load waits at the gate.
  void AwaitLoad() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return waiting_ > 0; });
  }
  // From LoadModel.
  void Pass() {
    std::unique_lock lock(mu_);
    ++waiting_;
    cv_.notify_all();
    cv_.wait(lock, [this] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;  // guarded by mu_
  int waiting_ = 0;   // loads that reached the gate since Close; guarded by mu_
};

Gate& TheGate() {
  static Gate gate;
  return gate;
}

constexpr char kBackendError[] = "the gated backend refuses a negative first element";

// OUTPUT0 = INPUT0, unless its first element is negative: then the backend's error.
class EchoInstance : public backends::BackendInstance {
 public:
  Status Execute(const InferRequest& request, std::vector<Tensor>* outputs) override {
    const Tensor& in = request.inputs[0];
    int32_t first = 0;
    if (in.data.size() >= sizeof first) std::memcpy(&first, in.data.data(), sizeof first);
    if (first < 0) return Status::Internal(kBackendError);
    outputs->push_back(Tensor{"OUTPUT0", in.datatype, in.shape, in.data});
    return Status::Ok();
  }
};

class EchoModel : public backends::BackendModel {
 public:
  Result<std::unique_ptr<backends::BackendInstance>> CreateInstance(
      const backends::InstanceContext&) override {
    return std::unique_ptr<backends::BackendInstance>(std::make_unique<EchoInstance>());
  }
};

// A config with parameter "fail_load" fails to load.
class GatedBackend : public backends::Backend {
 public:
  std::string_view name() const override { return "router_gated_test"; }
  Result<std::unique_ptr<backends::BackendModel>> LoadModel(
      const backends::ModelContext& ctx) override {
    TheGate().Pass();
    if (ctx.config->parameters().count("fail_load") > 0) {
      return Status::InvalidArgument("the test asked this load to fail");
    }
    return std::unique_ptr<backends::BackendModel>(std::make_unique<EchoModel>());
  }
};

// `version` of a model of the gated backend, reloaded with `policy`, whose requests wait at
// most `wait_ms` in a resource-preserving gap. A warmup leaves each version an execution
// estimate, so the fast path is open to its first request (and must still not be taken on
// the releasing thread).
std::string Config(int64_t version, const std::string& policy = "availability_preserving",
                   int wait_ms = 5000) {
  return "backend: \"router_gated_test\"\n"
         "input [ { name: \"INPUT0\" data_type: TYPE_INT32 dims: [ -1 ] } ]\n"
         "output [ { name: \"OUTPUT0\" data_type: TYPE_INT32 dims: [ -1 ] } ]\n"
         "instance_group [ { kind: KIND_CPU count: 1 } ]\n"
         "version_policy { specific { versions: [ " + std::to_string(version) + " ] } }\n"
         "parameters { key: \"vramd.reload_policy\" value { string_value: \"" + policy +
         "\" } }\n"
         "parameters { key: \"vramd.reload_unavailable_wait_ms\" value { string_value: \"" +
         std::to_string(wait_ms) + "\" } }\n"
         "model_warmup [ { name: \"w\" batch_size: 1 inputs { key: \"INPUT0\" value { "
         "data_type: TYPE_INT32 dims: [ 2 ] zero_data: true } } } ]\n";
}

InferRequest IntRequest(std::vector<int32_t> values) {
  InferRequest r;
  r.id = "r";
  r.inputs.push_back(Tensor{"INPUT0", DataType::kInt32, {static_cast<int64_t>(values.size())},
                            SharedBuffer::CopyOf(values.data(), values.size() * sizeof(int32_t))});
  return r;
}

// What one request got, and how: every call of its `done` and its build step is counted, so a
// test can check that each ran once (or, for the build step, not at all).
class Answers : public std::enable_shared_from_this<Answers> {
 public:
  struct Answer {
    Status status;
    int64_t version = 0;  // of the response
    std::vector<int32_t> output;
    std::thread::id thread;
  };

  runtime::InferCallback Done() {
    // Shared: a test that fails early may let go of it before a late answer comes.
    return [self = shared_from_this()](Result<runtime::InferOutcome> outcome) {
      Answer a;
      a.status = outcome.status();
      a.thread = std::this_thread::get_id();
      if (outcome.ok()) {
        a.version = outcome->response.model_version;
        const SharedBuffer& data = outcome->response.outputs.at(0).data;
        a.output.resize(data.size() / sizeof(int32_t));
        std::memcpy(a.output.data(), data.data(), data.size());
      }
      {
        std::lock_guard lock(self->mu_);
        if (self->answers_++ == 0) self->first_ = a;
      }
      self->cv_.notify_all();
    };
  }

  // A build step that makes `request`, counted, and when `during` is set runs it first (as if a
  // reload happened between the lookup and the submit).
  auto Build(InferRequest request, std::function<void()> during = nullptr) {
    return [self = shared_from_this(), request, during](
               const config::ModelConfig& config) -> Result<InferRequest> {
      {
        std::lock_guard lock(self->mu_);
        ++self->builds_;
        self->build_thread_ = std::this_thread::get_id();
        self->built_for_ = config.version_policy().specific().versions(0);
      }
      if (during) during();
      return request;
    };
  }

  // The first answer, once it came (within 10 s; else a failure and an empty status).
  Answer Await() {
    std::unique_lock lock(mu_);
    const bool came = cv_.wait_for(lock, std::chrono::seconds(10), [this] { return answers_ > 0; });
    EXPECT_TRUE(came) << "no answer";
    return first_;
  }
  int answers() const {
    std::lock_guard lock(mu_);
    return answers_;
  }
  int builds() const {
    std::lock_guard lock(mu_);
    return builds_;
  }
  std::thread::id build_thread() const {
    std::lock_guard lock(mu_);
    return build_thread_;
  }
  int64_t built_for() const {
    std::lock_guard lock(mu_);
    return built_for_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int answers_ = 0;  // guarded by mu_
  Answer first_;  // guarded by mu_
  int builds_ = 0;  // guarded by mu_
  std::thread::id build_thread_;  // guarded by mu_
  int64_t built_for_ = 0;  // the version the config named; guarded by mu_
};

class InferRouterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static backends::Backend* backend = [] {
      static GatedBackend b;
      EXPECT_TRUE(backends::RegisterBackend(&b).ok());
      return &b;
    }();
    ASSERT_NE(backend, nullptr);
    TheGate().Open();
    repo_.AddModel("m", Config(1), {"1", "2"});
  }

  // Whatever a failed test left: the gate opens (no load stays held), then the manager goes,
  // answering what it still holds.
  void TearDown() override {
    TheGate().Open();
    manager_.reset();
  }

  void Start(std::vector<std::string> models = {"m"}) {
    auto options = memory_.Options({repo_.root()});
    options.model_control_mode = runtime::ModelControlMode::kExplicit;
    options.startup_models = std::move(models);
    // How long a reload waits for requests still holding the versions it retires; a build
    // step holds none, which the test below would see by this running out.
    options.retire_timeout = milliseconds(200);
    auto manager = runtime::ModelManager::Create(options);
    ASSERT_TRUE(manager.ok()) << manager.status().ToString();
    manager_ = std::move(manager).value();
  }

  void Rewrite(const std::string& config) {
    std::ofstream(repo_.root() / "m" / "config.pbtxt") << config;
  }

  // For a build step, which runs between the lookup and the submit: a reload replacing
  // version 1 by version 2 (shutting version 1 down) while the router holds version 1.
  std::function<void()> ReloadToVersion2() {
    return [this] {
      Rewrite(Config(2));
      EXPECT_TRUE(manager_->Load("m").ok());
    };
  }

  runtime::InferRouter Router() const { return runtime::InferRouter(manager_.get()); }

  testing::ScratchRepository repo_;
  testing::TestMemory memory_;
  std::unique_ptr<runtime::ModelManager> manager_;
};

TEST_F(InferRouterTest, ServesTheReadyVersionBuildingOnceOnTheCallersThread) {
  Start();
  auto a = std::make_shared<Answers>();
  Router().InferAsync("m", 0, std::make_shared<InferRequest>(), a->Build(IntRequest({4, 5})),
                      a->Done());
  EXPECT_EQ(a->builds(), 1);
  EXPECT_EQ(a->build_thread(), std::this_thread::get_id());
  EXPECT_EQ(a->built_for(), 1);
  Answers::Answer got = a->Await();
  EXPECT_TRUE(got.status.ok()) << got.status.ToString();
  EXPECT_EQ(got.version, 1);
  EXPECT_EQ(got.output, (std::vector<int32_t>{4, 5}));
  manager_.reset();
  EXPECT_EQ(a->answers(), 1);
}

TEST_F(InferRouterTest, ARequestAlreadyMadeNeedsNoBuildStep) {
  Start();
  auto a = std::make_shared<Answers>();
  auto request = std::make_shared<InferRequest>(IntRequest({7}));
  Router().InferAsync("m", 1, request, a->Done());
  Answers::Answer got = a->Await();
  EXPECT_TRUE(got.status.ok()) << got.status.ToString();
  EXPECT_EQ(got.output, (std::vector<int32_t>{7}));
  EXPECT_EQ(request->model_name, "m");
  EXPECT_EQ(request->model_version, 1);
  manager_.reset();
  EXPECT_EQ(a->answers(), 1);
}

TEST_F(InferRouterTest, TheBackendsErrorIsAnsweredOnceNamingTheVersion) {
  Start();
  auto a = std::make_shared<Answers>();
  Router().InferAsync("m", 0, std::make_shared<InferRequest>(), a->Build(IntRequest({-1, 2})),
                      a->Done());
  Answers::Answer got = a->Await();
  EXPECT_EQ(got.status.code(), StatusCode::kInternal) << got.status.ToString();
  EXPECT_NE(got.status.message().find(kBackendError), std::string::npos) << got.status.message();
  EXPECT_NE(got.status.message().find("'m'"), std::string::npos) << got.status.message();
  manager_.reset();
  EXPECT_EQ(a->answers(), 1);
}

TEST_F(InferRouterTest, AnInvalidRequestIsAnsweredOnceByTheVersionsValidation) {
  Start();
  auto a = std::make_shared<Answers>();
  InferRequest wrong = IntRequest({1});
  wrong.inputs[0].name = "NOT_AN_INPUT";
  Router().InferAsync("m", 0, std::make_shared<InferRequest>(), a->Build(wrong), a->Done());
  EXPECT_EQ(a->Await().status.code(), StatusCode::kInvalidArgument);
  manager_.reset();
  EXPECT_EQ(a->answers(), 1);
}

TEST_F(InferRouterTest, ALookupThatFindsNothingReadyAnswersOnceAndBuildsNothing) {
  repo_.AddModel("broken", Config(1) + "parameters { key: \"fail_load\" value { string_value: "
                                       "\"yes\" } }\n",
                 {"1"});
  Start({"m", "broken"});
  auto unknown = std::make_shared<Answers>();
  auto no_version = std::make_shared<Answers>();
  auto failed = std::make_shared<Answers>();
  Router().InferAsync("nope", 0, std::make_shared<InferRequest>(), unknown->Build(IntRequest({1})),
                      unknown->Done());
  Router().InferAsync("m", 9, std::make_shared<InferRequest>(),
                      no_version->Build(IntRequest({1})), no_version->Done());
  Router().InferAsync("broken", 0, std::make_shared<InferRequest>(),
                      failed->Build(IntRequest({1})), failed->Done());
  EXPECT_EQ(unknown->Await().status.code(), StatusCode::kNotFound);
  EXPECT_EQ(no_version->Await().status.code(), StatusCode::kNotFound);
  Answers::Answer got = failed->Await();
  EXPECT_EQ(got.status.code(), StatusCode::kUnavailable) << got.status.ToString();
  EXPECT_NE(got.status.message().find("no ready version"), std::string::npos)
      << got.status.message();
  manager_.reset();
  for (const auto& a : {unknown, no_version, failed}) {
    EXPECT_EQ(a->answers(), 1);
    EXPECT_EQ(a->builds(), 0);
  }
}

TEST_F(InferRouterTest, ABuildErrorIsAnsweredOnceAndNothingIsSubmitted) {
  Start();
  auto version = manager_->Find("m", 0);
  ASSERT_TRUE(version.ok());
  const auto before = (*version)->statistics().Snapshot();
  auto a = std::make_shared<Answers>();
  Router().InferAsync(
      "m", 0, std::make_shared<InferRequest>(),
      [](const config::ModelConfig&) -> Result<InferRequest> {
        return Status::InvalidArgument("the body does not parse");
      },
      a->Done());
  Answers::Answer got = a->Await();
  EXPECT_EQ(got.status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(got.status.message(), "the body does not parse");
  const auto after = (*version)->statistics().Snapshot();
  EXPECT_EQ(after.success.count, before.success.count);  // nothing was submitted
  EXPECT_EQ(after.fail.count, before.fail.count);
  version = Status::NotFound("dropped");
  manager_.reset();
  EXPECT_EQ(a->answers(), 1);
}

TEST_F(InferRouterTest, AVersionRetiredBetweenLookupAndSubmitSendsTheRequestToItsReplacement) {
  Start();
  auto a = std::make_shared<Answers>();
  Router().InferAsync("m", 0, std::make_shared<InferRequest>(),
                      a->Build(IntRequest({3}), ReloadToVersion2()), a->Done());
  Answers::Answer got = a->Await();
  EXPECT_TRUE(got.status.ok()) << got.status.ToString();
  EXPECT_EQ(got.version, 2);
  EXPECT_EQ(got.output, (std::vector<int32_t>{3}));
  EXPECT_EQ(a->builds(), 1);  // built for version 1, not again for its replacement
  EXPECT_EQ(a->built_for(), 1);
  manager_.reset();
  EXPECT_EQ(a->answers(), 1);
}

// A build step may parse a large body; the version is not held meanwhile, so a reload that
// retires it finishes destroying it without waiting for the parse to end.
TEST_F(InferRouterTest, AReloadDuringTheBuildStepDoesNotWaitForIt) {
  Start();
  std::weak_ptr<runtime::LoadedModel> version1;
  {
    auto found = manager_->Find("m", 1);
    ASSERT_TRUE(found.ok()) << found.status().ToString();
    version1 = *found;
  }
  bool destroyed_when_reloaded = false;
  auto a = std::make_shared<Answers>();
  Router().InferAsync("m", 0, std::make_shared<InferRequest>(),
                      a->Build(IntRequest({6}),
                               [&] {
                                 ReloadToVersion2()();
                                 destroyed_when_reloaded = version1.expired();
                               }),
                      a->Done());
  Answers::Answer got = a->Await();
  EXPECT_TRUE(destroyed_when_reloaded)
      << "the reload returned with version 1 still held by the request being built";
  EXPECT_TRUE(got.status.ok()) << got.status.ToString();
  EXPECT_EQ(got.version, 2);
  EXPECT_EQ(got.output, (std::vector<int32_t>{6}));
  manager_.reset();
  EXPECT_EQ(a->answers(), 1);
}

TEST_F(InferRouterTest, AVersionAskedForByNumberAndRetiredMidFlightIsNotFound) {
  Start();
  auto a = std::make_shared<Answers>();
  Router().InferAsync("m", 1, std::make_shared<InferRequest>(),
                      a->Build(IntRequest({3}), ReloadToVersion2()), a->Done());
  Answers::Answer got = a->Await();
  EXPECT_EQ(got.status.code(), StatusCode::kNotFound) << got.status.ToString();
  EXPECT_NE(got.status.message().find("version 1"), std::string::npos) << got.status.message();
  manager_.reset();
  EXPECT_EQ(a->answers(), 1);
}

class InferRouterGapTest : public InferRouterTest {
 protected:
  // A resource-preserving reload to version 2 whose load waits at the gate: once this returns,
  // nothing serves "m" until the test opens the gate.
  void OpenGap(int wait_ms) {
    Rewrite(Config(2, "resource_preserving", wait_ms));
    TheGate().Close();
    reload_ = std::async(std::launch::async, [this] { return manager_->Load("m"); });
    TheGate().AwaitLoad();
  }
  // Lets the reload finish; it must succeed.
  void CloseGap() {
    TheGate().Open();
    ASSERT_TRUE(reload_.get().ok());
  }
  // A test that failed with the gap open: the reload ends before the manager goes.
  void TearDown() override {
    TheGate().Open();
    if (reload_.valid()) reload_.wait();
    InferRouterTest::TearDown();
  }

  std::future<Status> reload_;
};

TEST_F(InferRouterGapTest, ARequestParkedInAGapIsServedByTheNewVersionOffTheReleasingThread) {
  Start();
  OpenGap(5000);
  auto a = std::make_shared<Answers>();
  // A router that is gone before the answer comes: what it started refers to the manager only.
  runtime::InferRouter(manager_.get())
      .InferAsync("m", 0, std::make_shared<InferRequest>(), a->Build(IntRequest({6})), a->Done());
  EXPECT_EQ(a->answers(), 0) << "answered while nothing serves";
  EXPECT_EQ(a->builds(), 0) << "built while nothing serves";
  CloseGap();
  Answers::Answer got = a->Await();
  EXPECT_TRUE(got.status.ok()) << got.status.ToString();
  EXPECT_EQ(got.version, 2);
  EXPECT_EQ(got.output, (std::vector<int32_t>{6}));
  EXPECT_EQ(a->builds(), 1);
  EXPECT_EQ(a->built_for(), 2);
  // Built on the releasing thread, and run on an instance thread, not inline there.
  EXPECT_NE(a->build_thread(), std::this_thread::get_id());
  EXPECT_NE(got.thread, a->build_thread());
  manager_.reset();
  EXPECT_EQ(a->answers(), 1);
}

TEST_F(InferRouterGapTest, AGapLongerThanTheWaitAnswersUnavailableOnceAndBuildsNothing) {
  Start();
  OpenGap(50);
  auto a = std::make_shared<Answers>();
  Router().InferAsync("m", 0, std::make_shared<InferRequest>(), a->Build(IntRequest({6})),
                      a->Done());
  Answers::Answer got = a->Await();  // the gate stays closed: only the wait can end it
  EXPECT_EQ(got.status.code(), StatusCode::kUnavailable);
  EXPECT_NE(got.status.message().find("a resource-preserving reload is in progress and it was "
                                      "not ready within 50 ms"),
            std::string::npos)
      << got.status.message();
  CloseGap();
  manager_.reset();
  EXPECT_EQ(a->answers(), 1);
  EXPECT_EQ(a->builds(), 0);
}

TEST_F(InferRouterGapTest, AManagerStoppingWhileARequestIsParkedAnswersItOnce) {
  Start();
  OpenGap(5000);
  auto a = std::make_shared<Answers>();
  Router().InferAsync("m", 0, std::make_shared<InferRequest>(), a->Build(IntRequest({6})),
                      a->Done());
  manager_->TEST_StopReleasingParked();  // what destruction does first
  Answers::Answer got = a->Await();
  EXPECT_EQ(got.status.code(), StatusCode::kUnavailable);
  EXPECT_EQ(got.status.message(), "the server is shutting down");
  CloseGap();  // the gap ending later answers nothing more
  manager_.reset();
  EXPECT_EQ(a->answers(), 1);
  EXPECT_EQ(a->builds(), 0);
}

}  // namespace
}  // namespace vramd
