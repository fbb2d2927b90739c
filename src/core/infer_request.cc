#include "core/infer_request.h"

#include <fmt/format.h>

#include "core/json_parse.h"
#include "core/json_write.h"

namespace vramd {

std::string ParametersToJson(const std::vector<InferParameter>& parameters) {
  if (parameters.empty()) return "{}";  // most requests: no writer per request
  // A later duplicate wins: write each name once, at its last occurrence's value.
  rapidjson::StringBuffer buffer;
  JsonWriter w(buffer);
  w.StartObject();
  for (size_t i = 0; i < parameters.size(); ++i) {
    bool overridden = false;
    for (size_t j = i + 1; j < parameters.size() && !overridden; ++j)
      overridden = parameters[j].name == parameters[i].name;
    if (overridden) continue;
    WriteJsonKey(w, parameters[i].name);
    std::visit(
        [&w](const auto& v) {
          using V = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<V, bool>) w.Bool(v);
          else if constexpr (std::is_same_v<V, int64_t>) w.Int64(v);
          else if constexpr (std::is_same_v<V, uint64_t>) w.Uint64(v);
          else if constexpr (std::is_same_v<V, double>) w.Double(v);
          else WriteJsonString(w, v);
        },
        parameters[i].value);
  }
  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
}

Result<std::vector<InferParameter>> ParametersFromJson(std::string_view json,
                                                       std::string_view what) {
  auto doc = ParseJson(json, what);
  if (!doc.ok()) return doc.status();
  if (!doc->IsObject()) {
    return Status::InvalidArgument(fmt::format("{}: parameters must be a JSON object", what));
  }
  std::vector<InferParameter> out;
  for (auto it = doc->MemberBegin(); it != doc->MemberEnd(); ++it) {
    InferParameter p;
    p.name.assign(it->name.GetString(), it->name.GetStringLength());
    const auto& v = it->value;
    if (v.IsBool()) p.value = v.GetBool();
    else if (v.IsInt64()) p.value = v.GetInt64();
    else if (v.IsUint64()) p.value = v.GetUint64();
    else if (v.IsDouble()) p.value = v.GetDouble();
    else if (v.IsString()) p.value = std::string(v.GetString(), v.GetStringLength());
    else {
      return Status::InvalidArgument(fmt::format(
          "{}: parameter '{}' must be a bool, number or string, not {}", what, p.name,
          v.IsNull() ? "null" : v.IsArray() ? "an array" : "an object"));
    }
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace vramd
