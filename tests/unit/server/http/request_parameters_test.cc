// Request-level parameters of the KServe JSON infer request (infer_codec.h): what vramd
// consumes as Triton's HTTP front end does, what reaches the model, what is refused; and the
// response's parameters in the encoded reply.
#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <string>

#include "server/http/infer_codec.h"

namespace vramd::http {
namespace {

Result<InferRequest> WithParameters(const std::string& parameters) {
  return ParseInferRequest(
      std::make_shared<const std::string>(
          R"({"parameters":)" + parameters +
          R"(,"inputs":[{"name":"IN","shape":[1],"datatype":"FP32","data":[1]}]})"),
      std::nullopt);
}

template <typename T>
T ValueOf(const InferParameter& p) {
  EXPECT_TRUE(std::holds_alternative<T>(p.value)) << p.name << " has index " << p.value.index();
  return std::holds_alternative<T>(p.value) ? std::get<T>(p.value) : T{};
}

TEST(RequestParametersTest, EveryValueTypeReachesTheModelInOrder) {
  auto r = WithParameters(
      R"({"flag":true,"off":false,"neg":-3,"small":7,"big":18446744073709551615,)"
      R"("ratio":0.25,"whole_double":2.0,"text":"hi \u00e9","empty":""})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto& p = r->parameters;
  ASSERT_EQ(p.size(), 9u);
  EXPECT_EQ(p[0].name, "flag");
  EXPECT_TRUE(ValueOf<bool>(p[0]));
  EXPECT_FALSE(ValueOf<bool>(p[1]));
  EXPECT_EQ(ValueOf<int64_t>(p[2]), -3);
  EXPECT_EQ(ValueOf<int64_t>(p[3]), 7);  // an integer that fits int64 is Triton's int
  EXPECT_EQ(ValueOf<uint64_t>(p[4]), 18446744073709551615ull);
  EXPECT_EQ(ValueOf<double>(p[5]), 0.25);
  EXPECT_EQ(ValueOf<double>(p[6]), 2.0);  // 2.0 is not an integer
  EXPECT_EQ(ValueOf<std::string>(p[7]), "hi \xc3\xa9");
  EXPECT_EQ(ValueOf<std::string>(p[8]), "");
  EXPECT_EQ(r->flags, 0u);
  EXPECT_EQ(r->correlation_id, 0u);
}

TEST(RequestParametersTest, DuplicatesAreKept) {
  auto r = WithParameters(R"({"k":1,"k":"two"})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->parameters.size(), 2u);
  EXPECT_EQ(ValueOf<int64_t>(r->parameters[0]), 1);
  EXPECT_EQ(ValueOf<std::string>(r->parameters[1]), "two");
}

TEST(RequestParametersTest, ConsumedKeysDoNotReachTheModel) {
  auto r = WithParameters(
      R"({"binary_data_output":true,"timeout":1500,"priority":3,"sequence_id":42,)"
      R"("sequence_start":true,"sequence_end":true,"custom":1})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->parameters.size(), 1u);
  EXPECT_EQ(r->parameters[0].name, "custom");
  EXPECT_TRUE(r->binary_data_output);
  EXPECT_EQ(r->timeout_us, 1500u);
  EXPECT_EQ(r->correlation_id, 42u);
  EXPECT_TRUE(r->correlation_id_string.empty());
  EXPECT_EQ(r->flags, kRequestFlagSequenceStart | kRequestFlagSequenceEnd);
}

TEST(RequestParametersTest, SequenceIdMayBeAString) {
  auto r = WithParameters(R"({"sequence_id":"conversation-7","sequence_start":true,)"
                          R"("sequence_end":false})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->correlation_id_string, "conversation-7");
  EXPECT_EQ(r->correlation_id, 0u);
  EXPECT_EQ(r->flags, kRequestFlagSequenceStart);
  EXPECT_TRUE(r->parameters.empty());
}

TEST(RequestParametersTest, HeadersIsAnOrdinaryParameterAsInTritonsHttpFrontEnd) {
  auto r = WithParameters(R"({"headers":"x"})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->parameters.size(), 1u);
  EXPECT_EQ(r->parameters[0].name, "headers");
}

TEST(RequestParametersTest, RejectionsNameTheKey) {
  const std::pair<std::string, std::string> cases[] = {
      {R"({"nested":{"a":1}})", "request parameter 'nested' must be a boolean, a number or a "
                                "string, got an object"},
      {R"({"list":[1,2]})", "request parameter 'list' must be a boolean, a number or a string, "
                            "got an array"},
      {R"({"nothing":null})", "request parameter 'nothing' must be a boolean, a number or a "
                              "string, got null"},
      {R"({"triton_enable_empty_final_response":true})",
       "keys starting with 'triton_' are reserved for Triton usage"},
      {R"({"sequence_id":-1})", "'sequence_id' must be a non-negative integer or a string, got -1"},
      {R"({"sequence_id":1.5})", "'sequence_id' must be a non-negative integer or a string"},
      {R"({"sequence_id":true})", "'sequence_id' must be a non-negative integer or a string, got "
                                  "a boolean"},
      {R"({"sequence_start":1})", "'sequence_start' must be true or false, got a number"},
      {R"({"sequence_end":"yes"})", "'sequence_end' must be true or false, got a string"},
      {R"({"priority":-2})", "'priority' must be a non-negative integer, got -2"},
      {R"({"timeout":"soon"})", "'timeout' must be a non-negative integer (microseconds)"},
      {R"({"binary_data_output":1})", "'binary_data_output' must be true or false"},
  };
  for (const auto& [params, message] : cases) {
    auto r = WithParameters(params);
    ASSERT_FALSE(r.ok()) << params;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << params;
    EXPECT_NE(r.status().message().find(message), std::string::npos)
        << params << ": " << r.status().message();
  }
}

TEST(RequestParametersTest, ResponseParametersAreWrittenInTheReply) {
  InferRequest request;
  InferResponse response;
  response.model_name = "m";
  response.model_version = 1;
  response.parameters = {{"done", true},
                         {"count", int64_t{-4}},
                         {"huge", uint64_t{18446744073709551615ull}},
                         {"score", 0.5},
                         {"note", std::string("a \"q\"\n")},
                         {"count", int64_t{5}}};  // a later duplicate wins
  auto encoded = EncodeInferResponse(response, request);
  ASSERT_TRUE(encoded.ok()) << encoded.status().ToString();
  rapidjson::Document doc;
  doc.Parse(encoded->body.c_str());
  ASSERT_FALSE(doc.HasParseError()) << encoded->body;
  ASSERT_TRUE(doc.HasMember("parameters")) << encoded->body;
  const auto& p = doc["parameters"];
  EXPECT_EQ(p.MemberCount(), 5u) << encoded->body;
  EXPECT_TRUE(p["done"].GetBool());
  EXPECT_EQ(p["count"].GetInt64(), 5);
  EXPECT_EQ(p["huge"].GetUint64(), 18446744073709551615ull);
  EXPECT_EQ(p["score"].GetDouble(), 0.5);
  EXPECT_STREQ(p["note"].GetString(), "a \"q\"\n");
}

TEST(RequestParametersTest, NoParametersMemberWithoutResponseParameters) {
  InferRequest request;
  InferResponse response;
  response.model_name = "m";
  auto encoded = EncodeInferResponse(response, request);
  ASSERT_TRUE(encoded.ok());
  EXPECT_EQ(encoded->body.find("parameters"), std::string::npos) << encoded->body;
}

}  // namespace
}  // namespace vramd::http
