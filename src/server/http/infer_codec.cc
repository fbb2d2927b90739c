#include "server/http/infer_codec.h"

#include <fmt/format.h>
#include <rapidjson/document.h>
#include <rapidjson/error/en.h>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <unordered_set>
#include <vector>

#include "core/data_type.h"
#include "core/half.h"
#include "core/tensor.h"

namespace vramd::http {
namespace {

static_assert(std::endian::native == std::endian::little,
              "tensor data is little-endian: this target needs byte swaps in the codec");

// The DOM lives in per-thread pools, so a small request allocates nothing for it.
using Pool = rapidjson::MemoryPoolAllocator<rapidjson::CrtAllocator>;
using JsonDoc = rapidjson::GenericDocument<rapidjson::UTF8<>, Pool, Pool>;
using JsonValue = JsonDoc::ValueType;

// rapidjson hands numbers over as text (DomBuilder converts them) and parses in place.
// Bodies that could nest deeply are parsed iteratively, so they cannot exhaust the stack;
// the recursive parser is faster for the rest.
constexpr unsigned kParseFlags =
    rapidjson::kParseInsituFlag | rapidjson::kParseNumbersAsStringsFlag;
constexpr unsigned kParseDeepFlags = kParseFlags | rapidjson::kParseIterativeFlag;
// Up to this many '[' and '{' in a body, recursion depth is bounded by it.
constexpr size_t kMaxRecursiveBrackets = 256;

// How deep "data" arrays may nest; our own walks over them recurse.
constexpr int kMaxDataDepth = 64;

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

Status Invalid(std::string message) { return Status::InvalidArgument(std::move(message)); }

std::string_view Str(const JsonValue& v) { return {v.GetString(), v.GetStringLength()}; }

const char* KindOf(const JsonValue& v) {
  switch (v.GetType()) {
    case rapidjson::kNullType: return "null";
    case rapidjson::kFalseType:
    case rapidjson::kTrueType: return "a boolean";
    case rapidjson::kObjectType: return "an object";
    case rapidjson::kArrayType: return "an array";
    case rapidjson::kStringType: return "a string";
    case rapidjson::kNumberType: return "a number";
  }
  return "an unknown value";
}

std::string NumberText(const JsonValue& v) {
  if (v.IsUint64()) return std::to_string(v.GetUint64());
  if (v.IsInt64()) return std::to_string(v.GetInt64());
  return fmt::format("{}", v.GetDouble());
}

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

// ---- JSON data -> tensor bytes -------------------------------------------------------------

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
  HostBuffer buffer = HostBuffer::Allocate(count * sizeof(T));
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
  tensor->data = HostBuffer::FromString(std::move(serialized));
  return Status::Ok();
}

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

// ---- request structure ---------------------------------------------------------------------

bool IsSharedMemoryParameter(std::string_view key) { return key.substr(0, 14) == "shared_memory_"; }

Status SharedMemoryUnsupported(std::string_view what, std::string_view name, std::string_view key) {
  return Status::Unsupported(fmt::format(
      "{} '{}': shared memory (parameter '{}') is not supported by vramd; send the tensor as "
      "JSON or binary data",
      what, name, key));
}

Status ParseRequestParameters(const JsonValue& params, InferRequest* request) {
  if (!params.IsObject()) {
    return Invalid(fmt::format("'parameters' must be an object, got {}", KindOf(params)));
  }
  for (const auto& m : params.GetObject()) {
    if (Str(m.name) == "binary_data_output") {
      if (!m.value.IsBool()) {
        return Invalid(
            fmt::format("request parameter 'binary_data_output' must be true or false, got {}",
                        KindOf(m.value)));
      }
      request->binary_data_output = m.value.GetBool();
    } else if (Str(m.name) == "timeout") {
      if (!m.value.IsUint64()) {
        return Invalid(fmt::format(
            "request parameter 'timeout' must be a non-negative integer (microseconds), got {}",
            m.value.IsNumber() ? NumberText(m.value) : std::string(KindOf(m.value))));
      }
      request->timeout_us = m.value.GetUint64();
    }
  }
  return Status::Ok();
}

Status ParseInputParameters(const JsonValue& params, const std::string& name,
                            std::optional<uint64_t>* binary_size) {
  if (!params.IsObject()) {
    return Invalid(
        fmt::format("input '{}': 'parameters' must be an object, got {}", name, KindOf(params)));
  }
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
      return SharedMemoryUnsupported("input", name, key);
    }
  }
  return Status::Ok();
}

