// Writing safetensors files (the format is described in safetensors.h): for tests, tools and
// fixtures that need a weights file without Python. Tensors are laid out in the order given,
// back to back; the header is padded with spaces so the data starts at a multiple of 8 bytes.
//
// Thread safety: free functions without shared state.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "backends/mlp/safetensors.h"
#include "core/status.h"

namespace vramd::backends::safetensors {

struct TensorToWrite {
  std::string name;
  Dtype dtype = Dtype::kF32;
  std::vector<int64_t> shape;
  std::string bytes;  // product(shape) * DtypeSize(dtype) bytes, little-endian, row-major
};

// The file's bytes. InvalidArgument naming the tensor when its byte count does not match its
// shape or two tensors share a name.
Result<std::string> Serialize(const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

// Serialize, then write to `path` (replacing it). Internal naming the path on an I/O error.
Status WriteFile(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors,
                 const std::map<std::string, std::string>& metadata = {});

}  // namespace vramd::backends::safetensors
