#include "server/http/infer_codec.h"

#include <gtest/gtest.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#include "core/half.h"

namespace vramd::http {
namespace {

std::shared_ptr<const std::string> Body(std::string s) {
  return std::make_shared<const std::string>(std::move(s));
}

Result<InferRequest> ParseJson(const std::string& json) {
  return ParseInferRequest(Body(json), std::nullopt);
}

Result<InferRequest> ParseWithBinary(const std::string& json, const std::string& binary) {
  return ParseInferRequest(Body(json + binary), json.size());
}

std::string OneInput(const std::string& datatype, const std::string& shape,
                     const std::string& data) {
  return R"({"inputs":[{"name":"IN","shape":)" + shape + R"(,"datatype":")" + datatype +
         R"(","data":)" + data + "}]}";
}

std::string OneBinaryInput(const std::string& datatype, const std::string& shape, size_t size,
                           const std::string& extra = "") {
  return R"({"inputs":[{"name":"IN","shape":)" + shape + R"(,"datatype":")" + datatype +
         R"(","parameters":{"binary_data_size":)" + std::to_string(size) + "}}]" + extra + "}";
}

template <typename T>
std::string Le(std::initializer_list<T> values) {
  std::string s;
  for (T v : values) s.append(reinterpret_cast<const char*>(&v), sizeof(T));
  return s;
}

std::string Serialized(std::initializer_list<std::string_view> elements) {
  std::string s;
  for (std::string_view e : elements) AppendBytesElement(&s, e);
  return s;
}

std::string Bytes(const Tensor& t) { return std::string(t.data.view()); }

Tensor MakeTensor(std::string name, DataType type, Shape shape, std::string bytes) {
  Tensor t;
  t.name = std::move(name);
  t.datatype = type;
  t.shape = std::move(shape);
  t.data = SharedBuffer::FromString(std::move(bytes));
  return t;
}

InferResponse EchoResponse(const InferRequest& request) {
  InferResponse r;
  r.model_name = "echo";
  r.model_version = 3;
  r.outputs = request.inputs;
  return r;
}

// EncodeInferResponse, which must succeed.
EncodedBody Encode(const InferResponse& response, const InferRequest& request) {
  auto encoded = EncodeInferResponse(response, request);
  EXPECT_TRUE(encoded.ok()) << encoded.status().ToString();
  return encoded.ok() ? std::move(encoded).value() : EncodedBody{};
}

// The JSON part of an encoded body, parsed with UTF-8 validation (so it proves validity).
rapidjson::Document ParseResponse(const EncodedBody& encoded) {
  rapidjson::Document doc;
  const size_t n = encoded.json_length.value_or(encoded.body.size());
  doc.Parse<rapidjson::kParseValidateEncodingFlag | rapidjson::kParseFullPrecisionFlag>(
      encoded.body.data(), n);
  EXPECT_FALSE(doc.HasParseError())
      << "offset " << doc.GetErrorOffset() << " in " << encoded.body.substr(0, n);
  return doc;
}

std::string ToJson(const rapidjson::Value& v) {
  rapidjson::StringBuffer sb;
  rapidjson::Writer<rapidjson::StringBuffer> w(sb);
  v.Accept(w);
  return sb.GetString();
}

// ---- FP16 / BF16 conversions ---------------------------------------------------------------

TEST(HalfTest, KnownFp16Values) {
  EXPECT_EQ(HalfFromDouble(1.0), 0x3C00);
  EXPECT_EQ(HalfFromDouble(-2.5), 0xC100);
  EXPECT_EQ(HalfFromDouble(65504.0), 0x7BFF);
  EXPECT_EQ(HalfFromDouble(0.1), 0x2E66);
  EXPECT_EQ(HalfFromDouble(0.0), 0x0000);
  EXPECT_EQ(HalfFromDouble(-0.0), 0x8000);
  EXPECT_EQ(HalfFromDouble(0x1p-14), 0x0400);         // smallest normal
  EXPECT_EQ(HalfFromDouble(0x1p-24), 0x0001);         // smallest subnormal
  EXPECT_EQ(HalfFromDouble(1023 * 0x1p-24), 0x03FF);  // largest subnormal
  EXPECT_EQ(HalfFromDouble(std::numeric_limits<double>::infinity()), 0x7C00);
  EXPECT_EQ(HalfFromDouble(-std::numeric_limits<double>::infinity()), 0xFC00);
  const uint16_t nan = HalfFromDouble(std::nan(""));
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x03FF, 0);
  EXPECT_EQ(HalfToFloat(0x3C00), 1.0f);
  EXPECT_EQ(HalfToFloat(0xC100), -2.5f);
  EXPECT_EQ(HalfToFloat(0x7BFF), 65504.0f);
  EXPECT_EQ(HalfToFloat(0x0001), 0x1p-24f);
  EXPECT_EQ(HalfToFloat(0x03FF), 1023 * 0x1p-24f);
  EXPECT_TRUE(std::signbit(HalfToFloat(0x8000)));
  EXPECT_TRUE(std::isinf(HalfToFloat(0x7C00)));
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7E00)));
}

TEST(HalfTest, Fp16RoundsToNearestEven) {
  EXPECT_EQ(HalfFromDouble(65519.0), 0x7BFF);                // below the midpoint to infinity
  EXPECT_EQ(HalfFromDouble(65520.0), 0x7C00);                // the midpoint: even is infinity
  EXPECT_EQ(HalfFromDouble(1 + 0x1p-11), 0x3C00);            // tie, down to even
  EXPECT_EQ(HalfFromDouble(1 + 3 * 0x1p-11), 0x3C02);        // tie, up to even
  EXPECT_EQ(HalfFromDouble(1 + 0x1p-11 + 0x1p-40), 0x3C01);  // just above a tie: no double rounding
  EXPECT_EQ(HalfFromFloat(1 + 0x1p-11f + 0x1p-23f), 0x3C01);
  EXPECT_EQ(HalfFromDouble(0x1p-25), 0x0000);  // half the smallest subnormal: tie to 0
  EXPECT_EQ(HalfFromDouble(0x1p-25 + 0x1p-40), 0x0001);
  EXPECT_EQ(HalfFromDouble(3 * 0x1p-25), 0x0002);       // subnormal tie up to even
  EXPECT_EQ(HalfFromDouble(5 * 0x1p-25), 0x0002);       // subnormal tie down to even
  EXPECT_EQ(HalfFromDouble(1023.5 * 0x1p-24), 0x0400);  // carries into the smallest normal
  EXPECT_EQ(HalfFromDouble(0x1p-26), 0x0000);
  EXPECT_EQ(HalfFromDouble(-0x1p-30), 0x8000);
  EXPECT_EQ(HalfFromDouble(1e-310), 0x0000);  // double subnormal
  EXPECT_EQ(HalfFromDouble(1e300), 0x7C00);
}

