// The lifecycle state machine (runtime/model_lifecycle.h) and the reload policy's pure parts
// (runtime/reload_policy.h): which moves are allowed, what the index shows, the parameters a
// config sets, the footprint prediction and the choice between the two policies.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "config/model_config_parser.h"
#include "memory/allocator.h"
#include "memory/ledger.h"
#include "runtime/model_lifecycle.h"
#include "runtime/reload_policy.h"
#include "support/scratch_repository.h"

namespace vramd {
namespace {

using runtime::LifecycleState;
using runtime::ModelLifecycle;
using runtime::ReloadPolicy;
using runtime::ReloadPolicyChoice;

TEST(ModelLifecycleTest, FollowsTheDocumentedPaths) {
  ModelLifecycle life;
  EXPECT_EQ(life.state(), LifecycleState::kUnloaded);
  // First load, availability-preserving reload, resource-preserving reload, unload.
  for (auto [to, why] : std::vector<std::pair<LifecycleState, std::string>>{
           {LifecycleState::kLoading, "load"},
           {LifecycleState::kReady, ""},
           {LifecycleState::kLoading, "reload"},
           {LifecycleState::kReady, ""},
           {LifecycleState::kDraining, "resource-preserving"},
           {LifecycleState::kUnloading, ""},
           {LifecycleState::kLoading, ""},
           {LifecycleState::kReady, ""},
           {LifecycleState::kDraining, "unload"},
           {LifecycleState::kUnloading, ""},
           {LifecycleState::kUnloaded, "unloaded"}}) {
    ASSERT_TRUE(life.Transition(to, why).ok()) << runtime::LifecycleStateName(to);
  }
  EXPECT_EQ(life.reason(), "unloaded");
  EXPECT_EQ(life.history().size(), 11u);
  EXPECT_EQ(life.history().front().from, LifecycleState::kUnloaded);
  EXPECT_EQ(life.history().back().to, LifecycleState::kUnloaded);
}

TEST(ModelLifecycleTest, RefusesMovesOutsideThePictureAndStaysPut) {
  ModelLifecycle life;
  Status skip = life.Transition(LifecycleState::kReady);  // ready without loading
  EXPECT_EQ(skip.code(), StatusCode::kInternal);
  EXPECT_NE(skip.message().find("from unloaded to ready"), std::string::npos) << skip.message();
  EXPECT_EQ(life.state(), LifecycleState::kUnloaded);
  EXPECT_TRUE(life.history().empty());

  ASSERT_TRUE(life.Transition(LifecycleState::kLoading).ok());
  ASSERT_TRUE(life.Transition(LifecycleState::kFailed, "bad weights").ok());
  EXPECT_EQ(life.reason(), "bad weights");
  EXPECT_FALSE(life.Transition(LifecycleState::kDraining).ok());  // nothing serves to drain
  EXPECT_TRUE(life.Transition(LifecycleState::kUnloaded, "unloaded").ok());
  // Every pair: Allowed agrees with Transition.
  const LifecycleState all[] = {LifecycleState::kUnloaded, LifecycleState::kLoading,
                                LifecycleState::kReady,    LifecycleState::kDraining,
                                LifecycleState::kUnloading, LifecycleState::kFailed};
  int allowed = 0;
  for (auto from : all) {
    for (auto to : all) allowed += ModelLifecycle::Allowed(from, to) ? 1 : 0;
  }
  EXPECT_EQ(allowed, 10);  // the arrows of the header's picture
}

TEST(ModelLifecycleTest, HistoryIsBounded) {
  ModelLifecycle life;
  ASSERT_TRUE(life.Transition(LifecycleState::kLoading).ok());
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(life.Transition(LifecycleState::kReady).ok());
    ASSERT_TRUE(life.Transition(LifecycleState::kLoading, std::to_string(i)).ok());
  }
  EXPECT_EQ(life.history().size(), ModelLifecycle::kHistory);
  EXPECT_EQ(life.history().back().reason, "99");
}

TEST(ModelLifecycleTest, TritonStatesForTheIndex) {
  EXPECT_EQ(runtime::TritonStateName(LifecycleState::kReady), "READY");
  EXPECT_EQ(runtime::TritonStateName(LifecycleState::kLoading), "LOADING");
  EXPECT_EQ(runtime::TritonStateName(LifecycleState::kDraining), "UNLOADING");
  EXPECT_EQ(runtime::TritonStateName(LifecycleState::kUnloading), "UNLOADING");
  EXPECT_EQ(runtime::TritonStateName(LifecycleState::kUnloaded), "UNAVAILABLE");
  EXPECT_EQ(runtime::TritonStateName(LifecycleState::kFailed), "UNAVAILABLE");
}

config::ModelConfig ParseConfig(const std::string& text) {
  auto parsed = config::ParseModelConfigText(text, "config.pbtxt");
  EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
  return parsed.ok() ? parsed->config : config::ModelConfig();
}

TEST(ReloadPolicyTest, SettingsComeFromTheConfigParameters) {
  runtime::ReloadSettings defaults;
  auto plain = runtime::ReloadSettingsFromConfig(ParseConfig("backend: \"identity\""), defaults);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->choice, ReloadPolicyChoice::kAuto);
  EXPECT_EQ(plain->unavailable_wait, defaults.unavailable_wait);

