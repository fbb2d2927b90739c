// Fuzz target: the safetensors reader (src/backends/mlp/safetensors.h), File::Parse over a
// whole file's bytes. The bytes are copied into a buffer of exactly their size, so AddressSanitizer
// sees any read past the end.
//
// Checked beyond "no crash", on what parses: the layout safetensors.h promises (header and
// data sizes add up to the file; tensors in data order, back to back from 0 to the end; each
// tensor's bytes inside the buffer and as many as its shape and dtype say; Find finds each),
// and the writer's round trip: Serialize of the parsed tensors and metadata parses back to
// the same names, dtypes, shapes, bytes and metadata.
//
// Input: the file's bytes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/mlp/safetensors.h"
#include "backends/mlp/safetensors_writer.h"
#include "core/shared_buffer.h"
#include "fuzz_support.h"

namespace {
namespace st = vramd::backends::safetensors;
using vramd::fuzz::Fail;

void CheckLayout(const st::File& file, const vramd::SharedBuffer& bytes) {
  if (8 + file.header_bytes() + file.data_bytes() != file.file_bytes() ||
      file.file_bytes() != bytes.size()) {
    Fail("header, data and file sizes do not add up");
  }
  const std::byte* data_start = bytes.data() + 8 + file.header_bytes();
  uint64_t next = 0;
  for (const auto& t : file.tensors()) {
    if (t.begin != next || t.end < t.begin) Fail("tensor '" + t.name + "' is not where the last ended");
    next = t.end;
    if (t.data != data_start + t.begin) Fail("tensor '" + t.name + "' points elsewhere");
    // A zero anywhere makes the product 0, even after dimensions whose product overflows.
    int64_t count = 1;
    bool zero = false;
    for (int64_t d : t.shape) zero = zero || d == 0;
    for (int64_t d : t.shape) {
      if (!zero && __builtin_mul_overflow(count, d, &count)) Fail("'" + t.name + "': shape overflows");
    }
    if (zero) count = 0;
    if (count != t.element_count || t.size() != static_cast<uint64_t>(count) * st::DtypeSize(t.dtype)) {
      Fail("tensor '" + t.name + "' has a size that its shape does not give");
    }
    if (file.Find(t.name) != &t) Fail("Find does not find '" + t.name + "'");
    if (st::ParseDtype(st::DtypeName(t.dtype)) != t.dtype) Fail("a dtype that does not name itself");
  }
  if (next != file.data_bytes()) Fail("the tensors do not reach the end of the data");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const vramd::SharedBuffer bytes = vramd::SharedBuffer::CopyOf(data, size);
  auto file = st::File::Parse(bytes, "fuzz.safetensors");
  if (!file.ok()) {
    if (file.status().message().find("fuzz.safetensors") == std::string::npos) {
      Fail("an error that does not name the file: " + file.status().ToString());
    }
    return 0;
  }
  CheckLayout(*file, bytes);

  std::vector<st::TensorToWrite> tensors;
  for (const auto& t : file->tensors()) {
    tensors.push_back({t.name, t.dtype, t.shape,
                       std::string(reinterpret_cast<const char*>(t.data), t.size())});
  }
  auto written = st::Serialize(tensors, file->metadata());
  if (!written.ok()) Fail("a parsed file does not serialize: " + written.status().ToString());
  auto again = st::File::Parse(vramd::SharedBuffer::FromString(std::move(written).value()),
                               "rewritten.safetensors");
  if (!again.ok()) Fail("a rewritten file does not parse: " + again.status().ToString());
  if (again->metadata() != file->metadata()) Fail("the metadata changed on rewriting");
  if (again->tensors().size() != file->tensors().size()) Fail("the tensor count changed");
  // By name: empty tensors share an offset, so their data order is not unique.
  for (const auto& a : file->tensors()) {
    const st::TensorInfo* found = again->Find(a.name);
    if (found == nullptr) Fail("tensor '" + a.name + "' is missing after rewriting");
    const st::TensorInfo& b = *found;
    if (a.dtype != b.dtype || a.shape != b.shape || a.size() != b.size() ||
        std::string_view(reinterpret_cast<const char*>(a.data), a.size()) !=
            std::string_view(reinterpret_cast<const char*>(b.data), b.size())) {
      Fail("tensor '" + a.name + "' changed on rewriting");
    }
  }
  return 0;
}
