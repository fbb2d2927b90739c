#include "runtime/classification.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "config/model_config_parser.h"
#include "support/config_text.h"
#include "core/half.h"

namespace vramd::runtime {
namespace {

using vramd::testing::ConfigFromText;

template <typename T>
Tensor TensorOf(DataType type, Shape shape, const std::vector<T>& values) {
  Tensor t;
  t.name = "scores";
  t.datatype = type;
  t.shape = std::move(shape);
  std::string bytes(values.size() * sizeof(T), '\0');
  std::memcpy(bytes.data(), values.data(), bytes.size());
  t.data = HostBuffer::FromString(std::move(bytes));
  return t;
}

std::vector<std::string> Strings(const Tensor& t) {
  auto parts = SplitBytesElements(t.data.view(), t.name, ElementCount(t.shape));
  EXPECT_TRUE(parts.ok()) << parts.status().ToString();
  std::vector<std::string> out;
  if (parts.ok()) {
    for (auto p : *parts) out.emplace_back(p);
  }
  return out;
}

const char* kConfig = R"(
  max_batch_size: 0
  input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
  output [ { name: "scores" data_type: TYPE_FP32 dims: [ 4 ] } ])";

TEST(ClassifierTest, TopClassesHighestFirstAsValueColonIndex) {
  auto c = Classifier::Load(ConfigFromText(kConfig), "/nonexistent");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto top = c->Classify(TensorOf<float>(DataType::kFp32, {4}, {1, 5, 10, 4}), 2);
  ASSERT_TRUE(top.ok()) << top.status().ToString();
  EXPECT_EQ(top->datatype, DataType::kBytes);
  EXPECT_EQ(top->shape, (Shape{2}));
  EXPECT_EQ(Strings(*top), (std::vector<std::string>{"10.000000:2", "5.000000:1"}));
}

TEST(ClassifierTest, EqualValuesKeepIndexOrderAndTheCountIsCappedAtTheClasses) {
  Classifier c;
  auto top = c.Classify(TensorOf<int32_t>(DataType::kInt32, {3}, {7, -2, 7}), 10);
  ASSERT_TRUE(top.ok()) << top.status().ToString();
  EXPECT_EQ(top->shape, (Shape{3}));
  EXPECT_EQ(Strings(*top), (std::vector<std::string>{"7:0", "7:2", "-2:1"}));
}

TEST(ClassifierTest, BatchedOutputsClassifyEachRowWithTheirLabels) {
  const auto dir = std::filesystem::temp_directory_path() / "vramd-classifier-test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "labels.txt") << "cat\r\ndog\nbird\n";
  auto c = Classifier::Load(ConfigFromText(R"(
      max_batch_size: 4
      input [ { name: "x" data_type: TYPE_FP32 dims: [ 3 ] } ]
      output [ { name: "scores" data_type: TYPE_FP16 dims: [ 3 ] label_filename: "labels.txt" } ])"),
                            dir);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const std::vector<uint16_t> halves = {HalfFromFloat(0.5f), HalfFromFloat(0.25f),
                                        HalfFromFloat(2.0f), HalfFromFloat(-1.0f),
                                        HalfFromFloat(3.0f), HalfFromFloat(0.0f)};
  auto top = c->Classify(TensorOf<uint16_t>(DataType::kFp16, {2, 3}, halves), 1);
  ASSERT_TRUE(top.ok()) << top.status().ToString();
  EXPECT_EQ(top->shape, (Shape{2, 1}));
  EXPECT_EQ(Strings(*top), (std::vector<std::string>{"2.000000:2:bird", "3.000000:1:dog"}));
  std::filesystem::remove_all(dir);
}

TEST(ClassifierTest, StringsAndACountOfZeroAreRefusedAndAMissingLabelFileFailsTheLoad) {
  Classifier c;
  Tensor words;
  words.name = "words";
  words.datatype = DataType::kBytes;
  words.shape = {1};
  auto refused = c.Classify(words, 1);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("numeric"), std::string::npos);
  EXPECT_FALSE(c.Classify(TensorOf<float>(DataType::kFp32, {1}, {1}), 0).ok());

  auto missing = Classifier::Load(ConfigFromText(R"(
      max_batch_size: 0
      input [ { name: "x" data_type: TYPE_FP32 dims: [ 3 ] } ]
      output [ { name: "scores" data_type: TYPE_FP32 dims: [ 3 ] label_filename: "nope.txt" } ])"),
                                  "/nonexistent-model-dir");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("output 'scores'"), std::string::npos);
  EXPECT_NE(missing.status().message().find("nope.txt"), std::string::npos);
}

}  // namespace
}  // namespace vramd::runtime
