// Tests for config/model_config_parser.h: real Triton configs, our own fixtures
// (tests/fixtures/configs/) and inline edge cases.
#include "config/model_config_parser.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace vramd::config {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

fs::path OwnFixture(const std::string& name) {
  return fs::path(VRAMD_SOURCE_DIR) / "tests" / "fixtures" / "configs" / name;
}

fs::path TritonConfigDir() { return fs::path(VRAMD_SHARED_FIXTURES_DIR) / "triton-configs"; }

std::vector<fs::path> TritonConfigs() {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(TritonConfigDir())) {
    if (entry.path().extension() == ".pbtxt") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// Each fixture file is named after its model's directory, except where the copy was renamed.
std::string TritonModelDir(const fs::path& file) {
  // docs/examples/jetson/.../trtis_model_repo_sample_2/peoplenet/config.pbtxt (SOURCES.md)
  if (file.stem() == "trtis_model_repo_sample_2_peoplenet") return "peoplenet";
  return file.stem().string();
}

ParsedModelConfig LoadOrFail(const fs::path& path) {
  Result<ParsedModelConfig> parsed = LoadModelConfigFile(path);
  EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
  return parsed.ok() ? std::move(parsed).value() : ParsedModelConfig{};
}

ModelConfig ParseOrFail(std::string_view text) {
  Result<ParsedModelConfig> parsed = ParseModelConfigText(text, "test.pbtxt");
  EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
  return parsed.ok() ? parsed->config : ModelConfig{};
}

class TritonConfigsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::is_directory(TritonConfigDir())) {
      GTEST_SKIP() << "no real Triton configs at " << TritonConfigDir()
                   << " (the shared fixtures are not checked out)";
    }
  }

  // Loads, validates and normalizes one config by file name.
  ParsedModelConfig Load(const std::string& file_name) {
    fs::path path = TritonConfigDir() / file_name;
    ParsedModelConfig parsed = LoadOrFail(path);
    Status status = ValidateAndNormalize(&parsed.config, TritonModelDir(path));
    EXPECT_TRUE(status.ok()) << status.ToString();
    return parsed;
  }
};

// Every real config parses and validates; the fields vramd skips are exactly these.
TEST_F(TritonConfigsTest, EveryConfigParsesValidatesAndListsItsUnsupportedFields) {
  const std::map<std::string, std::vector<std::string>> kUnsupported = {
      {"bert_base_trt_gpu", {"instance_group.profile (line 35)"}},
  };
  std::vector<fs::path> files = TritonConfigs();
  // SOURCES.md lists 27 configs; more may be added, none should disappear.
  EXPECT_GE(files.size(), 27u);
  for (const fs::path& file : files) {
    SCOPED_TRACE(file.filename().string());
    Result<ParsedModelConfig> parsed = LoadModelConfigFile(file);
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    auto expected = kUnsupported.find(file.stem().string());
    if (expected == kUnsupported.end()) {
      EXPECT_THAT(parsed->unsupported_fields, IsEmpty());
    } else {
      EXPECT_EQ(parsed->unsupported_fields, expected->second);
    }
    Status status = ValidateAndNormalize(&parsed->config, TritonModelDir(file));
    EXPECT_TRUE(status.ok()) << status.ToString();
    EXPECT_EQ(parsed->config.name(), TritonModelDir(file));
    EXPECT_GE(parsed->config.instance_group_size(), 1);
  }
}

TEST_F(TritonConfigsTest, SimpleHasTwoInt32InputsAndOutputs) {
  ModelConfig config = Load("simple.pbtxt").config;
  EXPECT_EQ(config.name(), "simple");
  EXPECT_EQ(config.platform(), "onnxruntime_onnx");
  EXPECT_EQ(config.max_batch_size(), 8);
  ASSERT_EQ(config.input_size(), 2);
  EXPECT_EQ(config.input(1).name(), "INPUT1");
  EXPECT_EQ(config.input(1).data_type(), TYPE_INT32);
  EXPECT_THAT(config.input(1).dims(), ElementsAre(16));
  ASSERT_EQ(config.output_size(), 2);
  EXPECT_EQ(config.output(0).name(), "OUTPUT0");
  // Defaults filled in: latest 1 version, one KIND_AUTO group of 1.
  EXPECT_EQ(config.version_policy().latest().num_versions(), 1u);
  ASSERT_EQ(config.instance_group_size(), 1);
  EXPECT_EQ(config.instance_group(0).kind(), ModelInstanceGroup::KIND_AUTO);
  EXPECT_EQ(config.instance_group(0).count(), 1);
  EXPECT_EQ(config.instance_group(0).name(), config.name() + "_0");
}

TEST_F(TritonConfigsTest, DensenetKeepsFormatReshapeAndLabels) {
  ModelConfig config = Load("densenet_onnx.pbtxt").config;
  EXPECT_EQ(config.max_batch_size(), 0);
  ASSERT_EQ(config.input_size(), 1);
  EXPECT_EQ(config.input(0).format(), ModelInput::FORMAT_NCHW);
  EXPECT_THAT(config.input(0).dims(), ElementsAre(3, 224, 224));
  ASSERT_TRUE(config.input(0).has_reshape());
  EXPECT_THAT(config.input(0).reshape().shape(), ElementsAre(1, 3, 224, 224));
  ASSERT_EQ(config.output_size(), 1);
  EXPECT_EQ(config.output(0).label_filename(), "densenet_labels.txt");
  EXPECT_THAT(config.output(0).reshape().shape(), ElementsAre(1, 1000, 1, 1));
}

