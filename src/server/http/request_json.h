// The rapidjson DOM that ParseInferRequest builds, and the small helpers over it that the
// request parser's parts share. Internal to server/http.
#pragma once

#include <fmt/format.h>
#include <rapidjson/document.h>

#include <string>
#include <string_view>
#include <utility>

#include "core/infer_request.h"
#include "core/status.h"

namespace vramd::http::internal {

// The DOM lives in per-thread pools, so a small request allocates nothing for it.
using Pool = rapidjson::MemoryPoolAllocator<rapidjson::CrtAllocator>;
using JsonDoc = rapidjson::GenericDocument<rapidjson::UTF8<>, Pool, Pool>;
using JsonValue = JsonDoc::ValueType;

inline Status Invalid(std::string message) { return Status::InvalidArgument(std::move(message)); }

inline std::string_view Str(const JsonValue& v) { return {v.GetString(), v.GetStringLength()}; }

// "null", "a boolean", "an object", ...: for error messages.
inline const char* KindOf(const JsonValue& v) {
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

// A number's value as text: integers in full, doubles in shortest form.
inline std::string NumberText(const JsonValue& v) {
  if (v.IsUint64()) return std::to_string(v.GetUint64());
  if (v.IsInt64()) return std::to_string(v.GetInt64());
  return fmt::format("{}", v.GetDouble());
}

using ParameterVariant = decltype(InferParameter::value);

// A client's parameter value as InferRequest::parameters holds it: integers as int64 when they
// fit (Triton's int parameter), else uint64; other numbers as double. Null, arrays and objects
// have no such form (Triton refuses them too): InvalidArgument "<what> '<key>' must be ...".
Result<ParameterVariant> ParameterValue(const JsonValue& v, std::string_view what,
                                        std::string_view key);

}  // namespace vramd::http::internal
