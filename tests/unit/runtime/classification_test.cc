#include "runtime/classification.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "config/model_config_parser.h"
#include "support/config_text.h"
#include "support/scratch_repository.h"
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
  t.data = SharedBuffer::FromString(std::move(bytes));
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

// A model directory with a label file, a secret beside it and the tricks a config override
// could try (absolute paths, "..", symlinks out, a FIFO, a device, a huge file).
class LabelFileTest : public ::testing::Test {
 protected:
  LabelFileTest() {
    std::filesystem::create_directories(model_);
    std::ofstream(model_ / "labels.txt") << "cat\ndog\nbird";
    std::ofstream(scratch_.root() / "secret.txt") << "root:x:0:0\n";
  }

  static config::ModelConfig WithLabels(const std::string& label_filename) {
    return ConfigFromText(R"(
      max_batch_size: 0
      input [ { name: "x" data_type: TYPE_FP32 dims: [ 3 ] } ]
      output [ { name: "scores" data_type: TYPE_FP32 dims: [ 3 ] label_filename: ")" +
                          label_filename + R"(" } ])");
  }

  // The load error for `label_filename`: an InvalidArgument naming the output and the file.
  std::string Refusal(const std::string& label_filename) const {
    auto c = Classifier::Load(WithLabels(label_filename), model_);
    EXPECT_FALSE(c.ok()) << label_filename;
    if (c.ok()) return "";
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << c.status().ToString();
    EXPECT_THAT(c.status().message(),
                ::testing::HasSubstr("output 'scores': label_filename '" + label_filename + "'"));
    EXPECT_EQ(c.status().message().find("root:x"), std::string::npos);
    return c.status().message();
  }

  vramd::testing::ScratchRepository scratch_;
  std::filesystem::path model_ = scratch_.root() / "m";
};

using ::testing::HasSubstr;

TEST_F(LabelFileTest, AFileInTheModelDirectoryLabelsTheClasses) {
  auto c = Classifier::Load(WithLabels("labels.txt"), model_);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto top = c->Classify(TensorOf<float>(DataType::kFp32, {3}, {1, 3, 2}), 3);
  ASSERT_TRUE(top.ok());
  EXPECT_EQ(Strings(*top), (std::vector<std::string>{"3.000000:1:dog", "2.000000:2:bird",
                                                     "1.000000:0:cat"}));
}

TEST_F(LabelFileTest, AbsolutePathsAreRefused) {
  EXPECT_THAT(Refusal((scratch_.root() / "secret.txt").string()), HasSubstr("relative"));
  EXPECT_THAT(Refusal("/etc/passwd"), HasSubstr("must be a path relative to the model directory"));
}

TEST_F(LabelFileTest, DotDotIsRefused) {
  EXPECT_THAT(Refusal("../secret.txt"), HasSubstr("must not leave the model directory"));
  EXPECT_THAT(Refusal("../../../../../../etc/passwd"), HasSubstr("\"..\""));
}

TEST_F(LabelFileTest, SymlinksOutOfTheModelDirectoryAreRefused) {
  std::filesystem::create_symlink(scratch_.root() / "secret.txt", model_ / "labels_link.txt");
  EXPECT_THAT(Refusal("labels_link.txt"), HasSubstr("outside the model directory"));
}

TEST_F(LabelFileTest, AFifoIsRefusedWithoutOpeningIt) {
  // Reading a FIFO blocks until a writer comes: before the rule this test hung.
  ASSERT_EQ(::mkfifo((model_ / "fifo.txt").c_str(), 0600), 0);
  EXPECT_THAT(Refusal("fifo.txt"), HasSubstr("is a FIFO, not a regular file"));
}

TEST_F(LabelFileTest, DevZeroIsRefusedWithoutReadingIt) {
  // /dev/zero never ends: before the rule the load read until memory ran out.
  std::filesystem::create_symlink("/dev/zero", model_ / "zero.txt");
  EXPECT_THAT(Refusal("zero.txt"), HasSubstr("outside the model directory"));
}

TEST_F(LabelFileTest, AFileOverTheLimitIsRefused) {
  // One byte over the 16 MiB limit, sparse.
  std::ofstream(model_ / "huge.txt").close();
  std::filesystem::resize_file(model_ / "huge.txt", (16 << 20) + 1);
  EXPECT_THAT(Refusal("huge.txt"), HasSubstr("over the limit of 16777216 bytes"));
}

}  // namespace
}  // namespace vramd::runtime