  auto set = runtime::ReloadSettingsFromConfig(
      ParseConfig("parameters { key: \"vramd.reload_policy\" value { string_value: "
                  "\"resource_preserving\" } }\n"
                  "parameters { key: \"vramd.reload_unavailable_wait_ms\" value { string_value: "
                  "\"250\" } }"),
      defaults);
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(set->choice, ReloadPolicyChoice::kResourcePreserving);
  EXPECT_EQ(set->unavailable_wait.count(), 250);

  auto bad = runtime::ReloadSettingsFromConfig(
      ParseConfig("parameters { key: \"vramd.reload_policy\" value { string_value: \"fast\" } }"),
      defaults);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("vramd.reload_policy"), std::string::npos);
  EXPECT_NE(bad.status().message().find("resource_preserving"), std::string::npos);
  auto negative = runtime::ReloadSettingsFromConfig(
      ParseConfig("parameters { key: \"vramd.reload_unavailable_wait_ms\" value { string_value: "
                  "\"-1\" } }"),
      defaults);
  EXPECT_FALSE(negative.ok());
  auto words = runtime::ReloadSettingsFromConfig(
      ParseConfig("parameters { key: \"vramd.reload_unavailable_wait_ms\" value { string_value: "
                  "\"5s\" } }"),
      defaults);
  EXPECT_FALSE(words.ok());
}

// A config as the manager reads it: parsed, then normalized (group names and counts set).
config::ModelConfig NormalizedConfig(const std::string& text) {
  config::ModelConfig config = ParseConfig("name: \"m\" backend: \"identity\" " + text);
  Status normalized = config::ValidateAndNormalize(&config, "m");
  EXPECT_TRUE(normalized.ok()) << normalized.ToString();
  return config;
}

runtime::PlacementTarget Target(bool supports_gpu, int visible_gpus) {
  runtime::PlacementTarget target;
  target.backend = supports_gpu ? "mlp" : "identity";
  target.backend_supports_gpu = supports_gpu;
  target.visible_gpus = visible_gpus;
  return target;
}

TEST(ReloadPolicyTest, PredictionUsesTheMeasurementElseFileSizesTimesTheFactor) {
  testing::ScratchRepository repo;
  repo.AddModel("m", "", {"1", "2"});
  std::ofstream(repo.root() / "m" / "1" / "w.bin") << std::string(1000, 'x');
  std::ofstream(repo.root() / "m" / "2" / "w.bin") << std::string(3000, 'x');
  const auto cpu = NormalizedConfig("instance_group [ { kind: KIND_CPU } ]");
  const auto no_gpu = Target(false, 0);
  auto from_files = runtime::PredictFootprint(cpu, repo.root() / "m", {2}, std::nullopt, no_gpu);
  ASSERT_EQ(from_files.bytes.size(), 1u);
  EXPECT_EQ(from_files.bytes.at("cpu"), static_cast<int64_t>(3000 * runtime::kFileSizeFactor));
  auto both = runtime::PredictFootprint(cpu, repo.root() / "m", {1, 2}, std::nullopt, no_gpu);
  EXPECT_EQ(both.bytes.at("cpu"), static_cast<int64_t>(4000 * runtime::kFileSizeFactor));

  runtime::DeviceBytes measured{{"cuda:0", 12345}};
  const auto gpus = NormalizedConfig("instance_group [ { kind: KIND_GPU count: 4 gpus: [ 0, 2 ] } ]");
  auto remembered =
      runtime::PredictFootprint(gpus, repo.root() / "m", {1}, measured, Target(true, 4));
  EXPECT_EQ(remembered.bytes, measured);
  EXPECT_NE(remembered.source.find("measured"), std::string::npos);
}

