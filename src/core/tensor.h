// Tensor: a named, typed, shaped block of bytes, the unit requests and responses carry.
//
// Its bytes are host memory, or, with `gpu` set, device memory of that CUDA device (a backend's
// output a BLS caller takes on the GPU; a BLS input a model passed from the GPU). Only the
// runtime and backends see GPU tensors: before a front end, a backend that reads only host
// memory, or a joined batch sees one, runtime/tensor_memory.h moves it to host.
//
// Data is row-major and little-endian. A BYTES tensor holds each element as a 4-byte
// little-endian length followed by that many bytes (Triton's serialized form), so binary
// transfers need no conversion.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/data_type.h"
#include "core/shared_buffer.h"
#include "core/status.h"

namespace vramd {

using Shape = std::vector<int64_t>;

inline constexpr int kOnHost = -1;

struct Tensor {
  std::string name;
  DataType datatype = DataType::kInvalid;
  Shape shape;
  SharedBuffer data;
  // The CUDA ordinal `data` is on; kOnHost: host memory.
  int gpu = kOnHost;

  bool on_gpu() const { return gpu != kOnHost; }
};

// Elements of `shape`; -1 if a dimension is negative.
int64_t ElementCount(const Shape& shape);

// Bytes a tensor of `tensor`'s fixed-size datatype and shape holds; nullopt for BYTES, an
// invalid datatype, or a size past 2^64.
std::optional<uint64_t> FixedByteSize(const Tensor& tensor);

// "[2,3]"
std::string ShapeToString(const Shape& shape);

// Appends one serialized BYTES element to `out`.
void AppendBytesElement(std::string* out, std::string_view element);

// Splits serialized BYTES data into its elements. Fails, naming `tensor_name`, if the data is
// truncated, or if `expected_count` >= 0 and the element count differs.
Result<std::vector<std::string_view>> SplitBytesElements(std::string_view data,
                                                         std::string_view tensor_name,
                                                         int64_t expected_count);

}  // namespace vramd
