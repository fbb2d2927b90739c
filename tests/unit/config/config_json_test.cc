// Tests for config/model_config_json.h: printing, parsing and round trips.
#include "config/model_config_json.h"

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include "config/model_config_parser.h"

namespace vramd::config {
namespace {

namespace fs = std::filesystem;
using ::google::protobuf::util::MessageDifferencer;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

ModelConfig ParseText(std::string_view text) {
  Result<ParsedModelConfig> parsed = ParseModelConfigText(text, "test.pbtxt");
  EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
  return parsed.ok() ? parsed->config : ModelConfig{};
}

rapidjson::Document ParseJson(const std::string& json) {
  rapidjson::Document doc;
  doc.Parse(json.c_str());
  EXPECT_FALSE(doc.HasParseError()) << json;
  return doc;
}

// ToJson, then FromJson, must give back an equal message.
void ExpectRoundTrip(const ModelConfig& config) {
  std::string json = ModelConfigToJson(config);
  Result<ModelConfig> back = ModelConfigFromJson(json);
  ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << json;
  std::string diff;
  MessageDifferencer differencer;
  differencer.ReportDifferencesToString(&diff);
  EXPECT_TRUE(differencer.Compare(config, *back)) << diff << "\n" << json;
}

TEST(ConfigJsonTest, PrintsInt64DimsAsNumbers) {
  ModelConfig config = ParseText(
      "name: \"m\" max_batch_size: 4\n"
      "input [ { name: \"IN\" data_type: TYPE_FP32 dims: [ -1, 16 ] } ]\n");
  std::string json = ModelConfigToJson(config);
  EXPECT_THAT(json, HasSubstr("\"dims\":[-1,16]"));
  rapidjson::Document doc = ParseJson(json);
  const rapidjson::Value& dims = doc["input"][0]["dims"];
  ASSERT_TRUE(dims.IsArray());
  EXPECT_TRUE(dims[0].IsInt64());
  EXPECT_EQ(dims[0].GetInt64(), -1);
}

TEST(ConfigJsonTest, PrintsDefaultsAndEnumsByName) {
  ModelConfig config = ParseText("name: \"m\" input [ { name: \"IN\" data_type: TYPE_STRING } ]");
  rapidjson::Document doc = ParseJson(ModelConfigToJson(config));
  EXPECT_STREQ(doc["name"].GetString(), "m");
  EXPECT_STREQ(doc["platform"].GetString(), "");
  EXPECT_STREQ(doc["backend"].GetString(), "");
  EXPECT_EQ(doc["max_batch_size"].GetInt(), 0);
  EXPECT_TRUE(doc["output"].IsArray());
  EXPECT_EQ(doc["output"].Size(), 0u);
  EXPECT_TRUE(doc["parameters"].IsObject());
  EXPECT_TRUE(doc["model_warmup"].IsArray());
  const rapidjson::Value& input = doc["input"][0];
  EXPECT_STREQ(input["data_type"].GetString(), "TYPE_STRING");
  EXPECT_STREQ(input["format"].GetString(), "FORMAT_NONE");
  EXPECT_TRUE(input["dims"].IsArray());
  EXPECT_FALSE(input["optional"].GetBool());
  // Unset singular messages and unset oneofs are left out: their presence carries meaning.
  EXPECT_FALSE(input.HasMember("reshape"));
  EXPECT_FALSE(doc.HasMember("version_policy"));
  EXPECT_FALSE(doc.HasMember("dynamic_batching"));
}

TEST(ConfigJsonTest, PrintsNormalizedConfigLikeTriton) {
  ModelConfig config = ParseText(
      "max_batch_size: 8\n"
      "input [ { name: \"IN\" data_type: TYPE_INT32 dims: [ 16 ] } ]\n"
      "output [ { name: \"OUT\" data_type: TYPE_INT32 dims: [ 16 ] } ]\n"
      "dynamic_batching { }\n");
  ASSERT_TRUE(ValidateAndNormalize(&config, "simple").ok());
  EXPECT_EQ(ModelConfigToJson(config),
            "{\"name\":\"simple\",\"platform\":\"\",\"backend\":\"\","
            "\"version_policy\":{\"latest\":{\"num_versions\":1}},\"max_batch_size\":8,"
            "\"input\":[{\"name\":\"IN\",\"data_type\":\"TYPE_INT32\",\"format\":\"FORMAT_NONE\","
            "\"dims\":[16],\"is_shape_tensor\":false,\"allow_ragged_batch\":false,"
            "\"optional\":false}],"
            "\"output\":[{\"name\":\"OUT\",\"data_type\":\"TYPE_INT32\",\"dims\":[16],"
            "\"label_filename\":\"\",\"is_shape_tensor\":false}],"
            "\"instance_group\":[{\"name\":\"simple_0\",\"kind\":\"KIND_AUTO\",\"count\":1,\"gpus\":[]}],"
            "\"default_model_filename\":\"\","
            "\"dynamic_batching\":{\"preferred_batch_size\":[],\"max_queue_delay_microseconds\":0,"
            "\"preserve_ordering\":false,\"priority_levels\":0,\"default_priority_level\":0,"
            "\"priority_queue_policy\":{}},"
            "\"parameters\":{},\"model_warmup\":[]}");
}

TEST(ConfigJsonTest, PrintsMapsAsObjectsWithStringKeysInOrder) {
  ModelConfig config = ParseText(
      "max_batch_size: 4\n"
      "dynamic_batching {\n"
      "  priority_levels: 10\n"
      "  priority_queue_policy { key: 10 value: { max_queue_size: 1 } }\n"
      "  priority_queue_policy { key: 2 value: { timeout_action: DELAY } }\n"
      "}\n"
      "parameters { key: \"z\" value: { string_value: \"last\" } }\n"
      "parameters { key: \"a\" value: { string_value: \"first\" } }\n");
  std::string json = ModelConfigToJson(config);
  EXPECT_THAT(json, HasSubstr("\"parameters\":{\"a\":{\"string_value\":\"first\"},"
                              "\"z\":{\"string_value\":\"last\"}}"));
  EXPECT_THAT(json, HasSubstr("\"priority_queue_policy\":{\"2\":{\"timeout_action\":\"DELAY\","));
  EXPECT_THAT(json, HasSubstr("},\"10\":{\"timeout_action\":\"REJECT\""));
  ExpectRoundTrip(config);
}

TEST(ConfigJsonTest, PrintsOnlyTheSetOneofMember) {
  ModelConfig config = ParseText(
      "model_warmup [ { name: \"w\" batch_size: 1\n"
      "  inputs { key: \"IN\" value: { data_type: TYPE_FP32 dims: [ 4 ] random_data: true } } } ]\n"
      "version_policy { all { } }\n");
  std::string json = ModelConfigToJson(config);
  EXPECT_THAT(json, HasSubstr("\"inputs\":{\"IN\":{\"data_type\":\"TYPE_FP32\",\"dims\":[4],"
                              "\"random_data\":true}}"));
  EXPECT_THAT(json, Not(HasSubstr("zero_data")));
  EXPECT_THAT(json, Not(HasSubstr("input_data_file")));
  EXPECT_THAT(json, HasSubstr("\"version_policy\":{\"all\":{}}"));
  ExpectRoundTrip(config);
}

TEST(ConfigJsonTest, PrintsLargeUnsignedAndEscapedStrings) {
  ModelConfig config = ParseText(
      "name: \"quote\\\" back\\\\ \\u00e9\"\n"
      "dynamic_batching { max_queue_delay_microseconds: 18446744073709551615 }\n"
      "version_policy { specific { versions: [ 9000000000 ] } }\n");
  std::string json = ModelConfigToJson(config);
  EXPECT_THAT(json, HasSubstr("\"max_queue_delay_microseconds\":18446744073709551615"));
  EXPECT_THAT(json, HasSubstr("\"versions\":[9000000000]"));
  EXPECT_THAT(json, HasSubstr("\"name\":\"quote\\\" back\\\\ \xc3\xa9\""));
  ExpectRoundTrip(config);
}

TEST(ConfigJsonTest, FullFixtureRoundTrips) {
  Result<ParsedModelConfig> parsed = LoadModelConfigFile(
      fs::path(VRAMD_SOURCE_DIR) / "tests" / "fixtures" / "configs" / "full.pbtxt");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ASSERT_TRUE(ValidateAndNormalize(&parsed->config, "full").ok());
  ExpectRoundTrip(parsed->config);
}

TEST(ConfigJsonTest, EveryRealTritonConfigRoundTrips) {
  fs::path dir = fs::path(VRAMD_SHARED_FIXTURES_DIR) / "triton-configs";
  if (!fs::is_directory(dir)) GTEST_SKIP() << "no real Triton configs at " << dir;
  int count = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".pbtxt") continue;
    SCOPED_TRACE(entry.path().filename().string());
    Result<ParsedModelConfig> parsed = LoadModelConfigFile(entry.path());
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    ExpectRoundTrip(parsed->config);
    ++count;
  }
  EXPECT_GE(count, 27);
}

