// The gRPC infer codec: requests in both tensor forms become the runtime's InferRequest (raw
// bytes viewed, not copied), every malformed one is refused naming what is wrong, and a
// response goes out raw with its parameters.
#include "server/grpc/infer_proto_codec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

namespace vramd::grpc_server {
namespace {
using ::testing::HasSubstr;
using inference::ModelInferRequest;

std::shared_ptr<ModelInferRequest> Fp32Raw(std::vector<float> values) {
  auto m = std::make_shared<ModelInferRequest>();
  m->set_model_name("m");
  m->set_id("r1");
  auto* in = m->add_inputs();
  in->set_name("X");
  in->set_datatype("FP32");
  in->add_shape(static_cast<int64_t>(values.size()));
  m->add_raw_input_contents(std::string(reinterpret_cast<const char*>(values.data()),
                                        values.size() * sizeof(float)));
  return m;
}

TEST(InferProtoCodecTest, RawInputsAreViewsOfTheMessage) {
  auto m = Fp32Raw({1, 2, 3});
  (*m->mutable_parameters())["sequence_id"].set_int64_param(9);
  (*m->mutable_parameters())["sequence_start"].set_bool_param(true);
  (*m->mutable_parameters())["timeout"].set_uint64_param(500);
  (*m->mutable_parameters())["custom"].set_string_param("v");
  auto* out = m->add_outputs();
  out->set_name("Y");
  (*out->mutable_parameters())["classification"].set_int64_param(2);
  auto r = DecodeInferRequest(m);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->id, "r1");
  EXPECT_EQ(r->correlation_id, 9u);
  EXPECT_EQ(r->flags, kRequestFlagSequenceStart);
  EXPECT_EQ(r->timeout_us, 500u);
  ASSERT_EQ(r->parameters.size(), 1u);
  EXPECT_EQ(r->parameters[0].name, "custom");
  ASSERT_EQ(r->inputs.size(), 1u);
  EXPECT_EQ(r->inputs[0].datatype, DataType::kFp32);
  EXPECT_EQ(r->inputs[0].data.view().data(), m->raw_input_contents(0).data()) << "not copied";
  ASSERT_EQ(r->outputs.size(), 1u);
  EXPECT_EQ(r->outputs[0].classification, 2u);
}

TEST(InferProtoCodecTest, TypedContentsArePackedAndRangeChecked) {
  auto m = std::make_shared<ModelInferRequest>();
  auto* in = m->add_inputs();
  in->set_name("X");
  in->set_datatype("UINT16");
  in->add_shape(2);
  in->mutable_contents()->add_uint_contents(7);
  in->mutable_contents()->add_uint_contents(65535);
  auto r = DecodeInferRequest(m);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  uint16_t got[2];
  ASSERT_EQ(r->inputs[0].data.size(), sizeof got);
  std::memcpy(got, r->inputs[0].data.view().data(), sizeof got);
  EXPECT_EQ(got[0], 7);
  EXPECT_EQ(got[1], 65535);

  in->mutable_contents()->set_uint_contents(1, 65536);
  auto over = DecodeInferRequest(m);
  ASSERT_FALSE(over.ok());
  EXPECT_THAT(over.status().message(), HasSubstr("element 1 (65536) is out of range"));

  in->mutable_contents()->set_uint_contents(1, 1);
  in->add_shape(2);  // [2, 2]: 4 elements wanted, 2 given
  auto short_of = DecodeInferRequest(m);
  ASSERT_FALSE(short_of.ok());
  EXPECT_THAT(short_of.status().message(), HasSubstr("2 elements in its contents, but shape [2,2] has 4"));
}

TEST(InferProtoCodecTest, MalformedRequestsAreRefusedNamingTheFault) {
  struct Case {
    const char* what;
    std::function<void(ModelInferRequest*)> spoil;
    const char* text;
  };
  const Case cases[] = {
      {"raw size", [](ModelInferRequest* m) { m->set_raw_input_contents(0, "abc"); },
       "raw_input_contents has 3 bytes but shape [3] of FP32 needs 12"},
      {"raw count", [](ModelInferRequest* m) { m->add_raw_input_contents("x"); },
       "raw_input_contents has 2 entries but the request has 1 inputs"},
      {"negative dim", [](ModelInferRequest* m) { m->mutable_inputs(0)->set_shape(0, -1); },
       "shape[0] must be a non-negative integer, got -1"},
      {"datatype", [](ModelInferRequest* m) { m->mutable_inputs(0)->set_datatype("fp32"); },
       "unknown datatype 'fp32'"},
      {"empty name", [](ModelInferRequest* m) { m->mutable_inputs(0)->set_name(""); },
       "inputs[0]: 'name' must not be empty"},
      {"duplicate", [](ModelInferRequest* m) {
         *m->add_inputs() = m->inputs(0);
         m->add_raw_input_contents(m->raw_input_contents(0));
       }, "input 'X' appears more than once"},
      {"reserved", [](ModelInferRequest* m) { (*m->mutable_parameters())["triton_a"].set_bool_param(true); },
       "keys starting with 'triton_' are reserved"},
      {"sequence_start", [](ModelInferRequest* m) { (*m->mutable_parameters())["sequence_start"].set_int64_param(1); },
       "'sequence_start' must be true or false, got an int64"},
      {"empty parameter", [](ModelInferRequest* m) { (*m->mutable_parameters())["p"]; },
       "request parameter 'p' has no value"},
      {"bytes", [](ModelInferRequest* m) {
         m->mutable_inputs(0)->set_datatype("BYTES");
         m->set_raw_input_contents(0, std::string("\x09\x00\x00\x00" "ab", 6));
       }, "X"},
      {"classification", [](ModelInferRequest* m) {
         (*m->add_outputs()->mutable_parameters())["classification"].set_int64_param(0);
         m->mutable_outputs(0)->set_name("Y");
       }, "parameter 'classification' must be a positive integer"},
  };
  for (const Case& c : cases) {
    auto m = Fp32Raw({1, 2, 3});
    c.spoil(m.get());
    auto r = DecodeInferRequest(m);
    ASSERT_FALSE(r.ok()) << c.what;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.what;
    EXPECT_THAT(r.status().message(), HasSubstr(c.text)) << c.what;
  }
  auto shm = Fp32Raw({1});
  (*shm->mutable_inputs(0)->mutable_parameters())["shared_memory_region"].set_string_param("r");
  auto r = DecodeInferRequest(shm);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
}

TEST(InferProtoCodecTest, VersionsAreEmptyOrPositiveIntegers) {
  EXPECT_EQ(*ParseModelVersion(""), 0);
  EXPECT_EQ(*ParseModelVersion("12"), 12);
  for (const char* bad : {"0", "-1", "1a", " 1", "99999999999999999999"}) {
    EXPECT_FALSE(ParseModelVersion(bad).ok()) << bad;
  }
}

TEST(InferProtoCodecTest, ResponsesGoOutRawWithTheirParameters) {
  InferResponse response;
  response.model_name = "m";
  response.model_version = 3;
  response.parameters = {{"done", true}, {"n", int64_t{-4}}, {"s", std::string("x")}};
  Tensor t;
  t.name = "Y";
  t.datatype = DataType::kInt32;
  t.shape = {2};
  const int32_t values[2] = {5, -6};
  t.data = SharedBuffer::CopyOf(values, sizeof values);
  response.outputs.push_back(t);
  InferRequest request;
  request.id = "abc";
  inference::ModelInferResponse out;
  ASSERT_TRUE(EncodeInferResponse(response, request, &out).ok());
  EXPECT_EQ(out.model_version(), "3");
  EXPECT_EQ(out.id(), "abc");
  EXPECT_TRUE(out.parameters().at("done").bool_param());
  EXPECT_EQ(out.parameters().at("n").int64_param(), -4);
  ASSERT_EQ(out.outputs_size(), 1);
  EXPECT_EQ(out.outputs(0).datatype(), "INT32");
  ASSERT_EQ(out.raw_output_contents(0).size(), sizeof values);
  EXPECT_EQ(std::memcmp(out.raw_output_contents(0).data(), values, sizeof values), 0);
}

// A serialized answer read back by protobuf, as a client reads it.
inference::ModelInferResponse Parse(grpc::ByteBuffer* buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer->Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  inference::ModelInferResponse parsed;
  EXPECT_TRUE(parsed.ParseFromString(bytes));
  return parsed;
}

TEST(InferProtoCodecTest, SerializedAnswersHoldLargeOutputsInPlaceUntilSent) {
  // Three raw entries: small (copied), empty (an output placed in shared memory), and large
  // (sent from its own buffer): parsed back, every field and byte is where a serializer would
  // put it, and the large one is the model's memory, held (with `keep`) by the buffer alone.
  InferResponse response;
  response.model_name = "m";
  response.model_version = 2;
  for (auto [name, elements] : {std::pair<const char*, size_t>{"SMALL", 3}, {"PLACED", 0},
                                {"LARGE", kRawInPlaceBytes / sizeof(float) + 5}}) {
    Tensor t;
    t.name = name;
    t.datatype = DataType::kFp32;
    t.shape = {static_cast<int64_t>(elements)};
    t.data = SharedBuffer::Allocate(elements * sizeof(float));
    auto* f = reinterpret_cast<float*>(t.data.mutable_data());
    for (size_t i = 0; i < elements; ++i) f[i] = static_cast<float>(i) * 0.25f + (name[0] == 'S');
    response.outputs.push_back(std::move(t));
  }
  InferRequest request;
  request.id = "rid";
  EncodedInferResponse encoded;
  ASSERT_TRUE(EncodeInferResponse(response, request, &encoded.message, nullptr, nullptr,
                                  &encoded.raw).ok());
  EXPECT_EQ(encoded.message.raw_output_contents_size(), 0);
  ASSERT_EQ(encoded.raw.size(), 3u);
  encoded.raw[1] = SharedBuffer();  // as EncodeInferResponse leaves a placed output's entry
  const std::byte* large = encoded.raw[2].data();
  EXPECT_EQ(large, response.outputs[2].data.data());  // the output's own buffer, not a copy
  auto keep = std::make_shared<int>(7);
  std::weak_ptr<int> kept = keep;
  encoded.keep = std::move(keep);
  {
    grpc::ByteBuffer buffer = SerializeInferResponse(std::move(encoded));
    EXPECT_FALSE(kept.expired()) << "released before gRPC let go of the large output";
    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(buffer.Dump(&slices).ok());
    bool in_place = false;
    for (const grpc::Slice& s : slices) {
      in_place |= reinterpret_cast<const std::byte*>(s.begin()) == large;
    }
    EXPECT_TRUE(in_place) << "the large output was copied";
    inference::ModelInferResponse parsed = Parse(&buffer);
    EXPECT_EQ(parsed.model_name(), "m");
    EXPECT_EQ(parsed.model_version(), "2");
    EXPECT_EQ(parsed.id(), "rid");
    ASSERT_EQ(parsed.outputs_size(), 3);
    ASSERT_EQ(parsed.raw_output_contents_size(), 3);
    for (int i : {0, 2}) {
      const SharedBuffer& want = response.outputs[static_cast<size_t>(i)].data;
      EXPECT_EQ(parsed.raw_output_contents(i), std::string(want.view())) << "entry " << i;
    }
    EXPECT_EQ(parsed.raw_output_contents(1), "");
  }
  EXPECT_TRUE(kept.expired()) << "the outcome outlived the buffer that held it";
}

}  // namespace
}  // namespace vramd::grpc_server
