// The built-in backends (identity, add_sub), reached as the runtime reaches them (FindBackend,
// then the C ABI bridge), and FindBackend's lookup.
#include <gmock/gmock.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "memory/allocator.h"
#include "memory/ledger.h"

namespace vramd::backends {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsSupersetOf;

// The list of available backends names the built-ins. Tests that run in the same process (the
// unit tests may run as gtest shards, tests/CMakeLists.txt) may have registered more.
auto ListsTheBuiltIns() {
  return AllOf(HasSubstr("available backends: add_sub, "), HasSubstr(", ensemble, "),
               HasSubstr(", identity"), HasSubstr(", mlp"));
}

config::ModelConfig ParseConfig(const std::string& text) {
  config::ModelConfig config;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &config)) << text;
  return config;
}

// A loaded model with one instance; keeps the config alive as ModelContext requires.
struct Loaded {
  std::unique_ptr<config::ModelConfig> config;
  std::unique_ptr<BackendModel> model;
  std::unique_ptr<BackendInstance> instance;
};

// `model_dir`: where the model's files are (the mlp backend reads its weights there).
Result<Loaded> Load(const std::string& config_text, std::filesystem::path model_dir = {}) {
  static memory::Ledger ledger;
  static memory::Allocator allocator(&ledger);
  Loaded l;
  l.config = std::make_unique<config::ModelConfig>(ParseConfig(config_text));
  VRAMD_ASSIGN_OR_RETURN(Backend * backend, FindBackend(*l.config));
  if (model_dir.empty()) model_dir = "/nonexistent/" + l.config->name();
  ModelContext mctx{l.config->name(), 1, model_dir, model_dir / "1", l.config.get(), &allocator};
  VRAMD_ASSIGN_OR_RETURN(l.model, backend->LoadModel(mctx));
  InstanceContext ictx{l.config->name() + "_0", 0, DeviceKind::kCpu, -1};
  VRAMD_ASSIGN_OR_RETURN(l.instance, l.model->CreateInstance(ictx));
  return l;
}

Status LoadStatus(const std::string& config_text) { return Load(config_text).status(); }

template <typename T>
Tensor Make(const std::string& name, DataType type, Shape shape, const std::vector<T>& values) {
  return Tensor{name, type, std::move(shape),
                SharedBuffer::CopyOf(values.data(), values.size() * sizeof(T))};
}

template <typename T>
std::vector<T> Values(const Tensor& t) {
  std::vector<T> out(t.data.size() / sizeof(T));
  std::memcpy(out.data(), t.data.data(), out.size() * sizeof(T));
  return out;
}

// ---- FindBackend ----------------------------------------------------------------------------

TEST(FindBackendTest, ListsTheBuiltInBackends) {
  const std::vector<std::string> available = AvailableBackends();
  EXPECT_THAT(available, IsSupersetOf({"add_sub", "ensemble", "identity", "mlp"}));
  EXPECT_TRUE(std::is_sorted(available.begin(), available.end()));
}

TEST(FindBackendTest, FindsBackendByName) {
  auto b = FindBackend(ParseConfig(R"pb(name: "m" backend: "identity")pb"));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ((*b)->name(), "identity");
  b = FindBackend(ParseConfig(R"pb(name: "m" backend: "add_sub")pb"));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ((*b)->name(), "add_sub");
}

TEST(FindBackendTest, BackendFieldWinsOverPlatform) {
  auto b =
      FindBackend(ParseConfig(R"pb(name: "m" platform: "onnxruntime_onnx" backend: "identity")pb"));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ((*b)->name(), "identity");
}

TEST(FindBackendTest, MapsTritonPlatformsToBackendNames) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"pytorch_libtorch", "pytorch"},       {"onnxruntime_onnx", "onnxruntime"},
      {"tensorrt_plan", "tensorrt"},         {"tensorflow_savedmodel", "tensorflow"},
      {"tensorflow_graphdef", "tensorflow"},
  };
  for (const auto& [platform, backend] : cases) {
    config::ModelConfig c;
    c.set_name("m");
    c.set_platform(platform);
    auto b = FindBackend(c);
    ASSERT_FALSE(b.ok()) << platform;
    EXPECT_EQ(b.status().code(), StatusCode::kNotFound);
    EXPECT_THAT(b.status().message(),
                HasSubstr("backend '" + backend + "' (from platform '" + platform + "')"));
    EXPECT_THAT(b.status().message(), ListsTheBuiltIns());
  }
}