TEST(ConfigJsonTest, ParsesInt64GivenAsNumbersOrStrings) {
  Result<ModelConfig> config = ModelConfigFromJson(
      R"({"name":"m","max_batch_size":2,"input":[{"name":"a","data_type":"TYPE_FP32",)"
      R"("dims":[-1,"16"]}],"dynamic_batching":{"max_queue_delay_microseconds":"100"}})");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_THAT(config->input(0).dims(), ElementsAre(-1, 16));
  EXPECT_EQ(config->input(0).data_type(), TYPE_FP32);
  EXPECT_EQ(config->dynamic_batching().max_queue_delay_microseconds(), 100u);
}

TEST(ConfigJsonTest, IgnoresUnknownFieldsAndAcceptsCamelCaseNames) {
  Result<ModelConfig> config = ModelConfigFromJson(
      R"({"name":"m","maxBatchSize":3,"optimization":{"cuda":{"graphs":true}},)"
      R"("instance_group":[{"kind":"KIND_GPU","rate_limiter":{"priority":1}}]})");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->max_batch_size(), 3);
  EXPECT_EQ(config->instance_group(0).kind(), ModelInstanceGroup::KIND_GPU);
}

TEST(ConfigJsonTest, SequenceBatchingReadsInEitherSpelling) {
  for (const char* key : {"sequence_batching", "sequenceBatching"}) {
    Result<ModelConfig> config = ModelConfigFromJson(fmt::format(
        R"({{"name":"m","{}":{{"oldest":{{"max_candidate_sequences":4}},)"
        R"("control_input":[{{"name":"S","control":[{{"kind":"CONTROL_SEQUENCE_START",)"
        R"("int32_false_true":[0,1]}}]}}],"state":[{{"input_name":"i","output_name":"o",)"
        R"("data_type":"TYPE_FP32","dims":[2]}}]}}}})",
        key));
    ASSERT_TRUE(config.ok()) << key << ": " << config.status().ToString();
    ASSERT_TRUE(config->has_sequence_batching()) << key;
    const auto& seq = config->sequence_batching();
    EXPECT_EQ(seq.oldest().max_candidate_sequences(), 4);
    ASSERT_EQ(seq.control_input_size(), 1);
    EXPECT_EQ(seq.control_input(0).control(0).kind(),
              ModelSequenceBatching::Control::CONTROL_SEQUENCE_START);
    ASSERT_EQ(seq.state_size(), 1);
    EXPECT_EQ(seq.state(0).output_name(), "o");
  }
}

