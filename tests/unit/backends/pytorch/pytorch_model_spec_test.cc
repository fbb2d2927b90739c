// The pytorch backend's reading of the config JSON vramd gives every backend
// (src/backends/pytorch/model_spec.h): the part of the backend that needs no LibTorch.
#include "backends/pytorch/model_spec.h"

#include <gtest/gtest.h>

#include <string>

#include "config/model_config_json.h"
#include "config/model_config_parser.h"

namespace vramd::pytorch {
namespace {

// The JSON vramd itself would hand the backend for `pbtxt`: parsed, normalized, rendered.
std::string JsonFor(const std::string& pbtxt, const std::string& name = "m") {
  auto parsed = config::ParseModelConfigText(pbtxt, "config.pbtxt");
  EXPECT_TRUE(parsed.ok()) << parsed.status().message();
  config::ModelConfig cfg = parsed->config;
  cfg.set_name(name);
  EXPECT_TRUE(config::ValidateAndNormalize(&cfg, name).ok());
  return config::ModelConfigToJson(cfg);
}

std::optional<ModelSpec> Parse(const std::string& json, std::string* error) {
  return ParseModelSpec(json.data(), json.size(), error);
}

constexpr const char* kAddMul = R"(
platform: "pytorch_libtorch"
max_batch_size: 8
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "INPUT__1" data_type: TYPE_INT64 dims: [ -1, 2 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "scores" data_type: TYPE_BF16 dims: [ 3 ] } ]
)";

TEST(PytorchModelSpec, ReadsWhatVramdRendersFromATritonConfig) {
  std::string error;
  auto spec = Parse(JsonFor(kAddMul, "addmul"), &error);
  ASSERT_TRUE(spec) << error;
  EXPECT_EQ(spec->name, "addmul");
  EXPECT_EQ(spec->max_batch_size, 8);
  ASSERT_EQ(spec->inputs.size(), 2u);
  EXPECT_EQ(spec->inputs[0].name, "INPUT__0");
  EXPECT_EQ(spec->inputs[0].datatype, VRAMD_TYPE_FP32);
  EXPECT_EQ(spec->inputs[0].dims, (std::vector<int64_t>{4}));
  EXPECT_EQ(spec->inputs[0].convention_index, 0);
  EXPECT_EQ(spec->inputs[1].datatype, VRAMD_TYPE_INT64);
  EXPECT_EQ(spec->inputs[1].dims, (std::vector<int64_t>{-1, 2}));
  EXPECT_EQ(spec->inputs[1].convention_index, 1);
  ASSERT_EQ(spec->outputs.size(), 2u);
  EXPECT_EQ(spec->outputs[1].datatype, VRAMD_TYPE_BF16);
  EXPECT_FALSE(spec->outputs[1].convention_index);
  EXPECT_EQ(spec->model_filename, "model.pt");
  EXPECT_TRUE(spec->inference_mode);
  EXPECT_TRUE(spec->optimized_execution);
  EXPECT_FALSE(spec->intra_op_threads);
}

TEST(PytorchModelSpec, ConventionIndexNeedsDigitsAfterTheLastDoubleUnderscore) {
  EXPECT_EQ(ConventionIndex("INPUT__0"), 0);
  EXPECT_EQ(ConventionIndex("OUTPUT__12"), 12);
  EXPECT_EQ(ConventionIndex("my__input__3"), 3);
  EXPECT_FALSE(ConventionIndex("INPUT0"));
  EXPECT_FALSE(ConventionIndex("INPUT__"));
  EXPECT_FALSE(ConventionIndex("INPUT__x1"));
  EXPECT_FALSE(ConventionIndex("INPUT__1234567"));  // not an index anyone writes
}

TEST(PytorchModelSpec, TypesLibTorchCannotHoldAreRefusedNamingTheTensor) {
  for (const char* type : {"TYPE_UINT16", "TYPE_UINT32", "TYPE_UINT64"}) {
    const std::string pbtxt = std::string(R"(
      max_batch_size: 0
      input [ { name: "text" data_type: )") + type + R"( dims: [ -1 ] } ]
      output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ -1 ] } ])";
    std::string error;
    EXPECT_FALSE(Parse(JsonFor(pbtxt), &error)) << type;
    EXPECT_NE(error.find("input 'text'"), std::string::npos) << error;
    EXPECT_NE(error.find(type), std::string::npos) << error;
    EXPECT_NE(error.find("not supported"), std::string::npos) << error;
  }
}

TEST(PytorchModelSpec, EveryOtherTritonTypeIsAccepted) {
  for (const char* type : {"TYPE_BOOL", "TYPE_UINT8", "TYPE_INT8", "TYPE_INT16", "TYPE_INT32",
                           "TYPE_INT64", "TYPE_FP16", "TYPE_BF16", "TYPE_FP32", "TYPE_FP64",
                           "TYPE_STRING"}) {
    const std::string json = std::string(R"({"input":[{"name":"a","data_type":")") + type +
                             R"(","dims":[2]}],"output":[{"name":"b","data_type":")" + type +
                             R"(","dims":[2]}]})";
    std::string error;
    auto spec = Parse(json, &error);
    ASSERT_TRUE(spec) << type << ": " << error;
    EXPECT_EQ(spec->inputs[0].datatype, DataTypeFromConfig(type));
    EXPECT_STRNE(DataTypeName(spec->inputs[0].datatype), "INVALID");
  }
}

