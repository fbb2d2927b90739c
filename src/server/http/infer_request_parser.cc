// ParseInferRequest (infer_codec.h): the JSON text into a DOM (per-thread pools, numbers
// converted with std::from_chars), then the DOM into an InferRequest with its binary data.
#include "server/http/infer_codec.h"

#include <fmt/format.h>
#include <rapidjson/document.h>
#include <rapidjson/error/en.h>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "core/data_type.h"
#include "core/tensor.h"
#include "runtime/tensor_memory.h"
#include "server/http/infer_input_data.h"
#include "server/http/request_json.h"

namespace vramd::http {
namespace {

using internal::Invalid;
using internal::JsonDoc;
using internal::JsonValue;
using internal::KindOf;
using internal::NumberText;
using internal::ParameterValue;
using internal::ParseJsonData;
using internal::Pool;
using internal::Str;

// rapidjson hands numbers over as text (DomBuilder converts them) and parses in place.
// Bodies that could nest deeply are parsed iteratively, so they cannot exhaust the stack;
// the recursive parser is faster for the rest.
constexpr unsigned kParseFlags =
    rapidjson::kParseInsituFlag | rapidjson::kParseNumbersAsStringsFlag;
constexpr unsigned kParseDeepFlags = kParseFlags | rapidjson::kParseIterativeFlag;
// Up to this many '[' and '{' in a body, recursion depth is bounded by it.
constexpr size_t kMaxRecursiveBrackets = 256;

// Per-thread scratch for ParseInferRequest: the JSON copy that rapidjson parses in situ
// (strings then point into it) and the memory pools for the DOM and the parser's stack.
struct ParseScratch {
  static constexpr size_t kValuePoolBytes = 32 * 1024;
  static constexpr size_t kStackPoolBytes = 8 * 1024;
  // A JSON copy larger than this is freed after use rather than kept for the next request.
  static constexpr size_t kKeepJsonBytes = 1 << 20;