TEST_F(TritonConfigsTest, BertCpuHasDynamicBatchingAndTwoCpuInstances) {
  ModelConfig config = Load("bert_base_tf_cpu.pbtxt").config;
  EXPECT_EQ(config.name(), "bert_base_tf_cpu");  // from the directory
  EXPECT_EQ(config.input_size(), 0);               // left to the backend to fill in
  ASSERT_TRUE(config.has_dynamic_batching());
  EXPECT_THAT(config.dynamic_batching().preferred_batch_size(), ElementsAre(1));
  EXPECT_EQ(config.dynamic_batching().max_queue_delay_microseconds(), 2000000u);
  ASSERT_EQ(config.instance_group_size(), 1);
  EXPECT_EQ(config.instance_group(0).kind(), ModelInstanceGroup::KIND_CPU);
  EXPECT_EQ(config.instance_group(0).count(), 2);
}

TEST_F(TritonConfigsTest, SkippedInstanceGroupFieldKeepsTheRestOfTheGroup) {
  ParsedModelConfig parsed = Load("bert_base_trt_gpu.pbtxt");
  EXPECT_THAT(parsed.unsupported_fields, ElementsAre("instance_group.profile (line 35)"));
  ASSERT_EQ(parsed.config.instance_group_size(), 1);
  EXPECT_EQ(parsed.config.instance_group(0).kind(), ModelInstanceGroup::KIND_GPU);
  EXPECT_EQ(parsed.config.instance_group(0).count(), 2);
}

// sequence_batching writes `control_input [ ... ]` without a colon, which protobuf 3.21 reads
// only once AddColonsBeforeLists has added it.
TEST_F(TritonConfigsTest, DynaSequenceReadsSequenceBatching) {
  ParsedModelConfig parsed = Load("simple_dyna_sequence.pbtxt");
  EXPECT_THAT(parsed.unsupported_fields, IsEmpty());
  const ModelConfig& config = parsed.config;
  ASSERT_TRUE(config.has_sequence_batching());
  const auto& seq = config.sequence_batching();
  EXPECT_EQ(seq.max_sequence_idle_microseconds(), 10000000u);
  EXPECT_EQ(seq.oldest().max_candidate_sequences(), 1024);
  EXPECT_EQ(seq.oldest().max_queue_delay_microseconds(), 10000u);
  ASSERT_EQ(seq.control_input_size(), 4);
  EXPECT_EQ(seq.control_input(3).name(), "CORRID");
  EXPECT_EQ(seq.control_input(3).control(0).kind(),
            ModelSequenceBatching::Control::CONTROL_SEQUENCE_CORRID);
  EXPECT_EQ(seq.control_input(3).control(0).data_type(), TYPE_UINT64);
  EXPECT_THAT(seq.control_input(0).control(0).int32_false_true(), ElementsAre(0, 1));
  ASSERT_EQ(config.input_size(), 1);
  EXPECT_EQ(config.input(0).name(), "INPUT");
  ASSERT_EQ(config.parameters().count("execute_delay_ms"), 1u);
  EXPECT_EQ(config.parameters().at("execute_delay_ms").string_value(), "3");
  ASSERT_EQ(config.instance_group_size(), 1);
  EXPECT_EQ(config.instance_group(0).count(), 2);
  EXPECT_EQ(config.instance_group(0).kind(), ModelInstanceGroup::KIND_CPU);
}

TEST_F(TritonConfigsTest, DecoupledPythonModelReadsOptionalInputs) {
  ParsedModelConfig parsed = Load("tool_stream_py.pbtxt");
  EXPECT_THAT(parsed.unsupported_fields, IsEmpty());
  const ModelConfig& config = parsed.config;
  EXPECT_TRUE(config.model_transaction_policy().decoupled());
  EXPECT_EQ(config.backend(), "python");
  ASSERT_EQ(config.input_size(), 13);
  EXPECT_FALSE(config.input(0).optional());
  EXPECT_TRUE(config.input(2).optional());
  EXPECT_EQ(config.input(10).name(), "seed");
  EXPECT_EQ(config.input(10).data_type(), TYPE_UINT64);
  EXPECT_THAT(config.output(0).dims(), ElementsAre(1, -1));
}

TEST_F(TritonConfigsTest, VllmConfigGetsNameAndInstanceCountDefaults) {
  ModelConfig config = Load("llama-3.1-8b-instruct.pbtxt").config;
  EXPECT_EQ(config.name(), "llama-3.1-8b-instruct");
  EXPECT_EQ(config.backend(), "vllm");
  ASSERT_EQ(config.instance_group_size(), 1);
  EXPECT_EQ(config.instance_group(0).kind(), ModelInstanceGroup::KIND_MODEL);
  EXPECT_EQ(config.instance_group(0).count(), 1);  // was 0 (unset)
}

TEST_F(TritonConfigsTest, EmptyDynamicBatchingBlockIsKept) {
  ModelConfig config = Load("trtis_model_repo_sample_2_peoplenet.pbtxt").config;
  EXPECT_EQ(config.name(), "peoplenet");
  EXPECT_TRUE(config.has_dynamic_batching());
  EXPECT_THAT(config.dynamic_batching().preferred_batch_size(), IsEmpty());
  EXPECT_EQ(config.output(0).name(), "output_bbox/BiasAdd");
}

