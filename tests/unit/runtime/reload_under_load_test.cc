// Hot reload under continuous load. A CPU mlp model has two versions with different weights;
// four client threads send requests back to back the way the HTTP front end does (Find, then
// TryInferAsync, finding the replacement when a reload retired the version in between) while
// the main thread reloads the model 200 times, alternating the versions (explicit mode, a
// config override whose version_policy is specific { versions: [v] }).
//
// Checked, for each policy (availability-preserving; resource-preserving with a generous and
// with a zero unavailable wait):
//   - no request fails, except, with a zero wait under resource-preserving, Unavailable with
//     the documented gap message of ModelManager::Find;
//   - every response comes from exactly one version: its model_version is 1 or 2 and its output
//     equals that version's reference output (and not the other's);
//   - after each reload: the lifecycle is ready with the new version alone serving, the last
//     load reports the expected policy, the history shows that policy's transitions, and the
//     ledger holds exactly one copy of the model (the replaced version's memory is back);
//   - after the loop and the final Unload: the ledger is at its baseline (bytes, allocations,
//     owner tree) with no leak report, and the process has no more threads and open file
//     descriptors than before the manager was created.
//
// A companion test makes the race these reloads run into deterministic: the last reference to a
// replaced version is dropped by a request thread, and its destruction takes a while. Load must
// not return (nor, resource-preserving, load the new version) before that destruction is done.
//
// This found a race, since fixed: the manager took a retired version for destroyed when its last
// reference went (weak_ptr expiry), before ~LoadedModel had run; it now waits for the end of
// the destruction (LoadedModel::destroyed()).
//
// A Watchdog ends the process, naming the step, if a step hangs (a reload that never returns).
// This test found such a hang in Scheduler::Shutdown (a worker never woken when an inline
// execution ended after Shutdown's broadcast); scheduler.cc has since been fixed.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/mlp/safetensors_writer.h"
#include "runtime/model_manager.h"
#include "support/mlp_reference.h"
#include "support/reload_harness.h"
#include "support/scratch_repository.h"

namespace vramd {
namespace {
namespace fs = std::filesystem;
using runtime::LifecycleState;
using runtime::ReloadPolicy;
using namespace vramd::testing;  // NOLINT

constexpr char kModel[] = "flip";
constexpr int64_t kInputs = 8;
constexpr int64_t kOutputs = 4;
constexpr int kInstances = 2;
constexpr int kClients = 4;
constexpr int kReloads = 200;
// The message ModelManager::Find gives a request that waited out a resource-preserving gap
// (src/runtime/model_manager.cc, Find).
constexpr char kGapMessage[] = "a resource-preserving reload is in progress";

struct Scenario {
  std::string policy;  // vramd.reload_policy
  int64_t wait_ms = 0;  // vramd.reload_unavailable_wait_ms
  ReloadPolicy expected = ReloadPolicy::kAvailabilityPreserving;
  bool gap_errors_allowed = false;
};

// A backend whose model takes `destroy_delay_ms` (config parameter) to destroy, holding its
// weights meanwhile, and which records the ledger's live bytes when a load starts. Its output
// is INPUT0 + 1000 x the version.
constexpr size_t kSlowWeights = 64 << 10;
std::atomic<int64_t> slow_live_at_load{-1};  // the ledger's live bytes when LoadModel began

class SlowInstance : public backends::BackendInstance {
 public:
  explicit SlowInstance(int64_t version) : version_(version) {}
  Status Execute(const InferRequest& request, std::vector<Tensor>* outputs) override {
    return testing::AddVersionOffset(request, version_, outputs);
  }

 private:
  const int64_t version_;
};

class SlowModel : public backends::BackendModel {
 public:
  SlowModel(int64_t version, std::chrono::milliseconds delay, memory::Buffer weights)
      : version_(version), delay_(delay), weights_(std::move(weights)) {}
  ~SlowModel() override { std::this_thread::sleep_for(delay_); }  // then weights_ is freed
  Result<std::unique_ptr<backends::BackendInstance>> CreateInstance(
      const backends::InstanceContext&) override {
    return std::unique_ptr<backends::BackendInstance>(std::make_unique<SlowInstance>(version_));
  }

