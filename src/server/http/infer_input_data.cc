#include "server/http/infer_input_data.h"

#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>

#include "core/data_type.h"
#include "core/half.h"

namespace vramd::http::internal {
namespace {

// How deep "data" arrays may nest; our own walks over them recurse.
constexpr int kMaxDataDepth = 64;

static_assert(std::endian::native == std::endian::little,
              "tensor data is little-endian: this target needs byte swaps in the codec");

bool IsIntegerType(DataType type) {
  switch (type) {
    case DataType::kUint8:
    case DataType::kUint16:
    case DataType::kUint32:
    case DataType::kUint64:
    case DataType::kInt8:
    case DataType::kInt16:
    case DataType::kInt32:
    case DataType::kInt64: return true;
    default: return false;
  }
}

// Element converters: false when the JSON value does not fit the type (the caller explains).
template <typename T>
bool ToInteger(const JsonValue& v, T* out) {
  if constexpr (std::is_signed_v<T>) {
    if (!v.IsInt64()) return false;
    const int64_t x = v.GetInt64();
    if (x < std::numeric_limits<T>::min() || x > std::numeric_limits<T>::max()) return false;
    *out = static_cast<T>(x);
  } else {
    if (!v.IsUint64()) return false;
    const uint64_t x = v.GetUint64();
    if (x > std::numeric_limits<T>::max()) return false;
    *out = static_cast<T>(x);
  }
  return true;
}

bool ToBool(const JsonValue& v, uint8_t* out) {
  if (!v.IsBool()) return false;
  *out = v.GetBool() ? 1 : 0;
  return true;
}

bool ToFp32(const JsonValue& v, float* out) {
  if (!v.IsNumber()) return false;
  const float f = static_cast<float>(v.GetDouble());  // the double is finite: JSON has no inf
  if (std::isinf(f)) return false;
  *out = f;
  return true;
}

bool ToFp64(const JsonValue& v, double* out) {
  if (!v.IsNumber()) return false;
  *out = v.GetDouble();
  return true;
}

bool ToFp16(const JsonValue& v, uint16_t* out) {
  if (!v.IsNumber()) return false;
  const uint16_t h = HalfFromDouble(v.GetDouble());
  if (HalfIsInf(h)) return false;
  *out = h;
  return true;
}

bool ToBf16(const JsonValue& v, uint16_t* out) {
  if (!v.IsNumber()) return false;
  const uint16_t b = Bf16FromDouble(v.GetDouble());
  if (Bf16IsInf(b)) return false;
  *out = b;
  return true;
}

// Why element `index` of input `name` could not be converted to `type`.
Status ElementError(std::string_view name, size_t index, const JsonValue& v, DataType type) {
  const std::string_view type_name = DataTypeWireName(type);
  if (type == DataType::kBool) {
    return Invalid(fmt::format("input '{}': element {} must be true or false for BOOL, got {}",
                               name, index, KindOf(v)));
  }
  if (type == DataType::kBytes) {
    return Invalid(fmt::format("input '{}': element {} must be a string for BYTES, got {}", name,
                               index, KindOf(v)));
  }
  if (!v.IsNumber()) {
    return Invalid(fmt::format("input '{}': element {} must be a number for {}, got {}", name,
                               index, type_name, KindOf(v)));
  }
  if (IsIntegerType(type) && !v.IsInt64() && !v.IsUint64()) {
    if (v.IsDouble() && std::trunc(v.GetDouble()) != v.GetDouble()) {
      return Invalid(fmt::format("input '{}': element {} ({}) is not an integer, as {} requires",
                                 name, index, NumberText(v), type_name));
    }
    return Invalid(fmt::format(
        "input '{}': element {} ({}) is written as a floating-point number; {} requires an "
        "integer in range",
        name, index, NumberText(v), type_name));
  }
  return Invalid(fmt::format("input '{}': element {} ({}) is out of range for {}", name, index,
                             NumberText(v), type_name));
}

// Adds the elements that are not arrays under `array` to *count; false if arrays nest deeper
// than kMaxDataDepth.
bool CountLeaves(const JsonValue& array, int depth, uint64_t* count) {
  if (depth > kMaxDataDepth) return false;
  for (const JsonValue& e : array.GetArray()) {
    if (e.IsArray()) {
      if (!CountLeaves(e, depth + 1, count)) return false;
    } else {
      ++*count;
    }
  }
  return true;
}

// Calls fn(leaf) on the non-array elements under `array` in row-major order, stopping at the
// first that returns false. REQUIRES: CountLeaves succeeded on `array`.
template <typename Fn>
bool VisitLeaves(const JsonValue& array, Fn& fn) {
  for (const JsonValue& e : array.GetArray()) {
    if (e.IsArray()) {
      if (!VisitLeaves(e, fn)) return false;
    } else if (!fn(e)) {
      return false;
    }
  }
  return true;
}

template <typename T, bool (*Convert)(const JsonValue&, T*)>
Status FillFixed(const JsonValue& data, size_t count, Tensor* tensor) {
  SharedBuffer buffer = SharedBuffer::Allocate(count * sizeof(T));
  std::byte* dst = buffer.mutable_data();
  size_t index = 0;
  const JsonValue* bad = nullptr;
  auto convert = [&](const JsonValue& leaf) {
    T value;
    if (!Convert(leaf, &value)) {
      bad = &leaf;
      return false;
    }
    std::memcpy(dst + index * sizeof(T), &value, sizeof(T));
    ++index;
    return true;
  };
  if (!VisitLeaves(data, convert)) return ElementError(tensor->name, index, *bad, tensor->datatype);
  tensor->data = std::move(buffer);
  return Status::Ok();
}

Status FillBytes(const JsonValue& data, Tensor* tensor) {
  size_t total = 0;
  size_t index = 0;
  const JsonValue* bad = nullptr;
  auto measure = [&](const JsonValue& leaf) {
    if (!leaf.IsString() || leaf.GetStringLength() > std::numeric_limits<uint32_t>::max()) {
      bad = &leaf;
      return false;
    }
    total += 4 + leaf.GetStringLength();
    ++index;
    return true;
  };
  if (!VisitLeaves(data, measure)) {
    if (bad->IsString()) {
      return Invalid(
          fmt::format("input '{}': element {} is longer than 4 GiB", tensor->name, index));
    }
    return ElementError(tensor->name, index, *bad, DataType::kBytes);
  }
  std::string serialized;
  serialized.reserve(total);
  auto append = [&](const JsonValue& leaf) {
    AppendBytesElement(&serialized, Str(leaf));
    return true;
  };
  VisitLeaves(data, append);
  tensor->data = SharedBuffer::FromString(std::move(serialized));
  return Status::Ok();
}

}  // namespace

// Converts `data` (flat or nested) into tensor->data per tensor->datatype and shape.
Status ParseJsonData(const JsonValue& data, Tensor* tensor) {
  const std::string& name = tensor->name;
  if (!data.IsArray()) {
    return Invalid(fmt::format("input '{}': 'data' must be an array, got {}", name, KindOf(data)));
  }
  uint64_t given = 0;
  if (!CountLeaves(data, 1, &given)) {
    return Invalid(
        fmt::format("input '{}': 'data' nests arrays deeper than {} levels", name, kMaxDataDepth));
  }
  const int64_t expected = ElementCount(tensor->shape);
  if (given != static_cast<uint64_t>(expected)) {
    return Invalid(fmt::format("input '{}': shape {} needs {} element(s) but 'data' has {}", name,
                               ShapeToString(tensor->shape), expected, given));
  }
  const auto count = static_cast<size_t>(given);
  switch (tensor->datatype) {
    case DataType::kBool: return FillFixed<uint8_t, ToBool>(data, count, tensor);
    case DataType::kUint8: return FillFixed<uint8_t, ToInteger<uint8_t>>(data, count, tensor);
    case DataType::kUint16: return FillFixed<uint16_t, ToInteger<uint16_t>>(data, count, tensor);
    case DataType::kUint32: return FillFixed<uint32_t, ToInteger<uint32_t>>(data, count, tensor);
    case DataType::kUint64: return FillFixed<uint64_t, ToInteger<uint64_t>>(data, count, tensor);
    case DataType::kInt8: return FillFixed<int8_t, ToInteger<int8_t>>(data, count, tensor);
    case DataType::kInt16: return FillFixed<int16_t, ToInteger<int16_t>>(data, count, tensor);
    case DataType::kInt32: return FillFixed<int32_t, ToInteger<int32_t>>(data, count, tensor);
    case DataType::kInt64: return FillFixed<int64_t, ToInteger<int64_t>>(data, count, tensor);
    case DataType::kFp16: return FillFixed<uint16_t, ToFp16>(data, count, tensor);
    case DataType::kBf16: return FillFixed<uint16_t, ToBf16>(data, count, tensor);
    case DataType::kFp32: return FillFixed<float, ToFp32>(data, count, tensor);
    case DataType::kFp64: return FillFixed<double, ToFp64>(data, count, tensor);
    case DataType::kBytes: return FillBytes(data, tensor);
    case DataType::kInvalid: break;
  }
  return Invalid(fmt::format("input '{}': datatype {} cannot carry data", name,
                             DataTypeWireName(tensor->datatype)));
}

}  // namespace vramd::http::internal