TEST(HalfTest, Fp16EveryValueRoundTripsThroughFloat) {
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(HalfFromFloat(f), h) << std::hex << h;
  }
}

TEST(HalfTest, KnownBf16Values) {
  EXPECT_EQ(Bf16FromDouble(1.0), 0x3F80);
  EXPECT_EQ(Bf16FromDouble(-2.5), 0xC020);
  EXPECT_EQ(Bf16FromDouble(3.0), 0x4040);
  EXPECT_EQ(Bf16FromFloat(0.1f), 0x3DCD);                               // 0x3DCCCCCD rounds up
  EXPECT_EQ(Bf16FromDouble(1 + 0x1p-8), 0x3F80);                        // tie, down to even
  EXPECT_EQ(Bf16FromDouble(1 + 3 * 0x1p-8), 0x3F82);                    // tie, up to even
  EXPECT_EQ(Bf16FromDouble(0x1p-133), 0x0001);                          // smallest subnormal
  EXPECT_EQ(Bf16FromDouble(0x1p-134), 0x0000);                          // tie to 0
  EXPECT_EQ(Bf16FromFloat(std::numeric_limits<float>::max()), 0x7F80);  // rounds to infinity
  EXPECT_EQ(Bf16FromDouble(3.3895313892515355e38), 0x7F7F);             // largest finite
  EXPECT_EQ(Bf16ToFloat(0x3F80), 1.0f);
  EXPECT_EQ(Bf16ToFloat(0xC020), -2.5f);
  EXPECT_EQ(Bf16ToFloat(0x0001), 0x1p-133f);
}

TEST(HalfTest, Bf16EveryValueRoundTripsThroughFloat) {
  for (uint32_t b = 0; b <= 0xFFFF; ++b) {
    const float f = Bf16ToFloat(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    ASSERT_EQ(Bf16FromFloat(f), b) << std::hex << b;
  }
}

// ---- JSON round trips ----------------------------------------------------------------------

struct JsonCase {
  std::string datatype;
  std::string data;            // JSON array as sent
  std::string expected_bytes;  // little-endian tensor bytes
};

std::vector<JsonCase> JsonCases() {
  return {
      {"BOOL", "[true,false,true]", std::string("\x01\x00\x01", 3)},
      {"UINT8", "[0,7,255]", Le<uint8_t>({0, 7, 255})},
      {"UINT16", "[0,300,65535]", Le<uint16_t>({0, 300, 65535})},
      {"UINT32", "[0,70000,4294967295]", Le<uint32_t>({0, 70000, 4294967295u})},
      {"UINT64", "[0,1,18446744073709551615]",
       Le<uint64_t>({0, 1, std::numeric_limits<uint64_t>::max()})},
      {"INT8", "[-128,0,127]", Le<int8_t>({-128, 0, 127})},
      {"INT16", "[-32768,-1,32767]", Le<int16_t>({-32768, -1, 32767})},
      {"INT32", "[-2147483648,5,2147483647]",
       Le<int32_t>({std::numeric_limits<int32_t>::min(), 5, 2147483647})},
      {"INT64", "[-9223372036854775808,0,9223372036854775807]",
       Le<int64_t>({std::numeric_limits<int64_t>::min(), 0, std::numeric_limits<int64_t>::max()})},
      {"FP16", "[1.0,-2.5,65504,5.960464477539063e-08]",
       Le<uint16_t>({0x3C00, 0xC100, 0x7BFF, 0x0001})},
      {"BF16", "[1,-2.5,3.0,0.1]", Le<uint16_t>({0x3F80, 0xC020, 0x4040, 0x3DCD})},
      {"FP32", "[0.1,-3.4028235e38,1.17549435e-38,1e-45,2]",
       Le<float>({0.1f, -3.4028235e38f, 1.17549435e-38f, 1e-45f, 2.0f})},
      {"FP64", "[0.1,1.7976931348623157e308,5e-324,-0.0,3]",
       Le<double>({0.1, 1.7976931348623157e308, 5e-324, -0.0, 3.0})},
      {"BYTES", R"(["hello","","say \"hi\"\n","\u65e5\u672c",""])",
       Serialized({"hello", "", "say \"hi\"\n", "\xe6\x97\xa5\xe6\x9c\xac", ""})},
  };
}

TEST(InferCodecTest, JsonRoundTripEveryDatatype) {
  for (const JsonCase& c : JsonCases()) {
    SCOPED_TRACE(c.datatype);
    const size_t count =
        c.datatype == "BYTES"
            ? 5
            : (c.expected_bytes.size() / DataTypeByteSize(*DataTypeFromWireName(c.datatype)));
    const std::string shape = "[" + std::to_string(count) + "]";
    auto parsed = ParseJson(OneInput(c.datatype, shape, c.data));
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    ASSERT_EQ(parsed->inputs.size(), 1u);
    EXPECT_EQ(DataTypeWireName(parsed->inputs[0].datatype), c.datatype);
    EXPECT_EQ(parsed->inputs[0].shape, Shape{static_cast<int64_t>(count)});
    ASSERT_EQ(Bytes(parsed->inputs[0]), c.expected_bytes);

    // Encode as JSON, read the data back, send it again: the bytes must survive.
    EncodedBody encoded = Encode(EchoResponse(*parsed), *parsed);
    EXPECT_FALSE(encoded.json_length.has_value());
    rapidjson::Document doc = ParseResponse(encoded);
    const rapidjson::Value& out = doc["outputs"][0];
    EXPECT_STREQ(out["name"].GetString(), "IN");
    EXPECT_EQ(out["datatype"].GetString(), c.datatype);
    ASSERT_TRUE(out["data"].IsArray());
    EXPECT_EQ(out["data"].Size(), count);
    auto again = ParseJson(OneInput(c.datatype, shape, ToJson(out["data"])));
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(Bytes(again->inputs[0]), c.expected_bytes);
  }
}