  alignas(16) char value_pool[kValuePoolBytes];
  alignas(16) char stack_pool[kStackPoolBytes];
  std::string json;
};

// Allocated on a thread's first parse, so threads that never parse do not carry it.
ParseScratch& ThreadScratch() {
  thread_local std::unique_ptr<ParseScratch> scratch =
      std::make_unique_for_overwrite<ParseScratch>();
  return *scratch;
}

// ---- request structure ---------------------------------------------------------------------

bool IsSharedMemoryParameter(std::string_view key) { return key.substr(0, 14) == "shared_memory_"; }

Status SharedMemoryUnsupported(std::string_view what, std::string_view name, std::string_view key) {
  return Status::Unsupported(fmt::format(
      "{} '{}': shared memory (parameter '{}') is turned off on this server "
      "(--no-http-shared-memory); send the tensor as JSON or binary data",
      what, name, key));
}

// One shared_memory_* parameter of a tensor into `placement` (region a string, offset and
// byte_size non-negative integers); `seen_size` says byte_size was given.
Status ReadShmParameter(std::string_view what, const std::string& name, std::string_view key,
                        const JsonValue& value, shared_memory::TensorPlacement* placement,
                        bool* seen_size) {
  placement->tensor = name;
  if (key == "shared_memory_region") {
    if (!value.IsString()) {
      return Invalid(fmt::format("{} '{}': parameter 'shared_memory_region' must be a string, got {}",
                                 what, name, KindOf(value)));
    }
    placement->region.assign(value.GetString(), value.GetStringLength());
    return Status::Ok();
  }
  if (key == "shared_memory_offset" || key == "shared_memory_byte_size") {
    if (!value.IsUint64()) {
      return Invalid(fmt::format("{} '{}': parameter '{}' must be a non-negative integer, got {}",
                                 what, name, key, value.IsNumber() ? NumberText(value) : KindOf(value)));
    }
    if (key == "shared_memory_offset") {
      placement->offset = value.GetUint64();
    } else {
      placement->byte_size = value.GetUint64();
      *seen_size = true;
    }
    return Status::Ok();
  }
  return Invalid(fmt::format("{} '{}': unknown shared memory parameter '{}'", what, name, key));
}

Status CheckPlacement(std::string_view what, const std::string& name,
                      const shared_memory::TensorPlacement& placement, bool seen_size) {
  if (placement.region.empty() || !seen_size) {
    return Invalid(fmt::format(
        "{} '{}': shared memory needs parameters 'shared_memory_region' and "
        "'shared_memory_byte_size'",
        what, name));
  }
  return Status::Ok();
}

// Triton's HTTP front end consumes these keys itself (ParseJsonTritonParams) and refuses any
// key starting with "triton_", which Triton reserves; every other key reaches the model.
Status ParseRequestParameters(const JsonValue& params, InferRequest* request) {
  if (!params.IsObject()) {
    return Invalid(fmt::format("'parameters' must be an object, got {}", KindOf(params)));
  }
  for (const auto& m : params.GetObject()) {
    const std::string_view key = Str(m.name);
    auto must_be_bool = [&](bool* out) -> Status {
      if (!m.value.IsBool()) {
        return Invalid(fmt::format("request parameter '{}' must be true or false, got {}", key,
                                   KindOf(m.value)));
      }
      *out = m.value.GetBool();
      return Status::Ok();
    };
    auto must_be_uint = [&](std::string_view unit, uint64_t* out) -> Status {
      if (!m.value.IsUint64()) {
        return Invalid(fmt::format(
            "request parameter '{}' must be a non-negative integer{}, got {}", key, unit,
            m.value.IsNumber() ? NumberText(m.value) : KindOf(m.value)));
      }
      *out = m.value.GetUint64();
      return Status::Ok();
    };
    if (key == "binary_data_output") {
      VRAMD_RETURN_IF_ERROR(must_be_bool(&request->binary_data_output));
    } else if (key == "timeout") {
      VRAMD_RETURN_IF_ERROR(must_be_uint(" (microseconds)", &request->timeout_us));
    } else if (key == "priority") {
      // Checked as Triton checks it, then dropped: vramd's queues have one priority level.
      uint64_t priority = 0;
      VRAMD_RETURN_IF_ERROR(must_be_uint("", &priority));
    } else if (key == "sequence_id") {
      if (m.value.IsUint64()) {
        request->correlation_id = m.value.GetUint64();
        request->correlation_id_string.clear();
      } else if (m.value.IsString()) {
        request->correlation_id = 0;
        request->correlation_id_string.assign(Str(m.value));
      } else {
        return Invalid(fmt::format(
            "request parameter 'sequence_id' must be a non-negative integer or a string, got {}",
            m.value.IsNumber() ? NumberText(m.value) : KindOf(m.value)));
      }
    } else if (key == "sequence_start" || key == "sequence_end") {
      bool set = false;
      VRAMD_RETURN_IF_ERROR(must_be_bool(&set));
      const uint32_t flag =
          key == "sequence_start" ? kRequestFlagSequenceStart : kRequestFlagSequenceEnd;
      request->flags = set ? (request->flags | flag) : (request->flags & ~flag);
    } else if (key.substr(0, 7) == "triton_") {
      return Invalid(fmt::format(
          "request parameter '{}': keys starting with 'triton_' are reserved for Triton usage "
          "and should not be specified",
          key));
    } else {
      auto value = ParameterValue(m.value, "request parameter", key);
      if (!value.ok()) return value.status();
      request->parameters.push_back({std::string(key), std::move(value).value()});
    }
  }
  return Status::Ok();
}

Status ParseInputParameters(const JsonValue& params, const std::string& name,
                            std::optional<uint64_t>* binary_size,
                            const SharedMemoryContext* shm,
                            std::optional<shared_memory::TensorPlacement>* placement) {
  if (!params.IsObject()) {
    return Invalid(
        fmt::format("input '{}': 'parameters' must be an object, got {}", name, KindOf(params)));
  }
  bool seen_size = false;
  for (const auto& m : params.GetObject()) {
    const std::string_view key = Str(m.name);
    if (key == "binary_data_size") {
      if (!m.value.IsUint64()) {
        return Invalid(fmt::format(
            "input '{}': parameter 'binary_data_size' must be a non-negative integer, got {}", name,
            m.value.IsNumber() ? NumberText(m.value) : KindOf(m.value)));
      }
      *binary_size = m.value.GetUint64();
    } else if (IsSharedMemoryParameter(key)) {
      if (shm == nullptr || shm->regions == nullptr) return SharedMemoryUnsupported("input", name, key);
      if (!placement->has_value()) placement->emplace();
      VRAMD_RETURN_IF_ERROR(ReadShmParameter("input", name, key, m.value, &**placement, &seen_size));
    }
  }
  if (placement->has_value()) VRAMD_RETURN_IF_ERROR(CheckPlacement("input", name, **placement, seen_size));
  return Status::Ok();
}

// Fills `tensor` (all but binary data) from inputs[position]; sets *binary_size when the data
// comes from the binary part.
Status ParseInput(const JsonValue& v, size_t position, Tensor* tensor,
                  std::optional<uint64_t>* binary_size, const SharedMemoryContext* shm,
                  std::optional<shared_memory::TensorPlacement>* placement) {
  if (!v.IsObject()) {
    return Invalid(fmt::format("inputs[{}] must be an object, got {}", position, KindOf(v)));
  }
  const JsonValue* name = nullptr;
  const JsonValue* shape = nullptr;
  const JsonValue* datatype = nullptr;
  const JsonValue* params = nullptr;
  const JsonValue* data = nullptr;
  for (const auto& m : v.GetObject()) {
    const std::string_view key = Str(m.name);
    if (key == "name")
      name = &m.value;
    else if (key == "shape")
      shape = &m.value;
    else if (key == "datatype")
      datatype = &m.value;
    else if (key == "parameters")
      params = &m.value;
    else if (key == "data")
      data = &m.value;
  }

  if (name == nullptr) return Invalid(fmt::format("inputs[{}] has no 'name'", position));
  if (!name->IsString()) {
    return Invalid(
        fmt::format("inputs[{}]: 'name' must be a string, got {}", position, KindOf(*name)));
  }
  if (name->GetStringLength() == 0) {
    return Invalid(fmt::format("inputs[{}]: 'name' must not be empty", position));
  }
  tensor->name.assign(name->GetString(), name->GetStringLength());
  const std::string& n = tensor->name;

  if (shape == nullptr) return Invalid(fmt::format("input '{}' has no 'shape'", n));
  if (!shape->IsArray()) {
    return Invalid(fmt::format("input '{}': 'shape' must be an array, got {}", n, KindOf(*shape)));
  }
  tensor->shape.reserve(shape->Size());
  for (const JsonValue& dim : shape->GetArray()) {
    if (!dim.IsInt64() || dim.GetInt64() < 0) {
      return Invalid(fmt::format("input '{}': shape[{}] must be a non-negative integer, got {}", n,
                                 tensor->shape.size(),
                                 dim.IsNumber() ? NumberText(dim) : KindOf(dim)));
    }
    tensor->shape.push_back(dim.GetInt64());
  }

  if (datatype == nullptr) return Invalid(fmt::format("input '{}' has no 'datatype'", n));
  if (!datatype->IsString()) {
    return Invalid(
        fmt::format("input '{}': 'datatype' must be a string, got {}", n, KindOf(*datatype)));
  }
  const std::optional<DataType> type = DataTypeFromWireName(Str(*datatype));
  if (!type) {
    return Invalid(fmt::format(
        "input '{}': unknown datatype '{}' (expected BOOL, UINT8..UINT64, INT8..INT64, FP16, "
        "BF16, FP32, FP64 or BYTES)",
        n, Str(*datatype)));
  }
  tensor->datatype = *type;

  if (params != nullptr) {
    VRAMD_RETURN_IF_ERROR(ParseInputParameters(*params, n, binary_size, shm, placement));
  }
  if (placement->has_value()) {
    if (data != nullptr || binary_size->has_value()) {
      return Invalid(fmt::format(
          "input '{}' is in shared memory and also has 'data' or 'binary_data_size'; send one", n));
    }
    return Status::Ok();  // its bytes are attached from the region (ParseDocument)
  }
  if (data != nullptr && binary_size->has_value()) {
    return Invalid(fmt::format(
        "input '{}' has both 'data' and parameter 'binary_data_size'; send one of them", n));
  }
  if (data == nullptr && !binary_size->has_value()) {
    return Invalid(
        fmt::format("input '{}' has neither 'data' nor parameter 'binary_data_size'", n));
  }
  if (data != nullptr) return ParseJsonData(*data, tensor);

  if (tensor->datatype != DataType::kBytes) {
    const std::optional<uint64_t> needed = FixedByteSize(*tensor);
    if (needed != **binary_size) {
      return Invalid(fmt::format(
          "input '{}': binary_data_size is {} bytes but shape {} of {} needs {}", n, **binary_size,
          ShapeToString(tensor->shape), DataTypeWireName(tensor->datatype),
          needed ? fmt::format("{}", *needed) : std::string("more than 2^64")));
    }
  }
  return Status::Ok();
}

Status ParseOutputs(const JsonValue& outputs, InferRequest* request,
                    const SharedMemoryContext* shm) {
  if (!outputs.IsArray()) {
    return Invalid(fmt::format("'outputs' must be an array, got {}", KindOf(outputs)));
  }
  request->outputs.reserve(outputs.Size());
  size_t position = 0;
  for (const JsonValue& o : outputs.GetArray()) {
    if (!o.IsObject()) {
      return Invalid(fmt::format("outputs[{}] must be an object, got {}", position, KindOf(o)));
    }
    const JsonValue* name = nullptr;
    const JsonValue* params = nullptr;
    for (const auto& m : o.GetObject()) {
      const std::string_view key = Str(m.name);
      if (key == "name")
        name = &m.value;
      else if (key == "parameters")
        params = &m.value;
    }
    if (name == nullptr) return Invalid(fmt::format("outputs[{}] has no 'name'", position));
    if (!name->IsString() || name->GetStringLength() == 0) {
      return Invalid(fmt::format("outputs[{}]: 'name' must be a non-empty string", position));
    }
    RequestedOutput requested{std::string(Str(*name)), request->binary_data_output};
    std::optional<shared_memory::TensorPlacement> placement;
    bool seen_size = false;
    if (params != nullptr) {
      if (!params->IsObject()) {
        return Invalid(fmt::format("output '{}': 'parameters' must be an object, got {}",
                                   requested.name, KindOf(*params)));
      }
      for (const auto& m : params->GetObject()) {
        const std::string_view key = Str(m.name);
        if (key == "binary_data") {
          if (!m.value.IsBool()) {
            return Invalid(
                fmt::format("output '{}': parameter 'binary_data' must be true or false, got {}",
                            requested.name, KindOf(m.value)));
          }
          requested.binary = m.value.GetBool();
        } else if (key == "classification") {
          if (!m.value.IsUint() || m.value.GetUint() == 0) {
            return Invalid(fmt::format(
                "output '{}': parameter 'classification' must be a positive integer, got {}",
                requested.name, KindOf(m.value)));
          }
          requested.classification = m.value.GetUint();
        } else if (IsSharedMemoryParameter(key)) {
          if (shm == nullptr || shm->regions == nullptr || shm->outputs == nullptr) {
            return SharedMemoryUnsupported("output", requested.name, key);
          }
          if (!placement) placement.emplace();
          VRAMD_RETURN_IF_ERROR(ReadShmParameter("output", requested.name, key, m.value,
                                                 &*placement, &seen_size));
        }
      }
    }
    if (placement) {
      VRAMD_RETURN_IF_ERROR(CheckPlacement("output", requested.name, *placement, seen_size));
      // The region and range must exist now; the output is written when the request ends.
      VRAMD_ASSIGN_OR_RETURN(auto slice, shm->regions->Find(placement->region, placement->offset,
                                                             placement->byte_size,
                                                             fmt::format("output '{}'", requested.name)));
      // Copied into a CUDA region from the GPU the model leaves it on, not through the host.
      if (slice.gpu != kOnHost) request->output_gpu = kAnyGpu;
      requested.binary = false;
      shm->outputs->push_back(std::move(*placement));
    }
    request->outputs.push_back(std::move(requested));
    ++position;
  }
  return Status::Ok();
}

// The first name that appears twice in `items` (each with a .name), or nullptr.
template <typename T>
const std::string* FindDuplicateName(const std::vector<T>& items) {
  if (items.size() <= 16) {
    for (size_t i = 1; i < items.size(); ++i) {
      for (size_t j = 0; j < i; ++j) {
        if (items[i].name == items[j].name) return &items[i].name;
      }
    }
    return nullptr;
  }
  std::unordered_set<std::string_view> seen;
  seen.reserve(items.size());
  for (const T& item : items) {
    if (!seen.insert(item.name).second) return &item.name;
  }
  return nullptr;
}

struct BinaryInput {
  size_t input;
  uint64_t size;
};

// Points the binary inputs at their slices of body[json_length:].
Status AttachBinaryData(const std::vector<BinaryInput>& binary,
                        const std::shared_ptr<const std::string>& body, size_t json_length,
                        bool header_sent, InferRequest* request) {
  const uint64_t available = body->size() - json_length;
  uint64_t total = 0;
  for (const BinaryInput& b : binary) {
    if (__builtin_add_overflow(total, b.size, &total)) total = std::numeric_limits<uint64_t>::max();
  }
  if (total != available) {
    return Invalid(fmt::format(
        "the inputs' binary_data_size parameters add up to {} bytes but the request has {} bytes "
        "of binary data after the JSON{}",
        total, available,
        header_sent ? "" : " (no Inference-Header-Content-Length header was sent)"));
  }
  const auto* base = reinterpret_cast<const std::byte*>(body->data());
  size_t offset = json_length;
  for (const BinaryInput& b : binary) {
    Tensor& tensor = request->inputs[b.input];
    const auto size = static_cast<size_t>(b.size);
    tensor.data = SharedBuffer::View(body, base + offset, size);
    offset += size;
    if (tensor.datatype == DataType::kBytes) {
      auto elements =
          SplitBytesElements(tensor.data.view(), tensor.name, ElementCount(tensor.shape));
      if (!elements.ok()) return elements.status();
    }
  }
  return Status::Ok();
}

Result<InferRequest> ParseDocument(const JsonDoc& doc,
                                   const std::shared_ptr<const std::string>& body,
                                   size_t json_length, bool header_sent,
                                   const SharedMemoryContext* shm) {
  if (!doc.IsObject()) {
    return Invalid(fmt::format("the request JSON must be an object, got {}", KindOf(doc)));
  }
  InferRequest request;
  const JsonValue* inputs = nullptr;
  const JsonValue* outputs = nullptr;
  for (const auto& m : doc.GetObject()) {
    const std::string_view key = Str(m.name);
    if (key == "id") {
      if (!m.value.IsString()) {
        return Invalid(fmt::format("'id' must be a string, got {}", KindOf(m.value)));
      }
      request.id.assign(m.value.GetString(), m.value.GetStringLength());
    } else if (key == "parameters") {
      VRAMD_RETURN_IF_ERROR(ParseRequestParameters(m.value, &request));
    } else if (key == "inputs") {
      inputs = &m.value;
    } else if (key == "outputs") {
      outputs = &m.value;
    }
  }

  if (inputs == nullptr) return Invalid("the request has no 'inputs'");
  if (!inputs->IsArray()) {
    return Invalid(fmt::format("'inputs' must be an array, got {}", KindOf(*inputs)));
  }
  if (inputs->Empty()) return Invalid("'inputs' must not be empty");

  request.inputs.resize(inputs->Size());
  std::vector<BinaryInput> binary;
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    std::optional<uint64_t> binary_size;
    std::optional<shared_memory::TensorPlacement> placement;
    VRAMD_RETURN_IF_ERROR(ParseInput((*inputs)[static_cast<rapidjson::SizeType>(i)], i,
                                     &request.inputs[i], &binary_size, shm, &placement));
    if (binary_size) binary.push_back({i, *binary_size});
    if (placement) VRAMD_RETURN_IF_ERROR(shared_memory::AttachInput(*shm->regions, *placement, &request.inputs[i]));
  }
  if (const std::string* dup = FindDuplicateName(request.inputs)) {
    return Invalid(fmt::format("input '{}' appears more than once in 'inputs'", *dup));
  }

