// EncodeInferResponse and EncodeError (infer_codec.h), and the output writers the generate
// endpoint shares (output_json.h).
#include "server/http/infer_codec.h"

#include <fmt/format.h>

#include <bit>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "core/data_type.h"
#include "core/half.h"
#include "core/tensor.h"
#include "server/http/json_text.h"
#include "server/http/output_json.h"

namespace vramd::http {
namespace {

using internal::AppendExactJsonString;
using internal::AppendFloating;
using internal::AppendInteger;
using internal::AppendJsonData;
using internal::AppendJsonString;
using internal::AppendParameterMembers;
using internal::ParameterMembersBound;

static_assert(std::endian::native == std::endian::little,
              "tensor data is little-endian: this target needs byte swaps in the codec");

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

// The most text a JSON string literal of `bytes` can take: quotes, and 6 characters (\u00XX)
// per byte.
size_t JsonStringBound(size_t bytes) { return 6 * bytes + 2; }

}  // namespace

namespace internal {

Status AppendJsonData(std::string* out, const Tensor& tensor) {
  out->push_back('[');
  if (tensor.datatype == DataType::kBytes) {
    auto elements = SplitBytesElements(tensor.data.view(), tensor.name, -1);
    if (elements.ok()) {
      for (size_t i = 0; i < elements->size(); ++i) {
        if (i != 0) out->push_back(',');
        const std::string_view element = (*elements)[i];
        if (auto bad = AppendExactJsonString(out, element)) {
          return Status::InvalidArgument(fmt::format(
              "output '{}' cannot be sent as JSON: its element {} is not valid UTF-8 (byte "
              "0x{:02X} at offset {}), and a JSON string carries text only; request it as "
              "binary data (output parameter \"binary_data\": true, or request parameter "
              "\"binary_data_output\": true) to receive its bytes exactly",
              tensor.name, i, static_cast<unsigned char>(element[*bad]), *bad));
        }
      }
    }
    out->push_back(']');
    return Status::Ok();
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
  return Status::Ok();
}

void AppendParameterValue(std::string* out, const decltype(InferParameter::value)& value) {
  std::visit(
      [out](const auto& v) {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, bool>) {
          out->append(v ? "true" : "false");
        } else if constexpr (std::is_same_v<V, double>) {
          AppendFloating(out, v);
        } else if constexpr (std::is_same_v<V, std::string>) {
          AppendJsonString(out, v);
        } else {
          AppendInteger(out, v);
        }
      },
      value);
}

namespace {
// Whether parameters[i] is overridden by a later one of the same name. Quadratic, as
// ParametersToJson: a response carries a handful of parameters.
bool Overridden(const std::vector<InferParameter>& parameters, size_t i) {
  for (size_t j = i + 1; j < parameters.size(); ++j) {
    if (parameters[j].name == parameters[i].name) return true;
  }
  return false;
}
}  // namespace

size_t AppendParameterMembers(std::string* out, const std::vector<InferParameter>& parameters) {
  size_t written = 0;
  for (size_t i = 0; i < parameters.size(); ++i) {
    if (Overridden(parameters, i)) continue;
    if (written++ != 0) out->push_back(',');
    AppendJsonString(out, parameters[i].name);
    out->push_back(':');
    AppendParameterValue(out, parameters[i].value);
  }
  return written;
}

size_t ParameterMembersBound(const std::vector<InferParameter>& parameters) {
  size_t bound = 0;
  for (const InferParameter& p : parameters) {
    // name, colon, comma; a number or boolean is at most 25 characters
    bound += JsonStringBound(p.name.size()) + 2;
    const auto* text = std::get_if<std::string>(&p.value);
    bound += text != nullptr ? JsonStringBound(text->size()) : 25;
  }
  return bound;
}

}  // namespace internal

namespace {

// The most JSON text `tensor`'s data can take, separators and brackets included, so that the
// body is allocated once at its final capacity: growing it by doubling would copy a large
// reply and briefly hold it three times over. Only the pages written become resident, so the
// slack costs address space, not memory. Per element, with its comma: BOOL "false," 6; an
// integer its most digits and sign ("-2147483648," 12 for INT32, element * 3 + 2 bounds every
// width); FP16, BF16 and FP32 are written as floats, whose shortest form is at most 15
// characters ("-1.17549435e-38"), so 16; FP64 at most 24 ("-2.2250738585072014e-308"), so 25.
// BYTES: each element's 4-byte length prefix is not written, and its text is at most
// JsonStringBound plus a comma.
size_t JsonDataBound(const Tensor& tensor) {
  const size_t bytes = tensor.data.size();
  switch (tensor.datatype) {
    case DataType::kBytes: return 6 * bytes + 2;  // an element's 4 unwritten prefix bytes
                                                  // pay for its quotes and comma
    case DataType::kBool: return bytes * 6 + 2;
    case DataType::kFp16:
    case DataType::kBf16: return bytes / 2 * 16 + 2;
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

}  // namespace

Result<EncodedBody> EncodeInferResponse(const InferResponse& response,
                                        const InferRequest& request,
                                        const std::vector<shared_memory::TensorPlacement>* placed,
                                        const shared_memory::SharedMemoryRegions* regions) {
  // Outputs on a GPU that are not placed in a CUDA region are encoded from host copies; a
  // placed one is copied into its region from where it is.
  std::vector<Tensor> hosted;
  VRAMD_ASSIGN_OR_RETURN(const std::vector<Tensor>* outputs,
                         shared_memory::OutputsToEncode(response.outputs, placed, &hosted));
  EncodedBody encoded;
  std::string& s = encoded.body;
  const std::string& id = response.id.empty() ? request.id : response.id;

  // An upper bound, as for the data: the fixed text of the envelope and of each output is
  // under 96 characters, a shape dimension under 21.
  size_t bound = 96 + JsonStringBound(response.model_name.size()) + JsonStringBound(id.size()) +
                 ParameterMembersBound(response.parameters);
  size_t binary_bytes = 0;
  bool any_binary = false;
  for (const Tensor& t : *outputs) {
    bound += 96 + JsonStringBound(t.name.size()) + 21 * t.shape.size();
    if (const auto* p = shared_memory::PlacementOf(placed, t.name)) {
      if (regions == nullptr) return Status::Internal("an output placed in shared memory, but no regions");
      VRAMD_RETURN_IF_ERROR(regions->Write(*p, t, fmt::format("output '{}'", t.name)));
      bound += 96 + JsonStringBound(p->region.size()) + 42;
    } else if (OutputIsBinary(request, t.name)) {
      any_binary = true;
      binary_bytes += t.data.size();
    } else {
      bound += JsonDataBound(t);
    }
  }
  s.reserve(bound + binary_bytes);

  s.append("{\"model_name\":");
  AppendJsonString(&s, response.model_name);
  s.append(",\"model_version\":\"");
  AppendInteger(&s, response.model_version);
  s.push_back('"');
  if (!id.empty()) {
    s.append(",\"id\":");
    AppendJsonString(&s, id);
  }
  if (!response.parameters.empty()) {
    s.append(",\"parameters\":{");
    AppendParameterMembers(&s, response.parameters);
    s.push_back('}');
  }
  s.append(",\"outputs\":[");
  for (size_t i = 0; i < outputs->size(); ++i) {
    const Tensor& t = (*outputs)[i];
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
    if (const auto* p = shared_memory::PlacementOf(placed, t.name)) {
      s.append(",\"parameters\":{\"shared_memory_region\":");
      AppendJsonString(&s, p->region);
      if (p->offset != 0) {
        s.append(",\"shared_memory_offset\":");
        AppendInteger(&s, p->offset);
      }
      s.append(",\"shared_memory_byte_size\":");
      AppendInteger(&s, t.data.size());
      s.append("}}");
    } else if (OutputIsBinary(request, t.name)) {
      s.append(",\"parameters\":{\"binary_data_size\":");
      AppendInteger(&s, t.data.size());
      s.append("}}");
    } else {
      s.append(",\"data\":");
      VRAMD_RETURN_IF_ERROR(AppendJsonData(&s, t));
      s.push_back('}');
    }
  }
  s.append("]}");

  if (any_binary) {
    encoded.json_length = s.size();
    for (const Tensor& t : *outputs) {
      if (shared_memory::PlacementOf(placed, t.name) == nullptr && OutputIsBinary(request, t.name)) {
        s.append(t.data.view());
      }
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