 private:
  const int64_t version_;
  const std::chrono::milliseconds delay_;
  memory::Buffer weights_;
};

class SlowBackend : public backends::Backend {
 public:
  std::string_view name() const override { return "reload_slow_destroy_test"; }
  Result<std::unique_ptr<backends::BackendModel>> LoadModel(
      const backends::ModelContext& ctx) override {
    memory::Ledger* ledger = ctx.allocator->ledger();
    slow_live_at_load = *ledger->SubtreeLiveBytes(ledger->root());
    int64_t delay_ms = 0;
    if (auto it = ctx.config->parameters().find("destroy_delay_ms");
        it != ctx.config->parameters().end()) {
      delay_ms = std::stoll(it->second.string_value());
    }
    VRAMD_ASSIGN_OR_RETURN(auto weights,
                           ctx.allocator->Allocate(memory::Device::Cpu(), kSlowWeights));
    return std::unique_ptr<backends::BackendModel>(std::make_unique<SlowModel>(
        ctx.version, std::chrono::milliseconds(delay_ms), std::move(weights)));
  }
};

void RegisterSlowBackend() {
  static SlowBackend backend;
  static bool registered = backends::RegisterBackend(&backend).ok();
  ASSERT_TRUE(registered);
}

class ReloadUnderLoadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    weights_[1] = RandomMlpWeights({kInputs, 16, kOutputs}, 101, 0.5f);
    weights_[2] = RandomMlpWeights({kInputs, 16, kOutputs}, 202, 0.5f);
    fs::create_directories(repo_.root() / kModel);
    for (int v : {1, 2}) {
      fs::create_directories(repo_.root() / kModel / std::to_string(v));
      ASSERT_TRUE(backends::safetensors::WriteFile(
                      repo_.root() / kModel / std::to_string(v) / "model.safetensors",
                      MlpTensors(weights_[v], false))
                      .ok());
    }
    // The repository's own config (unused by the overrides, but the model folder needs one).
    std::ofstream(repo_.root() / kModel / "config.pbtxt")
        << MlpConfigText(kModel, kInputs, kOutputs, kInstances);
    for (int c = 0; c < kClients; ++c) {
      inputs_.push_back(RandomMlpInput(1, kInputs, 1000 + c));
      for (int v : {1, 2}) expected_[v].push_back(MlpReference(weights_[v], inputs_[c], 1));
      // "Exactly one version" is checkable only if the versions disagree on every input.
      ASSERT_FALSE(CloseTo(expected_[1][c], expected_[2][c])) << "client " << c;
    }
  }

  std::unique_ptr<runtime::ModelManager> Start() {
    auto o = memory_.Options({repo_.root()});
    o.model_control_mode = runtime::ModelControlMode::kExplicit;
    // "auto" then sees plenty of room: availability-preserving, whatever this machine has free.
    o.free_bytes = [](const std::string&) -> Result<int64_t> { return int64_t{1} << 50; };
    auto manager = runtime::ModelManager::Create(o);
    EXPECT_TRUE(manager.ok()) << manager.status().ToString();
    return manager.ok() ? std::move(manager).value() : nullptr;
  }

  // One load, request and unload before anything is counted, so that what the process creates
  // once and keeps (OpenBLAS's thread pool on the first sgemm, the allocator's CPU pool) exists
  // in the "before" figures too.
  void WarmUp() {
    watchdog_.Step("warm-up: load, request, unload");
    auto manager = Start();
    ASSERT_NE(manager, nullptr);
    ASSERT_TRUE(manager->Load(kModel, Override(1, Scenario{"auto"})).ok());
    {
      // Dropped before the Unload: an outcome may hold its version (InferOutcome).
      RetriedOutcome r = InferWithRetry(*manager, kModel, FloatRequest("warmup", inputs_[0]));
      ASSERT_TRUE(r.outcome.ok()) << r.outcome.status().ToString();
    }
    ASSERT_TRUE(manager->Unload(kModel).ok());
  }

  std::shared_ptr<const config::ModelConfig> Override(int64_t version, const Scenario& s) const {
    return ConfigOverride(
        MlpConfigText(kModel, kInputs, kOutputs, kInstances, ReloadParameters(s.policy, s.wait_ms)),
        version);
  }

  // "" when `response` is what client `c` should get from the version that answered.
  std::string Check(int c, const InferResponse& response) const {
    const int64_t v = response.model_version;
    if (v != 1 && v != 2) return "model_version " + std::to_string(v);
    const std::vector<float> got = FloatOutput(response);
    const int64_t other = 3 - v;
    if (!CloseTo(got, expected_.at(v)[c])) {
      return "client " + std::to_string(c) + ": version " + std::to_string(v) + " answered " +
             FloatsString(got) + ", its reference is " + FloatsString(expected_.at(v)[c]) +
             (CloseTo(got, expected_.at(other)[c])
                  ? " (the output is version " + std::to_string(other) + "'s)"
                  : "");
    }
    return "";
  }