TEST_F(TritonConfigsTest, RepeatedInputBlocksAccumulate) {
  // onnx_float32_int32_int32 writes `input [ ... ]` twice.
  ModelConfig config = Load("onnx_float32_int32_int32.pbtxt").config;
  ASSERT_EQ(config.input_size(), 2);
  EXPECT_EQ(config.input(1).name(), "INPUT1");
  ASSERT_EQ(config.output_size(), 2);
  EXPECT_EQ(config.output(1).data_type(), TYPE_INT32);
}

// ---- our own fixtures -------------------------------------------------------------------------

TEST(ConfigParserTest, UnsupportedFieldsAreListedWithPathAndLine) {
  ParsedModelConfig parsed = LoadOrFail(OwnFixture("unsupported_fields.pbtxt"));
  EXPECT_THAT(parsed.unsupported_fields,
              ElementsAre("runtime (line 5)", "input.is_non_linear_format_io (line 12)",
                          "batch_input (line 22)", "instance_group.rate_limiter (line 35)",
                          "instance_group.host_policy (line 36)", "optimization (line 39)",
                          "response_cache (line 50)",
                          "metric_tags (line 51)"));
  const ModelConfig& config = parsed.config;
  EXPECT_EQ(config.backend(), "onnxruntime");
  EXPECT_EQ(config.max_batch_size(), 16);
  ASSERT_EQ(config.input_size(), 1);
  EXPECT_THAT(config.input(0).dims(), ElementsAre(-1, 16));
  ASSERT_EQ(config.instance_group_size(), 1);
  EXPECT_EQ(config.instance_group(0).count(), 2);
  EXPECT_THAT(config.instance_group(0).gpus(), ElementsAre(0, 1));
  EXPECT_EQ(config.parameters().at("EXECUTION_ENV_PATH").string_value(),
            "$$TRITON_MODEL_DIRECTORY/env.tar.gz");
  EXPECT_TRUE(ValidateAndNormalize(&parsed.config, "unsupported_fields").ok());
}

TEST(ConfigParserTest, SyntaxErrorNamesFileLineAndColumn) {
  fs::path path = OwnFixture("syntax_error.pbtxt");
  Result<ParsedModelConfig> parsed = LoadModelConfigFile(path);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  // Line 6 is `    data_type TYPE_FP32` (no colon); TYPE_FP32 starts at column 15.
  EXPECT_EQ(parsed.status().message(),
            path.string() + ":6:15: Expected \":\", found \"TYPE_FP32\".");
}

TEST(ConfigParserTest, UnknownDataTypeNameIsAnErrorAtItsLine) {
  fs::path path = OwnFixture("bad_enum.pbtxt");
  Result<ParsedModelConfig> parsed = LoadModelConfigFile(path);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  // protobuf reports at the token after the value (line 7); we report the value itself.
  EXPECT_THAT(parsed.status().message(), HasSubstr(path.string() + ":6:16: "));
  EXPECT_THAT(parsed.status().message(), HasSubstr("TYPE_FP8"));
  EXPECT_THAT(parsed.status().message(), HasSubstr("data_type"));
}

TEST(ConfigParserTest, DuplicateInputNameIsRejected) {
  ParsedModelConfig parsed = LoadOrFail(OwnFixture("duplicate_input.pbtxt"));
  Status status = ValidateAndNormalize(&parsed.config, "duplicate_input");
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "model 'duplicate_input': input 'INPUT0': the name is used by more than one input");
}

TEST(ConfigParserTest, ZeroDimIsRejected) {
  ParsedModelConfig parsed = LoadOrFail(OwnFixture("bad_dims.pbtxt"));
  Status status = ValidateAndNormalize(&parsed.config, "bad_dims");
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "model 'bad_dims': input 'INPUT0': dims[1] is 0; each dimension must be -1 "
            "(variable) or positive");
}

TEST(ConfigParserTest, ReshapeWithOtherElementCountIsRejected) {
  ParsedModelConfig parsed = LoadOrFail(OwnFixture("bad_reshape.pbtxt"));
  Status status = ValidateAndNormalize(&parsed.config, "bad_reshape");
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "model 'bad_reshape': input 'INPUT0': reshape.shape [4,2] does not have the same "
            "elements as dims [16]");
}

TEST(ConfigParserTest, NameDifferentFromDirectoryIsRejected) {
  ParsedModelConfig parsed = LoadOrFail(OwnFixture("name_mismatch.pbtxt"));
  ModelConfig before = parsed.config;
  Status status = ValidateAndNormalize(&parsed.config, "name_mismatch");
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "model 'name_mismatch': name 'another_model' in the config does not match the model "
            "directory 'name_mismatch'");
  // Nothing was normalized.
  EXPECT_EQ(parsed.config.SerializeAsString(), before.SerializeAsString());
}

TEST(ConfigParserTest, PreferredBatchSizeAboveMaxBatchSizeIsRejected) {
  ParsedModelConfig parsed = LoadOrFail(OwnFixture("preferred_batch_too_big.pbtxt"));
  Status status = ValidateAndNormalize(&parsed.config, "preferred_batch_too_big");
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "model 'preferred_batch_too_big': dynamic_batching.preferred_batch_size 16 must be "
            "positive and at most max_batch_size (8)");
}

