// EnsembleGraph: what a request walks (where it starts, what each step waits for, who goes
// next) and the order the load checks steps in, for a diamond; the load errors with their texts
// are in tests/e2e/test_ensemble.py.
#include "backends/ensemble/ensemble_graph.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "config/model_config_parser.h"

namespace vramd::backends::ensemble {
namespace {
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

config::ModelConfig Parse(const char* text) {
  auto parsed = config::ParseModelConfigText(text, "test.pbtxt");
  EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
  return parsed->config;
}

constexpr const char* kDiamond = R"(
name: "d" platform: "ensemble" max_batch_size: 4
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] } ]
ensemble_scheduling { step [
  { model_name: "join" input_map { key: "x" value: "b" } input_map { key: "y" value: "c" }
    output_map { key: "z" value: "OUT" } },
  { model_name: "left" input_map { key: "x" value: "a" } output_map { key: "z" value: "b" } },
  { model_name: "first" model_version: -1 input_map { key: "x" value: "IN" }
    output_map { key: "z" value: "a" } },
  { model_name: "right" model_version: 2 input_map { key: "x" value: "a" }
    output_map { key: "z" value: "c" } }
] }
)";

config::ModelConfig StepModel(const char* inputs, int max_batch_size = 8) {
  std::string text = "max_batch_size: " + std::to_string(max_batch_size) + " " + inputs +
                     " output [ { name: \"z\" data_type: TYPE_FP32 dims: [ 2 ] } ]";
  return Parse(text.c_str());
}

TEST(EnsembleGraphTest, ADiamondStartsAtItsFirstStepAndJoinsOnce) {
  auto graph = EnsembleGraph::Build(Parse(kDiamond));
  ASSERT_TRUE(graph.ok()) << graph.status().ToString();
  const auto& steps = graph->steps();
  ASSERT_EQ(steps.size(), 4u);
  EXPECT_THAT(graph->first(), ElementsAre(2));            // "first" reads only IN
  EXPECT_THAT(graph->waits(), ElementsAre(2, 1, 0, 1));   // join waits for b and c
  EXPECT_THAT(steps[2].next, UnorderedElementsAre(1, 3));  // a feeds left and right
  EXPECT_THAT(steps[1].next, ElementsAre(0));
  EXPECT_EQ(steps[2].version, 0);  // -1: whichever the policy serves
  EXPECT_EQ(steps[3].version, 2);
  // The order puts every step after those it reads from.
  const auto& order = graph->order();
  auto pos = [&](size_t step) { return std::find(order.begin(), order.end(), step) - order.begin(); };
  EXPECT_LT(pos(2), pos(1));
  EXPECT_LT(pos(2), pos(3));
  EXPECT_LT(pos(1), pos(0));
  EXPECT_LT(pos(3), pos(0));
}

TEST(EnsembleGraphTest, CheckStepComparesTypesAndShapesAlongTheFlow) {
  auto graph = EnsembleGraph::Build(Parse(kDiamond));
  ASSERT_TRUE(graph.ok());
  const auto one = StepModel("input [ { name: \"x\" data_type: TYPE_FP32 dims: [ 2 ] } ]");
  const auto two = StepModel(
      "input [ { name: \"x\" data_type: TYPE_FP32 dims: [ -1 ] },"
      " { name: \"y\" data_type: TYPE_FP32 dims: [ 2 ] } ]");
  for (size_t i : graph->order()) {
    Status status = graph->CheckStep(i, i == 0 ? two : one);
    EXPECT_TRUE(status.ok()) << status.ToString();
  }
  // A step model that reads INT32 where the ensemble gives FP32.
  auto again = EnsembleGraph::Build(Parse(kDiamond));
  Status wrong = again->CheckStep(
      2, StepModel("input [ { name: \"x\" data_type: TYPE_INT32 dims: [ 2 ] } ]"));
  ASSERT_FALSE(wrong.ok());
  EXPECT_THAT(wrong.message(), HasSubstr("tensor 'IN' is TYPE_INT32 for the model's input 'x' "
                                         "and TYPE_FP32 as ensemble input 'IN'"));
  // A step model that cannot take the ensemble's batch.
  Status small = again->CheckStep(
      2, StepModel("input [ { name: \"x\" data_type: TYPE_FP32 dims: [ 2 ] } ]", 2));
  ASSERT_FALSE(small.ok());
  EXPECT_THAT(small.message(), HasSubstr("max_batch_size is 4, and the model's is 2"));
  // An input of the model the step leaves unmapped.
  Status unmapped = again->CheckStep(
      2, StepModel("input [ { name: \"x\" data_type: TYPE_FP32 dims: [ 2 ] },"
                   " { name: \"w\" data_type: TYPE_FP32 dims: [ 2 ] } ]"));
  ASSERT_FALSE(unmapped.ok());
  EXPECT_THAT(unmapped.message(), HasSubstr("the model's input 'w' is not in the step's input_map"));
}

TEST(EnsembleGraphTest, RefusesAStepWithoutAModelAndTheReservedNamespace) {
  auto nameless = EnsembleGraph::Build(Parse(
      "name: \"d\" platform: \"ensemble\" ensemble_scheduling { step [ { } ] }"));
  ASSERT_FALSE(nameless.ok());
  EXPECT_THAT(nameless.status().message(), HasSubstr("ensemble 'd': step 0 names no model_name"));
  auto spaced = EnsembleGraph::Build(Parse(
      "name: \"d\" platform: \"ensemble\" ensemble_scheduling { step [ { model_name: \"m\""
      " model_namespace: \"x\" } ] }"));
  ASSERT_FALSE(spaced.ok());
  EXPECT_THAT(spaced.status().message(), HasSubstr("model_namespace is reserved"));
}

}  // namespace
}  // namespace vramd::backends::ensemble