TEST(InferCodecTest, BinaryRoundTripEveryDatatype) {
  for (const JsonCase& c : JsonCases()) {
    SCOPED_TRACE(c.datatype);
    const size_t element = DataTypeByteSize(*DataTypeFromWireName(c.datatype));
    const size_t count = element == 0 ? 5 : c.expected_bytes.size() / element;
    const std::string json =
        OneBinaryInput(c.datatype, "[" + std::to_string(count) + "]", c.expected_bytes.size(),
                       R"(,"parameters":{"binary_data_output":true})");
    auto body = Body(json + c.expected_bytes);
    auto parsed = ParseInferRequest(body, json.size());
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    const Tensor& in = parsed->inputs[0];
    EXPECT_EQ(Bytes(in), c.expected_bytes);
    // A view into the body, not a copy.
    EXPECT_EQ(reinterpret_cast<const char*>(in.data.data()), body->data() + json.size());

    EncodedBody encoded = Encode(EchoResponse(*parsed), *parsed);
    ASSERT_TRUE(encoded.json_length.has_value());
    rapidjson::Document doc = ParseResponse(encoded);
    const rapidjson::Value& out = doc["outputs"][0];
    EXPECT_FALSE(out.HasMember("data"));
    EXPECT_EQ(out["parameters"]["binary_data_size"].GetUint64(), c.expected_bytes.size());
    EXPECT_EQ(encoded.body.substr(*encoded.json_length), c.expected_bytes);
  }
}