TEST(ConfigParserTest, DefaultsAreFilledIn) {
  ParsedModelConfig parsed = LoadOrFail(OwnFixture("minimal_defaults.pbtxt"));
  EXPECT_THAT(parsed.unsupported_fields, IsEmpty());
  ASSERT_TRUE(ValidateAndNormalize(&parsed.config, "minimal_defaults").ok());
  const ModelConfig& config = parsed.config;
  EXPECT_EQ(config.name(), "minimal_defaults");
  ASSERT_TRUE(config.version_policy().has_latest());
  EXPECT_EQ(config.version_policy().latest().num_versions(), 1u);
  ASSERT_EQ(config.instance_group_size(), 1);
  EXPECT_EQ(config.instance_group(0).kind(), ModelInstanceGroup::KIND_AUTO);
  EXPECT_EQ(config.instance_group(0).count(), 1);
  EXPECT_EQ(config.max_batch_size(), 0);
  // Normalizing twice changes nothing.
  ModelConfig once = config;
  ASSERT_TRUE(ValidateAndNormalize(&parsed.config, "minimal_defaults").ok());
  EXPECT_EQ(parsed.config.SerializeAsString(), once.SerializeAsString());
}

TEST(ConfigParserTest, MissingFileIsNotFound) {
  Result<ParsedModelConfig> parsed = LoadModelConfigFile(OwnFixture("does_not_exist.pbtxt"));
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(parsed.status().message(), HasSubstr("does_not_exist.pbtxt"));
}

// ---- inline edge cases ------------------------------------------------------------------------

TEST(ConfigParserTest, UnknownFieldInsideListElementIsNamedByItsPath) {
  Result<ParsedModelConfig> parsed = ParseModelConfigText(
      "input [\n  { name: \"a\" data_type: TYPE_FP32 dims: [ 1 ]\n    format_x: 1 }\n]\n",
      "test.pbtxt");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_THAT(parsed->unsupported_fields, ElementsAre("input.format_x (line 3)"));
  EXPECT_EQ(parsed->config.input(0).name(), "a");
}

TEST(ConfigParserTest, UnknownListFieldWithoutColonOrSpaceIsSkipped) {
  Result<ParsedModelConfig> parsed = ParseModelConfigText(
      "name: \"m\"\nbatch_output[ { target_name: [\"X\"] kind: BATCH_SCATTER } ]\n"
      "optimization { execution_accelerators { gpu_execution_accelerator [ { name: \"a\"\n"
      "  parameters { key: \"k\" value: \"v\" } } ] } }\n"
      "max_batch_size: 2\n",
      "test.pbtxt");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_THAT(parsed->unsupported_fields,
              ElementsAre("batch_output (line 2)", "optimization (line 3)"));
  EXPECT_EQ(parsed->config.name(), "m");
  EXPECT_EQ(parsed->config.max_batch_size(), 2);
}

TEST(ConfigParserTest, EnsembleSchedulingIsRead) {
  Result<ParsedModelConfig> parsed = ParseModelConfigText(
      "platform: \"ensemble\"\nensemble_scheduling { step [ { model_name: \"a\"\n"
      "  model_version: -1 input_map { key: \"k\" value: \"v\" }\n"
      "  output_map { key: \"o\" value: \"w\" } } ] }\n",
      "test.pbtxt");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_THAT(parsed->unsupported_fields, IsEmpty());
  const auto& step = parsed->config.ensemble_scheduling().step(0);
  EXPECT_EQ(step.model_name(), "a");
  EXPECT_EQ(step.model_version(), -1);
  EXPECT_EQ(step.input_map().at("k"), "v");
  EXPECT_EQ(step.output_map().at("o"), "w");
}

TEST(ConfigParserTest, UnknownFieldWhoseBraceIsOnTheNextLineReportsTheNameLine) {
  Result<ParsedModelConfig> parsed =
      ParseModelConfigText("name: \"m\"\noptimization\n{\n  cuda { graphs: true }\n}\n", "t");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_THAT(parsed->unsupported_fields, ElementsAre("optimization (line 2)"));
}

TEST(ConfigParserTest, UnknownDataTypeNumberIsAnError) {
  Result<ParsedModelConfig> parsed = ParseModelConfigText(
      "input [ { name: \"a\" data_type: TYPE_FP32 dims: [1] },\n"
      "        { name: \"b\" data_type: 99 dims: [1] } ]\n",
      "test.pbtxt");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(parsed.status().message(),
            "test.pbtxt: input[1].data_type: 99 is not a value of vramd.config.DataType");
}

TEST(ConfigParserTest, StringThatIsNotUtf8IsAnError) {
  // Such a name could not be sent back as JSON (GET /v2/models/m/config).
  Result<ParsedModelConfig> parsed = ParseModelConfigText(
      "input [ { name: \"ok\" }, { name: \"IN\\xff\" } ]\n", "test.pbtxt");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().message(), "test.pbtxt: input[1].name: not valid UTF-8");

  ModelConfig config;
  (*config.mutable_parameters())["bad\xc0\x80key"].set_string_value("v");
  Status status = ValidateAndNormalize(&config, "m");
  EXPECT_EQ(status.message(), "model 'm': parameters key: not valid UTF-8");

  // Well-formed multi-byte text is fine.
  EXPECT_TRUE(ParseModelConfigText("name: \"\u00e9\u4e2d\U0001F600\"", "t").ok());
}

