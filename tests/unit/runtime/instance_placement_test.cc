// Where instances run (runtime/instance_placement.h): Triton's instance_group rules against a
// given number of GPUs, so every multi-GPU case runs here without a GPU.
#include "runtime/instance_placement.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "config/model_config_parser.h"

namespace vramd::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The config as a model directory would give it: parsed, checked and normalized.
config::ModelConfig PlacementTest_Config(const std::string& text) {
  auto parsed = config::ParseModelConfigText("name: \"m\"\nbackend: \"b\"\n" + text, "config.pbtxt");
  EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
  config::ModelConfig config = parsed.ok() ? parsed->config : config::ModelConfig();
  Status normalized = config::ValidateAndNormalize(&config, "m");
  EXPECT_TRUE(normalized.ok()) << normalized.ToString();
  return config;
}

PlacementTarget PlacementTest_Gpus(int gpus, bool supports_gpu = true) {
  PlacementTarget target;
  target.backend = "b";
  target.backend_supports_gpu = supports_gpu;
  target.visible_gpus = gpus;
  target.describe_gpus = [gpus] { return gpus == 0 ? "no CUDA device" : "CUDA test devices"; };
  return target;
}

std::vector<std::pair<std::string, int>> PlacementTest_Names(
    const std::vector<backends::InstanceContext>& plan) {
  std::vector<std::pair<std::string, int>> names;
  for (const auto& instance : plan) {
    EXPECT_EQ(instance.kind == backends::DeviceKind::kGpu, instance.device_id >= 0)
        << instance.name;
    names.emplace_back(instance.name, instance.device_id);
  }
  return names;
}

TEST(InstancePlacementTest, GpusListPlacesCountOnEachListedGpuNamedAsTriton) {
  auto plan = PlanInstances(
      PlacementTest_Config("instance_group [ { name: \"g\" count: 2 kind: KIND_GPU gpus: [ 1, 3 ] } ]"),
      PlacementTest_Gpus(4));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  // Count-major, as Triton creates them: consecutive instances are on different GPUs.
  EXPECT_THAT(PlacementTest_Names(*plan),
              ElementsAre(std::pair<std::string, int>{"g_0_gpu1", 1},
                          std::pair<std::string, int>{"g_0_gpu3", 3},
                          std::pair<std::string, int>{"g_1_gpu1", 1},
                          std::pair<std::string, int>{"g_1_gpu3", 3}));
  for (size_t i = 0; i < plan->size(); ++i) EXPECT_EQ((*plan)[i].index, static_cast<int>(i));
  EXPECT_THAT(GpusOfPlan(*plan), ElementsAre(1, 3));
}

TEST(InstancePlacementTest, GpuGroupWithoutGpusUsesEveryVisibleGpu) {
  auto plan = PlanInstances(PlacementTest_Config("instance_group [ { count: 4 kind: KIND_GPU } ]"),
                            PlacementTest_Gpus(2));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->size(), 8u);
  EXPECT_EQ((*plan)[0].name, "m_0_0_gpu0");
  EXPECT_EQ((*plan)[1].name, "m_0_0_gpu1");
  EXPECT_EQ((*plan)[7].name, "m_0_3_gpu1");
  EXPECT_THAT(GpusOfPlan(*plan), ElementsAre(0, 1));
}

TEST(InstancePlacementTest, AutoIsEveryGpuWhenTheBackendRunsOnGpusElseCpu) {
  // No instance_group at all: normalization gives one KIND_AUTO group of count 1.
  const config::ModelConfig config = PlacementTest_Config("");
  auto on_gpus = PlanInstances(config, PlacementTest_Gpus(3));
  ASSERT_TRUE(on_gpus.ok()) << on_gpus.status().ToString();
  EXPECT_THAT(PlacementTest_Names(*on_gpus),
              ElementsAre(std::pair<std::string, int>{"m_0_0_gpu0", 0},
                          std::pair<std::string, int>{"m_0_0_gpu1", 1},
                          std::pair<std::string, int>{"m_0_0_gpu2", 2}));

  auto no_gpu = PlanInstances(config, PlacementTest_Gpus(0));
  ASSERT_TRUE(no_gpu.ok()) << no_gpu.status().ToString();
  EXPECT_THAT(PlacementTest_Names(*no_gpu), ElementsAre(std::pair<std::string, int>{"m_0_0", -1}));

  auto cpu_backend = PlanInstances(config, PlacementTest_Gpus(2, /*supports_gpu=*/false));
  ASSERT_TRUE(cpu_backend.ok()) << cpu_backend.status().ToString();
  EXPECT_THAT(PlacementTest_Names(*cpu_backend),
              ElementsAre(std::pair<std::string, int>{"m_0_0", -1}));
  EXPECT_TRUE(GpusOfPlan(*cpu_backend).empty());
}