TEST(InferCodecTest, NestedDataIsFlattened) {
  auto flat = ParseJson(OneInput("INT32", "[2,3]", "[1,2,3,4,5,6]"));
  auto nested = ParseJson(OneInput("INT32", "[2,3]", "[[1,2,3],[4,5,6]]"));
  auto ragged = ParseJson(OneInput("INT32", "[2,3]", "[[1,2],[[3],4,5],6]"));
  ASSERT_TRUE(flat.ok());
  ASSERT_TRUE(nested.ok()) << nested.status().ToString();
  ASSERT_TRUE(ragged.ok()) << ragged.status().ToString();
  EXPECT_EQ(Bytes(flat->inputs[0]), Le<int32_t>({1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(Bytes(nested->inputs[0]), Bytes(flat->inputs[0]));
  EXPECT_EQ(Bytes(ragged->inputs[0]), Bytes(flat->inputs[0]));

  auto bytes = ParseJson(OneInput("BYTES", "[2,1]", R"([["a"],["bc"]])"));
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(Bytes(bytes->inputs[0]), Serialized({"a", "bc"}));

  auto deep = ParseJson(OneInput("FP32", "[1,1,1,1]", "[[[[1.5]]]]"));
  ASSERT_TRUE(deep.ok());
  EXPECT_EQ(Bytes(deep->inputs[0]), Le<float>({1.5f}));
}

TEST(InferCodecTest, ScalarAndEmptyShapes) {
  auto scalar = ParseJson(OneInput("INT64", "[]", "[42]"));
  ASSERT_TRUE(scalar.ok()) << scalar.status().ToString();
  EXPECT_TRUE(scalar->inputs[0].shape.empty());
  EXPECT_EQ(Bytes(scalar->inputs[0]), Le<int64_t>({42}));

  auto empty = ParseJson(OneInput("FP32", "[0,4]", "[]"));
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_EQ(empty->inputs[0].data.size(), 0u);
  EncodedBody encoded = Encode(EchoResponse(*empty), *empty);
  rapidjson::Document doc = ParseResponse(encoded);
  EXPECT_EQ(doc["outputs"][0]["data"].Size(), 0u);
}

TEST(InferCodecTest, FloatsAreWrittenShortest) {
  InferRequest request;
  InferResponse response;
  response.model_name = "m";
  response.model_version = 1;
  response.outputs.push_back(
      MakeTensor("F32", DataType::kFp32, {6},
                 Le<float>({0.1f, 1.0f, 3.4028235e38f, 1e-45f, -0.0f, 16777216.0f})));
  response.outputs.push_back(
      MakeTensor("F64", DataType::kFp64, {3}, Le<double>({0.1, 1e300, 2.0})));
  response.outputs.push_back(
      MakeTensor("F16", DataType::kFp16, {2}, Le<uint16_t>({0x3C00, 0x3555})));
  response.outputs.push_back(MakeTensor("B16", DataType::kBf16, {1}, Le<uint16_t>({0x3DCD})));
  EncodedBody encoded = Encode(response, request);
  EXPECT_NE(encoded.body.find(R"("data":[0.1,1.0,3.4028235e+38,1e-45,-0.0,16777216.0])"),
            std::string::npos)
      << encoded.body;
  EXPECT_NE(encoded.body.find(R"("data":[0.1,1e+300,2.0])"), std::string::npos) << encoded.body;
  // 0x3555 is 0.333251953125 and BF16 0x3DCD 0.10009765625: shortest as floats.
  EXPECT_NE(encoded.body.find(R"("data":[1.0,0.33325195])"), std::string::npos) << encoded.body;
  EXPECT_NE(encoded.body.find(R"("data":[0.100097656])"), std::string::npos) << encoded.body;
  ParseResponse(encoded);
}

TEST(InferCodecTest, InfAndNanAreWrittenAsNull) {
  InferRequest request;
  InferResponse response;
  response.model_name = "m";
  const float inf = std::numeric_limits<float>::infinity();
  response.outputs.push_back(
      MakeTensor("F32", DataType::kFp32, {4}, Le<float>({inf, -inf, std::nanf(""), 1.5f})));
  response.outputs.push_back(MakeTensor("F64", DataType::kFp64, {1}, Le<double>({std::nan("")})));
  response.outputs.push_back(
      MakeTensor("F16", DataType::kFp16, {2}, Le<uint16_t>({0x7C00, 0x7E00})));
  response.outputs.push_back(MakeTensor("B16", DataType::kBf16, {1}, Le<uint16_t>({0xFF80})));
  EncodedBody encoded = Encode(response, request);
  rapidjson::Document doc = ParseResponse(encoded);
  const rapidjson::Value& f32 = doc["outputs"][0]["data"];
  EXPECT_TRUE(f32[0].IsNull());
  EXPECT_TRUE(f32[1].IsNull());
  EXPECT_TRUE(f32[2].IsNull());
  EXPECT_EQ(f32[3].GetDouble(), 1.5);
  EXPECT_TRUE(doc["outputs"][1]["data"][0].IsNull());
  EXPECT_TRUE(doc["outputs"][2]["data"][0].IsNull());
  EXPECT_TRUE(doc["outputs"][2]["data"][1].IsNull());
  EXPECT_TRUE(doc["outputs"][3]["data"][0].IsNull());
}

TEST(InferCodecTest, Fp32InputIsRoundedFromTheDecimal) {
  auto parsed = ParseJson(OneInput("FP32", "[3]", "[0.1,16777217,1e-50]"));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  // 16777217 is a tie between 16777216 and 16777218: even wins. 1e-50 underflows to 0.
  EXPECT_EQ(Bytes(parsed->inputs[0]), Le<float>({0.1f, 16777216.0f, 0.0f}));
}

TEST(InferCodecTest, NumbersAreReadCorrectlyRounded) {
  // 17 significant digits and extreme exponents, where a fast but inexact strtod slips.
  auto parsed = ParseJson(OneInput(
      "FP64", "[8]",
      "[0.30000000000000004,2.2250738585072014e-308,1.7976931348623157e308,"
      "9007199254740993,4.9406564584124654e-324,1e-400,-1e-400,123456789012345678901234567890]"));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(
      Bytes(parsed->inputs[0]),
      Le<double>({0.30000000000000004, 2.2250738585072014e-308, 1.7976931348623157e308,
                  9007199254740992.0, 4.9406564584124654e-324, 0.0, -0.0, 1.2345678901234568e29}));
  double negative_zero;
  std::memcpy(&negative_zero, parsed->inputs[0].data.data() + 6 * 8, 8);
  EXPECT_TRUE(std::signbit(negative_zero));

  auto huge = ParseJson(OneInput("FP64", "[1]", "[1e400]"));
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(huge.status().message().find("too big"), std::string::npos) << huge.status().message();
  // Past the largest double by less than rapidjson's exponent check sees.
  auto just_over = ParseJson(OneInput("FP64", "[1]", "[1.7976931348623159e308]"));
  ASSERT_FALSE(just_over.ok());
  EXPECT_NE(
      just_over.status().message().find("number 1.7976931348623159e308 does not fit a double"),
      std::string::npos)
      << just_over.status().message();
}

TEST(InferCodecTest, DeeplyNestedBodiesFailCleanly) {
  // Far past what a recursive parser's stack could take: parsed iteratively.
  const int depth = 200000;
  std::string data = std::string(depth, '[') + "1" + std::string(depth, ']');
  auto parsed = ParseJson(OneInput("FP32", "[1]", data));
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("deeper than 64 levels"), std::string::npos);

  auto unclosed = ParseJson(std::string(depth, '['));
  ASSERT_FALSE(unclosed.ok());
  EXPECT_NE(unclosed.status().message().find("failed to parse the request JSON"),
            std::string::npos);

  // Many brackets but shallow: the iterative parser gives the same result.
  std::string rows = "[";
  for (int i = 0; i < 400; ++i) rows += (i ? ",[" : "[") + std::to_string(i) + "]";
  rows += "]";
  auto many = ParseJson(OneInput("INT16", "[400,1]", rows));
  ASSERT_TRUE(many.ok()) << many.status().ToString();
  ASSERT_EQ(many->inputs[0].data.size(), 800u);
  int16_t last;
  std::memcpy(&last, many->inputs[0].data.data() + 798, 2);
  EXPECT_EQ(last, 399);
}

// ---- malformed bodies ----------------------------------------------------------------------

struct BadCase {
  std::string body;
  std::string message;  // substring of the error
};

const std::string kGoodInput = R"({"name":"IN","shape":[1],"datatype":"FP32","data":[1]})";

TEST(InferCodecTest, MalformedBodiesAreInvalidArgument) {
  std::string deep(70, '[');
  deep += "1" + std::string(70, ']');
  const std::vector<BadCase> cases = {
      {"not json", "failed to parse the request JSON"},
      {"{\"inputs\":[" + kGoodInput + "]} x", "failed to parse the request JSON"},
      {"{\"inputs\":[" + kGoodInput + "]", "failed to parse the request JSON"},
      {OneInput("FP32", "[1]", "[NaN]"), "failed to parse the request JSON"},
      {"{\"inputs\":[" + kGoodInput + std::string("]}\0", 3), "NUL"},
      {"[1]", "must be an object"},
      {"{}", "no 'inputs'"},
      {R"({"inputs":{}})", "'inputs' must be an array"},
      {R"({"inputs":[]})", "'inputs' must not be empty"},
      {R"({"id":5,"inputs":[)" + kGoodInput + "]}", "'id' must be a string"},
      {R"({"parameters":[],"inputs":[)" + kGoodInput + "]}", "'parameters' must be an object"},
      {R"({"parameters":{"binary_data_output":"yes"},"inputs":[)" + kGoodInput + "]}",
       "'binary_data_output' must be true or false"},
      {R"({"inputs":[5]})", "inputs[0] must be an object"},
      {R"({"inputs":[{"shape":[1],"datatype":"FP32","data":[1]}]})", "inputs[0] has no 'name'"},
      {R"({"inputs":[{"name":7,"shape":[1],"datatype":"FP32","data":[1]}]})",
       "inputs[0]: 'name' must be a string"},
      {R"({"inputs":[{"name":"IN","datatype":"FP32","data":[1]}]})", "input 'IN' has no 'shape'"},
      {OneInput("FP32", "\"1\"", "[1]"), "input 'IN': 'shape' must be an array"},
      {OneInput("FP32", "[-1]", "[1]"), "shape[0] must be a non-negative integer, got -1"},
      {OneInput("FP32", "[1,1.5]", "[1]"), "shape[1] must be a non-negative integer, got 1.5"},
      {R"({"inputs":[{"name":"IN","shape":[1],"data":[1]}]})", "input 'IN' has no 'datatype'"},
      {OneInput("FLOAT32", "[1]", "[1]"), "unknown datatype 'FLOAT32'"},
      {R"({"inputs":[{"name":"IN","shape":[1],"datatype":"FP32"}]})",
       "input 'IN' has neither 'data' nor parameter 'binary_data_size'"},
      {OneInput("FP32", "[1]", "5"), "input 'IN': 'data' must be an array"},
      {OneInput("FP32", "[2,2]", "[1,2,3]"),
       "input 'IN': shape [2,2] needs 4 element(s) but 'data' has 3"},
      {OneInput("FP32", "[1000000000000]", "[1]"),
       "needs 1000000000000 element(s) but 'data' has 1"},
      {OneInput("UINT8", "[2]", "[1,300]"),
       "input 'IN': element 1 (300) is out of range for UINT8"},
      {OneInput("INT8", "[1]", "[-129]"), "element 0 (-129) is out of range for INT8"},
      {OneInput("UINT32", "[1]", "[-1]"), "element 0 (-1) is out of range for UINT32"},
      {OneInput("INT64", "[1]", "[9223372036854775808]"), "out of range for INT64"},
      {OneInput("INT32", "[2]", "[1,1.5]"), "element 1 (1.5) is not an integer"},
      {OneInput("INT64", "[1]", "[1e2]"), "written as a floating-point number"},
      {OneInput("FP32", "[1]", "[\"abc\"]"), "element 0 must be a number for FP32, got a string"},
      {OneInput("FP64", "[1]", "[null]"), "element 0 must be a number for FP64, got null"},
      {OneInput("FP32", "[1]", "[1e39]"), "element 0 (1e+39) is out of range for FP32"},
      {OneInput("FP16", "[1]", "[65520]"), "out of range for FP16"},
      {OneInput("BF16", "[1]", "[1e39]"), "out of range for BF16"},
      {OneInput("BOOL", "[1]", "[1]"), "element 0 must be true or false for BOOL, got a number"},
      {OneInput("BYTES", "[2]", "[\"a\",1]"), "element 1 must be a string for BYTES"},
      {OneInput("FP32", "[1]", deep), "deeper than 64 levels"},
      {R"({"inputs":[{"name":"IN","shape":[1],"datatype":"FP32","data":[1],)"
       R"("parameters":{"binary_data_size":4}}]})",
       "input 'IN' has both 'data' and parameter 'binary_data_size'"},
      {R"({"inputs":[{"name":"IN","shape":[1],"datatype":"FP32",)"
       R"("parameters":{"binary_data_size":-4}}]})",
       "'binary_data_size' must be a non-negative integer, got -4"},
      {R"({"inputs":[{"name":"IN","shape":[1],"datatype":"FP32",)"
       R"("parameters":{"binary_data_size":"4"}}]})",
       "'binary_data_size' must be a non-negative integer, got a string"},
      {R"({"inputs":[{"name":"IN","shape":[1],"datatype":"FP32","data":[1],"parameters":[]}]})",
       "input 'IN': 'parameters' must be an object"},
      {R"({"inputs":[)" + kGoodInput + "," + kGoodInput + "]}",
       "input 'IN' appears more than once"},
      {R"({"inputs":[)" + kGoodInput + R"(],"outputs":{}})", "'outputs' must be an array"},
      {R"({"inputs":[)" + kGoodInput + R"(],"outputs":[{}]})", "outputs[0] has no 'name'"},
      {R"({"inputs":[)" + kGoodInput + R"(],"outputs":[{"name":"O"},{"name":"O"}]})",
       "output 'O' appears more than once"},
      {R"({"inputs":[)" + kGoodInput +
           R"(],"outputs":[{"name":"O","parameters":{"binary_data":"true"}}]})",
       "output 'O': parameter 'binary_data' must be true or false"},
  };
  ASSERT_GE(cases.size(), 20u);
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.body.substr(0, 200));
    auto parsed = ParseJson(c.body);
    ASSERT_FALSE(parsed.ok());
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument) << parsed.status().ToString();
    EXPECT_NE(parsed.status().message().find(c.message), std::string::npos)
        << "message: " << parsed.status().message() << "\nexpected to contain: " << c.message;
  }
}

