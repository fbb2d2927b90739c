// The generate extension's JSON (generate_codec.h): members to inputs and parameters, the
// shape rule, outputs as members (1-element tensors as scalars), the SSE framing.
#include "server/http/generate_codec.h"

#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "support/config_text.h"

namespace vramd::http {
namespace {

using testing::ConfigFromText;

config::ModelConfig TextModel() {
  return ConfigFromText(R"(
name: "llm"
backend: "python"
max_batch_size: 0
input [
  { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "max_tokens" data_type: TYPE_INT32 dims: [ 1 ] optional: true },
  { name: "weights" data_type: TYPE_FP32 dims: [ -1 ] optional: true },
  { name: "pairs" data_type: TYPE_INT64 dims: [ -1, 2 ] optional: true },
  { name: "flags" data_type: TYPE_BOOL dims: [ 2 ] optional: true }
]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ -1 ] } ]
)");
}

template <typename T>
std::vector<T> Values(const Tensor& t) {
  std::vector<T> out(t.data.size() / sizeof(T));
  std::memcpy(out.data(), t.data.data(), out.size() * sizeof(T));
  return out;
}

std::vector<std::string> Strings(const Tensor& t) {
  auto elements = SplitBytesElements(t.data.view(), t.name, -1);
  EXPECT_TRUE(elements.ok());
  std::vector<std::string> out;
  if (elements.ok()) {
    for (auto e : *elements) out.emplace_back(e);
  }
  return out;
}

TEST(GenerateCodecTest, MembersNamingInputsBecomeTensorsTheRestParameters) {
  auto r = ParseGenerateRequest(
      R"({"text_input":"hello","max_tokens":16,"stream":false,"temperature":0.5,)"
      R"("parameters":{"weights":[0.5,1.5,2],"top_k":4,"mode":"greedy"}})",
      TextModel());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->inputs.size(), 3u);
  const Tensor* text = r->FindInput("text_input");
  ASSERT_NE(text, nullptr);
  EXPECT_EQ(text->datatype, DataType::kBytes);
  EXPECT_EQ(text->shape, (Shape{1}));
  EXPECT_EQ(Strings(*text), (std::vector<std::string>{"hello"}));
  const Tensor* max_tokens = r->FindInput("max_tokens");
  ASSERT_NE(max_tokens, nullptr);
  EXPECT_EQ(max_tokens->shape, (Shape{1}));
  EXPECT_EQ(Values<int32_t>(*max_tokens), (std::vector<int32_t>{16}));
  const Tensor* weights = r->FindInput("weights");
  ASSERT_NE(weights, nullptr);
  EXPECT_EQ(weights->shape, (Shape{3}));
  EXPECT_EQ(Values<float>(*weights), (std::vector<float>{0.5f, 1.5f, 2.0f}));

  ASSERT_EQ(r->parameters.size(), 4u);
  EXPECT_EQ(r->parameters[0].name, "stream");
  EXPECT_EQ(std::get<bool>(r->parameters[0].value), false);
  EXPECT_EQ(r->parameters[1].name, "temperature");
  EXPECT_EQ(std::get<double>(r->parameters[1].value), 0.5);
  EXPECT_EQ(r->parameters[2].name, "top_k");
  EXPECT_EQ(std::get<int64_t>(r->parameters[2].value), 4);
  EXPECT_EQ(r->parameters[3].name, "mode");
  EXPECT_EQ(std::get<std::string>(r->parameters[3].value), "greedy");
}

TEST(GenerateCodecTest, NoKeyIsConsumedAsTheInferEndpointDoes) {
  // Triton's generate passes these to the model as they are.
  auto r = ParseGenerateRequest(
      R"({"text_input":"x","sequence_id":3,"timeout":10,"triton_x":1,"id":"abc"})", TextModel());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->parameters.size(), 4u);
  EXPECT_EQ(r->correlation_id, 0u);
  EXPECT_EQ(r->timeout_us, 0u);
  EXPECT_TRUE(r->id.empty());
}

TEST(GenerateCodecTest, ShapeFollowsTritonsRule) {
  // [-1, 2]: the fixed 2 divides the count, the -1 takes the rest.
  auto r = ParseGenerateRequest(R"({"pairs":[1,2,3,4,5,6]})", TextModel());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->inputs[0].shape, (Shape{3, 2}));
  EXPECT_EQ(Values<int64_t>(r->inputs[0]), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));

  auto odd = ParseGenerateRequest(R"({"pairs":[1,2,3]})", TextModel());
  ASSERT_FALSE(odd.ok());
  EXPECT_NE(odd.status().message().find(
                "the schema can not convert input 'pairs' to tensor with proper shape"),
            std::string::npos)
      << odd.status().message();

  auto flags = ParseGenerateRequest(R"({"flags":[true,false]})", TextModel());
  ASSERT_TRUE(flags.ok()) << flags.status().ToString();
  EXPECT_EQ(flags->inputs[0].shape, (Shape{2}));
  EXPECT_FALSE(ParseGenerateRequest(R"({"flags":true})", TextModel()).ok());  // 1 is not 2
}

TEST(GenerateCodecTest, ABatchingModelGetsABatchOfOne) {
  auto config = ConfigFromText(R"(
name: "b" backend: "identity" max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
)");
  auto r = ParseGenerateRequest(R"({"IN":[1,2,3,4]})", config);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->inputs[0].shape, (Shape{1, 4}));
  // [-1, -1]: the innermost takes the count, the other is 1.
  auto two_free = ConfigFromText(R"(
name: "f" backend: "identity" max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1, -1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1, -1 ] } ]
)");
  auto f = ParseGenerateRequest(R"({"IN":[1,2,3]})", two_free);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->inputs[0].shape, (Shape{1, 3}));
  auto empty = ParseGenerateRequest(R"({"IN":[]})", two_free);
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_EQ(empty->inputs[0].shape, (Shape{1, 0}));
}