TEST(ConfigJsonTest, UnknownFieldsLeaveNothingBehind) {
  // Found by tests/fuzz/config_json: an unknown key with an object value inside a list element
  // came back as an unknown field, so ToJson(FromJson(x)) was not FromJson(x).
  for (const char* json : {R"({"model_warmup":[{"":{}}]})",
                           R"({"input":[{"name":"a","future_field":{"x":1}}]})"}) {
    Result<ModelConfig> config = ModelConfigFromJson(json);
    ASSERT_TRUE(config.ok()) << json << ": " << config.status().ToString();
    Result<ModelConfig> again = ModelConfigFromJson(ModelConfigToJson(*config));
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    // MessageDifferencer compares unknown fields too.
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*config, *again)) << json;
  }
}

TEST(ConfigJsonTest, RejectsUnknownEnumName) {
  Result<ModelConfig> config =
      ModelConfigFromJson(R"({"instance_group":[{"kind":"KIND_GPU"},{"kind":"KIND_TPU"}]})");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(config.status().message(),
            "model config JSON: instance_group[1].kind: \"KIND_TPU\" is not a value of "
            "vramd.config.ModelInstanceGroup.Kind");
}

TEST(ConfigJsonTest, RejectsUnknownEnumNameInsideMapValue) {
  Result<ModelConfig> config = ModelConfigFromJson(
      R"({"model_warmup":[{"inputs":{"IN":{"data_type":"TYPE_FP8"}}}]})");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(),
              HasSubstr("model_warmup[0].inputs[\"IN\"].data_type: \"TYPE_FP8\""));
}