TEST(FindBackendTest, UnknownBackendIsNotFoundListingAvailable) {
  auto b = FindBackend(ParseConfig(R"pb(name: "m" backend: "python")pb"));
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(b.status().message(), HasSubstr("backend 'python' is not available"));
  EXPECT_THAT(b.status().message(), ListsTheBuiltIns());
}

TEST(FindBackendTest, UnknownPlatformIsNotFound) {
  auto b = FindBackend(ParseConfig(R"pb(name: "m" platform: "caffe2_netdef")pb"));
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(b.status().message(), HasSubstr("unknown platform 'caffe2_netdef'"));
}

TEST(FindBackendTest, NeitherBackendNorPlatformIsInvalid) {
  auto b = FindBackend(ParseConfig(R"pb(name: "m")pb"));
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(b.status().message(), HasSubstr("neither 'backend' nor 'platform'"));
}

// ---- identity -------------------------------------------------------------------------------

std::string IdentityConfig(const std::string& type) {
  return R"pb(name: "identity"
              backend: "identity"
              input { name: "INPUT0" data_type:)pb" +
         type + R"pb(                      dims: [ -1 ] }
                                           output { name: "OUTPUT0" data_type: )pb" +
         type + R"pb(                      dims: [ -1 ] })pb";
}

TEST(IdentityBackendTest, ReturnsTheInputBytesForEveryType) {
  struct Case {
    std::string config_type;
    DataType type;
    size_t bytes_per_element;
  };
  const std::vector<Case> cases = {
      {"TYPE_BOOL", DataType::kBool, 1},     {"TYPE_INT8", DataType::kInt8, 1},
      {"TYPE_UINT16", DataType::kUint16, 2}, {"TYPE_FP16", DataType::kFp16, 2},
      {"TYPE_BF16", DataType::kBf16, 2},     {"TYPE_INT32", DataType::kInt32, 4},
      {"TYPE_FP32", DataType::kFp32, 4},     {"TYPE_INT64", DataType::kInt64, 8},
      {"TYPE_FP64", DataType::kFp64, 8}};
  for (const Case& c : cases) {
    auto loaded = Load(IdentityConfig(c.config_type));
    ASSERT_TRUE(loaded.ok()) << c.config_type << ": " << loaded.status().ToString();
    InferRequest req;
    std::string bytes(3 * c.bytes_per_element, '\x5a');
    req.inputs.push_back(Tensor{"INPUT0", c.type, {3}, SharedBuffer::FromString(bytes)});
    std::vector<Tensor> out;
    ASSERT_TRUE(loaded->instance->Execute(req, &out).ok()) << c.config_type;
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].name, "OUTPUT0");
    EXPECT_EQ(out[0].datatype, c.type);
    EXPECT_EQ(out[0].shape, Shape{3});
    EXPECT_EQ(out[0].data.view(), bytes);
  }
}

TEST(IdentityBackendTest, BytesOutputIsTheSerializedInput) {
  auto loaded = Load(IdentityConfig("TYPE_STRING"));
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  std::string data;
  AppendBytesElement(&data, "hello");
  AppendBytesElement(&data, "");
  InferRequest req;
  req.inputs.push_back(Tensor{"INPUT0", DataType::kBytes, {2}, SharedBuffer::FromString(data)});
  std::vector<Tensor> out;
  ASSERT_TRUE(loaded->instance->Execute(req, &out).ok());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].datatype, DataType::kBytes);
  EXPECT_EQ(out[0].data.view(), data);
  auto elements = SplitBytesElements(out[0].data.view(), "OUTPUT0", 2);
  ASSERT_TRUE(elements.ok());
  EXPECT_THAT(*elements, ElementsAre("hello", ""));
}