TEST(ConfigParserTest, MapKeyGivenTwiceIsAnError) {
  // Found by tests/fuzz/config_pbtxt: accepted, the config's JSON (GET /v2/models/m/config)
  // named the key twice, and that JSON was refused as a config override.
  Result<ParsedModelConfig> parsed = ParseModelConfigText(
      "model_warmup [ { name: \"w\"\n"
      "  inputs { key: \"INPUT1\" value: { data_type: TYPE_FP32 dims: [ 1 ] zero_data: true } }\n"
      "  inputs { key: \"INPUT1\" value: { data_type: TYPE_FP32 dims: [ 2 ] zero_data: true } }\n"
      "} ]\n",
      "test.pbtxt");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(parsed.status().message(),
            "test.pbtxt: model_warmup[0].inputs: key \"INPUT1\" is given twice");
  EXPECT_FALSE(ParseModelConfigText("parameters { key: \"a\" value: {} }\n"
                                    "parameters { key: \"a\" value: {} }\n",
                                    "test.pbtxt")
                   .ok());
  EXPECT_TRUE(ParseModelConfigText("parameters { key: \"a\" value: {} }\n"
                                   "parameters { key: \"b\" value: {} }\n",
                                   "test.pbtxt")
                  .ok());
}

TEST(ConfigParserTest, UnknownInstanceKindIsAnError) {
  Result<ParsedModelConfig> parsed =
      ParseModelConfigText("instance_group [ { kind: KIND_TPU } ]\n", "test.pbtxt");
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(), HasSubstr("test.pbtxt:1:26: "));
  EXPECT_THAT(parsed.status().message(), HasSubstr("KIND_TPU"));
}

TEST(ConfigParserTest, RepeatedSingularFieldIsAnErrorAtItsName) {
  Result<ParsedModelConfig> parsed =
      ParseModelConfigText("name: \"a\"\n  name: \"b\"\n", "test.pbtxt");
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(), HasSubstr("test.pbtxt:2:3: "));
  EXPECT_THAT(parsed.status().message(), HasSubstr("name"));
}

TEST(ConfigParserTest, WrongValueTypeIsAnError) {
  Result<ParsedModelConfig> parsed =
      ParseModelConfigText("name: \"m\"\nmax_batch_size: \"eight\"\n", "m/config.pbtxt");
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(), HasSubstr("m/config.pbtxt:2:17: "));
}

TEST(ConfigParserTest, UnterminatedBlockReportsEndOfFile) {
  Result<ParsedModelConfig> parsed =
      ParseModelConfigText("name: \"m\"\ninput [\n  { name: \"a\"\n", "test.pbtxt");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().message(), "test.pbtxt:4:1: Expected identifier, got: end of file");
}

TEST(ConfigParserTest, TabsCountToTheNextMultipleOfEightAndColonRewriteKeepsColumns) {
  // `dims [` has its space turned into a colon internally; the error column must still be the
  // column as written. After a tab, `max_batch_size` starts at column 9 (1-based), so `x` is
  // at 25.
  Result<ParsedModelConfig> parsed =
      ParseModelConfigText("input [ { name: \"a\" dims [ 1 ] }, ]\n", "test.pbtxt");
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(), HasSubstr("test.pbtxt:1:35: "));
  parsed = ParseModelConfigText("\tmax_batch_size: x\n", "test.pbtxt");
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(), HasSubstr("test.pbtxt:1:25: "));
}

TEST(ConfigParserTest, EmptyTextIsAnEmptyConfig) {
  ModelConfig config = ParseOrFail("# only a comment\n");
  EXPECT_EQ(config.ByteSizeLong(), 0u);
  ASSERT_TRUE(ValidateAndNormalize(&config, "empty").ok());
  EXPECT_EQ(config.name(), "empty");
}

struct ValidationCase {
  const char* label;
  const char* text;
  const char* message;  // expected, after "model 'm': "
};

class ValidationTest : public ::testing::TestWithParam<ValidationCase> {};

TEST_P(ValidationTest, RejectsWithMessage) {
  ModelConfig config = ParseOrFail(GetParam().text);
  ModelConfig before = config;
  Status status = ValidateAndNormalize(&config, "m");
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), std::string("model 'm': ") + GetParam().message);
  EXPECT_EQ(config.SerializeAsString(), before.SerializeAsString());
}