// What a backend is given: KIND_AUTO resolved and gpus filled, so a backend deciding where to
// stage weights from its groups agrees with the plan (the mlp backend once refused a KIND_AUTO
// model placed on a GPU: device run 1 of 2026-12-06).
TEST(InstancePlacementTest, TheBackendSeesItsGroupsAsPlaced) {
  const config::ModelConfig config = PlacementTest_Config(R"(instance_group [
      { name: "a" kind: KIND_AUTO },
      { name: "g" kind: KIND_GPU },
      { name: "listed" kind: KIND_GPU gpus: [ 1 ] },
      { name: "c" kind: KIND_CPU } ])");
  const config::ModelConfig on_gpus = ConfigAsPlaced(config, PlacementTest_Gpus(2));
  ASSERT_EQ(on_gpus.instance_group_size(), 4);
  EXPECT_EQ(on_gpus.instance_group(0).kind(), config::ModelInstanceGroup::KIND_GPU);
  EXPECT_THAT(on_gpus.instance_group(0).gpus(), ElementsAre(0, 1));
  EXPECT_THAT(on_gpus.instance_group(1).gpus(), ElementsAre(0, 1));
  EXPECT_THAT(on_gpus.instance_group(2).gpus(), ElementsAre(1));
  EXPECT_EQ(on_gpus.instance_group(3).kind(), config::ModelInstanceGroup::KIND_CPU);
  EXPECT_TRUE(on_gpus.instance_group(3).gpus().empty());
  // The written config is left as written.
  EXPECT_EQ(config.instance_group(0).kind(), config::ModelInstanceGroup::KIND_AUTO);

  const config::ModelConfig auto_only = PlacementTest_Config("");
  const config::ModelConfig no_gpu = ConfigAsPlaced(auto_only, PlacementTest_Gpus(0));
  EXPECT_EQ(no_gpu.instance_group(0).kind(), config::ModelInstanceGroup::KIND_CPU);
  const config::ModelConfig cpu_backend =
      ConfigAsPlaced(auto_only, PlacementTest_Gpus(2, /*supports_gpu=*/false));
  EXPECT_EQ(cpu_backend.instance_group(0).kind(), config::ModelInstanceGroup::KIND_CPU);
}

TEST(InstancePlacementTest, GroupsMixAndIndexAcrossThem) {
  auto plan = PlanInstances(PlacementTest_Config(R"(instance_group [
      { name: "cpu" count: 2 kind: KIND_CPU },
      { name: "gpu" count: 1 kind: KIND_GPU gpus: [ 1 ] } ])"),
                            PlacementTest_Gpus(2));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_THAT(PlacementTest_Names(*plan),
              ElementsAre(std::pair<std::string, int>{"cpu_0", -1},
                          std::pair<std::string, int>{"cpu_1", -1},
                          std::pair<std::string, int>{"gpu_0_gpu1", 1}));
  EXPECT_EQ((*plan)[2].index, 2);
  EXPECT_THAT(GpusOfPlan(*plan), ElementsAre(1));
}

TEST(InstancePlacementTest, AnOrdinalPastTheVisibleGpusIsRefusedNamingTheGroupAndField) {
  const config::ModelConfig config = PlacementTest_Config(
      "instance_group [ { name: \"g\" kind: KIND_GPU gpus: [ 0, 2 ] } ]");
  auto plan = PlanInstances(config, PlacementTest_Gpus(2));
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), HasSubstr("instance_group 'g': gpus lists GPU 2"));
  EXPECT_THAT(plan.status().message(), HasSubstr("it sees 2 (GPUs 0 to 1)"));
  // The same config places on a server that sees three.
  EXPECT_TRUE(PlanInstances(config, PlacementTest_Gpus(3)).ok());

  auto one = PlanInstances(config, PlacementTest_Gpus(1));
  ASSERT_FALSE(one.ok());
  EXPECT_THAT(one.status().message(), HasSubstr("it sees 1 (GPU 0)"));
}