TEST(IdentityBackendTest, MapsInputNToOutputNByName) {
  auto loaded = Load(R"pb(
    name: "pair"
    backend: "identity"
    max_batch_size: 4
    input {
      name: "INPUT0"
      data_type: TYPE_INT32
      dims: [ 2 ]
    }
    input {
      name: "INPUT1"
      data_type: TYPE_FP32
      dims: [ 2 ]
    }
    output {
      name: "OUTPUT1"
      data_type: TYPE_FP32
      dims: [ 2 ]
    }
    output {
      name: "OUTPUT0"
      data_type: TYPE_INT32
      dims: [ 2 ]
    }
  )pb");
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  InferRequest req;
  req.inputs.push_back(Make<int32_t>("INPUT0", DataType::kInt32, {1, 2}, {1, 2}));
  req.inputs.push_back(Make<float>("INPUT1", DataType::kFp32, {1, 2}, {0.5f, 1.5f}));
  std::vector<Tensor> out;
  ASSERT_TRUE(loaded->instance->Execute(req, &out).ok());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].name, "OUTPUT1");
  EXPECT_THAT(Values<float>(out[0]), ElementsAre(0.5f, 1.5f));
  EXPECT_EQ(out[1].name, "OUTPUT0");
  EXPECT_THAT(Values<int32_t>(out[1]), ElementsAre(1, 2));
  EXPECT_EQ(out[1].shape, (Shape{1, 2}));
}

TEST(IdentityBackendTest, MapsByPositionWhenNamesDoNotPair) {
  auto loaded = Load(R"pb(
    name: "named"
    backend: "identity"
    input {
      name: "x"
      data_type: TYPE_INT64
      dims: [ -1 ]
    }
    input {
      name: "y"
      data_type: TYPE_INT64
      dims: [ -1 ]
    }
    output {
      name: "a"
      data_type: TYPE_INT64
      dims: [ -1 ]
    }
    output {
      name: "b"
      data_type: TYPE_INT64
      dims: [ -1 ]
    }
  )pb");
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  InferRequest req;
  req.inputs.push_back(Make<int64_t>("y", DataType::kInt64, {1}, {7}));
  req.inputs.push_back(Make<int64_t>("x", DataType::kInt64, {1}, {3}));
  std::vector<Tensor> out;
  ASSERT_TRUE(loaded->instance->Execute(req, &out).ok());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].name, "a");
  EXPECT_THAT(Values<int64_t>(out[0]), ElementsAre(3));
  EXPECT_EQ(out[1].name, "b");
  EXPECT_THAT(Values<int64_t>(out[1]), ElementsAre(7));
}

TEST(IdentityBackendTest, LeavesOutTheOutputOfAnAbsentOptionalInput) {
  auto loaded = Load(R"pb(
    name: "optional_input"
    backend: "identity"
    input {
      name: "INPUT0"
      data_type: TYPE_FP32
      dims: [ -1 ]
    }
    input {
      name: "INPUT1"
      data_type: TYPE_FP32
      dims: [ -1 ]
      optional: true
    }
    output {
      name: "OUTPUT0"
      data_type: TYPE_FP32
      dims: [ -1 ]
    }
    output {
      name: "OUTPUT1"
      data_type: TYPE_FP32
      dims: [ -1 ]
    }
  )pb");
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  InferRequest req;
  req.inputs.push_back(Make<float>("INPUT0", DataType::kFp32, {1}, {1.0f}));
  std::vector<Tensor> out;
  ASSERT_TRUE(loaded->instance->Execute(req, &out).ok());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].name, "OUTPUT0");
}

TEST(IdentityBackendTest, InstancesOfOneModelServeIndependently) {
  auto loaded = Load(IdentityConfig("TYPE_FP32"));
  ASSERT_TRUE(loaded.ok());
  auto second = loaded->model->CreateInstance({"identity_1", 1, DeviceKind::kCpu, -1});
  ASSERT_TRUE(second.ok());
  loaded->model.reset();  // instances hold what they need
  InferRequest req;
  req.inputs.push_back(Make<float>("INPUT0", DataType::kFp32, {2}, {1.0f, 2.0f}));
  std::vector<Tensor> out;
  ASSERT_TRUE((*second)->Execute(req, &out).ok());
  ASSERT_TRUE(loaded->instance->Execute(req, &out).ok());
  EXPECT_EQ(out.size(), 2u);
}

