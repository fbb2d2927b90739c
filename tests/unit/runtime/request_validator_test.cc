#include "runtime/request_validator.h"

#include <gmock/gmock.h>
#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace vramd::runtime {
namespace {

using ::testing::HasSubstr;

config::ModelConfig ParseConfig(const std::string& text) {
  config::ModelConfig config;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &config)) << text;
  return config;
}

// Quick start's add_sub: batching, two FP32 inputs of dims [16].
config::ModelConfig AddSubConfig() {
  return ParseConfig(R"pb(
    name: "add_sub"
    backend: "add_sub"
    max_batch_size: 8
    input {
      name: "INPUT0"
      data_type: TYPE_FP32
      dims: [ 16 ]
    }
    input {
      name: "INPUT1"
      data_type: TYPE_FP32
      dims: [ 16 ]
    }
    output {
      name: "OUTPUT0"
      data_type: TYPE_FP32
      dims: [ 16 ]
    }
    output {
      name: "OUTPUT1"
      data_type: TYPE_FP32
      dims: [ 16 ]
    }
  )pb");
}

// A tensor of `shape` with exactly the bytes its type needs, plus `extra_bytes` (may be < 0).
Tensor Fixed(const std::string& name, DataType type, Shape shape, int64_t extra_bytes = 0) {
  const int64_t bytes =
      ElementCount(shape) * static_cast<int64_t>(DataTypeByteSize(type)) + extra_bytes;
  return Tensor{name, type, std::move(shape),
                SharedBuffer::FromString(std::string(static_cast<size_t>(bytes), '\0'))};
}

Tensor Bytes(const std::string& name, Shape shape, const std::vector<std::string>& elements) {
  std::string data;
  for (const auto& e : elements) AppendBytesElement(&data, e);
  return Tensor{name, DataType::kBytes, std::move(shape), SharedBuffer::FromString(std::move(data))};
}

InferRequest AddSubRequest(Shape shape) {
  InferRequest r;
  r.model_name = "add_sub";
  r.inputs.push_back(Fixed("INPUT0", DataType::kFp32, shape));
  r.inputs.push_back(Fixed("INPUT1", DataType::kFp32, shape));
  return r;
}

void ExpectInvalid(const Status& s, const std::string& text) {
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr(text));
}

TEST(RequestValidatorTest, AcceptsWellFormedBatchedRequest) {
  EXPECT_TRUE(ValidateInferRequest(AddSubConfig(), AddSubRequest({1, 16})).ok());
  EXPECT_TRUE(ValidateInferRequest(AddSubConfig(), AddSubRequest({8, 16})).ok());
}

TEST(RequestValidatorTest, RejectsUnknownInputListingTheModelsInputs) {
  InferRequest r = AddSubRequest({1, 16});
  r.inputs.push_back(Fixed("FOO", DataType::kFp32, {1, 16}));
  ExpectInvalid(ValidateInferRequest(AddSubConfig(), r),
                "unexpected input 'FOO' for model 'add_sub' (inputs: INPUT0, INPUT1)");
}

TEST(RequestValidatorTest, RejectsInputSentTwice) {
  InferRequest r = AddSubRequest({1, 16});
  r.inputs.push_back(Fixed("INPUT0", DataType::kFp32, {1, 16}));
  ExpectInvalid(ValidateInferRequest(AddSubConfig(), r), "input 'INPUT0' is sent more than once");
}

TEST(RequestValidatorTest, RejectsMissingRequiredInput) {
  InferRequest r = AddSubRequest({1, 16});
  r.inputs.pop_back();
  ExpectInvalid(ValidateInferRequest(AddSubConfig(), r), "missing required input 'INPUT1'");
}

TEST(RequestValidatorTest, AllowsMissingOptionalInput) {
  config::ModelConfig c = ParseConfig(R"pb(
    name: "opt"
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
  )pb");
  InferRequest r;
  r.inputs.push_back(Fixed("INPUT0", DataType::kFp32, {3}));
  EXPECT_TRUE(ValidateInferRequest(c, r).ok());
  r.inputs.clear();
  r.inputs.push_back(Fixed("INPUT1", DataType::kFp32, {3}));
  ExpectInvalid(ValidateInferRequest(c, r), "missing required input 'INPUT0'");
}

TEST(RequestValidatorTest, RejectsWrongDatatypeNamingBothTypes) {
  InferRequest r = AddSubRequest({1, 16});
  r.inputs[0] = Fixed("INPUT0", DataType::kInt32, {1, 16});
  ExpectInvalid(ValidateInferRequest(AddSubConfig(), r),
                "input 'INPUT0': expected datatype FP32 (config TYPE_FP32), got INT32");
}