TEST(InstancePlacementTest, GpuGroupsNeedAGpuAndABackendThatRunsOnOne) {
  const config::ModelConfig config =
      PlacementTest_Config("instance_group [ { name: \"g\" kind: KIND_GPU } ]");
  auto no_gpu = PlanInstances(config, PlacementTest_Gpus(0));
  ASSERT_FALSE(no_gpu.ok());
  EXPECT_THAT(no_gpu.status().message(),
              HasSubstr("instance_group 'g': kind is KIND_GPU but this server sees no GPU "
                        "(no CUDA device)"));
  auto cpu_backend = PlanInstances(config, PlacementTest_Gpus(2, /*supports_gpu=*/false));
  ASSERT_FALSE(cpu_backend.ok());
  EXPECT_THAT(cpu_backend.status().message(),
              HasSubstr("instance_group 'g': kind is KIND_GPU but backend 'b' runs on the CPU "
                        "only"));
}

TEST(InstancePlacementTest, TheConfigCheckRefusesNegativeAndRepeatedOrdinalsNamingTheField) {
  for (const auto& [text, expected] : std::vector<std::pair<std::string, std::string>>{
           {"instance_group [ { name: \"g\" kind: KIND_GPU gpus: [ 0, -1 ] } ]",
            "instance_group 'g': gpus lists -1"},
           {"instance_group [ { name: \"g\" kind: KIND_GPU gpus: [ 1, 0, 1 ] } ]",
            "instance_group 'g': gpus lists GPU 1 twice"},
           {"instance_group [ { name: \"g\" kind: KIND_CPU gpus: [ 0 ] } ]",
            "instance_group 'g': kind KIND_CPU runs on no GPU, yet gpus lists [0]"}}) {
    auto parsed = config::ParseModelConfigText("name: \"m\"\n" + text, "config.pbtxt");
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    config::ModelConfig config = parsed->config;
    Status s = config::ValidateAndNormalize(&config, "m");
    ASSERT_FALSE(s.ok()) << text;
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr(expected)) << text;
  }
}

// Triton's example configs with GPU groups place as Triton would on a two-GPU server.
TEST(InstancePlacementTest, TritonExampleGpuConfigsPlaceOnEveryGpu) {
  const std::filesystem::path dir =
      std::filesystem::path(VRAMD_SHARED_FIXTURES_DIR) / "triton-configs";
  if (!std::filesystem::exists(dir / "peoplenet.pbtxt")) {
    GTEST_SKIP() << "no " << dir << " (the shared fixtures are not next to this checkout)";
  }
  for (const auto& [file, count] :
       std::vector<std::pair<std::string, int>>{{"peoplenet.pbtxt", 3}, {"bert_base_tf_gpu.pbtxt", 2}}) {
    auto parsed = config::LoadModelConfigFile(dir / file);
    ASSERT_TRUE(parsed.ok()) << file << ": " << parsed.status().ToString();
    config::ModelConfig config = parsed->config;
    const std::string name = config.name().empty() ? "m" : config.name();
    ASSERT_TRUE(config::ValidateAndNormalize(&config, name).ok()) << file;
    auto plan = PlanInstances(config, PlacementTest_Gpus(2));
    ASSERT_TRUE(plan.ok()) << file << ": " << plan.status().ToString();
    ASSERT_EQ(plan->size(), static_cast<size_t>(2 * count)) << file;
    EXPECT_EQ((*plan)[0].device_id, 0) << file;
    EXPECT_EQ((*plan)[1].device_id, 1) << file;
    EXPECT_EQ((*plan)[0].name, config.instance_group(0).name() + "_0_gpu0") << file;
  }
}

}  // namespace
}  // namespace vramd::runtime