  if (outputs != nullptr) VRAMD_RETURN_IF_ERROR(ParseOutputs(*outputs, &request, shm));
  if (const std::string* dup = FindDuplicateName(request.outputs)) {
    return Invalid(fmt::format("output '{}' appears more than once in 'outputs'", *dup));
  }

  VRAMD_RETURN_IF_ERROR(AttachBinaryData(binary, body, json_length, header_sent, &request));
  return request;
}

// ---- JSON text -> DOM ----------------------------------------------------------------------

// For number text that std::from_chars found out of range: true if it is tiny (rounds to
// zero) rather than huge. Only the sign of its decimal magnitude matters at that point.
bool UnderflowsToZero(std::string_view text) {
  size_t i = text[0] == '-' ? 1 : 0;
  int64_t magnitude = 0;  // decimal exponent of the leading nonzero digit, plus one
  bool nonzero = false;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    nonzero = nonzero || text[i] != '0';
    if (nonzero) ++magnitude;
  }
  if (i < text.size() && text[i] == '.') {
    for (++i; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
      if (nonzero) continue;
      if (text[i] == '0')
        --magnitude;
      else
        nonzero = true;
    }
  }
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    const bool negative = i < text.size() && text[i] == '-';
    if (i < text.size() && (text[i] == '-' || text[i] == '+')) ++i;
    int64_t exponent = 0;
    const auto r = std::from_chars(text.data() + i, text.data() + text.size(), exponent);
    if (r.ec != std::errc()) return negative;  // an exponent beyond 64 bits decides alone
    magnitude += negative ? -exponent : exponent;
  }
  return magnitude < 0;
}