TEST(RequestValidatorTest, RejectsWrongDimensionNamingIt) {
  InferRequest r = AddSubRequest({1, 16});
  r.inputs[0] = Fixed("INPUT0", DataType::kFp32, {1, 17});
  ExpectInvalid(ValidateInferRequest(AddSubConfig(), r),
                "input 'INPUT0': shape [1,17] does not match dims [16] with max_batch_size 8: "
                "dimension 1 is 17, expected 16");
}

TEST(RequestValidatorTest, RejectsMissingBatchDimension) {
  ExpectInvalid(ValidateInferRequest(AddSubConfig(), AddSubRequest({16})),
                "input 'INPUT0': shape [16] does not match dims [16] with max_batch_size 8: "
                "expected 2 dimension(s) (batch + dims), got 1");
}

TEST(RequestValidatorTest, RejectsBatchAboveMaxBatchSize) {
  ExpectInvalid(ValidateInferRequest(AddSubConfig(), AddSubRequest({9, 16})),
                "input 'INPUT0': batch size 9 exceeds max_batch_size 8");
}

TEST(RequestValidatorTest, RejectsBatchOfZero) {
  ExpectInvalid(ValidateInferRequest(AddSubConfig(), AddSubRequest({0, 16})),
                "input 'INPUT0': batch size 0 is below 1");
}

TEST(RequestValidatorTest, RejectsInputsWithDifferentBatchSizes) {
  InferRequest r = AddSubRequest({2, 16});
  r.inputs[1] = Fixed("INPUT1", DataType::kFp32, {3, 16});
  ExpectInvalid(ValidateInferRequest(AddSubConfig(), r),
                "input 'INPUT1': batch size 3 differs from batch size 2 of input 'INPUT0'");
}

TEST(RequestValidatorTest, NonBatchingModelHasNoBatchDimension) {
  config::ModelConfig c = AddSubConfig();
  c.set_max_batch_size(0);
  EXPECT_TRUE(ValidateInferRequest(c, AddSubRequest({16})).ok());
  Status s = ValidateInferRequest(c, AddSubRequest({1, 16}));
  ExpectInvalid(s,
                "input 'INPUT0': shape [1,16] does not match dims [16]: expected 1 dimension(s), "
                "got 2");
  EXPECT_THAT(s.message(), ::testing::Not(HasSubstr("max_batch_size")));
}

TEST(RequestValidatorTest, VariableDimTakesAnySizeButNotNegative) {
  config::ModelConfig c = ParseConfig(R"pb(
    name: "identity_fp32"
    input {
      name: "INPUT0"
      data_type: TYPE_FP32
      dims: [ -1, 2 ]
    }
    output {
      name: "OUTPUT0"
      data_type: TYPE_FP32
      dims: [ -1, 2 ]
    }
  )pb");
  for (int64_t n : {0, 1, 1000}) {
    InferRequest r;
    r.inputs.push_back(Fixed("INPUT0", DataType::kFp32, {n, 2}));
    EXPECT_TRUE(ValidateInferRequest(c, r).ok()) << n;
  }
  InferRequest r;
  r.inputs.push_back(Tensor{"INPUT0", DataType::kFp32, {-1, 2}, SharedBuffer()});
  ExpectInvalid(ValidateInferRequest(c, r), "dimension 0 is -1, expected a size >= 0");
}

TEST(RequestValidatorTest, ReshapeDoesNotChangeWhatTheClientSends) {
  config::ModelConfig c = ParseConfig(R"pb(
    name: "reshaped"
    max_batch_size: 4
    input {
      name: "INPUT0"
      data_type: TYPE_FP32
      dims: [ 6 ]
      reshape { shape: [ 2, 3 ] }
    }
    output {
      name: "OUTPUT0"
      data_type: TYPE_FP32
      dims: [ 6 ]
    }
  )pb");
  InferRequest ok;
  ok.inputs.push_back(Fixed("INPUT0", DataType::kFp32, {2, 6}));
  EXPECT_TRUE(ValidateInferRequest(c, ok).ok());
  InferRequest reshaped;
  reshaped.inputs.push_back(Fixed("INPUT0", DataType::kFp32, {2, 2, 3}));
  ExpectInvalid(ValidateInferRequest(c, reshaped), "does not match dims [6]");
}

TEST(RequestValidatorTest, RejectsByteSizeThatDoesNotMatchShape) {
  config::ModelConfig c = AddSubConfig();
  c.set_max_batch_size(0);
  InferRequest r = AddSubRequest({16});
  r.inputs[0] = Fixed("INPUT0", DataType::kFp32, {16}, -4);
  ExpectInvalid(ValidateInferRequest(c, r),
                "input 'INPUT0': byte size 60 does not match shape [16] of FP32 (64 bytes)");
  r.inputs[0] = Fixed("INPUT0", DataType::kFp32, {16}, 1);
  ExpectInvalid(ValidateInferRequest(c, r), "byte size 65 does not match");
}

