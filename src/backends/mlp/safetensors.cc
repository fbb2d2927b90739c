// The safetensors parser. The format and the checks are in safetensors.h; this file keeps the
// order of the checks: sizes first (nothing is read before its bounds are known), then the
// header's nesting (a cheap scan, so a hostile header cannot make the JSON parser build a deep
// or huge tree), then the JSON itself, then each entry, then the tensors' layout as a whole.
#include "backends/mlp/safetensors.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <rapidjson/document.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <limits>
#include <new>
#include <set>
#include <tuple>
#include <utility>

#include "core/json_parse.h"

namespace vramd::backends::safetensors {
namespace {

struct DtypeEntry {
  Dtype dtype;
  std::string_view name;
  size_t size;
};

constexpr std::array<DtypeEntry, 16> kDtypes = {{
    {Dtype::kBool, "BOOL", 1},
    {Dtype::kU8, "U8", 1},
    {Dtype::kI8, "I8", 1},
    {Dtype::kF8E5M2, "F8_E5M2", 1},
    {Dtype::kF8E4M3, "F8_E4M3", 1},
    {Dtype::kF8E8M0, "F8_E8M0", 1},
    {Dtype::kI16, "I16", 2},
    {Dtype::kU16, "U16", 2},
    {Dtype::kF16, "F16", 2},
    {Dtype::kBF16, "BF16", 2},
    {Dtype::kI32, "I32", 4},
    {Dtype::kU32, "U32", 4},
    {Dtype::kF32, "F32", 4},
    {Dtype::kF64, "F64", 8},
    {Dtype::kI64, "I64", 8},
    {Dtype::kU64, "U64", 8},
}};

// Deepest nesting a valid header has: the object of tensors > a tensor > its shape.
constexpr int kMaxDepth = 3;
constexpr std::string_view kMetadataKey = "__metadata__";

// A tensor name for a message: quoted, and cut short when it is long.
std::string Quote(std::string_view name) {
  constexpr size_t kMax = 80;
  if (name.size() <= kMax) return fmt::format("'{}'", name);
  return fmt::format("'{}...' ({} bytes)", name.substr(0, kMax), name.size());
}

uint64_t ReadLittleEndian64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

class Parser {
 public:
  explicit Parser(const std::string& source) : source_(source) {}

  Status Error(std::string_view detail) const {
    return Status::InvalidArgument(fmt::format("{}: not a valid safetensors file: {}", source_,
                                               detail));
  }
  Status TensorError(std::string_view name, std::string_view detail) const {
    return Error(fmt::format("tensor {}: {}", Quote(name), detail));
  }

