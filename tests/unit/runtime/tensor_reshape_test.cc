#include "runtime/tensor_reshape.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "config/model_config_parser.h"
#include "support/config_text.h"

namespace vramd::runtime {
namespace {

using vramd::testing::ConfigFromText;

Tensor Shaped(const std::string& name, Shape shape) {
  Tensor t;
  t.name = name;
  t.datatype = DataType::kFp32;
  t.shape = std::move(shape);
  return t;
}

TEST(TensorReshapeTest, AConfigWithoutReshapeReshapesNothing) {
  TensorReshape r = TensorReshape::From(ConfigFromText(R"(
    max_batch_size: 4
    input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
    output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ])"));
  EXPECT_TRUE(r.empty());
  std::vector<Tensor> inputs = {Shaped("x", {2, 4})};
  r.ToBackend(&inputs);
  EXPECT_EQ(inputs[0].shape, (Shape{2, 4}));
}

TEST(TensorReshapeTest, BatchedInputsAndOutputsKeepTheBatchAndFillTheVariableSizes) {
  TensorReshape r = TensorReshape::From(ConfigFromText(R"(
    max_batch_size: 8
    input [ { name: "image" data_type: TYPE_FP32 dims: [ -1, 12 ] reshape { shape: [ -1, 3, 4 ] } },
            { name: "plain" data_type: TYPE_FP32 dims: [ 2 ] } ]
    output [ { name: "scores" data_type: TYPE_FP32 dims: [ 10 ] reshape { shape: [ 1, 10, 1, 1 ] } },
             { name: "scalar" data_type: TYPE_FP32 dims: [ 1 ] reshape { shape: [ ] } } ])"));
  ASSERT_FALSE(r.empty());
  std::vector<Tensor> inputs = {Shaped("image", {5, 7, 12}), Shaped("plain", {5, 2})};
  r.ToBackend(&inputs);
  EXPECT_EQ(inputs[0].shape, (Shape{5, 7, 3, 4}));
  EXPECT_EQ(inputs[1].shape, (Shape{5, 2}));

  std::vector<Tensor> outputs = {Shaped("scores", {5, 1, 10, 1, 1}), Shaped("scalar", {5})};
  ASSERT_TRUE(r.FromBackend(&outputs).ok());
  EXPECT_EQ(outputs[0].shape, (Shape{5, 10}));
  EXPECT_EQ(outputs[1].shape, (Shape{5, 1}));
}

TEST(TensorReshapeTest, AnOutputAlreadyShapedByDimsPassesAndOneShapedByNeitherIsAnError) {
  TensorReshape r = TensorReshape::From(ConfigFromText(R"(
    max_batch_size: 0
    input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
    output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] reshape { shape: [ 2, 2 ] } } ])"));
  std::vector<Tensor> as_dims = {Shaped("y", {4})};
  ASSERT_TRUE(r.FromBackend(&as_dims).ok());
  EXPECT_EQ(as_dims[0].shape, (Shape{4}));

  std::vector<Tensor> wrong = {Shaped("y", {3, 2})};
  Status s = r.FromBackend(&wrong);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.message().find("output 'y' has shape [3,2]"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("[2,2]"), std::string::npos) << s.message();
}

// The fixtures' densenet and inception configs (Triton's examples) reshape both ways.
TEST(TensorReshapeTest, TritonExampleConfigsReshapeAsTheirModelsExpect) {
  const std::filesystem::path fixture =
      std::filesystem::path(VRAMD_SHARED_FIXTURES_DIR) / "triton-configs" / "densenet_onnx.pbtxt";
  if (!std::filesystem::exists(fixture)) {
    GTEST_SKIP() << "no " << fixture << " (the shared fixtures are not next to this checkout)";
  }
  auto parsed = config::LoadModelConfigFile(fixture);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  TensorReshape r = TensorReshape::From(parsed->config);
  std::vector<Tensor> inputs = {Shaped("data_0", {3, 224, 224})};
  r.ToBackend(&inputs);
  EXPECT_EQ(inputs[0].shape, (Shape{1, 3, 224, 224}));
  std::vector<Tensor> outputs = {Shaped("fc6_1", {1, 1000, 1, 1})};
  ASSERT_TRUE(r.FromBackend(&outputs).ok());
  EXPECT_EQ(outputs[0].shape, (Shape{1000}));
}

}  // namespace
}  // namespace vramd::runtime