TEST(RequestValidatorTest, RejectsShapeWhoseByteSizeOverflows) {
  config::ModelConfig c = ParseConfig(R"pb(
    name: "big"
    input {
      name: "INPUT0"
      data_type: TYPE_FP64
      dims: [ -1, -1 ]
    }
    output {
      name: "OUTPUT0"
      data_type: TYPE_FP64
      dims: [ -1, -1 ]
    }
  )pb");
  InferRequest r;
  r.inputs.push_back(
      Tensor{"INPUT0", DataType::kFp64, {int64_t{1} << 40, int64_t{1} << 40}, SharedBuffer()});
  ExpectInvalid(ValidateInferRequest(c, r), "input 'INPUT0': byte size 0 does not match shape");
}

config::ModelConfig BytesConfig() {
  return ParseConfig(R"pb(
    name: "identity_bytes"
    input {
      name: "INPUT0"
      data_type: TYPE_STRING
      dims: [ -1 ]
    }
    output {
      name: "OUTPUT0"
      data_type: TYPE_STRING
      dims: [ -1 ]
    }
  )pb");
}

TEST(RequestValidatorTest, BytesAcceptsWellFormedElements) {
  InferRequest r;
  r.inputs.push_back(Bytes("INPUT0", {3}, {"a", "", "hello"}));
  EXPECT_TRUE(ValidateInferRequest(BytesConfig(), r).ok());
}

TEST(RequestValidatorTest, BytesRejectsWrongElementCount) {
  InferRequest r;
  r.inputs.push_back(Bytes("INPUT0", {2}, {"a", "b", "c"}));
  ExpectInvalid(ValidateInferRequest(BytesConfig(), r),
                "input 'INPUT0': expected 2 BYTES element(s) for its shape, got 3");
}

TEST(RequestValidatorTest, BytesRejectsTruncatedData) {
  InferRequest r;
  Tensor t = Bytes("INPUT0", {1}, {"hello"});
  t.data = t.data.Slice(0, t.data.size() - 1);
  r.inputs.push_back(t);
  ExpectInvalid(ValidateInferRequest(BytesConfig(), r),
                "input 'INPUT0': BYTES element 0 declares 5 bytes but only 4 remain");
}

TEST(RequestValidatorTest, BytesRejectsShapeLargerThanTheDataCanHold) {
  InferRequest r;
  r.inputs.push_back(Bytes("INPUT0", {int64_t{1} << 50}, {"x"}));
  ExpectInvalid(ValidateInferRequest(BytesConfig(), r),
                "input 'INPUT0': shape [1125899906842624] has 1125899906842624 BYTES element(s)");
}

TEST(RequestValidatorTest, AcceptsKnownRequestedOutputs) {
  InferRequest r = AddSubRequest({1, 16});
  r.outputs = {{"OUTPUT1", true}, {"OUTPUT0", false}};
  EXPECT_TRUE(ValidateInferRequest(AddSubConfig(), r).ok());
}

TEST(RequestValidatorTest, RejectsUnknownRequestedOutput) {
  InferRequest r = AddSubRequest({1, 16});
  r.outputs = {{"OUTPUT2", false}};
  ExpectInvalid(ValidateInferRequest(AddSubConfig(), r),
                "unexpected output 'OUTPUT2' requested from model 'add_sub' "
                "(outputs: OUTPUT0, OUTPUT1)");
}

TEST(RequestValidatorTest, RejectsOutputRequestedTwice) {
  InferRequest r = AddSubRequest({1, 16});
  r.outputs = {{"OUTPUT0", false}, {"OUTPUT0", true}};
  ExpectInvalid(ValidateInferRequest(AddSubConfig(), r),
                "output 'OUTPUT0' is requested more than once");
}

TEST(RequestValidatorTest, ScalarInputOfAModelWithEmptyDims) {
  config::ModelConfig c = ParseConfig(R"pb(
    name: "scalar"
    input { name: "INPUT0" data_type: TYPE_INT64 }
    output { name: "OUTPUT0" data_type: TYPE_INT64 }
  )pb");
  InferRequest r;
  r.inputs.push_back(Fixed("INPUT0", DataType::kInt64, {}));
  EXPECT_TRUE(ValidateInferRequest(c, r).ok());
  r.inputs[0] = Fixed("INPUT0", DataType::kInt64, {1});
  ExpectInvalid(ValidateInferRequest(c, r), "shape [1] does not match dims []");
}

}  // namespace
}  // namespace vramd::runtime