// A rapidjson handler that builds `doc`, converting number text with std::from_chars:
// correctly rounded doubles (rapidjson's own full-precision mode is slower), and integers
// that fit 64 bits kept as integers, so the DOM answers IsInt64/IsUint64/GetDouble as usual.
class DomBuilder {
 public:
  explicit DomBuilder(JsonDoc* doc) : doc_(doc) {}

  // The number that stopped the parse (too large for a double); empty if none did.
  std::string_view bad_number() const { return bad_number_; }

  bool RawNumber(const char* str, rapidjson::SizeType length, bool /*copy*/) {
    const char* end = str + length;
    if (std::none_of(str, end, [](char c) { return c == '.' || c == 'e' || c == 'E'; })) {
      if (*str == '-') {
        int64_t v;
        const auto r = std::from_chars(str, end, v);
        if (r.ec == std::errc() && r.ptr == end) return doc_->Int64(v);
      } else {
        uint64_t v;
        const auto r = std::from_chars(str, end, v);
        if (r.ec == std::errc() && r.ptr == end) return doc_->Uint64(v);
      }
      // Beyond 64 bits: a double, as rapidjson does.
    }
    double d;
    const auto r = std::from_chars(str, end, d);
    if (r.ec == std::errc() && r.ptr == end) return doc_->Double(d);
    if (r.ec == std::errc::result_out_of_range && UnderflowsToZero({str, length})) {
      return doc_->Double(*str == '-' ? -0.0 : 0.0);
    }
    bad_number_ = {str, length};
    return false;
  }