// Bytes the binary form of `tensor` must have; nullopt for BYTES (variable) or on overflow.
std::optional<uint64_t> FixedByteSize(const Tensor& tensor) {
  const size_t element = DataTypeByteSize(tensor.datatype);
  if (element == 0) return std::nullopt;
  uint64_t bytes;
  if (__builtin_mul_overflow(static_cast<uint64_t>(ElementCount(tensor.shape)), element, &bytes)) {
    return std::nullopt;
  }
  return bytes;
}

// Fills `tensor` (all but binary data) from inputs[position]; sets *binary_size when the data
// comes from the binary part.
Status ParseInput(const JsonValue& v, size_t position, Tensor* tensor,
                  std::optional<uint64_t>* binary_size) {
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

  if (params != nullptr) VRAMD_RETURN_IF_ERROR(ParseInputParameters(*params, n, binary_size));
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

Status ParseOutputs(const JsonValue& outputs, InferRequest* request) {
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
          return Status::Unsupported(fmt::format(
              "output '{}': the classification extension (parameter 'classification') is not "
              "supported by vramd",
              requested.name));
        } else if (IsSharedMemoryParameter(key)) {
          return SharedMemoryUnsupported("output", requested.name, key);
        }
      }
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
    tensor.data = HostBuffer::View(body, base + offset, size);
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
                                   size_t json_length, bool header_sent) {
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
    VRAMD_RETURN_IF_ERROR(ParseInput((*inputs)[static_cast<rapidjson::SizeType>(i)], i,
                                     &request.inputs[i], &binary_size));
    if (binary_size) binary.push_back({i, *binary_size});
  }
  if (const std::string* dup = FindDuplicateName(request.inputs)) {
    return Invalid(fmt::format("input '{}' appears more than once in 'inputs'", *dup));
  }

  if (outputs != nullptr) VRAMD_RETURN_IF_ERROR(ParseOutputs(*outputs, &request));
  if (const std::string* dup = FindDuplicateName(request.outputs)) {
    return Invalid(fmt::format("output '{}' appears more than once in 'outputs'", *dup));
  }

  VRAMD_RETURN_IF_ERROR(AttachBinaryData(binary, body, json_length, header_sent, &request));
  return request;
}

// ---- JSON writing --------------------------------------------------------------------------

// Length of the valid UTF-8 sequence at p[0..n) (RFC 3629: no overlong forms, surrogates or
// code points above U+10FFFF), or 0 if p[0] does not start one.
size_t Utf8SequenceLength(const unsigned char* p, size_t n) {
  auto cont = [&](size_t i, unsigned char lo = 0x80, unsigned char hi = 0xBF) {
    return i < n && p[i] >= lo && p[i] <= hi;
  };
  const unsigned char c = p[0];
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c == 0xE0) return cont(1, 0xA0) && cont(2) ? 3 : 0;
  if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) return cont(1) && cont(2) ? 3 : 0;
  if (c == 0xED) return cont(1, 0x80, 0x9F) && cont(2) ? 3 : 0;
  if (c == 0xF0) return cont(1, 0x90) && cont(2) && cont(3) ? 4 : 0;
  if (c >= 0xF1 && c <= 0xF3) return cont(1) && cont(2) && cont(3) ? 4 : 0;
  if (c == 0xF4) return cont(1, 0x80, 0x8F) && cont(2) && cont(3) ? 4 : 0;
  return 0;
}

