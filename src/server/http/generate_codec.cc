// ParseGenerateRequest, EncodeGenerateResponse and SseEvent (generate_codec.h).
#include "server/http/generate_codec.h"

#include <fmt/format.h>
#include <rapidjson/document.h>
#include <rapidjson/error/en.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/data_type.h"
#include "core/tensor.h"
#include "server/http/infer_input_data.h"
#include "server/http/json_text.h"
#include "server/http/output_json.h"
#include "server/http/request_json.h"

namespace vramd::http {
namespace {

using internal::Invalid;
using internal::JsonDoc;
using internal::JsonValue;
using internal::KindOf;
using internal::Str;

// Iterative: a body cannot exhaust the stack however deep it nests (only flat values are
// accepted, but the parser sees the whole text first).
constexpr unsigned kParseFlags =
    rapidjson::kParseIterativeFlag | rapidjson::kParseFullPrecisionFlag;

const config::ModelInput* FindInput(const config::ModelConfig& config, std::string_view name) {
  for (const auto& input : config.input()) {
    if (input.name() == name) return &input;
  }
  return nullptr;
}

// The shape Triton gives `count` elements of `input` (ExactMappingInput): fixed dimensions
// divide the count from the innermost out; the innermost -1 takes the rest, other -1s are 1.
Result<Shape> GenerateShape(const config::ModelConfig& config, const config::ModelInput& input,
                            uint64_t count) {
  Shape shape;
  if (config.max_batch_size() > 0) shape.push_back(-1);
  shape.insert(shape.end(), input.dims().begin(), input.dims().end());
  auto cannot = [&] {
    return Invalid(fmt::format(
        "generate request: the schema can not convert input '{}' to tensor with proper shape "
        "(model shape {}, {} element(s) given)",
        input.name(), ShapeToString(shape), count));
  };
  for (auto d = shape.rbegin(); d != shape.rend(); ++d) {
    if (*d < 0) continue;
    // A 0 dimension holds only an empty value; Triton would divide by it.
    if (*d == 0) {
      if (count != 0) return cannot();
      count = 1;
      continue;
    }
    if (count % static_cast<uint64_t>(*d) != 0) return cannot();
    count /= static_cast<uint64_t>(*d);
  }
  for (auto d = shape.rbegin(); d != shape.rend(); ++d) {
    if (*d >= 0) continue;
    *d = static_cast<int64_t>(count);
    count = 1;
  }
  if (count != 1) return cannot();
  return shape;
}

Status MapInput(const config::ModelConfig& config, const config::ModelInput& input,
                const JsonValue& given, JsonDoc::AllocatorType& allocator,
                InferRequest* request) {
  Tensor tensor;
  tensor.name = input.name();
  tensor.datatype = static_cast<DataType>(input.data_type());
  if (request->FindInput(tensor.name) != nullptr) {
    return Invalid(
        fmt::format("generate request: input '{}' is given more than once", tensor.name));
  }
  // ParseJsonData reads a "data" array: a scalar becomes (a copy in) an array of one.
  JsonValue scalar_array;
  if (!given.IsArray()) {
    scalar_array.SetArray();
    scalar_array.PushBack(JsonValue(given, allocator), allocator);
  }
  const JsonValue& value = given.IsArray() ? given : scalar_array;
  for (const JsonValue& element : value.GetArray()) {
    if (element.IsArray() || element.IsObject()) {
      return Invalid(fmt::format(
          "generate request: input '{}' must be a scalar or a flat array of scalars; it holds {}",
          tensor.name, KindOf(element)));
    }
  }
  auto shape = GenerateShape(config, input, value.Size());
  if (!shape.ok()) return shape.status();
  tensor.shape = std::move(shape).value();
  VRAMD_RETURN_IF_ERROR(internal::ParseJsonData(value, &tensor));
  request->inputs.push_back(std::move(tensor));
  return Status::Ok();
}

// One member of the request object (or of its "parameters"): an input or a parameter.
Status MapMember(const config::ModelConfig& config, std::string_view name,
                 const JsonValue& value,
                 JsonDoc::AllocatorType& allocator, InferRequest* request) {
  if (const config::ModelInput* input = FindInput(config, name)) {
    return MapInput(config, *input, value, allocator, request);
  }
  auto parameter = internal::ParameterValue(value, "generate request: parameter", name);
  if (!parameter.ok()) return parameter.status();
  request->parameters.push_back({std::string(name), std::move(parameter).value()});
  return Status::Ok();
}

}  // namespace

Result<InferRequest> ParseGenerateRequest(std::string_view body,
                                          const config::ModelConfig& config) {
  JsonDoc doc;
  doc.Parse<kParseFlags>(body.data(), body.size());
  if (doc.HasParseError()) {
    return Invalid(fmt::format("failed to parse the generate request JSON at offset {}: {}",
                               doc.GetErrorOffset(),
                               rapidjson::GetParseError_En(doc.GetParseError())));
  }
  if (!doc.IsObject()) {
    return Invalid(fmt::format("the generate request JSON must be an object, got {}", KindOf(doc)));
  }
  auto& allocator = doc.GetAllocator();
  const JsonDoc& object = doc;  // walked read-only (rapidjson's const iterators)
  InferRequest request;
  for (const auto& m : object.GetObject()) {
    const std::string_view name = Str(m.name);
    if (name != "parameters") {
      VRAMD_RETURN_IF_ERROR(MapMember(config, name, m.value, allocator, &request));
      continue;
    }
    // Triton's generate schema reserves "parameters" for a nested object mapped the same way.
    if (FindInput(config, name) != nullptr) {
      return Invalid(
          "generate request: keyword 'parameters' for nested schema also given as input tensor "
          "name");
    }
    if (!m.value.IsObject()) {
      return Invalid(fmt::format("generate request: 'parameters' must be an object, got {}",
                                 KindOf(m.value)));
    }
    for (const auto& p : m.value.GetObject()) {
      VRAMD_RETURN_IF_ERROR(MapMember(config, Str(p.name), p.value, allocator, &request));
    }
  }
  return request;
}

Result<std::string> EncodeGenerateResponse(const InferResponse& response,
                                           std::string_view model_name, int64_t model_version) {
  std::string s;
  s.append("{\"model_name\":");
  internal::AppendJsonString(&s, response.model_name.empty() ? model_name : response.model_name);
  s.append(",\"model_version\":\"");
  internal::AppendInteger(&s, response.model_version != 0 ? response.model_version : model_version);
  s.push_back('"');
  if (!response.id.empty()) {
    s.append(",\"id\":");
    internal::AppendJsonString(&s, response.id);
  }
  if (!response.parameters.empty()) {
    s.push_back(',');
    if (internal::AppendParameterMembers(&s, response.parameters) == 0) s.pop_back();
  }
  std::string data;
  for (const Tensor& t : response.outputs) {
    s.push_back(',');
    internal::AppendJsonString(&s, t.name);
    s.push_back(':');
    data.clear();
    VRAMD_RETURN_IF_ERROR(internal::AppendJsonData(&data, t));
    // One element: the value itself, without its array (data is "[<value>]").
    if (ElementCount(t.shape) == 1 && data.size() > 2) {
      s.append(std::string_view(data).substr(1, data.size() - 2));
    } else {
      s.append(data);
    }
  }
  s.push_back('}');
  return s;
}

std::string SseEvent(std::string_view json) {
  std::string event;
  event.reserve(json.size() + 8);
  event.append("data: ");
  event.append(json);
  event.append("\n\n");
  return event;
}

}  // namespace vramd::http