  // The lifecycle transitions a reload with `policy` appends, oldest first.
  static std::vector<std::pair<LifecycleState, LifecycleState>> ReloadTransitions(
      ReloadPolicy policy) {
    using S = LifecycleState;
    if (policy == ReloadPolicy::kAvailabilityPreserving) {
      return {{S::kReady, S::kLoading}, {S::kLoading, S::kReady}};
    }
    return {{S::kReady, S::kDraining},
            {S::kDraining, S::kUnloading},
            {S::kUnloading, S::kLoading},
            {S::kLoading, S::kReady}};
  }

  void Run(const Scenario& s) {
    QuietLog quiet;
    const auto started = std::chrono::steady_clock::now();
    WarmUp();
    if (HasFatalFailure()) return;
    const size_t threads_before = ThreadCount();
    const size_t fds_before = OpenFdCount();
    const uint64_t leaks_before = memory_.ledger.leak_reports_total();

    watchdog_.Step("start and first load");
    auto manager = Start();
    // The manager's own threads (the one that answers requests parked in a reload's gap).
    const size_t threads_with_manager = ThreadCount();
    ASSERT_NE(manager, nullptr);
    const LedgerState baseline = CaptureLedger(memory_.ledger);
    ASSERT_TRUE(manager->Load(kModel, Override(1, s)).ok());
    // One copy of the model: what every reload must come back to once it returns.
    const int64_t one_copy = CaptureLedger(memory_.ledger).live_bytes - baseline.live_bytes;
    ASSERT_GT(one_copy, 0);

    LoadClients::Counts counts;
    {
      LoadClients clients(
          *manager, kModel, kClients,
          [this](int c, uint64_t seq) {
            return FloatRequest("c" + std::to_string(c) + "-" + std::to_string(seq), inputs_[c]);
          },
          [this](int c, const InferResponse& r) { return Check(c, r); },
          [&s](const Status& status) {
            return s.gap_errors_allowed && status.code() == StatusCode::kUnavailable &&
                   status.message().find(kGapMessage) != std::string::npos;
          });
      ASSERT_TRUE(clients.WaitAnswered(0, 20)) << "the clients get no answer";

      const auto transitions = ReloadTransitions(s.expected);
      int first_leak = -1;  // the reload after which the first leak report was seen
      for (int i = 0; i < kReloads; ++i) {
        const int64_t v = i % 2 == 0 ? 2 : 1;
        const uint64_t since = clients.answered();
        watchdog_.Step("reload " + std::to_string(i) + " (Load of version " + std::to_string(v) +
                       ")");
        Status loaded = manager->Load(kModel, Override(v, s));
        ASSERT_TRUE(loaded.ok()) << "reload " << i << ": " << loaded.ToString();

        auto life = manager->Lifecycle(kModel);
        ASSERT_TRUE(life.has_value());
        ASSERT_EQ(life->state, LifecycleState::kReady) << "reload " << i << ": " << life->reason;
        ASSERT_EQ(life->serving, std::vector<int64_t>{v}) << "reload " << i;
        ASSERT_TRUE(life->last_load.has_value());
        ASSERT_TRUE(life->last_load->ok) << life->last_load->error;
        ASSERT_EQ(life->last_load->versions, std::vector<int64_t>{v});
        ASSERT_EQ(life->last_load->policy, s.expected)
            << "reload " << i << ": " << life->last_load->policy_reason;
        ASSERT_GE(life->history.size(), transitions.size());
        for (size_t t = 0; t < transitions.size(); ++t) {
          const auto& h = life->history[life->history.size() - transitions.size() + t];
          ASSERT_EQ(h.from, transitions[t].first) << "reload " << i << " transition " << t;
          ASSERT_EQ(h.to, transitions[t].second) << "reload " << i << " transition " << t;
        }
        auto serving = manager->Find(kModel, 0);
        ASSERT_TRUE(serving.ok()) << serving.status().ToString();
        ASSERT_EQ((*serving)->version(), v);
        serving = Status::Internal("dropped");
        // The replaced version is destroyed before Load returns: one copy, not two.
        ASSERT_EQ(CaptureLedger(memory_.ledger).live_bytes, baseline.live_bytes + one_copy)
            << "reload " << i;
        if (first_leak < 0 && memory_.ledger.leak_reports_total() != leaks_before) first_leak = i;
        // Requests flow across every reload (each client answered about once, on average).
        ASSERT_TRUE(clients.WaitAnswered(since, kClients)) << "reload " << i;
      }
      EXPECT_EQ(first_leak, -1) << "leak reports filed by reload " << first_leak << ":\n"
                                << DescribeLeaks(memory_.ledger, leaks_before);
      watchdog_.Step("stopping the clients");
      clients.Stop();
      counts = clients.counts();
    }

    std::cout << "[ reloads  ] policy " << s.policy << ", wait " << s.wait_ms << " ms: "
              << counts.answered << " requests (" << counts.by_version[1] << " by v1, "
              << counts.by_version[2] << " by v2), " << counts.allowed_failures
              << " gap errors, " << counts.failed << " failed, "
              << counts.inconsistent << " inconsistent\n";
    EXPECT_EQ(counts.failed, 0u) << ::testing::PrintToString(counts.failures);
    EXPECT_EQ(counts.inconsistent, 0u) << ::testing::PrintToString(counts.complaints);
    EXPECT_EQ(counts.consistent + counts.allowed_failures, counts.answered);
    EXPECT_GT(counts.by_version[1], 0u);
    EXPECT_GT(counts.by_version[2], 0u);
    if (!s.gap_errors_allowed) {
      EXPECT_EQ(counts.allowed_failures, 0u);
    } else {
      // The clients did meet the gaps (thousands of times in practice; one is enough here).
      EXPECT_GT(counts.allowed_failures, 0u);
    }
    for (const auto& e : counts.allowed_examples) {
      EXPECT_NE(e.find("model '" + std::string(kModel) + "' is unavailable"), std::string::npos)
          << e;
    }

    watchdog_.Step("final unload");
    ASSERT_TRUE(manager->Unload(kModel).ok());
    const LedgerState after = CaptureLedger(memory_.ledger);
    EXPECT_EQ(after, baseline) << "before: " << Describe(baseline) << "\nafter: " << Describe(after);
    EXPECT_EQ(memory_.ledger.leak_reports_total(), leaks_before)
        << DescribeLeaks(memory_.ledger, leaks_before);
    // Nothing loaded: only the manager's own threads are left.
    EXPECT_LE(ThreadCountSettledAtMost(threads_with_manager), threads_with_manager);
    EXPECT_LE(OpenFdCount(), fds_before);
    watchdog_.Step("destroying the manager");
    manager.reset();
    EXPECT_LE(ThreadCountSettledAtMost(threads_before), threads_before);
    EXPECT_LE(OpenFdCount(), fds_before);
    EXPECT_EQ(memory_.ledger.leak_reports_total(), leaks_before);
    std::cout << "[ reloads  ] took "
              << std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count()
              << " s\n";
  }