INSTANTIATE_TEST_SUITE_P(
    ConfigParserTest, ValidationTest,
    ::testing::Values(
        ValidationCase{"NegativeMaxBatchSize", "max_batch_size: -1",
                       "max_batch_size is -1; must be 0 or positive"},
        ValidationCase{"EmptyInputName", "input [ { data_type: TYPE_FP32 dims: [1] } ]",
                       "input[0]: name is empty"},
        ValidationCase{"DuplicateOutputName",
                       "output [ { name: \"o\" data_type: TYPE_FP32 dims: [1] },"
                       " { name: \"o\" data_type: TYPE_FP32 dims: [1] } ]",
                       "output 'o': the name is used by more than one output"},
        ValidationCase{"MissingDataType", "output [ { name: \"o\" dims: [1] } ]",
                       "output 'o': data_type is not set"},
        ValidationCase{"DimBelowMinusOne",
                       "input [ { name: \"i\" data_type: TYPE_FP32 dims: [-2] } ]",
                       "input 'i': dims[0] is -2; each dimension must be -1 (variable) or "
                       "positive"},
        ValidationCase{"ReshapeZero",
                       "input [ { name: \"i\" data_type: TYPE_FP32 dims: [4]"
                       " reshape { shape: [0] } } ]",
                       "input 'i': reshape.shape[0] is 0; each dimension must be -1 (variable) or "
                       "positive"},
        ValidationCase{"ReshapeVariableCountDiffers",
                       "input [ { name: \"i\" data_type: TYPE_FP32 dims: [-1, 4]"
                       " reshape { shape: [4] } } ]",
                       "input 'i': reshape.shape [4] does not have the same elements as dims "
                       "[-1,4]"},
        ValidationCase{"NegativeInstanceCount", "instance_group [ { count: -2 } ]",
                       "instance_group[0]: count is -2; must be 0 (meaning 1) or positive"},
        // Triton's checks (its model_config_utils.cc) of the fields vramd reads, each with
        // vramd's words. Deliberately not among them: empty dims (vramd serves scalars) and
        // duplicate tensor names (Triton keeps the first silently; vramd refuses, above).
        ValidationCase{"EnsembleWithoutSteps", "platform: \"ensemble\"",
                       "platform \"ensemble\" needs ensemble_scheduling with at least one step"},
        ValidationCase{"EnsembleSchedulingOnAnotherPlatform",
                       "backend: \"identity\" ensemble_scheduling { step [ { model_name: \"a\" } ] }",
                       "ensemble_scheduling is for platform \"ensemble\", and the platform is ''"},
        ValidationCase{"EnsembleWithABackend",
                       "platform: \"ensemble\" backend: \"identity\""
                       " ensemble_scheduling { step [ { model_name: \"a\" } ] }",
                       "an ensemble names no backend (its steps' models have theirs), not "
                       "'identity'"},
        ValidationCase{"CpuGroupWithGpus",
                       "instance_group [ { name: \"g\" kind: KIND_CPU gpus: [0, 1] } ]",
                       "instance_group 'g': kind KIND_CPU runs on no GPU, yet gpus lists [0, 1]; "
                       "drop gpus or make the kind KIND_GPU"},
        ValidationCase{"ModelGroupWithGpus", "instance_group [ { kind: KIND_MODEL gpus: [0] } ]",
                       "instance_group[0]: kind KIND_MODEL runs on no GPU, yet gpus lists [0]; "
                       "drop gpus or make the kind KIND_GPU"},
        ValidationCase{"NegativeGpu", "instance_group [ { kind: KIND_GPU gpus: [0, -1] } ]",
                       "instance_group[0]: gpus lists -1; a GPU is named by its index, 0 or more"},
        ValidationCase{"EmptyReshapeWithoutBatching",
                       "input [ { name: \"i\" data_type: TYPE_FP32 dims: [1]"
                       " reshape { shape: [] } } ]",
                       "input 'i': an empty reshape makes a scalar, which only a batching model "
                       "may take (max_batch_size is 0)"},
        ValidationCase{"EmptyOutputReshapeWithoutBatching",
                       "output [ { name: \"o\" data_type: TYPE_FP32 dims: [1]"
                       " reshape { } } ]",
                       "output 'o': an empty reshape makes a scalar, which only a batching model "
                       "may take (max_batch_size is 0)"},
        ValidationCase{"ImageFormatWithoutThreeDims",
                       "input [ { name: \"i\" data_type: TYPE_FP32 format: FORMAT_NCHW"
                       " dims: [3, 224] } ]",
                       "input 'i': format FORMAT_NCHW needs 3 dims (an image without the batch "
                       "dimension), not 2"},
        ValidationCase{"ShapeTensor",
                       "input [ { name: \"i\" data_type: TYPE_INT32 dims: [2]"
                       " is_shape_tensor: true } ]",
                       "input 'i': is_shape_tensor is for TensorRT models, which vramd does not "
                       "serve"},
        ValidationCase{"DefaultPriorityLevelOutOfRange",
                       "max_batch_size: 4 dynamic_batching { priority_levels: 2 }",
                       "dynamic_batching.default_priority_level is 0; with priority_levels 2 it "
                       "must be in [1, 2]"},
        ValidationCase{"PriorityQueuePolicyLevelOutOfRange",
                       "max_batch_size: 4 dynamic_batching { priority_levels: 2"
                       " default_priority_level: 1 priority_queue_policy { key: 3 value { } } }",
                       "dynamic_batching.priority_queue_policy has level 3; with priority_levels "
                       "2 the levels are 1 to 2"},
        ValidationCase{"PreserveOrderingWithPriorities",
                       "max_batch_size: 4 dynamic_batching { preserve_ordering: true"
                       " priority_levels: 2 default_priority_level: 1 }",
                       "dynamic_batching.preserve_ordering allows one priority level, not 2"},
        ValidationCase{"PreserveOrderingWithDelay",
                       "max_batch_size: 4 dynamic_batching { preserve_ordering: true"
                       " default_queue_policy { timeout_action: DELAY"
                       " default_timeout_microseconds: 100 } }",
                       "dynamic_batching.preserve_ordering cannot keep the order with a queue "
                       "policy whose timeout_action is DELAY"},
        ValidationCase{"PreferredBatchWithoutBatching",
                       "dynamic_batching { preferred_batch_size: 1 }",
                       "dynamic_batching.preferred_batch_size 1 must be positive and at most "
                       "max_batch_size (0)"},
        ValidationCase{"PreferredBatchZero",
                       "max_batch_size: 4 dynamic_batching { preferred_batch_size: [2, 0] }",
                       "dynamic_batching.preferred_batch_size 0 must be positive and at most "
                       "max_batch_size (4)"},
        // Sequence batching, as Triton's sequence batcher checks it at load.
        ValidationCase{"SequenceIterative", "sequence_batching { iterative_sequence: true }",
                       "sequence_batching: iterative_sequence is not served (vramd does not "
                       "reschedule requests); the model would not see the iterations it expects"},
        ValidationCase{"SequenceControlWithoutValues",
                       "sequence_batching { control_input [ { name: \"S\" control [ { kind: "
                       "CONTROL_SEQUENCE_START } ] } ] }",
                       "sequence_batching: control_input 'S': CONTROL_SEQUENCE_START needs exactly "
                       "one of int32_false_true, fp32_false_true and bool_false_true, and has 0"},
        ValidationCase{"SequenceControlOneValue",
                       "sequence_batching { control_input [ { name: \"S\" control [ { kind: "
                       "CONTROL_SEQUENCE_END int32_false_true: [1] } ] } ] }",
                       "sequence_batching: control_input 'S': CONTROL_SEQUENCE_END has 1 values; "
                       "it needs two, [false, true]"},
        ValidationCase{"SequenceControlKindTwice",
                       "sequence_batching { control_input [ { name: \"A\" control [ { kind: "
                       "CONTROL_SEQUENCE_READY bool_false_true: [false, true] } ] }, { name: "
                       "\"B\" control [ { kind: CONTROL_SEQUENCE_READY fp32_false_true: [0, 1] "
                       "} ] } ] }",
                       "sequence_batching: control_input 'B': CONTROL_SEQUENCE_READY is given by "
                       "two control inputs"},
        ValidationCase{"SequenceControlTwoControls",
                       "sequence_batching { control_input [ { name: \"A\" control [ { kind: "
                       "CONTROL_SEQUENCE_READY bool_false_true: [false, true] }, { kind: "
                       "CONTROL_SEQUENCE_END bool_false_true: [false, true] } ] } ] }",
                       "sequence_batching: control_input 'A' has 2 controls; it must have "
                       "exactly one"},
        ValidationCase{"SequenceControlNamedAsInput",
                       "input [ { name: \"X\" data_type: TYPE_FP32 dims: [1] } ] "
                       "sequence_batching { control_input [ { name: \"X\" control [ { "
                       "kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] } ] } ] }",
                       "sequence_batching: control_input 'X' has the name of a model input"},
        ValidationCase{"SequenceCorridType",
                       "sequence_batching { control_input [ { name: \"C\" control [ { kind: "
                       "CONTROL_SEQUENCE_CORRID data_type: TYPE_FP32 } ] } ] }",
                       "sequence_batching: control_input 'C': CONTROL_SEQUENCE_CORRID data_type "
                       "is TYPE_FP32; it must be TYPE_UINT64, TYPE_INT64, TYPE_UINT32, "
                       "TYPE_INT32 or TYPE_STRING"},
        ValidationCase{"SequenceStateString",
                       "sequence_batching { state [ { input_name: \"i\" output_name: \"o\" "
                       "data_type: TYPE_STRING dims: [1] } ] }",
                       "sequence_batching: state 'i': data_type TYPE_STRING is not served for "
                       "implicit state"},
        ValidationCase{"SequenceStateNoDims",
                       "sequence_batching { state [ { input_name: \"i\" output_name: \"o\" "
                       "data_type: TYPE_FP32 } ] }",
                       "sequence_batching: state 'i' has no dims"},
        ValidationCase{"SequenceStateInitialDims",
                       "sequence_batching { state [ { input_name: \"i\" output_name: \"o\" "
                       "data_type: TYPE_FP32 dims: [2] initial_state [ { name: \"z\" "
                       "data_type: TYPE_FP32 dims: [3] zero_data: true } ] } ] }",
                       "sequence_batching: state 'i': initial_state 'z' dims do not fit the "
                       "state's dims"},
        ValidationCase{"SequenceStateInitialWithoutData",
                       "sequence_batching { state [ { input_name: \"i\" output_name: \"o\" "
                       "data_type: TYPE_FP32 dims: [-1] initial_state [ { name: \"z\" "
                       "data_type: TYPE_FP32 dims: [3] } ] } ] }",
                       "sequence_batching: state 'i': initial_state 'z' needs zero_data or "
                       "data_file"},
        ValidationCase{"SequenceStateFileEscapes",
                       "sequence_batching { state [ { input_name: \"i\" output_name: \"o\" "
                       "data_type: TYPE_FP32 dims: [1] initial_state [ { name: \"z\" "
                       "data_type: TYPE_FP32 dims: [1] data_file: \"../secret\" } ] } ] }",
                       "sequence_batching: state 'i': initial_state 'z' data_file '../secret' "
                       "must be a file name under the model's initial_state folder"},
        ValidationCase{"SequenceStateNamedAsInput",
                       "input [ { name: \"X\" data_type: TYPE_FP32 dims: [1] } ] "
                       "sequence_batching { state [ { input_name: \"X\" output_name: "
                       "\"o\" data_type: TYPE_FP32 dims: [1] } ] }",
                       "sequence_batching: state input_name 'X' is already a model input, a "
                       "control input or another state's input"},
        ValidationCase{"SequenceStateDecoupled",
                       "model_transaction_policy { decoupled: true } sequence_batching { state "
                       "[ { input_name: \"i\" output_name: \"o\" data_type: TYPE_FP32 dims: "
                       "[1] } ] }",
                       "sequence_batching: implicit state on a decoupled model is not served "
                       "(its state output may come after the sequence's next request has run)"},
        ValidationCase{"SequenceSlotUtilization",
                       "sequence_batching { direct { minimum_slot_utilization: 1.5 } }",
                       "sequence_batching: direct.minimum_slot_utilization is 1.5; it must be in "
                       "[0, 1]"},
        ValidationCase{"SequenceOldestPreferred",
                       "max_batch_size: 4 sequence_batching { oldest { preferred_batch_size: "
                       "[8] } }",
                       "sequence_batching: oldest.preferred_batch_size 8 is outside [1, 4] "
                       "(max_batch_size)"}),
    [](const ::testing::TestParamInfo<ValidationCase>& info) { return info.param.label; });

