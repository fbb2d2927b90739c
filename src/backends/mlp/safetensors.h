// safetensors: reading the tensor file format of Hugging Face's `safetensors`, written from
// the format's public description (nothing of that library is used):
//
//   bytes 0..7      N, the header size, an unsigned 64-bit little-endian integer
//   bytes 8..8+N    the header: a UTF-8 JSON object. Each key names a tensor and maps to
//                     {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}
//                   except the optional "__metadata__", an object of string to string.
//                   It may end in spaces (writers pad it so the data is aligned).
//   the rest        the data: each tensor's bytes, row-major and little-endian, at
//                   [begin, end) counted from the start of the data.
//
// Validation (every failure is an InvalidArgument naming the file and, where there is one, the
// tensor and the problem; nothing here crashes or reads outside the bytes it was given, on any
// input):
//  - the file holds the 8 size bytes, N is at most kMaxHeaderBytes and 8 + N fits in the file;
//  - the header is valid UTF-8 JSON, one object, starting with '{', no key twice;
//  - each tensor has a known dtype, a shape of non-negative integers and two data_offsets with
//    begin <= end <= the data size, and end - begin = product(shape) * the dtype's size (no
//    overflow anywhere);
//  - in offset order, the tensors cover the data exactly: the first starts at 0, each starts
//    where the previous ended (no overlap, no hole), the last ends at the end of the file.
//    Like the reference implementation, holes are refused so a file cannot carry hidden bytes.
//  - "__metadata__", when present, is an object whose values are strings.
//
// Reading: File::Read reads the whole file with read(2) into one host buffer (not mmap: a file
// truncated or rewritten while a model loads must give an error, not a SIGBUS; a page-cached
// file reads at memory-copy speed). The buffer is plain host memory outside the ledger: it is
// the load's transient input, and what a model keeps is copied out of it through memory::.
//
// Thread safety: a File is immutable after Read / Parse; const methods are safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/shared_buffer.h"
#include "core/status.h"

namespace vramd::backends::safetensors {

// The element types of the format with a whole number of bytes per element. Sub-byte types
// (F4, F6_*) are refused as unknown.
enum class Dtype : uint8_t {
  kBool,
  kU8,
  kI8,
  kF8E5M2,
  kF8E4M3,
  kF8E8M0,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kF64,
  kI64,
  kU64,
};

// The format's spelling: "BOOL", "U8", ..., "F8_E4M3", "F16", "BF16", "F32", ...
std::string_view DtypeName(Dtype dtype);
// nullopt for a name the format does not define (or one not handled here).
std::optional<Dtype> ParseDtype(std::string_view name);
// Bytes per element (1, 2, 4 or 8).
size_t DtypeSize(Dtype dtype);

struct TensorInfo {
  std::string name;
  Dtype dtype = Dtype::kU8;
  std::vector<int64_t> shape;  // empty for a scalar
  int64_t element_count = 0;   // product of shape; 1 for a scalar
  uint64_t begin = 0;          // data_offsets, from the start of the data
  uint64_t end = 0;
  const std::byte* data = nullptr;  // into the File's buffer; end - begin bytes; any alignment
  size_t size() const { return static_cast<size_t>(end - begin); }
};

class File {
 public:
  // The largest header accepted (the reference implementation's limit).
  static constexpr uint64_t kMaxHeaderBytes = 100'000'000;

  // Reads and parses `path`. NotFound when it does not exist, InvalidArgument when it is not a
  // regular file, changes size while read, or is corrupt (see the file comment);
  // ResourceExhausted when there is no host memory for it; Internal for another I/O error.
  // Every message names the path.
  static Result<File> Read(const std::filesystem::path& path);

  // Parses `bytes`, a whole file's contents; `source` names it in messages (a path).
  static Result<File> Parse(SharedBuffer bytes, std::string source);

  const std::string& source() const { return source_; }
  // Every tensor, in data order (ascending data_offsets).
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // The tensor named `name`, or null.
  const TensorInfo* Find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  uint64_t header_bytes() const { return header_bytes_; }  // N
  uint64_t data_bytes() const { return data_bytes_; }
  uint64_t file_bytes() const { return bytes_.size(); }

 private:
  File() = default;

  SharedBuffer bytes_;  // the whole file; the tensors point into it
  std::string source_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
  uint64_t header_bytes_ = 0;
  uint64_t data_bytes_ = 0;
};

}  // namespace vramd::backends::safetensors