  Watchdog watchdog_;  // first: outlives the rest of the fixture
  ScratchRepository repo_;
  TestMemory memory_;
  std::map<int64_t, MlpWeights> weights_;
  std::vector<std::vector<float>> inputs_;                   // by client
  std::map<int64_t, std::vector<std::vector<float>>> expected_;  // by version, then client
};

// "auto" with room for both copies: the new version loads beside the old one, which serves until
// the switch. Nothing may fail.
TEST_F(ReloadUnderLoadTest, AvailabilityPreservingReloadsFailNoRequest) {
  Run({"auto", 5000, ReloadPolicy::kAvailabilityPreserving, /*gap_errors_allowed=*/false});
}

// Resource-preserving: the old version drains and unloads before the new one loads; requests
// arriving in the gap wait in Find. With a wait far longer than the gap, nothing may fail.
TEST_F(ReloadUnderLoadTest, ResourcePreservingWithAGenerousWaitFailsNoRequest) {
  Run({"resource_preserving", 5000, ReloadPolicy::kResourcePreserving,
       /*gap_errors_allowed=*/false});
}

// Resource-preserving with no wait: a request that meets the gap gets the documented
// Unavailable at once, and that is the only error allowed.
TEST_F(ReloadUnderLoadTest, ResourcePreservingWithoutWaitFailsOnlyWithTheGapError) {
  Run({"resource_preserving", 0, ReloadPolicy::kResourcePreserving,
       /*gap_errors_allowed=*/true});
}