  // Fills `info` (but its data pointer) from one header entry.
  Status ParseEntry(std::string_view name, const rapidjson::Value& entry, uint64_t data_bytes,
                    TensorInfo* info) const {
    if (!entry.IsObject()) return TensorError(name, "the entry is not a JSON object");
    info->name = std::string(name);

    auto dtype_it = entry.FindMember("dtype");
    if (dtype_it == entry.MemberEnd()) return TensorError(name, "'dtype' is missing");
    if (!dtype_it->value.IsString()) return TensorError(name, "'dtype' is not a string");
    std::string_view dtype_name(dtype_it->value.GetString(), dtype_it->value.GetStringLength());
    auto dtype = ParseDtype(dtype_name);
    if (!dtype) {
      return TensorError(name, fmt::format("unknown dtype {}", Quote(dtype_name)));
    }
    info->dtype = *dtype;

    auto shape_it = entry.FindMember("shape");
    if (shape_it == entry.MemberEnd()) return TensorError(name, "'shape' is missing");
    if (!shape_it->value.IsArray()) return TensorError(name, "'shape' is not an array");
    uint64_t elements = 1;
    bool overflow = false, has_zero = false;
    for (const auto& dim : shape_it->value.GetArray()) {
      if (!dim.IsUint64() || dim.GetUint64() > uint64_t{std::numeric_limits<int64_t>::max()}) {
        return TensorError(name, "'shape' must hold non-negative integers");
      }
      const uint64_t d = dim.GetUint64();
      info->shape.push_back(static_cast<int64_t>(d));
      has_zero = has_zero || d == 0;
      overflow = overflow || __builtin_mul_overflow(elements, d, &elements);
    }
    uint64_t bytes = 0;
    if (has_zero) {
      elements = 0;  // however large the other dimensions
    } else if (overflow || elements > uint64_t{std::numeric_limits<int64_t>::max()} ||
               __builtin_mul_overflow(elements, DtypeSize(*dtype), &bytes)) {
      return TensorError(name, "the shape's byte size overflows 64 bits");
    }
    info->element_count = static_cast<int64_t>(elements);

    auto offsets_it = entry.FindMember("data_offsets");
    if (offsets_it == entry.MemberEnd()) return TensorError(name, "'data_offsets' is missing");
    const auto& offsets = offsets_it->value;
    if (!offsets.IsArray() || offsets.Size() != 2 || !offsets[0].IsUint64() ||
        !offsets[1].IsUint64()) {
      return TensorError(name, "'data_offsets' must be two non-negative integers [begin, end]");
    }
    info->begin = offsets[0].GetUint64();
    info->end = offsets[1].GetUint64();
    if (info->begin > info->end) {
      return TensorError(name, fmt::format("data_offsets [{}, {}] end before they begin",
                                           info->begin, info->end));
    }
    if (info->end > data_bytes) {
      return TensorError(name, fmt::format("data_offsets [{}, {}] run past the data, which is "
                                           "{} bytes",
                                           info->begin, info->end, data_bytes));
    }
    if (info->end - info->begin != bytes) {
      return TensorError(
          name, fmt::format("data_offsets [{}, {}] hold {} bytes, but shape {} of {} needs {}",
                            info->begin, info->end, info->end - info->begin,
                            fmt::join(info->shape, "x"), DtypeName(*dtype), bytes));
    }
    return Status::Ok();
  }

  Status ParseMetadata(const rapidjson::Value& value, std::map<std::string, std::string>* out) const {
    if (!value.IsObject()) return Error("'__metadata__' is not a JSON object");
    for (const auto& m : value.GetObject()) {
      std::string_view key(m.name.GetString(), m.name.GetStringLength());
      if (!m.value.IsString()) {
        return Error(fmt::format("'__metadata__' value of {} is not a string", Quote(key)));
      }
      if (!out->emplace(std::string(key), std::string(m.value.GetString(),
                                                       m.value.GetStringLength()))
               .second) {
        return Error(fmt::format("'__metadata__' has key {} twice", Quote(key)));
      }
    }
    return Status::Ok();
  }