TEST(ConfigJsonTest, RejectsUnknownEnumNumber) {
  Result<ModelConfig> config =
      ModelConfigFromJson(R"({"input":[{"name":"a","data_type":42}]})");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().message(),
            "model config JSON: input[0].data_type: 42 is not a value of vramd.config.DataType");
}

TEST(ConfigJsonTest, RejectsMalformedJsonWithOffset) {
  Result<ModelConfig> config = ModelConfigFromJson(R"({"name": "m",})");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(config.status().message(), HasSubstr("not valid JSON at offset 13"));
}

TEST(ConfigJsonTest, RejectsDeepNestingNamingTheLimitInsteadOfOverflowingTheStack) {
  // A config override comes from a load request: 120k levels overflowed the recursive parser.
  for (const std::string& json :
       {std::string(120'000, '['),
        R"({"parameters": )" + std::string(1'000'000, '[') + std::string(1'000'000, ']') + "}",
        R"({"name": "m", "parameters": {"a": )" + [] {
          std::string deep;
          for (int i = 0; i < 200'000; ++i) deep += R"({"a": )";
          return deep + "1" + std::string(200'000, '}');
        }() + "}}"}) {
    Result<ModelConfig> config = ModelConfigFromJson(json);
    ASSERT_FALSE(config.ok());
    EXPECT_EQ(config.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(config.status().message(),
                HasSubstr("model config JSON nests deeper than 64 levels"));
  }
  // The deepest a real config nests is well inside the limit.
  EXPECT_TRUE(ModelConfigFromJson(
                  R"({"optimization": {"execution_accelerators": {"gpu_execution_accelerator":
                      [{"name": "tensorrt", "parameters": {"precision_mode": "FP16"}}]}}})")
                  .ok());
}

TEST(ConfigJsonTest, RejectsNonObjectAndWrongTypes) {
  EXPECT_EQ(ModelConfigFromJson("[1,2]").status().code(), StatusCode::kInvalidArgument);
  Result<ModelConfig> config = ModelConfigFromJson(R"({"max_batch_size":"eight"})");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(config.status().message(), HasSubstr("does not match ModelConfig"));
  EXPECT_THAT(config.status().message(), HasSubstr("max_batch_size"));
}

TEST(ConfigJsonTest, EmptyObjectIsAnEmptyConfig) {
  Result<ModelConfig> config = ModelConfigFromJson("{}");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->ByteSizeLong(), 0u);
}

}  // namespace
}  // namespace vramd::config
