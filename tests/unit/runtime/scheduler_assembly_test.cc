// Batch assembly: concatenating requests along dim 0 and splitting outputs back, BYTES
// included, and keeping each request's requested outputs.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "runtime/batch_assembly.h"

namespace vramd::runtime {
namespace {

Tensor Int32(const std::string& name, Shape shape, std::vector<int32_t> v) {
  return Tensor{name, DataType::kInt32, std::move(shape),
                SharedBuffer::CopyOf(v.data(), v.size() * sizeof(int32_t))};
}

Tensor Bytes(const std::string& name, Shape shape, const std::vector<std::string>& elements) {
  std::string data;
  for (const auto& e : elements) AppendBytesElement(&data, e);
  return Tensor{name, DataType::kBytes, std::move(shape), SharedBuffer::FromString(std::move(data))};
}

std::vector<int32_t> Values(const Tensor& t) {
  std::vector<int32_t> v(t.data.size() / sizeof(int32_t));
  if (!v.empty()) std::memcpy(v.data(), t.data.data(), t.data.size());
  return v;
}

std::vector<std::string> Strings(const Tensor& t) {
  auto split = SplitBytesElements(t.data.view(), t.name, -1);
  EXPECT_TRUE(split.ok()) << split.status().ToString();
  return split.ok() ? std::vector<std::string>(split->begin(), split->end())
                    : std::vector<std::string>{};
}

InferRequest Request(std::vector<Tensor> inputs) {
  InferRequest r;
  r.inputs = std::move(inputs);
  return r;
}

TEST(BatchAssemblyTest, BatchSizeIsTheFirstInputsLeadingDimension) {
  EXPECT_EQ(RequestBatchSize(Request({Int32("A", {3, 2}, {1, 2, 3, 4, 5, 6})})), 3u);
  EXPECT_EQ(RequestBatchSize(Request({})), 1u);
}

TEST(BatchAssemblyTest, RequestsBatchTogetherOnlyWithTheSameInputsTypesAndInnerShapes) {
  const InferRequest a = Request({Int32("A", {1, 2}, {1, 2}), Int32("B", {1, 1}, {9})});
  // Same inputs in another order, another batch size: fine.
  EXPECT_TRUE(CanBatchTogether(
      a, Request({Int32("B", {3, 1}, {1, 2, 3}), Int32("A", {3, 2}, {1, 2, 3, 4, 5, 6})})));
  EXPECT_FALSE(CanBatchTogether(
      a, Request({Int32("A", {1, 3}, {1, 2, 3}), Int32("B", {1, 1}, {9})})));  // inner shape
  EXPECT_FALSE(CanBatchTogether(a, Request({Int32("A", {1, 2}, {1, 2})})));  // an input fewer
  Tensor b_fp32 = Int32("B", {1, 1}, {9});
  b_fp32.datatype = DataType::kFp32;
  EXPECT_FALSE(CanBatchTogether(a, Request({Int32("A", {1, 2}, {1, 2}), b_fp32})));
  EXPECT_FALSE(CanBatchTogether(
      a, Request({Int32("A", {1, 2}, {1, 2}), Int32("C", {1, 1}, {9})})));  // another name
}

TEST(BatchAssemblyTest, ConcatenatesAlongTheBatchDimensionInRequestOrder) {
  const InferRequest r1 = Request({Int32("A", {1, 2}, {1, 2}), Bytes("S", {1, 1}, {"x"})});
  const InferRequest r2 = Request(
      {Bytes("S", {2, 1}, {"", "hello"}), Int32("A", {2, 2}, {3, 4, 5, 6})});
  const InferRequest merged = ConcatenateRequests({&r1, &r2});
  ASSERT_EQ(merged.inputs.size(), 2u);
  EXPECT_EQ(merged.inputs[0].name, "A");  // the first request's order
  EXPECT_EQ(merged.inputs[0].shape, (Shape{3, 2}));
  EXPECT_EQ(Values(merged.inputs[0]), (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(merged.inputs[1].name, "S");
  EXPECT_EQ(merged.inputs[1].datatype, DataType::kBytes);
  EXPECT_EQ(merged.inputs[1].shape, (Shape{3, 1}));
  EXPECT_EQ(Strings(merged.inputs[1]), (std::vector<std::string>{"x", "", "hello"}));
}

TEST(BatchAssemblyTest, SplitsOutputsBackByEachRequestsBatchSize) {
  std::vector<Tensor> outputs = {
      Int32("OUT", {4, 2}, {1, 2, 3, 4, 5, 6, 7, 8}),
      Bytes("STR", {4, 2}, {"a", "bb", "", "ccc", "d", "", "eeee", "f"}),
  };
  auto pieces = SplitOutputs(std::move(outputs), {1, 3});
  ASSERT_TRUE(pieces.ok()) << pieces.status().ToString();
  ASSERT_EQ(pieces->size(), 2u);
  const auto& first = (*pieces)[0];
  const auto& second = (*pieces)[1];
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].shape, (Shape{1, 2}));
  EXPECT_EQ(Values(first[0]), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(second[0].shape, (Shape{3, 2}));
  EXPECT_EQ(Values(second[0]), (std::vector<int32_t>{3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(first[1].shape, (Shape{1, 2}));
  EXPECT_EQ(Strings(first[1]), (std::vector<std::string>{"a", "bb"}));
  EXPECT_EQ(second[1].shape, (Shape{3, 2}));
  EXPECT_EQ(Strings(second[1]), (std::vector<std::string>{"", "ccc", "d", "", "eeee", "f"}));
}

TEST(BatchAssemblyTest, ConcatenateThenSplitGivesBackEachRequest) {
  const InferRequest r1 = Request({Bytes("S", {2}, {"one", "two"})});
  const InferRequest r2 = Request({Bytes("S", {1}, {"three"})});
  InferRequest merged = ConcatenateRequests({&r1, &r2});
  auto pieces = SplitOutputs(std::move(merged.inputs), {2, 1});
  ASSERT_TRUE(pieces.ok()) << pieces.status().ToString();
  EXPECT_EQ(Strings((*pieces)[0][0]), (std::vector<std::string>{"one", "two"}));
  EXPECT_EQ(Strings((*pieces)[1][0]), (std::vector<std::string>{"three"}));
}

TEST(BatchAssemblyTest, SplitRefusesOutputsThatDoNotCarryTheBatch) {
  auto wrong_batch = SplitOutputs({Int32("OUT", {3, 1}, {1, 2, 3})}, {1, 1});
  EXPECT_EQ(wrong_batch.status().code(), StatusCode::kInternal);
  EXPECT_NE(wrong_batch.status().message().find("'OUT'"), std::string::npos);

  Tensor short_data = Int32("OUT", {2, 2}, {1, 2, 3});
  EXPECT_EQ(SplitOutputs({short_data}, {1, 1}).status().code(), StatusCode::kInternal);

  Tensor bad_bytes = Bytes("STR", {2}, {"a"});  // one element for a shape of two
  EXPECT_EQ(SplitOutputs({bad_bytes}, {1, 1}).status().code(), StatusCode::kInternal);
}

TEST(BatchAssemblyTest, SelectKeepsTheRequestedOutputsInTheRequestsOrder) {
  std::vector<Tensor> outputs = {Int32("A", {1}, {1}), Int32("B", {1}, {2}),
                                 Int32("C", {1}, {3})};
  InferRequest all;
  auto every = SelectOutputs(all, outputs, "model 'm' version 1");
  ASSERT_TRUE(every.ok());
  EXPECT_EQ(every->size(), 3u);

  InferRequest some;
  some.outputs = {{"C", false}, {"A", true}};
  auto selected = SelectOutputs(some, outputs, "model 'm' version 1");
  ASSERT_TRUE(selected.ok());
  ASSERT_EQ(selected->size(), 2u);
  EXPECT_EQ((*selected)[0].name, "C");
  EXPECT_EQ((*selected)[1].name, "A");

  InferRequest missing;
  missing.outputs = {{"D", false}};
  auto none = SelectOutputs(missing, outputs, "model 'm' version 1");
  EXPECT_EQ(none.status().code(), StatusCode::kInternal);
  EXPECT_NE(none.status().message().find("model 'm' version 1"), std::string::npos);
  EXPECT_NE(none.status().message().find("'D'"), std::string::npos);
}

}  // namespace
}  // namespace vramd::runtime