TEST(IdentityBackendTest, LoadRejectsUnequalInputAndOutputCounts) {
  Status s = LoadStatus(R"pb(
    name: "bad"
    backend: "identity"
    input {
      name: "INPUT0"
      data_type: TYPE_FP32
      dims: [ -1 ]
    }
    input {
      name: "INPUT1"
      data_type: TYPE_FP32
      dims: [ -1 ]
    }
    output {
      name: "OUTPUT0"
      data_type: TYPE_FP32
      dims: [ -1 ]
    }
  )pb");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("2 input(s) and 1 output(s)"));
}

TEST(IdentityBackendTest, LoadRejectsOutputTypeDifferentFromItsInput) {
  Status s = LoadStatus(R"pb(
    name: "bad"
    backend: "identity"
    input {
      name: "INPUT0"
      data_type: TYPE_FP32
      dims: [ -1 ]
    }
    output {
      name: "OUTPUT0"
      data_type: TYPE_INT32
      dims: [ -1 ]
    }
  )pb");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              HasSubstr("output[0].data_type of 'OUTPUT0' is TYPE_INT32 but its input 'INPUT0' is "
                        "TYPE_FP32"));
}

// ---- add_sub --------------------------------------------------------------------------------

std::string AddSubConfig(const std::string& type, int max_batch_size, const std::string& dims) {
  const std::string t = " data_type: " + type + " dims: " + dims + " }\n";
  return "name: \"add_sub\" backend: \"add_sub\" max_batch_size: " +
         std::to_string(max_batch_size) + "\n" + "input { name: \"INPUT0\"" + t +
         "input { name: \"INPUT1\"" + t + "output { name: \"OUTPUT0\"" + t +
         "output { name: \"OUTPUT1\"" + t;
}

TEST(AddSubBackendTest, AddsAndSubtractsFp32) {
  auto loaded = Load(AddSubConfig("TYPE_FP32", 8, "[ 4 ]"));
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  InferRequest req;
  req.inputs.push_back(
      Make<float>("INPUT0", DataType::kFp32, {2, 4}, {1, 2, 3, 4, 0.5f, -1, 100, 1e30f}));
  req.inputs.push_back(
      Make<float>("INPUT1", DataType::kFp32, {2, 4}, {1, 1, 1, 1, 0.25f, -1, -100, 1e30f}));
  std::vector<Tensor> out;
  ASSERT_TRUE(loaded->instance->Execute(req, &out).ok());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].name, "OUTPUT0");
  EXPECT_EQ(out[0].datatype, DataType::kFp32);
  EXPECT_EQ(out[0].shape, (Shape{2, 4}));
  EXPECT_THAT(Values<float>(out[0]), ElementsAre(2, 3, 4, 5, 0.75f, -2, 0, 2e30f));
  EXPECT_EQ(out[1].name, "OUTPUT1");
  EXPECT_THAT(Values<float>(out[1]), ElementsAre(0, 1, 2, 3, 0.25f, 0, 200, 0));
}

TEST(AddSubBackendTest, Int32WrapsAroundOnOverflow) {
  constexpr int32_t kMax = std::numeric_limits<int32_t>::max();
  constexpr int32_t kMin = std::numeric_limits<int32_t>::min();
  auto loaded = Load(AddSubConfig("TYPE_INT32", 0, "[ -1 ]"));
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  InferRequest req;
  req.inputs.push_back(Make<int32_t>("INPUT0", DataType::kInt32, {4}, {kMax, kMin, 5, -7}));
  req.inputs.push_back(Make<int32_t>("INPUT1", DataType::kInt32, {4}, {1, 1, 3, 2}));
  std::vector<Tensor> out;
  ASSERT_TRUE(loaded->instance->Execute(req, &out).ok());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_THAT(Values<int32_t>(out[0]), ElementsAre(kMin, kMin + 1, 8, -5));
  EXPECT_THAT(Values<int32_t>(out[1]), ElementsAre(kMax - 1, kMax, 2, -9));
}