TEST(InferCodecTest, ManyInputsWithADuplicateName) {
  std::string json = R"({"inputs":[)";
  for (int i = 0; i < 30; ++i) {
    json += R"({"name":"I)" + std::to_string(i == 29 ? 3 : i) +
            R"(","shape":[1],"datatype":"INT8","data":[1]},)";
  }
  json.back() = ']';
  json += "}";
  auto parsed = ParseJson(json);
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("input 'I3' appears more than once"), std::string::npos);
}

TEST(InferCodecTest, SharedMemoryAndClassificationAreUnsupported) {
  auto in = ParseJson(R"({"inputs":[{"name":"IN","shape":[1],"datatype":"FP32","parameters":)"
                      R"({"shared_memory_region":"r","shared_memory_byte_size":4}}]})");
  ASSERT_FALSE(in.ok());
  EXPECT_EQ(in.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(in.status().message().find("input 'IN': shared memory"), std::string::npos)
      << in.status().message();

  auto out = ParseJson(R"({"inputs":[)" + kGoodInput +
                       R"(],"outputs":[{"name":"O","parameters":{"shared_memory_region":"r"}}]})");
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(out.status().message().find("output 'O': shared memory"), std::string::npos);

}

TEST(InferCodecTest, ClassificationIsAPositiveCountPerOutput) {
  auto cls = ParseJson(R"({"inputs":[)" + kGoodInput +
                       R"(],"outputs":[{"name":"O","parameters":{"classification":3}}]})");
  ASSERT_TRUE(cls.ok()) << cls.status().ToString();
  ASSERT_EQ(cls->outputs.size(), 1u);
  EXPECT_EQ(cls->outputs[0].classification, 3u);
  for (const char* bad : {"0", "-1", "\"3\"", "2.5"}) {
    auto r = ParseJson(R"({"inputs":[)" + kGoodInput +
                       R"(],"outputs":[{"name":"O","parameters":{"classification":)" + bad +
                       "}}]}");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("'classification' must be a positive integer"),
              std::string::npos)
        << r.status().message();
  }
}

