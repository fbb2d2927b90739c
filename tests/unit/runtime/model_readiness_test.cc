// The runtime's side of backend readiness and auto-complete: ReadinessProbe's rules (every
// instance asked, one round at a time, a question during a round waits for it, no answer in
// time is "not ready"), LoadedModel::CheckReady over a backend that checks readiness, and the
// manager auto-completing config.pbtxt before validating it (and not, when told not to).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backends/backend.h"
#include "runtime/readiness_probe.h"
#include "support/config_text.h"
#include "support/manager_fixture.h"

namespace vramd::runtime {
namespace {

using ::testing::HasSubstr;

// A gate a test opens: rounds that wait on it block until then.
class Gate {
 public:
  void Wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return open_; });
  }
  void Open() {
    {
      std::lock_guard lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

TEST(ReadinessProbeTest, AnswersWithTheRoundsVerdict) {
  std::atomic<int> rounds{0};
  Status verdict = Status::Ok();
  std::mutex mu;
  ReadinessProbe probe([&] {
    ++rounds;
    std::lock_guard lock(mu);
    return verdict;
  });
  EXPECT_TRUE(probe.Check().ok());
  {
    std::lock_guard lock(mu);
    verdict = Status::Unavailable("cold cache");
  }
  Status not_ready = probe.Check();
  EXPECT_EQ(not_ready.code(), StatusCode::kUnavailable);
  EXPECT_EQ(not_ready.message(), "cold cache");
  EXPECT_EQ(rounds.load(), 2) << "each question after a finished round asks again";
}

TEST(ReadinessProbeTest, NoAnswerInTimeIsNotReadyAndQuestionsShareTheRoundInFlight) {
  Gate gate;
  std::atomic<int> rounds{0};
  ReadinessProbe probe([&] {
    ++rounds;
    gate.Wait();
    return Status::Ok();
  });
  const auto start = std::chrono::steady_clock::now();
  Status late = probe.Check(std::chrono::milliseconds(100));
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(late.code(), StatusCode::kUnavailable);
  EXPECT_THAT(late.message(), HasSubstr("within 100 ms"));
  EXPECT_GE(waited, std::chrono::milliseconds(100));
  EXPECT_LT(waited, std::chrono::seconds(3)) << "the caller is not held by the backend";

  // Questions while the round hangs wait for that round: the backend is not asked again.
  auto a = std::async(std::launch::async, [&] { return probe.Check(std::chrono::seconds(10)); });
  auto b = std::async(std::launch::async, [&] { return probe.Check(std::chrono::seconds(10)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let both start waiting
  gate.Open();
  EXPECT_TRUE(a.get().ok());
  EXPECT_TRUE(b.get().ok());
  EXPECT_EQ(rounds.load(), 1);
}

TEST(ReadinessProbeTest, TheDestructorWaitsForTheRoundInFlight) {
  Gate gate;
  std::atomic<bool> returned{false};
  auto probe = std::make_unique<ReadinessProbe>([&] {
    gate.Wait();
    returned = true;
    return Status::Ok();
  });
  EXPECT_FALSE(probe->Check(std::chrono::milliseconds(20)).ok());
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    gate.Open();
  });
  probe.reset();
  EXPECT_TRUE(returned.load());
  opener.join();
}

// ---- backends registered for the manager tests below ---------------------------------------

std::atomic<int> g_not_ready_instance{-1};  // the instance index that says "not ready"
std::atomic<int> g_asked{0};

class ProbedInstance : public backends::BackendInstance {
 public:
  explicit ProbedInstance(int index) : index_(index) {}
  Status Execute(const InferRequest&, std::vector<Tensor>*) override { return Status::Ok(); }
  Status Ready() override {
    ++g_asked;
    if (g_not_ready_instance.load() == index_) return Status::Unavailable("loading a cache");
    return Status::Ok();
  }

 private:
  const int index_;
};

class ProbedModel : public backends::BackendModel {
 public:
  Result<std::unique_ptr<backends::BackendInstance>> CreateInstance(
      const backends::InstanceContext& ctx) override {
    return std::unique_ptr<backends::BackendInstance>(std::make_unique<ProbedInstance>(ctx.index));
  }
};

class ProbedBackend : public backends::Backend {
 public:
  std::string_view name() const override { return "readiness_probe_test"; }
  bool ChecksReadiness() const override { return true; }
  Result<std::unique_ptr<backends::BackendModel>> LoadModel(const backends::ModelContext&) override {
    return std::unique_ptr<backends::BackendModel>(std::make_unique<ProbedModel>());
  }
};

// Completes a config that lists no inputs: INPUT0/OUTPUT0, max_batch_size 4, dynamic batching.
// A config parameter "fail_auto_complete" makes it fail.
std::atomic<int64_t> g_completed_version{-1};

class CompletingBackend : public backends::Backend {
 public:
  std::string_view name() const override { return "auto_complete_test"; }
  Status AutoCompleteConfig(const std::filesystem::path&, int64_t version,
                            config::ModelConfig* config) override {
    g_completed_version = version;
    if (config->parameters().count("fail_auto_complete") > 0) {
      return Status::InvalidArgument("model.py says no");
    }
    if (config->input_size() == 0) {
      auto* in = config->add_input();
      in->set_name("INPUT0");
      in->set_data_type(config::TYPE_INT32);
      in->add_dims(-1);
      auto* out = config->add_output();
      out->set_name("OUTPUT0");
      out->set_data_type(config::TYPE_INT32);
      out->add_dims(-1);
    }
    config->set_max_batch_size(4);
    config->mutable_dynamic_batching();
    return Status::Ok();
  }
  Result<std::unique_ptr<backends::BackendModel>> LoadModel(const backends::ModelContext&) override {
    return std::unique_ptr<backends::BackendModel>(std::make_unique<ProbedModel>());
  }
};

void RegisterTestBackends() {
  static ProbedBackend probed;
  static CompletingBackend completing;
  static bool registered =
      backends::RegisterBackend(&probed).ok() && backends::RegisterBackend(&completing).ok();
  ASSERT_TRUE(registered);
}

class ModelReadinessTest : public testing::ManagerTest {
 protected:
  void SetUp() override { RegisterTestBackends(); }
};

TEST_F(ModelReadinessTest, AVersionIsReadyWhenEveryInstanceIs) {
  WriteModel("probed", testing::Int32ModelConfig("readiness_probe_test", 3));
  WriteModel("plain", testing::Int32ModelConfig("identity", 1));
  auto manager = StartManager(ManagerOptions());
  ASSERT_NE(manager, nullptr);
  auto probed = manager->Find("probed", 0);
  ASSERT_TRUE(probed.ok()) << probed.status().ToString();
  EXPECT_TRUE((*probed)->ChecksReadiness());

  g_not_ready_instance = -1;
  g_asked = 0;
  EXPECT_TRUE((*probed)->CheckReady().ok());
  EXPECT_EQ(g_asked.load(), 3) << "every instance is asked";

  g_not_ready_instance = 1;
  g_asked = 0;
  Status not_ready = (*probed)->CheckReady();
  EXPECT_EQ(not_ready.code(), StatusCode::kUnavailable);
  EXPECT_THAT(not_ready.message(), HasSubstr("model 'probed' version 1 is not ready"));
  EXPECT_THAT(not_ready.message(), HasSubstr("loading a cache"));
  EXPECT_EQ(g_asked.load(), 2) << "the first instance that is not ready decides";
  g_not_ready_instance = -1;

  auto plain = manager->Find("plain", 0);
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE((*plain)->ChecksReadiness()) << "a backend without readiness starts no probe";
  EXPECT_TRUE((*plain)->CheckReady().ok());
}

TEST_F(ModelReadinessTest, ConfigPbtxtIsAutoCompletedBeforeItIsValidated) {
  repo_.AddModel("completed", "backend: \"auto_complete_test\"\n", {"1", "3"});
  g_completed_version = -1;
  auto manager = StartManager(ManagerOptions());
  ASSERT_NE(manager, nullptr);
  EXPECT_EQ(g_completed_version.load(), 3) << "the highest version the policy selects";
  auto config = manager->FindConfig("completed");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ((*config)->name(), "completed");
  EXPECT_EQ((*config)->max_batch_size(), 4);
  ASSERT_EQ((*config)->input_size(), 1);
  EXPECT_EQ((*config)->input(0).name(), "INPUT0");
  EXPECT_TRUE((*config)->has_dynamic_batching());
  EXPECT_TRUE(manager->Find("completed", 3).ok());
}

TEST_F(ModelReadinessTest, DisabledAutoCompleteTakesTheConfigAsWritten) {
  repo_.AddModel("as_written", "backend: \"auto_complete_test\"\n", {"1"});
  g_completed_version = -1;
  auto options = ManagerOptions();
  options.auto_complete_config = false;
  auto manager = StartManager(options);
  ASSERT_NE(manager, nullptr);
  EXPECT_EQ(g_completed_version.load(), -1) << "the backend was not asked";
  auto config = manager->FindConfig("as_written");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ((*config)->input_size(), 0);
  EXPECT_EQ((*config)->max_batch_size(), 0);
  EXPECT_FALSE((*config)->has_dynamic_batching());
}

TEST_F(ModelReadinessTest, AFailedAutoCompleteFailsThatModelsLoadNamingIt) {
  repo_.AddModel("refused",
                 "backend: \"auto_complete_test\"\n"
                 "parameters { key: \"fail_auto_complete\" value { string_value: \"1\" } }\n",
                 {"1"});
  WriteModel("fine", testing::Int32ModelConfig("identity", 1));
  auto manager = StartManager(ManagerOptions());
  ASSERT_NE(manager, nullptr);
  EXPECT_TRUE(manager->Find("fine", 0).ok()) << "the other models still load";
  auto lifecycle = manager->Lifecycle("refused");
  ASSERT_TRUE(lifecycle.has_value());
  EXPECT_EQ(lifecycle->state, LifecycleState::kFailed);
  EXPECT_THAT(lifecycle->reason, HasSubstr("model 'refused': auto-completing its config"));
  EXPECT_THAT(lifecycle->reason, HasSubstr("model.py says no"));
}

}  // namespace
}  // namespace vramd::runtime