TEST(AddSubBackendTest, ReadsUnalignedInputs) {
  auto loaded = Load(AddSubConfig("TYPE_INT32", 0, "[ 2 ]"));
  ASSERT_TRUE(loaded.ok());
  // Both inputs are views at odd offsets into one body, as a binary request body gives them.
  std::string body(1 + 8 + 8, '\0');
  const int32_t a[2] = {10, 20};
  const int32_t b[2] = {1, 2};
  std::memcpy(body.data() + 1, a, 8);
  std::memcpy(body.data() + 9, b, 8);
  SharedBuffer whole = SharedBuffer::FromString(body);
  InferRequest req;
  req.inputs.push_back(Tensor{"INPUT0", DataType::kInt32, {2}, whole.Slice(1, 8)});
  req.inputs.push_back(Tensor{"INPUT1", DataType::kInt32, {2}, whole.Slice(9, 8)});
  std::vector<Tensor> out;
  ASSERT_TRUE(loaded->instance->Execute(req, &out).ok());
  EXPECT_THAT(Values<int32_t>(out[0]), ElementsAre(11, 22));
  EXPECT_THAT(Values<int32_t>(out[1]), ElementsAre(9, 18));
}

TEST(AddSubBackendTest, ServesASingleConfiguredOutput) {
  auto loaded = Load(R"pb(
    name: "sub_only"
    backend: "add_sub"
    input {
      name: "INPUT1"
      data_type: TYPE_FP32
      dims: [ 1 ]
    }
    input {
      name: "INPUT0"
      data_type: TYPE_FP32
      dims: [ 1 ]
    }
    output {
      name: "OUTPUT1"
      data_type: TYPE_FP32
      dims: [ 1 ]
    }
  )pb");
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  InferRequest req;
  req.inputs.push_back(Make<float>("INPUT0", DataType::kFp32, {1}, {5}));
  req.inputs.push_back(Make<float>("INPUT1", DataType::kFp32, {1}, {3}));
  std::vector<Tensor> out;
  ASSERT_TRUE(loaded->instance->Execute(req, &out).ok());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].name, "OUTPUT1");
  EXPECT_THAT(Values<float>(out[0]), ElementsAre(2));
}

TEST(AddSubBackendTest, ExecuteRejectsInputsOfDifferentShapes) {
  auto loaded = Load(AddSubConfig("TYPE_FP32", 0, "[ -1 ]"));
  ASSERT_TRUE(loaded.ok());
  InferRequest req;
  req.inputs.push_back(Make<float>("INPUT0", DataType::kFp32, {2}, {1, 2}));
  req.inputs.push_back(Make<float>("INPUT1", DataType::kFp32, {3}, {1, 2, 3}));
  std::vector<Tensor> out;
  Status s = loaded->instance->Execute(req, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("INPUT0 shape [2] and INPUT1 shape [3] differ"));
  EXPECT_TRUE(out.empty());
}

TEST(AddSubBackendTest, ExecuteRejectsShortDataInsteadOfReadingPastIt) {
  auto loaded = Load(AddSubConfig("TYPE_FP32", 0, "[ -1 ]"));
  ASSERT_TRUE(loaded.ok());
  InferRequest req;
  req.inputs.push_back(Make<float>("INPUT0", DataType::kFp32, {4}, {1, 2}));
  req.inputs.push_back(Make<float>("INPUT1", DataType::kFp32, {4}, {1, 2}));
  std::vector<Tensor> out;
  Status s = loaded->instance->Execute(req, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("needs 16 bytes per input, got 8 (INPUT0)"));
}

struct MisfitCase {
  std::string config;
  std::string field;  // the message must name it
};