  bool Null() { return doc_->Null(); }
  bool Bool(bool b) { return doc_->Bool(b); }
  bool Int(int i) { return doc_->Int(i); }
  bool Uint(unsigned u) { return doc_->Uint(u); }
  bool Int64(int64_t i) { return doc_->Int64(i); }
  bool Uint64(uint64_t u) { return doc_->Uint64(u); }
  bool Double(double d) { return doc_->Double(d); }
  bool String(const char* s, rapidjson::SizeType n, bool copy) { return doc_->String(s, n, copy); }
  bool StartObject() { return doc_->StartObject(); }
  bool Key(const char* s, rapidjson::SizeType n, bool copy) { return doc_->Key(s, n, copy); }
  bool EndObject(rapidjson::SizeType members) { return doc_->EndObject(members); }
  bool StartArray() { return doc_->StartArray(); }
  bool EndArray(rapidjson::SizeType elements) { return doc_->EndArray(elements); }

 private:
  JsonDoc* doc_;
  std::string_view bad_number_;
};

// True if `text` has more than `limit` '[' and '{' bytes (those in strings too): when false,
// no nesting in it is deeper than `limit`. Eight bytes at a time; stops once past the limit.
bool MayNestDeeperThan(std::string_view text, size_t limit) {
  // '[' (0x5B) and '{' (0x7B) are the only bytes with (c | 0x20) == 0x7B.
  constexpr uint64_t kOnes = 0x0101010101010101ull;
  size_t count = 0;
  size_t i = 0;
  for (; i + 8 <= text.size(); i += 8) {
    uint64_t word;
    std::memcpy(&word, text.data() + i, 8);
    const uint64_t y = (word | (0x20 * kOnes)) ^ (0x7B * kOnes);  // bracket bytes become 0
    const uint64_t low7 = 0x7F * kOnes;
    const uint64_t zero_bytes = ~(((y & low7) + low7) | y | low7);  // 0x80 per zero byte
    count += static_cast<size_t>(std::popcount(zero_bytes));
    if (count > limit) return true;
  }
  for (; i < text.size(); ++i) {
    count += (static_cast<unsigned char>(text[i]) | 0x20) == 0x7B ? 1 : 0;
  }
  return count > limit;
}