TEST(GenerateCodecTest, RejectionsNameTheMember) {
  const std::pair<std::string, std::string> cases[] = {
      {R"([1])", "the generate request JSON must be an object, got an array"},
      {R"({"text_input":)", "failed to parse the generate request JSON at offset"},
      {R"({"parameters":[1]})", "'parameters' must be an object, got an array"},
      {R"({"cfg":{"a":1}})", "parameter 'cfg' must be a boolean, a number or a string, got an "
                             "object"},
      {R"({"parameters":{"stop":["a","b"]}})", "parameter 'stop' must be a boolean, a number or "
                                               "a string, got an array"},
      {R"({"seed":null})", "parameter 'seed' must be a boolean, a number or a string, got null"},
      {R"({"weights":[[1,2]]})", "input 'weights' must be a scalar or a flat array of scalars"},
      {R"({"max_tokens":"many"})", "input 'max_tokens'"},
      {R"({"max_tokens":3000000000})", "input 'max_tokens'"},
      {R"({"text_input":"a","parameters":{"text_input":"b"}})",
       "input 'text_input' is given more than once"},
  };
  for (const auto& [body, message] : cases) {
    auto r = ParseGenerateRequest(body, TextModel());
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << body;
    EXPECT_NE(r.status().message().find(message), std::string::npos)
        << body << ": " << r.status().message();
  }
}

TEST(GenerateCodecTest, AnInputNamedParametersIsRefused) {
  auto config = ConfigFromText(R"(
name: "p" backend: "identity" max_batch_size: 0
input [ { name: "parameters" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
)");
  auto r = ParseGenerateRequest(R"({"parameters":{"a":1}})", config);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("also given as input tensor name"), std::string::npos);
}

Tensor BytesTensor(std::string name, Shape shape, std::vector<std::string> elements) {
  std::string data;
  for (const auto& e : elements) AppendBytesElement(&data, e);
  Tensor t;
  t.name = std::move(name);
  t.datatype = DataType::kBytes;
  t.shape = std::move(shape);
  t.data = SharedBuffer::FromString(std::move(data));
  return t;
}

template <typename T>
Tensor FixedTensor(std::string name, DataType type, Shape shape, std::vector<T> values) {
  Tensor t;
  t.name = std::move(name);
  t.datatype = type;
  t.shape = std::move(shape);
  t.data = SharedBuffer::CopyOf(values.data(), values.size() * sizeof(T));
  return t;
}

TEST(GenerateCodecTest, OutputsAreMembersAndOneElementIsAScalar) {
  InferResponse response;
  response.id = "r9";
  response.outputs.push_back(BytesTensor("text_output", {1}, {"Hello \"world\""}));
  response.outputs.push_back(FixedTensor<int32_t>("tokens", DataType::kInt32, {1, 3}, {4, 5, 6}));
  response.outputs.push_back(FixedTensor<float>("score", DataType::kFp32, {1, 1}, {0.5f}));
  response.outputs.push_back(BytesTensor("words", {2}, {"a", "b"}));
  response.parameters = {{"finish_reason", std::string("stop")}, {"n", int64_t{2}}};
  auto json = EncodeGenerateResponse(response, "llm", 3);
  ASSERT_TRUE(json.ok()) << json.status().ToString();
  rapidjson::Document doc;
  doc.Parse(json->c_str());
  ASSERT_FALSE(doc.HasParseError()) << *json;
  EXPECT_STREQ(doc["model_name"].GetString(), "llm");
  EXPECT_STREQ(doc["model_version"].GetString(), "3");
  EXPECT_STREQ(doc["id"].GetString(), "r9");
  EXPECT_STREQ(doc["text_output"].GetString(), "Hello \"world\"");
  ASSERT_TRUE(doc["tokens"].IsArray());
  EXPECT_EQ(doc["tokens"].Size(), 3u);  // flat, as Triton writes it
  EXPECT_EQ(doc["tokens"][2].GetInt(), 6);
  EXPECT_EQ(doc["score"].GetDouble(), 0.5);
  ASSERT_TRUE(doc["words"].IsArray());
  EXPECT_STREQ(doc["words"][1].GetString(), "b");
  EXPECT_STREQ(doc["finish_reason"].GetString(), "stop");
  EXPECT_EQ(doc["n"].GetInt64(), 2);
}

TEST(GenerateCodecTest, TheResponsesOwnNameAndVersionWin) {
  InferResponse response;
  response.model_name = "real";
  response.model_version = 7;
  auto json = EncodeGenerateResponse(response, "url", 1);
  ASSERT_TRUE(json.ok());
  EXPECT_EQ(*json, R"({"model_name":"real","model_version":"7"})");
}

TEST(GenerateCodecTest, NonUtf8BytesAreAnError) {
  InferResponse response;
  response.outputs.push_back(BytesTensor("text_output", {1}, {"\xff"}));
  auto json = EncodeGenerateResponse(response, "m", 1);
  ASSERT_FALSE(json.ok());
  EXPECT_NE(json.status().message().find("output 'text_output'"), std::string::npos);
}

TEST(GenerateCodecTest, SseEventFraming) {
  EXPECT_EQ(SseEvent(R"({"a":"x\ny"})"), "data: {\"a\":\"x\\ny\"}\n\n");
  EXPECT_EQ(SseEvent(R"({"error":"e"})"), "data: {\"error\":\"e\"}\n\n");
}

}  // namespace
}  // namespace vramd::http
