#include "runtime/classification.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string_view>
#include <type_traits>

#include "core/half.h"
#include "runtime/model_file.h"

namespace vramd::runtime {
namespace {

template <typename T>
T Load(const std::byte* p) {
  T value;
  std::memcpy(&value, p, sizeof value);
  return value;
}

// Calls `f` with element `i` of `data` in its own C++ type (BOOL as int, FP16 and BF16 as
// float).
template <typename F>
auto Visit(DataType type, const std::byte* data, size_t i, F&& f) {
  const std::byte* p = data + i * DataTypeByteSize(type);
  switch (type) {
    case DataType::kBool: return f(static_cast<int>(Load<uint8_t>(p) != 0));
    case DataType::kUint8: return f(Load<uint8_t>(p));
    case DataType::kUint16: return f(Load<uint16_t>(p));
    case DataType::kUint32: return f(Load<uint32_t>(p));
    case DataType::kUint64: return f(Load<uint64_t>(p));
    case DataType::kInt8: return f(Load<int8_t>(p));
    case DataType::kInt16: return f(Load<int16_t>(p));
    case DataType::kInt32: return f(Load<int32_t>(p));
    case DataType::kInt64: return f(Load<int64_t>(p));
    case DataType::kFp16: return f(HalfToFloat(Load<uint16_t>(p)));
    case DataType::kBf16: return f(Bf16ToFloat(Load<uint16_t>(p)));
    case DataType::kFp32: return f(Load<float>(p));
    case DataType::kFp64: return f(Load<double>(p));
    default: return f(0);  // Classify refuses other types first
  }
}

// Element `i` as a double, for ordering.
double ValueAt(DataType type, const std::byte* data, size_t i) {
  return Visit(type, data, i, [](auto v) { return static_cast<double>(v); });
}

// Element `i` as Triton writes it: integers as they are, reals with six decimals.
std::string TextAt(DataType type, const std::byte* data, size_t i) {
  return Visit(type, data, i, [](auto v) {
    if constexpr (std::is_floating_point_v<decltype(v)>) {
      return fmt::format("{:f}", static_cast<double>(v));
    } else {
      return fmt::format("{}", v);
    }
  });
}

}  // namespace

Result<Classifier> Classifier::Load(const config::ModelConfig& config,
                                    const std::filesystem::path& model_dir) {
  Classifier c;
  c.batched_ = config.max_batch_size() > 0;
  // The config can come from a load request: its label files follow model_file.h's rule.
  const ModelFileRule rule{.field = "label_filename",
                           .folder = "the model directory",
                           .max_bytes = kMaxLabelFileBytes};
  for (const auto& out : config.output()) {
    if (out.label_filename().empty()) continue;
    auto context = [&](const Status& status) {
      return status.WithContext(fmt::format("output '{}'", out.name()));
    };
    auto file = ResolveModelFile(model_dir, out.label_filename(), rule);
    if (!file.ok()) return context(file.status());
    auto text = ReadModelFile(*file, static_cast<size_t>(file->size), rule);
    if (!text.ok()) return context(text.status());
    std::vector<std::string>& labels = c.labels_[out.name()];
    std::string_view rest = *text;
    while (!rest.empty()) {  // one label a line; the last line may lack its newline
      const size_t end = std::min(rest.find('\n'), rest.size());
      std::string_view line = rest.substr(0, end);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      labels.emplace_back(line);
      rest.remove_prefix(std::min(end + 1, rest.size()));
    }
  }
  return c;
}

Result<Tensor> Classifier::Classify(const Tensor& output, uint32_t count) const {
  if (count == 0) {
    return Status::InvalidArgument(
        fmt::format("output '{}': parameter 'classification' must be at least 1", output.name));
  }
  if (output.datatype == DataType::kBytes || DataTypeByteSize(output.datatype) == 0) {
    return Status::InvalidArgument(fmt::format(
        "output '{}' is {}: the classification extension needs a numeric output", output.name,
        DataTypeWireName(output.datatype)));
  }
  const int64_t elements = ElementCount(output.shape);
  const int64_t batch = batched_ && !output.shape.empty() ? output.shape[0] : 1;
  const int64_t classes = batch > 0 ? elements / batch : 0;
  if (elements < 0 || (batch > 0 && classes * batch != elements) ||
      output.data.size() < static_cast<size_t>(elements) * DataTypeByteSize(output.datatype)) {
    return Status::Internal(fmt::format("output '{}': shape {} does not match its {} bytes",
                                        output.name, ShapeToString(output.shape),
                                        output.data.size()));
  }
  const auto k = static_cast<int64_t>(std::min<int64_t>(count, classes));
  auto labels = labels_.find(output.name);
  std::string bytes;
  std::vector<int64_t> order(static_cast<size_t>(classes));
  std::vector<double> row(static_cast<size_t>(classes));
  for (int64_t b = 0; b < batch; ++b) {
    const auto at = [&](int64_t i) { return static_cast<size_t>(b * classes + i); };
    for (int64_t i = 0; i < classes; ++i) {
      row[static_cast<size_t>(i)] = ValueAt(output.datatype, output.data.data(), at(i));
    }
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t x, int64_t y) {
      const double vx = row[static_cast<size_t>(x)], vy = row[static_cast<size_t>(y)];
      return vx > vy || (vx == vy && x < y);
    });
    for (int64_t j = 0; j < k; ++j) {
      const int64_t index = order[static_cast<size_t>(j)];
      std::string text = TextAt(output.datatype, output.data.data(), at(index)) + ":" +
                         std::to_string(index);
      if (labels != labels_.end() && static_cast<size_t>(index) < labels->second.size()) {
        text += ":" + labels->second[static_cast<size_t>(index)];
      }
      AppendBytesElement(&bytes, text);
    }
  }
  Tensor result;
  result.name = output.name;
  result.datatype = DataType::kBytes;
  result.shape = batched_ ? Shape{batch, k} : Shape{k};
  result.data = SharedBuffer::FromString(std::move(bytes));
  return result;
}

}  // namespace vramd::runtime