// The replaced version's last reference is dropped by a request thread (as when a request
// finishes after the switch), and destroying it takes 300 ms. Load must come back only once
// that destruction is over: its memory returned, its owners closed clean (no leak report); and a
// resource-preserving reload must load the new version only after that, as it promises.
TEST_F(ReloadUnderLoadTest, LoadReturnsOnlyOnceTheReplacedVersionIsDestroyed) {
  RegisterSlowBackend();
  QuietLog quiet;
  fs::create_directories(repo_.root() / "slow" / "1");
  fs::create_directories(repo_.root() / "slow" / "2");
  auto config = [](int64_t version, const std::string& policy) {
    return ConfigOverride(
        "name: \"slow\"\nbackend: \"reload_slow_destroy_test\"\n"
        "input [ { name: \"INPUT0\" data_type: TYPE_INT32 dims: [ -1 ] } ]\n"
        "output [ { name: \"OUTPUT0\" data_type: TYPE_INT32 dims: [ -1 ] } ]\n"
        "instance_group [ { kind: KIND_CPU count: 1 } ]\n"
        "parameters { key: \"destroy_delay_ms\" value { string_value: \"300\" } }\n" +
            ReloadParameters(policy, 5000),
        version);
  };
  std::ofstream(repo_.root() / "slow" / "config.pbtxt")
      << "backend: \"reload_slow_destroy_test\"\n";
  auto manager = Start();
  ASSERT_NE(manager, nullptr);
  const LedgerState baseline = CaptureLedger(memory_.ledger);

  int64_t version = 1;
  for (const std::string policy : {"availability_preserving", "resource_preserving"}) {
    SCOPED_TRACE(policy);
    watchdog_.Step("slow: " + policy);
    ASSERT_TRUE(manager->Load("slow", config(version, policy)).ok());
    const int64_t one_copy = CaptureLedger(memory_.ledger).live_bytes - baseline.live_bytes;
    ASSERT_EQ(one_copy, static_cast<int64_t>(kSlowWeights));
    const uint64_t leaks_before = memory_.ledger.leak_reports_total();

    // A request holds the serving version while the reload runs.
    auto held = manager->Find("slow", 0);
    ASSERT_TRUE(held.ok()) << held.status().ToString();
    const int64_t next = 3 - version;
    Status loaded = Status::Internal("not run");
    std::atomic<bool> returned{false};
    std::thread loader([&] {
      loaded = manager->Load("slow", config(next, policy));
      returned = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the reload waits for `held`
    EXPECT_FALSE(returned) << "Load returned while a request still held the replaced version";
    // The request ends on its own thread: the last reference, and a 300 ms destruction.
    const auto dropped_at = std::chrono::steady_clock::now();
    std::thread request([&held] { held = Status::Internal("dropped"); });
    loader.join();
    const auto load_returned_after = std::chrono::steady_clock::now() - dropped_at;
    const int64_t live_when_returned = CaptureLedger(memory_.ledger).live_bytes;
    const uint64_t leaks_when_returned = memory_.ledger.leak_reports_total();
    request.join();
    ASSERT_TRUE(loaded.ok()) << loaded.ToString();

    EXPECT_GE(load_returned_after, std::chrono::milliseconds(300))
        << "Load returned before the replaced version's destruction was over";
    EXPECT_EQ(live_when_returned, baseline.live_bytes + one_copy)
        << "the replaced version's memory was still held when Load returned";
    EXPECT_EQ(leaks_when_returned, leaks_before) << DescribeLeaks(memory_.ledger, leaks_before);
    if (policy == "resource_preserving") {
      EXPECT_EQ(slow_live_at_load.load(), baseline.live_bytes)
          << "the new version loaded while the old one still held its memory";
    }
    EXPECT_EQ(memory_.ledger.leak_reports_total(), leaks_before)
        << DescribeLeaks(memory_.ledger, leaks_before);
    auto serving = manager->Find("slow", 0);
    ASSERT_TRUE(serving.ok());
    EXPECT_EQ((*serving)->version(), next);
    version = next;
  }
  watchdog_.Step("slow: unload");
  ASSERT_TRUE(manager->Unload("slow").ok());
  const LedgerState after = CaptureLedger(memory_.ledger);
  EXPECT_EQ(after.live_bytes, baseline.live_bytes);
  EXPECT_EQ(after.owners, baseline.owners);
}

}  // namespace
}  // namespace vramd
