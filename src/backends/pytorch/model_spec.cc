#include "model_spec.h"

#include <rapidjson/document.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <utility>

namespace vramd::pytorch {
namespace {

struct TypeName {
  const char* config;  // Triton's config name
  const char* wire;    // KServe's name
  VramdDataType type;
};

constexpr std::array<TypeName, 14> kTypes = {{
    {"TYPE_BOOL", "BOOL", VRAMD_TYPE_BOOL},
    {"TYPE_UINT8", "UINT8", VRAMD_TYPE_UINT8},
    {"TYPE_UINT16", "UINT16", VRAMD_TYPE_UINT16},
    {"TYPE_UINT32", "UINT32", VRAMD_TYPE_UINT32},
    {"TYPE_UINT64", "UINT64", VRAMD_TYPE_UINT64},
    {"TYPE_INT8", "INT8", VRAMD_TYPE_INT8},
    {"TYPE_INT16", "INT16", VRAMD_TYPE_INT16},
    {"TYPE_INT32", "INT32", VRAMD_TYPE_INT32},
    {"TYPE_INT64", "INT64", VRAMD_TYPE_INT64},
    {"TYPE_FP16", "FP16", VRAMD_TYPE_FP16},
    {"TYPE_FP32", "FP32", VRAMD_TYPE_FP32},
    {"TYPE_FP64", "FP64", VRAMD_TYPE_FP64},
    {"TYPE_STRING", "BYTES", VRAMD_TYPE_BYTES},
    {"TYPE_BF16", "BF16", VRAMD_TYPE_BF16},
}};

// Types the backend serves: those LibTorch has tensors for, and strings (TYPE_STRING), which
// TorchScript takes and returns as List[str]. Unsigned types wider than 8 bits arrived in
// LibTorch only recently and with few kernels.
bool TorchHasType(VramdDataType type) {
  switch (type) {
    case VRAMD_TYPE_UINT16:
    case VRAMD_TYPE_UINT32:
    case VRAMD_TYPE_UINT64:
    case VRAMD_TYPE_INVALID: return false;
    default: return true;
  }
}

// Triton's pytorch backend parameters that vramd accepts but that change nothing: weight
// sharing is always on (one module per device), and the JIT/fuser switches and cache cleaning
// belong to LibTorch's own caching allocator, which vramd replaces.
constexpr std::array<const char*, 7> kIgnoredParameters = {
    "ENABLE_WEIGHT_SHARING", "ENABLE_CACHE_CLEANING", "ENABLE_JIT_EXECUTOR",
    "ENABLE_JIT_PROFILING",  "ENABLE_NVFUSER",        "INTER_OP_THREAD_COUNT",
    "DISABLE_CUDNN"};

std::optional<bool> ParseBool(std::string value) {
  std::transform(value.begin(), value.end(), value.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (value == "true" || value == "1" || value == "yes" || value == "on") return true;
  if (value == "false" || value == "0" || value == "no" || value == "off") return false;
  return std::nullopt;
}

bool IsInteger(const std::string& text) {
  const size_t start = !text.empty() && text[0] == '-' ? 1 : 0;
  return text.size() > start && text.size() < 19 &&
         std::all_of(text.begin() + start, text.end(),
                     [](unsigned char c) { return std::isdigit(c); });
}

bool ParseTensor(const rapidjson::Value& v, const char* what, size_t index, TensorSpec* out,
                 std::string* error) {
  const std::string where = std::string(what) + "[" + std::to_string(index) + "]";
  if (!v.IsObject() || !v.HasMember("name") || !v["name"].IsString()) {
    *error = where + " has no name";
    return false;
  }
  out->name = v["name"].GetString();
  const std::string label = std::string(what) + " '" + out->name + "'";
  const std::string type =
      v.HasMember("data_type") && v["data_type"].IsString() ? v["data_type"].GetString() : "";
  out->datatype = DataTypeFromConfig(type);
  if (out->datatype == VRAMD_TYPE_INVALID) {
    *error = label + ": unknown data_type '" + type + "'";
    return false;
  }
  if (!TorchHasType(out->datatype)) {
    *error = label + ": data_type " + type + " is not supported by the pytorch backend "
             "(supported: BOOL, UINT8, INT8, INT16, INT32, INT64, FP16, BF16, FP32, FP64, STRING)";
    return false;
  }
  // The shape the backend sees: vramd applies a `reshape` between the client's `dims` and the
  // backend (runtime/tensor_reshape.h), as Triton does.
  const rapidjson::Value* dims = nullptr;
  std::string field = "dims";
  if (v.HasMember("reshape") && v["reshape"].IsObject() && v["reshape"].HasMember("shape") &&
      v["reshape"]["shape"].IsArray()) {
    dims = &v["reshape"]["shape"];
    field = "reshape.shape";
  } else if (v.HasMember("reshape") && v["reshape"].IsObject()) {
    static const rapidjson::Value kScalar(rapidjson::kArrayType);  // reshape { shape: [] }
    dims = &kScalar;
    field = "reshape.shape";
  } else if (v.HasMember("dims") && v["dims"].IsArray()) {
    dims = &v["dims"];
  }
  if (dims != nullptr) {
    for (const auto& d : dims->GetArray()) {
      if (d.IsInt64()) {
        out->dims.push_back(d.GetInt64());
      } else if (d.IsString() && IsInteger(d.GetString())) {
        // protobuf's JSON may write int64 as strings
        out->dims.push_back(std::strtoll(d.GetString(), nullptr, 10));
      } else {
        *error = label + ": " + field + " must be integers";
        return false;
      }
    }
  }
  out->optional = v.HasMember("optional") && v["optional"].IsBool() && v["optional"].GetBool();
  out->convention_index = ConventionIndex(out->name);
  return true;
}

}  // namespace

std::optional<int> ConventionIndex(const std::string& name) {
  const size_t at = name.rfind("__");
  if (at == std::string::npos || at + 2 == name.size()) return std::nullopt;
  const std::string digits = name.substr(at + 2);
  if (digits.size() > 6 ||
      !std::all_of(digits.begin(), digits.end(), [](unsigned char c) { return std::isdigit(c); })) {
    return std::nullopt;
  }
  return std::stoi(digits);
}

VramdDataType DataTypeFromConfig(const std::string& type) {
  for (const auto& t : kTypes)
    if (type == t.config) return t.type;
  return VRAMD_TYPE_INVALID;
}

const char* DataTypeName(VramdDataType type) {
  for (const auto& t : kTypes)
    if (type == t.type) return t.wire;
  return "INVALID";
}

std::optional<ModelSpec> ParseModelSpec(const char* json, size_t size, std::string* error) {
  // vramd writes this JSON from a validated config, but the backend does not rely on that: the
  // iterative parser does not recurse however deep the text nests, and nothing below walks the
  // document recursively. (The backend links nothing of vramd, so not core/json_parse.h.)
  rapidjson::Document doc;
  doc.Parse<rapidjson::kParseIterativeFlag>(json, size);
  if (doc.HasParseError() || !doc.IsObject()) {
    *error = "the model config JSON vramd passed could not be parsed";
    return std::nullopt;
  }
  ModelSpec spec;
  if (doc.HasMember("name") && doc["name"].IsString()) spec.name = doc["name"].GetString();
  if (doc.HasMember("max_batch_size") && doc["max_batch_size"].IsInt64()) {
    spec.max_batch_size = doc["max_batch_size"].GetInt64();
  }
  for (const char* what : {"input", "output"}) {
    if (!doc.HasMember(what) || !doc[what].IsArray()) continue;
    auto& list = std::string(what) == "input" ? spec.inputs : spec.outputs;
    size_t i = 0;
    for (const auto& v : doc[what].GetArray()) {
      TensorSpec t;
      if (!ParseTensor(v, what, i++, &t, error)) return std::nullopt;
      list.push_back(std::move(t));
    }
  }
  if (spec.inputs.empty()) {
    *error = "the config has no input; the pytorch backend passes inputs to forward()";
    return std::nullopt;
  }
  if (spec.outputs.empty()) {
    *error = "the config has no output; the pytorch backend returns forward()'s results";
    return std::nullopt;
  }
  if (doc.HasMember("default_model_filename") && doc["default_model_filename"].IsString() &&
      doc["default_model_filename"].GetStringLength() > 0) {
    spec.model_filename = doc["default_model_filename"].GetString();
  }
  if (doc.HasMember("parameters") && doc["parameters"].IsObject()) {
    for (const auto& p : doc["parameters"].GetObject()) {
      const std::string key = p.name.GetString();
      std::string value;
      if (p.value.IsObject() && p.value.HasMember("string_value") &&
          p.value["string_value"].IsString()) {
        value = p.value["string_value"].GetString();
      }
      auto flag = [&](bool* target, bool invert) {
        auto b = ParseBool(value);
        if (!b) {
          *error = "parameter " + key + ": '" + value + "' is not true or false";
          return false;
        }
        *target = invert ? !*b : *b;
        return true;
      };
      if (key == "INFERENCE_MODE") {
        if (!flag(&spec.inference_mode, false)) return std::nullopt;
      } else if (key == "DISABLE_OPTIMIZED_EXECUTION") {
        if (!flag(&spec.optimized_execution, true)) return std::nullopt;
      } else if (key == "INTRA_OP_THREAD_COUNT") {
        char* end = nullptr;
        const long n = std::strtol(value.c_str(), &end, 10);
        if (value.empty() || *end != '\0' || n < 0 || n > 4096) {
          *error = "parameter INTRA_OP_THREAD_COUNT: '" + value + "' is not a thread count";
          return std::nullopt;
        }
        if (n > 0) spec.intra_op_threads = static_cast<int>(n);
      } else if (std::find_if(kIgnoredParameters.begin(), kIgnoredParameters.end(),
                              [&](const char* k) { return key == k; }) !=
                 kIgnoredParameters.end()) {
        spec.ignored_parameters.push_back(key);
      }
    }
  }
  return spec;
}

}  // namespace vramd::pytorch