// Appends `bytes` as a JSON string literal; see the header for the escaping rules.
void AppendJsonString(std::string* out, std::string_view bytes) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  out->push_back('"');
  size_t copied = 0;  // bytes before this are in `out`
  size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
      ++i;
      continue;
    }
    if (c >= 0x80) {
      const size_t len = Utf8SequenceLength(p + i, n - i);
      if (len != 0) {
        i += len;
        continue;
      }
    }
    out->append(bytes.data() + copied, i - copied);
    switch (c) {
      case '"': out->append("\\\""); break;
      case '\\': out->append("\\\\"); break;
      case '\b': out->append("\\b"); break;
      case '\f': out->append("\\f"); break;
      case '\n': out->append("\\n"); break;
      case '\r': out->append("\\r"); break;
      case '\t': out->append("\\t"); break;
      default: {
        const char escape[6] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 0xf]};
        out->append(escape, sizeof(escape));
      }
    }
    ++i;
    copied = i;
  }
  out->append(bytes.data() + copied, n - copied);
  out->push_back('"');
}

template <typename Int>
void AppendInteger(std::string* out, Int value) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof(buf), value);
  out->append(buf, r.ptr);
}

// Shortest round-trip text for `value` in its own type; null for inf and NaN; ".0" added to
// integral values so readers see a float.
template <typename Float>
void AppendFloating(std::string* out, Float value) {
  if (!std::isfinite(value)) {
    out->append("null");
    return;
  }
  char buf[40];
  const auto r = std::to_chars(buf, buf + sizeof(buf), value);
  out->append(buf, r.ptr);
  if (std::none_of(buf, r.ptr, [](char c) { return c == '.' || c == 'e'; })) out->append(".0");
}

template <typename T, typename Write>
void AppendElements(std::string* out, const std::byte* data, size_t count, Write write) {
  for (size_t i = 0; i < count; ++i) {
    if (i != 0) out->push_back(',');
    T value;
    std::memcpy(&value, data + i * sizeof(T), sizeof(T));
    write(out, value);
  }
}

template <typename T>
void AppendIntegers(std::string* out, const std::byte* data, size_t count) {
  AppendElements<T>(out, data, count, [](std::string* o, T v) { AppendInteger(o, v); });
}

// Appends tensor's data as a flat JSON array.
void AppendJsonData(std::string* out, const Tensor& tensor) {
  out->push_back('[');
  if (tensor.datatype == DataType::kBytes) {
    auto elements = SplitBytesElements(tensor.data.view(), tensor.name, -1);
    if (elements.ok()) {
      for (size_t i = 0; i < elements->size(); ++i) {
        if (i != 0) out->push_back(',');
        AppendJsonString(out, (*elements)[i]);
      }
    }
    out->push_back(']');
    return;
  }
  const size_t element = DataTypeByteSize(tensor.datatype);
  size_t count = element == 0 ? 0 : tensor.data.size() / element;
  const int64_t shape_count = ElementCount(tensor.shape);
  if (shape_count >= 0 && static_cast<uint64_t>(shape_count) < count) count = shape_count;
  const std::byte* d = tensor.data.data();
  switch (tensor.datatype) {
    case DataType::kBool:
      for (size_t i = 0; i < count; ++i) {
        if (i != 0) out->push_back(',');
        out->append(d[i] != std::byte{0} ? "true" : "false");
      }
      break;
    case DataType::kUint8: AppendIntegers<uint8_t>(out, d, count); break;
    case DataType::kUint16: AppendIntegers<uint16_t>(out, d, count); break;
    case DataType::kUint32: AppendIntegers<uint32_t>(out, d, count); break;
    case DataType::kUint64: AppendIntegers<uint64_t>(out, d, count); break;
    case DataType::kInt8: AppendIntegers<int8_t>(out, d, count); break;
    case DataType::kInt16: AppendIntegers<int16_t>(out, d, count); break;
    case DataType::kInt32: AppendIntegers<int32_t>(out, d, count); break;
    case DataType::kInt64: AppendIntegers<int64_t>(out, d, count); break;
    case DataType::kFp16:
      AppendElements<uint16_t>(
          out, d, count, [](std::string* o, uint16_t h) { AppendFloating(o, HalfToFloat(h)); });
      break;
    case DataType::kBf16:
      AppendElements<uint16_t>(
          out, d, count, [](std::string* o, uint16_t b) { AppendFloating(o, Bf16ToFloat(b)); });
      break;
    case DataType::kFp32:
      AppendElements<float>(out, d, count, [](std::string* o, float f) { AppendFloating(o, f); });
      break;
    case DataType::kFp64:
      AppendElements<double>(out, d, count, [](std::string* o, double f) { AppendFloating(o, f); });
      break;
    case DataType::kBytes:
    case DataType::kInvalid: break;
  }
  out->push_back(']');
}

