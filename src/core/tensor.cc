#include "core/tensor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace vramd {

int64_t ElementCount(const Shape& shape) { return ElementCount(shape.data(), shape.size()); }

std::optional<uint64_t> FixedByteSize(const Tensor& tensor) {
  const size_t element = DataTypeByteSize(tensor.datatype);
  if (element == 0) return std::nullopt;
  uint64_t bytes;
  if (__builtin_mul_overflow(static_cast<uint64_t>(ElementCount(tensor.shape)), element, &bytes)) {
    return std::nullopt;
  }
  return bytes;
}

std::string ShapeToString(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ",")); }

void AppendBytesElement(std::string* out, std::string_view element) {
  uint32_t len = static_cast<uint32_t>(element.size());
  char prefix[4] = {static_cast<char>(len & 0xff), static_cast<char>((len >> 8) & 0xff),
                    static_cast<char>((len >> 16) & 0xff), static_cast<char>((len >> 24) & 0xff)};
  out->append(prefix, 4);
  out->append(element);
}

Result<std::vector<std::string_view>> SplitBytesElements(std::string_view data,
                                                         std::string_view tensor_name,
                                                         int64_t expected_count) {
  std::vector<std::string_view> elements;
  // The count comes from a client's shape: never reserve more than the data could hold.
  if (expected_count > 0) {
    elements.reserve(std::min(static_cast<size_t>(expected_count), data.size() / 4));
  }
  size_t pos = 0;
  while (pos < data.size()) {
    if (data.size() - pos < 4) {
      return Status::InvalidArgument(fmt::format(
          "input '{}': BYTES data is truncated: {} byte(s) left where a 4-byte length prefix "
          "was expected",
          tensor_name, data.size() - pos));
    }
    const auto* p = reinterpret_cast<const unsigned char*>(data.data() + pos);
    uint32_t len = uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
    pos += 4;
    if (data.size() - pos < len) {
      return Status::InvalidArgument(fmt::format(
          "input '{}': BYTES element {} declares {} bytes but only {} remain", tensor_name,
          elements.size(), len, data.size() - pos));
    }
    elements.emplace_back(data.data() + pos, len);
    pos += len;
  }
  if (expected_count >= 0 && static_cast<int64_t>(elements.size()) != expected_count) {
    return Status::InvalidArgument(
        fmt::format("input '{}': expected {} BYTES element(s) for its shape, got {}", tensor_name,
                    expected_count, elements.size()));
  }
  return elements;
}

}  // namespace vramd