// The prediction goes where the load will place instances (instance_placement.h), so the two
// cannot disagree.
TEST(ReloadPolicyTest, PredictionIsOnTheDevicesTheLoadPlacesOn) {
  testing::ScratchRepository repo;
  repo.AddModel("m", "", {"1"});
  std::ofstream(repo.root() / "m" / "1" / "w.bin") << std::string(1000, 'x');
  const int64_t once = static_cast<int64_t>(1000 * runtime::kFileSizeFactor);
  auto predict = [&](const std::string& groups, const runtime::PlacementTarget& target) {
    return runtime::PredictFootprint(NormalizedConfig(groups), repo.root() / "m", {1},
                                     std::nullopt, target)
        .bytes;
  };
  // GPU groups: once per listed GPU (weights are shared by a GPU's instances).
  EXPECT_EQ(predict("instance_group [ { kind: KIND_GPU count: 4 gpus: [ 0, 2 ] } ]",
                    Target(true, 4)),
            (runtime::DeviceBytes{{"cuda:0", once}, {"cuda:2", once}}));
  // No gpus: every visible GPU.
  EXPECT_EQ(predict("instance_group [ { kind: KIND_GPU } ]", Target(true, 2)),
            (runtime::DeviceBytes{{"cuda:0", once}, {"cuda:1", once}}));
  // KIND_AUTO (and no group at all): every visible GPU for a backend that runs on GPUs ...
  EXPECT_EQ(predict("instance_group [ { kind: KIND_AUTO } ]", Target(true, 2)),
            (runtime::DeviceBytes{{"cuda:0", once}, {"cuda:1", once}}));
  EXPECT_EQ(predict("", Target(true, 1)), (runtime::DeviceBytes{{"cuda:0", once}}));
  // ... the CPU for one that does not, however many GPUs there are (it used to be predicted
  // on every GPU), and the CPU when no GPU is visible.
  EXPECT_EQ(predict("instance_group [ { kind: KIND_AUTO } ]", Target(false, 2)),
            (runtime::DeviceBytes{{"cpu", once}}));
  EXPECT_EQ(predict("instance_group [ { kind: KIND_AUTO } ]", Target(true, 0)),
            (runtime::DeviceBytes{{"cpu", once}}));
  // Mixed groups: the CPU and the GPU.
  EXPECT_EQ(predict("instance_group [ { kind: KIND_CPU }, { kind: KIND_GPU gpus: [ 1 ] } ]",
                    Target(true, 2)),
            (runtime::DeviceBytes{{"cpu", once}, {"cuda:1", once}}));
  // A plan the load will refuse (GPU 3 of 2) is predicted on the CPU; the load names the field.
  EXPECT_EQ(predict("instance_group [ { kind: KIND_GPU gpus: [ 3 ] } ]", Target(true, 2)),
            (runtime::DeviceBytes{{"cpu", once}}));
}