TEST(AddSubBackendTest, LoadRejectsConfigsItCannotServeNamingTheField) {
  const std::string in0 = R"pb(input {
                                 name: "INPUT0"
                                 data_type: TYPE_FP32
                                 dims: [ 4 ]
                               })pb";
  const std::string in1 = R"pb(input {
                                 name: "INPUT1"
                                 data_type: TYPE_FP32
                                 dims: [ 4 ]
                               })pb";
  const std::string out0 = R"pb(output {
                                  name: "OUTPUT0"
                                  data_type: TYPE_FP32
                                  dims: [ 4 ]
                                })pb";
  const std::string head = R"pb(name: "add_sub" backend: "add_sub")pb";
  const std::vector<MisfitCase> cases = {
      {AddSubConfig("TYPE_FP64", 0, "[ 4 ]"),
       "input[0].data_type: expected TYPE_FP32 or TYPE_INT32, got TYPE_FP64"},
      {head + in0 + out0, "input: expected exactly 2 inputs (INPUT0, INPUT1), got 1"},
      {head + in0 + R"pb(input {
                           name: "B"
                           data_type: TYPE_FP32
                           dims: [ 4 ]
                         })pb" +
           out0,
       "input: expected names INPUT0 and INPUT1, got 'INPUT0' and 'B'"},
      {head + in0 + R"pb(input {
                           name: "INPUT1"
                           data_type: TYPE_INT32
                           dims: [ 4 ]
                         })pb" +
           out0,
       "input[1].data_type: expected TYPE_FP32 like input[0], got TYPE_INT32"},
      {head + in0 + R"pb(input {
                           name: "INPUT1"
                           data_type: TYPE_FP32
                           dims: [ 5 ]
                         })pb" +
           out0,
       "input[1].dims: expected [4] like input[0], got [5]"},
      {head + in0 + R"pb(input {
                           name: "INPUT1"
                           data_type: TYPE_FP32
                           dims: [ 4 ]
                           optional: true
                         })pb" +
           out0,
       "input[1].optional: 'INPUT1' is required by add_sub"},
      {head + in0 + in1, "output: expected 1 or 2 outputs (OUTPUT0, OUTPUT1), got 0"},
      {head + in0 + in1 + R"pb(output {
                                 name: "SUM"
                                 data_type: TYPE_FP32
                                 dims: [ 4 ]
                               })pb",
       "output[0].name: expected OUTPUT0 or OUTPUT1, got 'SUM'"},
      {head + in0 + in1 + out0 + out0, "output[1].name: 'OUTPUT0' appears twice"},
      {head + in0 + in1 + R"pb(output {
                                 name: "OUTPUT0"
                                 data_type: TYPE_INT32
                                 dims: [ 4 ]
                               })pb",
       "output[0].data_type: expected TYPE_FP32 like the inputs, got TYPE_INT32"},
      {head + in0 + in1 + R"pb(output {
                                 name: "OUTPUT0"
                                 data_type: TYPE_FP32
                                 dims: [ 2, 2 ]
                               })pb",
       "output[0].dims: expected [4] like the inputs, got [2,2]"},
  };
  for (const MisfitCase& c : cases) {
    Status s = LoadStatus(c.config);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.config << "\n" << s.ToString();
    EXPECT_THAT(s.message(), HasSubstr("model 'add_sub'")) << c.config;
    EXPECT_THAT(s.message(), HasSubstr(c.field)) << c.config;
  }
}

// ---- the shipped model repositories -------------------------------------------------------

class SilentErrors : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int, google::protobuf::io::ColumnNumber, const std::string&) override {}
};

// Every config.pbtxt under examples/models and tests/fixtures/models (but the deliberately
// broken one) parses and loads with the backend it names.
TEST(ModelRepositoriesTest, EveryShippedConfigLoadsWithItsBackend) {
  const std::filesystem::path root = VRAMD_SOURCE_DIR;
  int loaded_count = 0;
  int library_count = 0;
  for (const char* repo : {"examples/models", "tests/fixtures/models"}) {
    for (const auto& entry : std::filesystem::directory_iterator(root / repo)) {
      const std::filesystem::path file = entry.path() / "config.pbtxt";
      if (!entry.is_directory() || !std::filesystem::exists(file)) continue;
      std::ifstream in(file);
      std::stringstream text;
      text << in.rdbuf();
      config::ModelConfig c;
      google::protobuf::TextFormat::Parser parser;
      SilentErrors errors;
      parser.RecordErrorsTo(&errors);
      const bool parsed = parser.ParseFromString(text.str(), &c);
      if (entry.path().filename() == "broken_syntax") {
        EXPECT_FALSE(parsed) << file;
        continue;
      }
      ASSERT_TRUE(parsed) << file;
      EXPECT_EQ(c.name(), entry.path().filename().string()) << file;
      if (c.backend() == "python") {
        // A library backend, not linked into this binary: tests/e2e/test_python_backend.py
        // serves the python examples through libvramd_python.so.
        ++library_count;
        continue;
      }
      auto l = Load(text.str(), entry.path());
      EXPECT_TRUE(l.ok()) << file << ": " << l.status().ToString();
      ++loaded_count;
    }
  }
  EXPECT_EQ(loaded_count, 5 + 19);  // examples + fixtures (14 types, 5 others)
  EXPECT_EQ(library_count, 1);      // examples/models/python_identity
}

}  // namespace
}  // namespace vramd::backends