TEST(InferCodecTest, UnknownKeysAndParametersAreIgnored) {
  auto parsed =
      ParseJson(R"({"id":"r1","parameters":{"priority":2,"sequence_id":5},"extra":[1],)"
                R"("inputs":[{"name":"IN","shape":[1],"datatype":"FP32","data":[1],"note":"x",)"
                R"("parameters":{"something":true}}],"outputs":[{"name":"O","extra":1}]})");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->id, "r1");
  EXPECT_FALSE(parsed->binary_data_output);
  ASSERT_EQ(parsed->outputs.size(), 1u);
  EXPECT_EQ(parsed->outputs[0].name, "O");
}

// ---- binary part ---------------------------------------------------------------------------

TEST(InferCodecTest, BinaryInputsTakeSlicesInOrder) {
  const std::string json =
      R"({"inputs":[{"name":"A","shape":[2],"datatype":"INT32",)"
      R"("parameters":{"binary_data_size":8}},)"
      R"({"name":"J","shape":[1],"datatype":"INT8","data":[7]},)"
      R"({"name":"B","shape":[1],"datatype":"UINT32","parameters":{"binary_data_size":4}}]})";
  const std::string binary = Le<int32_t>({1, 2}) + Le<uint32_t>({3});
  auto body = Body(json + binary);
  auto parsed = ParseInferRequest(body, json.size());
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(Bytes(parsed->inputs[0]), Le<int32_t>({1, 2}));
  EXPECT_EQ(Bytes(parsed->inputs[1]), Le<int8_t>({7}));
  EXPECT_EQ(Bytes(parsed->inputs[2]), Le<uint32_t>({3}));
  EXPECT_EQ(reinterpret_cast<const char*>(parsed->inputs[2].data.data()),
            body->data() + json.size() + 8);

  // The views keep the body alive.
  InferRequest request = std::move(parsed).value();
  body.reset();
  EXPECT_EQ(Bytes(request.inputs[0]), Le<int32_t>({1, 2}));
}

void ExpectInvalid(const Result<InferRequest>& r, std::initializer_list<std::string> parts) {
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  for (const std::string& p : parts) {
    EXPECT_NE(r.status().message().find(p), std::string::npos)
        << "message: " << r.status().message() << "\nexpected to contain: " << p;
  }
}

TEST(InferCodecTest, BinarySizeMismatches) {
  const std::string json = OneBinaryInput("FP32", "[4]", 16);
  ExpectInvalid(ParseWithBinary(json, std::string(12, 'x')), {"16 bytes", "12 bytes"});
  ExpectInvalid(ParseWithBinary(json, std::string(20, 'x')), {"16 bytes", "20 bytes"});
  // No header: the whole body is JSON, so there is no binary part.
  ExpectInvalid(ParseJson(json), {"16 bytes", "0 bytes", "no Inference-Header-Content-Length"});
  // Binary bytes that no input claims.
  ExpectInvalid(ParseWithBinary(OneInput("FP32", "[1]", "[1]"), "abcd"), {"0 bytes", "4 bytes"});
  // The header claims more than the body holds.
  ExpectInvalid(ParseInferRequest(Body(json), json.size() + 1),
                {"Inference-Header-Content-Length is " + std::to_string(json.size() + 1),
                 std::to_string(json.size()) + " bytes"});
  ExpectInvalid(ParseInferRequest(Body(json), 0), {"Inference-Header-Content-Length is 0"});
  // binary_data_size must match shape and datatype.
  ExpectInvalid(ParseWithBinary(OneBinaryInput("FP32", "[4]", 8), std::string(8, 'x')),
                {"input 'IN'", "binary_data_size is 8 bytes", "shape [4] of FP32 needs 16"});
  // Sizes whose sum overflows 64 bits.
  const std::string two =
      R"({"inputs":[{"name":"A","shape":[1],"datatype":"BYTES",)"
      R"("parameters":{"binary_data_size":18446744073709551615}},)"
      R"({"name":"B","shape":[1],"datatype":"BYTES","parameters":{"binary_data_size":2}}]})";
  ExpectInvalid(ParseWithBinary(two, "xy"), {"add up to", "2 bytes"});
  // Malformed BYTES binary data.
  ExpectInvalid(ParseWithBinary(OneBinaryInput("BYTES", "[1]", 6), std::string("\x05\0\0\0ab", 6)),
                {"input 'IN'"});
  ExpectInvalid(ParseWithBinary(OneBinaryInput("BYTES", "[2]", 6), std::string("\x02\0\0\0ab", 6)),
                {"input 'IN'", "expected 2"});
}