TEST(PytorchModelSpec, AModelNeedsInputsAndOutputs) {
  std::string error;
  EXPECT_FALSE(Parse(R"({"output":[{"name":"b","data_type":"TYPE_FP32","dims":[1]}]})", &error));
  EXPECT_NE(error.find("no input"), std::string::npos) << error;
  EXPECT_FALSE(Parse(R"({"input":[{"name":"a","data_type":"TYPE_FP32","dims":[1]}]})", &error));
  EXPECT_NE(error.find("no output"), std::string::npos) << error;
}

TEST(PytorchModelSpec, MalformedJsonAndTensorsAreErrorsNotCrashes) {
  std::string error;
  for (const char* json : {"", "{", "[1,2]", "null", R"({"input":[{"data_type":"TYPE_FP32"}]})",
                           R"({"input":[{"name":"a","data_type":"TYPE_NOPE"}]})",
                           R"({"input":[{"name":"a","data_type":"TYPE_FP32","dims":[1.5]}]})",
                           R"({"input":[{"name":"a","data_type":"TYPE_FP32","dims":["x"]}]})"}) {
    error.clear();
    EXPECT_FALSE(Parse(json, &error)) << json;
    EXPECT_FALSE(error.empty()) << json;
  }
}

TEST(PytorchModelSpec, DeeplyNestedJsonIsAnErrorNotAStackOverflow) {
  // The recursive parser needs a stack frame per level: this overflowed the stack.
  std::string error;
  const std::string deep(2'000'000, '[');
  EXPECT_FALSE(Parse(deep, &error));
  EXPECT_NE(error.find("could not be parsed"), std::string::npos) << error;
  const std::string closed = deep + std::string(2'000'000, ']');
  EXPECT_FALSE(Parse(R"({"input":[{"name":"a","data_type":"TYPE_FP32","dims":[1]}],"x":)" +
                         closed + "}",
                     &error));
}

TEST(PytorchModelSpec, TritonParametersAreHonouredOrNamedAsIgnored) {
  const std::string pbtxt = std::string(kAddMul) + R"(
    default_model_filename: "traced.pt"
    parameters { key: "INFERENCE_MODE" value: { string_value: "false" } }
    parameters { key: "DISABLE_OPTIMIZED_EXECUTION" value: { string_value: "true" } }
    parameters { key: "INTRA_OP_THREAD_COUNT" value: { string_value: "3" } }
    parameters { key: "ENABLE_CACHE_CLEANING" value: { string_value: "true" } }
    parameters { key: "something_else" value: { string_value: "x" } })";
  std::string error;
  auto spec = Parse(JsonFor(pbtxt), &error);
  ASSERT_TRUE(spec) << error;
  EXPECT_EQ(spec->model_filename, "traced.pt");
  EXPECT_FALSE(spec->inference_mode);
  EXPECT_FALSE(spec->optimized_execution);
  EXPECT_EQ(spec->intra_op_threads, 3);
  EXPECT_EQ(spec->ignored_parameters, (std::vector<std::string>{"ENABLE_CACHE_CLEANING"}));
}

TEST(PytorchModelSpec, BadParameterValuesNameTheParameter) {
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"INFERENCE_MODE", "maybe"},
           {"DISABLE_OPTIMIZED_EXECUTION", ""},
           {"INTRA_OP_THREAD_COUNT", "-1"},
           {"INTRA_OP_THREAD_COUNT", "four"}}) {
    const std::string pbtxt = std::string(kAddMul) + "parameters { key: \"" + key +
                              "\" value: { string_value: \"" + value + "\" } }";
    std::string error;
    EXPECT_FALSE(Parse(JsonFor(pbtxt), &error)) << key << "=" << value;
    EXPECT_NE(error.find(key), std::string::npos) << error;
  }
}

TEST(PytorchModelSpec, ATensorWithAReshapeIsSeenInTheReshapesShape) {
  std::string error;
  auto spec = Parse(JsonFor(R"(
    max_batch_size: 4
    input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ -1, 12 ] reshape { shape: [ -1, 3, 4 ] } } ]
    output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 1 ] reshape { shape: [ ] } },
             { name: "OUTPUT__1" data_type: TYPE_FP32 dims: [ 7 ] } ])"),
                    &error);
  ASSERT_TRUE(spec) << error;
  EXPECT_EQ(spec->inputs[0].dims, (std::vector<int64_t>{-1, 3, 4}));
  EXPECT_TRUE(spec->outputs[0].dims.empty());
  EXPECT_EQ(spec->outputs[1].dims, (std::vector<int64_t>{7}));
}

}  // namespace
}  // namespace vramd::pytorch