// Parses scratch->json (a copy of body[0, json_length)) in place, then the request.
Result<InferRequest> ParseInSitu(ParseScratch* scratch,
                                 const std::shared_ptr<const std::string>& body, size_t json_length,
                                 bool header_sent, const SharedMemoryContext* shm) {
  std::string& json = scratch->json;
  const bool deep = MayNestDeeperThan(json, kMaxRecursiveBrackets);
  Pool value_pool(scratch->value_pool, sizeof(scratch->value_pool));
  Pool stack_pool(scratch->stack_pool, sizeof(scratch->stack_pool));
  JsonDoc doc(&value_pool, 1024, &stack_pool);
  DomBuilder builder(&doc);
  rapidjson::GenericReader<rapidjson::UTF8<>, rapidjson::UTF8<>, Pool> reader(&stack_pool, 1024);
  rapidjson::GenericInsituStringStream<rapidjson::UTF8<>> stream(json.data());
  rapidjson::ParseResult parsed;
  auto generate = [&](JsonDoc&) {
    parsed = deep ? reader.Parse<kParseDeepFlags>(stream, builder)
                  : reader.Parse<kParseFlags>(stream, builder);
    return !parsed.IsError();
  };
  doc.Populate(generate);
  if (parsed.IsError()) {
    if (!builder.bad_number().empty()) {
      const std::string_view number = builder.bad_number();
      return Invalid(fmt::format(
          "failed to parse the request JSON at offset {}: number {}{} does not fit a double",
          parsed.Offset(), number.substr(0, 40), number.size() > 40 ? "..." : ""));
    }
    return Invalid(fmt::format("failed to parse the request JSON at offset {}: {}", parsed.Offset(),
                               rapidjson::GetParseError_En(parsed.Code())));
  }
  return ParseDocument(doc, body, json_length, header_sent, shm);
}

}  // namespace