// ---- outputs -------------------------------------------------------------------------------

TEST(InferCodecTest, RequestedOutputBinaryFollowsParameterThenRequestDefault) {
  const std::string outputs =
      R"(,"outputs":[{"name":"A"},{"name":"B","parameters":{"binary_data":false}},)"
      R"({"name":"C","parameters":{"binary_data":true}}]})";
  const std::string base = R"({"inputs":[)" + kGoodInput + "]";

  auto with_default = ParseJson(base + R"(,"parameters":{"binary_data_output":true})" + outputs);
  ASSERT_TRUE(with_default.ok()) << with_default.status().ToString();
  EXPECT_TRUE(with_default->binary_data_output);
  ASSERT_EQ(with_default->outputs.size(), 3u);
  EXPECT_TRUE(with_default->outputs[0].binary);
  EXPECT_FALSE(with_default->outputs[1].binary);
  EXPECT_TRUE(with_default->outputs[2].binary);

  auto without = ParseJson(base + outputs);
  ASSERT_TRUE(without.ok());
  EXPECT_FALSE(without->binary_data_output);
  EXPECT_FALSE(without->outputs[0].binary);
  EXPECT_FALSE(without->outputs[1].binary);
  EXPECT_TRUE(without->outputs[2].binary);
}

TEST(InferCodecTest, EncodeSelectsBinaryOutputsAndAppendsThemInOrder) {
  InferRequest request;
  request.binary_data_output = true;
  request.outputs = {{"A", true}, {"B", false}};
  InferResponse response;
  response.model_name = "m";
  response.model_version = 2;
  response.outputs.push_back(MakeTensor("A", DataType::kInt32, {2}, Le<int32_t>({1, 2})));
  response.outputs.push_back(MakeTensor("B", DataType::kInt32, {1}, Le<int32_t>({3})));
  response.outputs.push_back(MakeTensor("D", DataType::kUint8, {3}, Le<uint8_t>({4, 5, 6})));
  EncodedBody encoded = Encode(response, request);
  ASSERT_TRUE(encoded.json_length.has_value());
  EXPECT_EQ(encoded.body.substr(*encoded.json_length),
            Le<int32_t>({1, 2}) + Le<uint8_t>({4, 5, 6}));
  rapidjson::Document doc = ParseResponse(encoded);
  EXPECT_STREQ(doc["model_name"].GetString(), "m");
  EXPECT_STREQ(doc["model_version"].GetString(), "2");
  const rapidjson::Value& outs = doc["outputs"];
  ASSERT_EQ(outs.Size(), 3u);
  EXPECT_EQ(outs[0]["parameters"]["binary_data_size"].GetInt(), 8);
  EXPECT_FALSE(outs[0].HasMember("data"));
  EXPECT_FALSE(outs[1].HasMember("parameters"));
  EXPECT_EQ(outs[1]["data"][0].GetInt(), 3);
  EXPECT_EQ(outs[2]["parameters"]["binary_data_size"].GetInt(), 3);
  EXPECT_EQ(outs[2]["shape"][0].GetInt(), 3);

  // Nothing binary: no header value, no trailing bytes.
  request.binary_data_output = false;
  request.outputs.clear();
  EncodedBody json_only = Encode(response, request);
  EXPECT_FALSE(json_only.json_length.has_value());
  rapidjson::Document doc2 = ParseResponse(json_only);
  EXPECT_EQ(doc2["outputs"][2]["data"][2].GetInt(), 6);
}

TEST(InferCodecTest, IdIsEchoedOnlyWhenPresent) {
  auto parsed = ParseJson(R"({"id":"req-\"7\"","inputs":[)" + kGoodInput + "]}");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->id, "req-\"7\"");
  InferResponse response = EchoResponse(*parsed);
  rapidjson::Document doc = ParseResponse(Encode(response, *parsed));
  ASSERT_TRUE(doc.HasMember("id"));
  EXPECT_STREQ(doc["id"].GetString(), "req-\"7\"");

  auto anonymous = ParseJson(R"({"inputs":[)" + kGoodInput + "]}");
  ASSERT_TRUE(anonymous.ok());
  rapidjson::Document doc2 =
      ParseResponse(Encode(EchoResponse(*anonymous), *anonymous));
  EXPECT_FALSE(doc2.HasMember("id"));
  EXPECT_STREQ(doc2["model_version"].GetString(), "3");
}

TEST(InferCodecTest, Utf8BytesOutputIsExactInJson) {
  InferRequest request;
  InferResponse response;
  response.model_name = "m";
  const std::vector<std::string> cases = {
      "plain",
      "",
      "caf\xc3\xa9",                             // 2-byte sequence
      "\xe2\x98\x83",                             // 3-byte
      "\xf0\x9f\x98\x80",                         // 4-byte
      "\xf4\x8f\xbf\xbf",                         // U+10FFFF, the last code point
      std::string("a\0b\x01\n\t\"\\\x7f", 9),  // escapes, NUL included; DEL is not one
  };
  std::string data;
  for (const auto& c : cases) AppendBytesElement(&data, c);
  response.outputs.push_back(
      MakeTensor("S", DataType::kBytes, {static_cast<int64_t>(cases.size())}, data));
  EncodedBody encoded = Encode(response, request);
  rapidjson::Document doc = ParseResponse(encoded);
  const rapidjson::Value& out = doc["outputs"][0]["data"];
  ASSERT_EQ(out.Size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(std::string(out[i].GetString(), out[i].GetStringLength()), cases[i]) << i;
  }
  EXPECT_NE(encoded.body.find("\"a\\u0000b\\u0001\\n\\t\\\"\\\\\x7f\""), std::string::npos)
      << encoded.body;
}