TEST(ReloadPolicyTest, AutoPreservesAvailabilityOnlyWhenThePredictionFits) {
  runtime::ReloadSettings settings;
  settings.headroom_bytes = 100;
  runtime::Footprint predicted{{{"cuda:0", 1000}, {"cpu", 10}}, "test"};
  auto free = [](int64_t gpu_free) {
    return [gpu_free](const std::string& device) -> Result<int64_t> {
      if (device == "cpu") return int64_t{1} << 40;
      return gpu_free;
    };
  };
  auto fits = runtime::ChooseReloadPolicy(settings, predicted, true, free(1100));
  EXPECT_EQ(fits.policy, ReloadPolicy::kAvailabilityPreserving) << fits.reason;
  auto tight = runtime::ChooseReloadPolicy(settings, predicted, true, free(1099));
  EXPECT_EQ(tight.policy, ReloadPolicy::kResourcePreserving);
  EXPECT_NE(tight.reason.find("cuda:0"), std::string::npos) << tight.reason;
  // Nothing serving: nothing to preserve, whatever the memory.
  EXPECT_EQ(runtime::ChooseReloadPolicy(settings, predicted, false, free(0)).policy,
            ReloadPolicy::kAvailabilityPreserving);
  // Unknown free memory does not count as fitting.
  auto unknown = runtime::ChooseReloadPolicy(
      settings, predicted, true,
      [](const std::string&) -> Result<int64_t> { return Status::Unavailable("no probe"); });
  EXPECT_EQ(unknown.policy, ReloadPolicy::kResourcePreserving);
  EXPECT_NE(unknown.reason.find("no probe"), std::string::npos);
  // The config's choice wins.
  settings.choice = ReloadPolicyChoice::kAvailabilityPreserving;
  EXPECT_EQ(runtime::ChooseReloadPolicy(settings, predicted, true, free(0)).policy,
            ReloadPolicy::kAvailabilityPreserving);
  settings.choice = ReloadPolicyChoice::kResourcePreserving;
  EXPECT_EQ(runtime::ChooseReloadPolicy(settings, predicted, true, free(1 << 30)).policy,
            ReloadPolicy::kResourcePreserving);
}

TEST(ReloadPolicyTest, MeasureFootprintSumsTheOwnersSubtreesByDevice) {
  memory::Ledger ledger;
  memory::Allocator allocator(&ledger);
  memory::ScopedOwner model(&ledger, ledger.root(), memory::OwnerKind::kModel, "m");
  memory::ScopedOwner version(&ledger, model.id(), memory::OwnerKind::kVersion, "1");
  memory::ScopedOwner instance(&ledger, version.id(), memory::OwnerKind::kInstance, "i");
  memory::ScopedOwner other(&ledger, ledger.root(), memory::OwnerKind::kModel, "other");
  auto a = allocator.Allocate(memory::Device::Cpu(), 4096, 0, version.id());
  auto b = allocator.Allocate(memory::Device::Cpu(), 1024, 0, instance.id());
  auto c = allocator.Allocate(memory::Device::Cpu(), 999, 0, other.id());
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  auto measured = runtime::MeasureFootprint(ledger, {version.id()});
  EXPECT_EQ(measured, (runtime::DeviceBytes{{"cpu", 5120}}));
}

TEST(ReloadPolicyTest, HostFreeMemoryIsKnown) {
  auto free = runtime::DeviceFreeBytes("cpu", nullptr);
  ASSERT_TRUE(free.ok()) << free.status().ToString();
  EXPECT_GT(*free, 0);
  EXPECT_FALSE(runtime::DeviceFreeBytes("tpu:0", nullptr).ok());
}

TEST(ReloadPolicyTest, FreeMemoryIsNoMoreThanTheBudgetLeaves) {
  memory::Ledger::Options options;
  options.budget = {memory::QuotaLimit{memory::Device::Cpu(), 10 << 20}};
  memory::Ledger ledger(options);
  memory::Allocator allocator(&ledger);
  memory::ScopedOwner owner(&ledger, ledger.root(), memory::OwnerKind::kModel, "m");
  auto held = allocator.Allocate(memory::Device::Cpu(), 4 << 20, 0, owner.id());
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  auto free = runtime::DeviceFreeBytes("cpu", &allocator);
  ASSERT_TRUE(free.ok()) << free.status().ToString();
  EXPECT_EQ(*free, 6 << 20) << "the host has more, but the budget leaves 6 MiB";
  // Without a budget the host's figure stands.
  memory::Ledger unbounded;
  memory::Allocator plain(&unbounded);
  auto host = runtime::DeviceFreeBytes("cpu", &plain);
  ASSERT_TRUE(host.ok());
  EXPECT_GT(*host, 10 << 20);
}

}  // namespace
}  // namespace vramd