TEST(ConfigParserTest, TritonsChecksAcceptWhatTheyShould) {
  for (const char* text :
       {"max_batch_size: 8 input [ { name: \"i\" data_type: TYPE_FP32 dims: [1]"
        " reshape { shape: [] } } ]",
        "instance_group [ { kind: KIND_GPU gpus: [0, 1] } ]",
        "instance_group [ { kind: KIND_CPU } ]",
        "input [ { name: \"i\" data_type: TYPE_FP32 format: FORMAT_NHWC dims: [224, 224, 3] } ]",
        "max_batch_size: 4 dynamic_batching { priority_levels: 3 default_priority_level: 3"
        " priority_queue_policy { key: 1 value { max_queue_size: 2 } } }",
        "max_batch_size: 4 dynamic_batching { preserve_ordering: true"
        " default_queue_policy { timeout_action: DELAY } }",
        "input [ { name: \"scalar\" data_type: TYPE_FP32 dims: [] } ]"}) {
    ModelConfig config = ParseOrFail(text);
    Status status = ValidateAndNormalize(&config, "m");
    EXPECT_TRUE(status.ok()) << text << ": " << status.ToString();
  }
}

TEST(ConfigParserTest, ValidationRejectsUnknownEnumNumberFromOtherSources) {
  ModelConfig config;  // e.g. built from JSON or by code
  config.add_instance_group()->set_kind(static_cast<ModelInstanceGroup::Kind>(7));
  Status status = ValidateAndNormalize(&config, "m");
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "model 'm': instance_group[0].kind: 7 is not a value of "
            "vramd.config.ModelInstanceGroup.Kind");
}