 private:
  const std::string& source_;
};

}  // namespace

std::string_view DtypeName(Dtype dtype) {
  for (const auto& e : kDtypes)
    if (e.dtype == dtype) return e.name;
  return "?";
}

std::optional<Dtype> ParseDtype(std::string_view name) {
  for (const auto& e : kDtypes)
    if (e.name == name) return e.dtype;
  return std::nullopt;
}

size_t DtypeSize(Dtype dtype) {
  for (const auto& e : kDtypes)
    if (e.dtype == dtype) return e.size;
  return 1;
}

const TensorInfo* File::Find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

Result<File> File::Parse(SharedBuffer bytes, std::string source) {
  File file;
  file.bytes_ = std::move(bytes);
  file.source_ = std::move(source);
  const Parser p(file.source_);
  const uint64_t total = file.bytes_.size();
  if (total < 8) {
    return p.Error(fmt::format("the file is {} bytes, too short for the 8-byte header size",
                               total));
  }
  const uint64_t n = ReadLittleEndian64(file.bytes_.data());
  if (n > kMaxHeaderBytes) {
    return p.Error(fmt::format("header size {} is above the {}-byte limit", n, kMaxHeaderBytes));
  }
  if (n > total - 8) {
    return p.Error(fmt::format("header size {} runs past the end of the file ({} bytes after "
                               "the size)",
                               n, total - 8));
  }
  if (n < 2) return p.Error(fmt::format("header size {} cannot hold a JSON object", n));
  file.header_bytes_ = n;
  file.data_bytes_ = total - 8 - n;
  const std::string_view header(reinterpret_cast<const char*>(file.bytes_.data()) + 8, n);
  if (header.front() != '{') return p.Error("the header does not start with '{'");
  // Iterative and bounded at kMaxDepth: the walk below never recurses past a tensor's shape.
  auto parsed = ParseJson(header, "the header",
                          {.max_depth = kMaxDepth, .max_bytes = kMaxHeaderBytes,
                           .validate_utf8 = true});
  if (!parsed.ok()) return p.Error(parsed.status().message());
  const rapidjson::Document& doc = *parsed;
  if (!doc.IsObject()) return p.Error("the header is not a JSON object");

  std::set<std::string_view> seen;
  for (const auto& member : doc.GetObject()) {
    std::string_view name(member.name.GetString(), member.name.GetStringLength());
    if (!seen.insert(name).second) return p.Error(fmt::format("key {} appears twice", Quote(name)));
    if (name == kMetadataKey) {
      VRAMD_RETURN_IF_ERROR(p.ParseMetadata(member.value, &file.metadata_));
      continue;
    }
    TensorInfo info;
    VRAMD_RETURN_IF_ERROR(p.ParseEntry(name, member.value, file.data_bytes_, &info));
    file.tensors_.push_back(std::move(info));
  }

  // In data order, the tensors must tile the data exactly.
  std::sort(file.tensors_.begin(), file.tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  uint64_t expected = 0;
  const TensorInfo* previous = nullptr;
  for (const TensorInfo& t : file.tensors_) {
    if (t.begin < expected) {
      return p.TensorError(t.name, fmt::format("data_offsets [{}, {}] overlap tensor {} at "
                                               "[{}, {}]",
                                               t.begin, t.end, Quote(previous->name),
                                               previous->begin, previous->end));
    }
    if (t.begin > expected) {
      return p.TensorError(t.name, fmt::format("data_offsets [{}, {}] leave bytes [{}, {}) "
                                               "that no tensor covers",
                                               t.begin, t.end, expected, t.begin));
    }
    expected = t.end;
    previous = &t;
  }
  if (expected != file.data_bytes_) {
    return p.Error(fmt::format("the tensors cover {} bytes of data but the file holds {} "
                               "(trailing bytes [{}, {}) belong to no tensor)",
                               expected, file.data_bytes_, expected, file.data_bytes_));
  }
  const std::byte* data = file.bytes_.data() + 8 + n;
  for (size_t i = 0; i < file.tensors_.size(); ++i) {
    TensorInfo& t = file.tensors_[i];
    t.data = data + t.begin;
    file.index_.emplace(t.name, i);
  }
  return file;
}

Result<File> File::Read(const std::filesystem::path& path) {
  const std::string where = path.string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return Status::NotFound(fmt::format("{}: no such file", where));
    return Status::Internal(fmt::format("{}: cannot open: {}", where, std::strerror(err)));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    return Status::Internal(fmt::format("{}: cannot stat: {}", where, std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return Status::InvalidArgument(fmt::format("{}: not a regular file", where));
  }
  const auto size = static_cast<size_t>(st.st_size);
  SharedBuffer bytes;
  try {
    bytes = SharedBuffer::Allocate(size);
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted(
        fmt::format("{}: no host memory to read the file's {} bytes", where, size));
  }
  size_t done = 0;
  while (done < size) {
    const ssize_t got = ::read(fd, bytes.mutable_data() + done, size - done);
    if (got < 0) {
      if (errno == EINTR) continue;
      return Status::Internal(fmt::format("{}: read failed after {} of {} bytes: {}", where, done,
                                          size, std::strerror(errno)));
    }
    if (got == 0) {
      return Status::InvalidArgument(fmt::format(
          "{}: the file shrank while being read ({} of {} bytes read)", where, done, size));
    }
    done += static_cast<size_t>(got);
  }
  return Parse(std::move(bytes), where);
}

}  // namespace vramd::backends::safetensors
