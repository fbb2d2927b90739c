// Tensor element types, numbered as Triton's inference::DataType so a config's enum value,
// our enum and the wire name ("FP32", "BYTES") convert without tables elsewhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace vramd {

enum class DataType : int {
  kInvalid = 0,
  kBool = 1,
  kUint8 = 2,
  kUint16 = 3,
  kUint32 = 4,
  kUint64 = 5,
  kInt8 = 6,
  kInt16 = 7,
  kInt32 = 8,
  kInt64 = 9,
  kFp16 = 10,
  kFp32 = 11,
  kFp64 = 12,
  kBytes = 13,  // TYPE_STRING in config.pbtxt, "BYTES" on the wire
  kBf16 = 14,
};

// The KServe v2 wire name: "BOOL", "UINT8", ..., "FP32", "BYTES", "BF16"; "INVALID" for kInvalid.
std::string_view DataTypeWireName(DataType type);

// Parses a wire name; nullopt for anything else (names are case-sensitive, as in Triton).
std::optional<DataType> DataTypeFromWireName(std::string_view name);

// The config.pbtxt enum name: "TYPE_FP32", "TYPE_STRING", ...
std::string_view DataTypeConfigName(DataType type);

// Bytes per element; 0 for kBytes (variable length) and kInvalid.
size_t DataTypeByteSize(DataType type);

// Elements in a tensor of this shape; -1 if any dimension is negative; saturates at INT64_MAX.
int64_t ElementCount(const int64_t* dims, size_t rank);

}  // namespace vramd