// A guess at the JSON text for `tensor`'s data, to size the body once.
size_t JsonDataEstimate(const Tensor& tensor) {
  const size_t bytes = tensor.data.size();
  switch (tensor.datatype) {
    case DataType::kBytes: return bytes + bytes / 8 + 8;
    case DataType::kBool: return bytes * 6 + 2;
    case DataType::kFp16:
    case DataType::kBf16: return bytes / 2 * 14 + 2;
    case DataType::kFp32: return bytes / 4 * 16 + 2;
    case DataType::kFp64: return bytes / 8 * 25 + 2;
    default: {
      const size_t element = DataTypeByteSize(tensor.datatype);
      return element == 0 ? 2 : bytes / element * (element * 3 + 2) + 2;
    }
  }
}

bool OutputIsBinary(const InferRequest& request, std::string_view name) {
  for (const RequestedOutput& o : request.outputs) {
    if (o.name == name) return o.binary;
  }
  return request.binary_data_output;
}

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
                                 bool header_sent) {
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
  return ParseDocument(doc, body, json_length, header_sent);
}

}  // namespace

Result<InferRequest> ParseInferRequest(std::shared_ptr<const std::string> body,
                                       std::optional<size_t> json_length) {
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
  Result<InferRequest> result = ParseInSitu(&scratch, body, length, json_length.has_value());
  if (scratch.json.capacity() > ParseScratch::kKeepJsonBytes) std::string().swap(scratch.json);
  return result;
}

EncodedBody EncodeInferResponse(const InferResponse& response, const InferRequest& request) {
  EncodedBody encoded;
  std::string& s = encoded.body;
  const std::string& id = response.id.empty() ? request.id : response.id;

  size_t estimate = 96 + response.model_name.size() + id.size();
  size_t binary_bytes = 0;
  bool any_binary = false;
  for (const Tensor& t : response.outputs) {
    estimate += 96 + t.name.size() + 21 * t.shape.size();
    if (OutputIsBinary(request, t.name)) {
      any_binary = true;
      binary_bytes += t.data.size();
    } else {
      estimate += JsonDataEstimate(t);
    }
  }
  s.reserve(estimate + binary_bytes);

  s.append("{\"model_name\":");
  AppendJsonString(&s, response.model_name);
  s.append(",\"model_version\":\"");
  AppendInteger(&s, response.model_version);
  s.push_back('"');
  if (!id.empty()) {
    s.append(",\"id\":");
    AppendJsonString(&s, id);
  }
  s.append(",\"outputs\":[");
  for (size_t i = 0; i < response.outputs.size(); ++i) {
    const Tensor& t = response.outputs[i];
    if (i != 0) s.push_back(',');
    s.append("{\"name\":");
    AppendJsonString(&s, t.name);
    s.append(",\"datatype\":\"");
    s.append(DataTypeWireName(t.datatype));
    s.append("\",\"shape\":[");
    for (size_t d = 0; d < t.shape.size(); ++d) {
      if (d != 0) s.push_back(',');
      AppendInteger(&s, t.shape[d]);
    }
    s.push_back(']');
    if (OutputIsBinary(request, t.name)) {
      s.append(",\"parameters\":{\"binary_data_size\":");
      AppendInteger(&s, t.data.size());
      s.append("}}");
    } else {
      s.append(",\"data\":");
      AppendJsonData(&s, t);
      s.push_back('}');
    }
  }
  s.append("]}");

  if (any_binary) {
    encoded.json_length = s.size();
    for (const Tensor& t : response.outputs) {
      if (OutputIsBinary(request, t.name)) s.append(t.data.view());
    }
  }
  return encoded;
}

std::string EncodeError(std::string_view message) {
  std::string s;
  s.reserve(message.size() + 16);
  s.append("{\"error\":");
  AppendJsonString(&s, message);
  s.push_back('}');
  return s;
}

}  // namespace vramd::http
