#include "core/data_type.h"

#include <array>
#include <limits>
#include <utility>

namespace vramd {
namespace {

struct TypeInfo {
  DataType type;
  std::string_view wire;
  std::string_view config;
  size_t size;
};

constexpr std::array<TypeInfo, 15> kTypes = {{
    {DataType::kInvalid, "INVALID", "TYPE_INVALID", 0},
    {DataType::kBool, "BOOL", "TYPE_BOOL", 1},
    {DataType::kUint8, "UINT8", "TYPE_UINT8", 1},
    {DataType::kUint16, "UINT16", "TYPE_UINT16", 2},
    {DataType::kUint32, "UINT32", "TYPE_UINT32", 4},
    {DataType::kUint64, "UINT64", "TYPE_UINT64", 8},
    {DataType::kInt8, "INT8", "TYPE_INT8", 1},
    {DataType::kInt16, "INT16", "TYPE_INT16", 2},
    {DataType::kInt32, "INT32", "TYPE_INT32", 4},
    {DataType::kInt64, "INT64", "TYPE_INT64", 8},
    {DataType::kFp16, "FP16", "TYPE_FP16", 2},
    {DataType::kFp32, "FP32", "TYPE_FP32", 4},
    {DataType::kFp64, "FP64", "TYPE_FP64", 8},
    {DataType::kBytes, "BYTES", "TYPE_STRING", 0},
    {DataType::kBf16, "BF16", "TYPE_BF16", 2},
}};

const TypeInfo& Info(DataType type) {
  auto i = static_cast<size_t>(type);
  return i < kTypes.size() ? kTypes[i] : kTypes[0];
}

}  // namespace

std::string_view DataTypeWireName(DataType type) { return Info(type).wire; }
std::string_view DataTypeConfigName(DataType type) { return Info(type).config; }
size_t DataTypeByteSize(DataType type) { return Info(type).size; }

std::optional<DataType> DataTypeFromWireName(std::string_view name) {
  for (size_t i = 1; i < kTypes.size(); ++i) {
    if (kTypes[i].wire == name) return kTypes[i].type;
  }
  return std::nullopt;
}

int64_t ElementCount(const int64_t* dims, size_t rank) {
  int64_t n = 1;
  for (size_t i = 0; i < rank; ++i) {
    if (dims[i] < 0) return -1;
    if (dims[i] != 0 && n > std::numeric_limits<int64_t>::max() / dims[i]) {
      return std::numeric_limits<int64_t>::max();
    }
    n *= dims[i];
  }
  return n;
}

}  // namespace vramd