Result<InferRequest> ParseInferRequest(std::shared_ptr<const std::string> body,
                                       std::optional<size_t> json_length,
                                       const SharedMemoryContext* shm) {
  size_t length = body->size();
  if (json_length) {
    if (*json_length == 0) {
      return Invalid("Inference-Header-Content-Length is 0: the request has no JSON part");
    }
    if (*json_length > body->size()) {
      return Invalid(fmt::format(
          "Inference-Header-Content-Length is {} but the request body has only {} bytes",
          *json_length, body->size()));
    }
    length = *json_length;
  }
  // JSON never holds a raw NUL; the in-situ parser would take one for the end of the text.
  if (std::memchr(body->data(), '\0', length) != nullptr) {
    return Invalid("failed to parse the request JSON: it contains a NUL byte");
  }

  ParseScratch& scratch = ThreadScratch();
  scratch.json.assign(body->data(), length);
  Result<InferRequest> result = ParseInSitu(&scratch, body, length, json_length.has_value(), shm);
  if (scratch.json.capacity() > ParseScratch::kKeepJsonBytes) std::string().swap(scratch.json);
  return result;
}

namespace internal {

Result<ParameterVariant> ParameterValue(const JsonValue& v, std::string_view what,
                                        std::string_view key) {
  if (v.IsBool()) return ParameterVariant(v.GetBool());
  if (v.IsInt64()) return ParameterVariant(v.GetInt64());
  if (v.IsUint64()) return ParameterVariant(v.GetUint64());
  if (v.IsNumber()) return ParameterVariant(v.GetDouble());
  if (v.IsString()) return ParameterVariant(std::string(Str(v)));
  return Invalid(fmt::format("{} '{}' must be a boolean, a number or a string, got {}", what, key,
                             KindOf(v)));
}

}  // namespace internal

}  // namespace vramd::http