TEST(InferCodecTest, NonUtf8BytesOutputIsRefusedAsJsonAndExactAsBinary) {
  struct Case {
    std::string bytes;
    size_t offset;  // of the first byte that is not valid UTF-8
    const char* byte;
  };
  const std::vector<Case> cases = {
      {std::string("\xff\xfe\x00" "a", 4), 0, "0xFF"},
      {"ok\x80", 2, "0x80"},                 // a lone continuation byte
      {"\xc0\xaf", 0, "0xC0"},               // overlong form of '/'
      {"\xed\xa0\x80", 0, "0xED"},           // an encoded surrogate (CESU-8)
      {"ab\xe2\x82", 2, "0xE2"},             // truncated at the end
      {"\xf4\x90\x80\x80", 0, "0xF4"},       // above U+10FFFF
      {"caf\xc3\xa9 \xe9t\xe9", 6, "0xE9"},  // Latin-1 after valid UTF-8
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.byte);
    std::string data;
    AppendBytesElement(&data, "fine");
    AppendBytesElement(&data, c.bytes);
    InferResponse response;
    response.model_name = "m";
    response.outputs.push_back(MakeTensor("OUT", DataType::kBytes, {2}, data));

    InferRequest as_json;
    auto refused = EncodeInferResponse(response, as_json);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(refused.status().message(),
              "output 'OUT' cannot be sent as JSON: its element 1 is not valid UTF-8 (byte " +
                  std::string(c.byte) + " at offset " + std::to_string(c.offset) +
                  "), and a JSON string carries text only; request it as binary data (output "
                  "parameter \"binary_data\": true, or request parameter "
                  "\"binary_data_output\": true) to receive its bytes exactly");

    // The same bytes as binary data, whichever way it is asked for, come back exactly.
    InferRequest by_output;
    by_output.outputs = {{"OUT", true}};
    InferRequest by_request;
    by_request.binary_data_output = true;
    for (const InferRequest* request : {&by_output, &by_request}) {
      EncodedBody binary = Encode(response, *request);
      ASSERT_TRUE(binary.json_length.has_value());
      EXPECT_EQ(binary.body.substr(*binary.json_length), data);
      ParseResponse(binary);
    }
  }
}

TEST(InferCodecTest, LongestNumbersFitTheReservedBody) {
  // Values whose JSON text is the longest of their type: the body is reserved once from an
  // upper bound, so these must still come out whole and valid.
  InferRequest request;
  InferResponse response;
  response.model_name = "m";
  response.outputs.push_back(MakeTensor("F16", DataType::kFp16, {3},
                                        Le<uint16_t>({0x8400, 0x8001, 0x83FF})));
  response.outputs.push_back(MakeTensor("B16", DataType::kBf16, {2},
                                        Le<uint16_t>({0x8081, 0xFF7F})));
  response.outputs.push_back(
      MakeTensor("F32", DataType::kFp32, {2}, Le<float>({-1.17549435e-38f, -3.40282347e38f})));
  response.outputs.push_back(MakeTensor(
      "F64", DataType::kFp64, {1}, Le<double>({-2.2250738585072014e-308})));
  response.outputs.push_back(MakeTensor(
      "I64", DataType::kInt64, {1}, Le<int64_t>({std::numeric_limits<int64_t>::min()})));
  std::string controls;
  AppendBytesElement(&controls, std::string(64, '\x01'));  // 6 characters per byte
  response.outputs.push_back(MakeTensor("S", DataType::kBytes, {1}, controls));
  EncodedBody encoded = Encode(response, request);
  rapidjson::Document doc = ParseResponse(encoded);
  EXPECT_EQ(static_cast<float>(doc["outputs"][0]["data"][0].GetDouble()), -0x1p-14f);
  EXPECT_NE(encoded.body.find(R"("data":[-6.1035156e-05,-5.9604645e-08,-6.097555e-05])"),
            std::string::npos)
      << encoded.body;
  EXPECT_NE(encoded.body.find(R"("data":[-1.1846779e-38,-3.3895314e+38])"), std::string::npos)
      << encoded.body;
  EXPECT_NE(encoded.body.find(R"("data":[-1.1754944e-38,-3.4028235e+38])"), std::string::npos)
      << encoded.body;
  EXPECT_NE(encoded.body.find(R"("data":[-2.2250738585072014e-308])"), std::string::npos);
  EXPECT_NE(encoded.body.find(R"("data":[-9223372036854775808])"), std::string::npos);
  EXPECT_EQ(doc["outputs"][5]["data"][0].GetStringLength(), 64u);
}

TEST(InferCodecTest, ErrorBodyIsEscaped) {
  const std::string message = std::string("bad \"x\"\n\\ \xff end");
  const std::string body = EncodeError(message);
  rapidjson::Document doc;
  doc.Parse<rapidjson::kParseValidateEncodingFlag>(body.c_str());
  ASSERT_FALSE(doc.HasParseError()) << body;
  ASSERT_TRUE(doc.IsObject());
  EXPECT_EQ(doc.MemberCount(), 1u);
  EXPECT_EQ(std::string(doc["error"].GetString()), "bad \"x\"\n\\ \xc3\xbf end");
}

TEST(InferCodecTest, LargeRequestThenSmallOnesParse) {
  const std::string big(3 << 20, 'z');
  auto large = ParseJson(OneInput("BYTES", "[1]", "[\"" + big + "\"]"));
  ASSERT_TRUE(large.ok()) << large.status().ToString();
  EXPECT_EQ(large->inputs[0].data.size(), big.size() + 4);
  for (int i = 0; i < 3; ++i) {
    auto small = ParseJson(OneInput("FP32", "[2]", "[1,2]"));
    ASSERT_TRUE(small.ok());
    EXPECT_EQ(Bytes(small->inputs[0]), Le<float>({1, 2}));
  }
}

TEST(InferCodecTest, ParsesConcurrentlyFromManyThreads) {
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &failures] {
      for (int i = 0; i < 500; ++i) {
        const int v = t * 1000 + i;
        auto r = ParseJson(OneInput("INT32", "[2]", "[" + std::to_string(v) + ",1]"));
        if (!r.ok() || Bytes(r->inputs[0]) != Le<int32_t>({v, 1})) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
}  // namespace vramd::http