TEST(ConfigParserTest, ReshapeRulesAcceptMatchingElements) {
  // A batching model: an empty reshape (a scalar per batch entry) needs the batch dimension.
  const std::string kInput = "max_batch_size: 8 input [ { name: \"i\" data_type: TYPE_FP32 ";
  for (const char* dims_and_reshape : {
           "dims: [16] reshape { shape: [4, 4] }",
           "dims: [-1, 4] reshape { shape: [-1, 2, 2] }",
           "dims: [1] reshape { shape: [] }",
           "dims: [2, -1, 3] reshape { shape: [1, 2, -1, 3, 1] }",
       }) {
    SCOPED_TRACE(dims_and_reshape);
    ModelConfig config = ParseOrFail(kInput + dims_and_reshape + " } ]");
    Status status = ValidateAndNormalize(&config, "m");
    EXPECT_TRUE(status.ok()) << status.ToString();
  }
}

TEST(ConfigParserTest, ZeroCountBecomesOneAndNamelessDirectoryIsAnError) {
  ModelConfig config =
      ParseOrFail("instance_group [ { kind: KIND_CPU }, { count: 3 kind: KIND_GPU } ]");
  ASSERT_TRUE(ValidateAndNormalize(&config, "m").ok());
  ASSERT_EQ(config.instance_group_size(), 2);
  EXPECT_EQ(config.instance_group(0).count(), 1);
  EXPECT_EQ(config.instance_group(1).count(), 3);

  ModelConfig nameless;
  EXPECT_EQ(ValidateAndNormalize(&nameless, "").code(), StatusCode::kInvalidArgument);
}

TEST(ConfigParserTest, ExplicitVersionPolicyIsKept) {
  ModelConfig config = ParseOrFail("version_policy: { specific { versions: [1, 3] } }");
  ASSERT_TRUE(ValidateAndNormalize(&config, "m").ok());
  EXPECT_TRUE(config.version_policy().has_specific());
  EXPECT_THAT(config.version_policy().specific().versions(), ElementsAre(1, 3));
}

}  // namespace
}  // namespace vramd::config
