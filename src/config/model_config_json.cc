#include "config/model_config_json.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <utility>
#include <vector>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/util/json_util.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "config/model_config_parser.h"
#include "config/reflection_util.h"
#include "core/json_parse.h"
#include "core/json_write.h"

namespace vramd::config {
namespace {

namespace pb = google::protobuf;
// ---- printing ---------------------------------------------------------------------------------

std::string Base64(const std::string& bytes) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t chunk = static_cast<uint8_t>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) chunk |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) chunk |= static_cast<uint8_t>(bytes[i + 2]);
    out += kAlphabet[(chunk >> 18) & 63];
    out += kAlphabet[(chunk >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(chunk >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[chunk & 63] : '=';
  }
  return out;
}

// Floating point the way protobuf's JSON printer writes it: shortest round-trip form, and the
// strings "NaN", "Infinity", "-Infinity" for what JSON numbers cannot hold.
template <typename Float>
void WriteFloat(Float value, JsonWriter* w) {
  if (std::isnan(value)) return WriteJsonString(*w, "NaN");
  if (std::isinf(value)) return WriteJsonString(*w, value > 0 ? "Infinity" : "-Infinity");
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value);
  w->RawValue(buf, static_cast<size_t>(end - buf), rapidjson::kNumberType);
}

void WriteMessage(const pb::Message& message, JsonWriter* w);

// Writes element `index` of a repeated field, or the singular field when index < 0.
void WriteValue(const pb::Message& m, const pb::FieldDescriptor* f, int index, JsonWriter* w) {
  const pb::Reflection* r = m.GetReflection();
  const bool rep = index >= 0;
  switch (f->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_INT32:
      w->Int(rep ? r->GetRepeatedInt32(m, f, index) : r->GetInt32(m, f));
      break;
    case pb::FieldDescriptor::CPPTYPE_INT64:
      w->Int64(rep ? r->GetRepeatedInt64(m, f, index) : r->GetInt64(m, f));
      break;
    case pb::FieldDescriptor::CPPTYPE_UINT32:
      w->Uint(rep ? r->GetRepeatedUInt32(m, f, index) : r->GetUInt32(m, f));
      break;
    case pb::FieldDescriptor::CPPTYPE_UINT64:
      w->Uint64(rep ? r->GetRepeatedUInt64(m, f, index) : r->GetUInt64(m, f));
      break;
    case pb::FieldDescriptor::CPPTYPE_FLOAT:
      WriteFloat(rep ? r->GetRepeatedFloat(m, f, index) : r->GetFloat(m, f), w);
      break;
    case pb::FieldDescriptor::CPPTYPE_DOUBLE:
      WriteFloat(rep ? r->GetRepeatedDouble(m, f, index) : r->GetDouble(m, f), w);
      break;
    case pb::FieldDescriptor::CPPTYPE_BOOL:
      w->Bool(rep ? r->GetRepeatedBool(m, f, index) : r->GetBool(m, f));
      break;
    case pb::FieldDescriptor::CPPTYPE_STRING: {
      std::string s = rep ? r->GetRepeatedString(m, f, index) : r->GetString(m, f);
      WriteJsonString(*w, f->type() == pb::FieldDescriptor::TYPE_BYTES ? Base64(s) : s);
      break;
    }
    case pb::FieldDescriptor::CPPTYPE_ENUM: {
      int number = rep ? r->GetRepeatedEnumValue(m, f, index) : r->GetEnumValue(m, f);
      const pb::EnumValueDescriptor* value = f->enum_type()->FindValueByNumber(number);
      if (value != nullptr) {
        WriteJsonString(*w, value->name());
      } else {
        w->Int(number);  // an open enum's unknown value, as protobuf prints it
      }
      break;
    }
    case pb::FieldDescriptor::CPPTYPE_MESSAGE:
      WriteMessage(rep ? r->GetRepeatedMessage(m, f, index) : r->GetMessage(m, f), w);
      break;
  }
}

// A map as a JSON object with keys in order (numerically for integer keys), so output is stable.
void WriteMap(const pb::Message& m, const pb::FieldDescriptor* f, JsonWriter* w) {
  const pb::Reflection* r = m.GetReflection();
  const pb::FieldDescriptor* key_field = f->message_type()->map_key();
  const pb::FieldDescriptor* value_field = f->message_type()->map_value();
  struct Entry {
    std::string key;
    const pb::Message* message;
  };
  std::vector<Entry> entries;
  for (int i = 0; i < r->FieldSize(m, f); ++i) {
    const pb::Message& entry = r->GetRepeatedMessage(m, f, i);
    entries.push_back({MapKeyString(entry), &entry});
  }
  const bool numeric = key_field->cpp_type() != pb::FieldDescriptor::CPPTYPE_STRING &&
                       key_field->cpp_type() != pb::FieldDescriptor::CPPTYPE_BOOL;
  std::sort(entries.begin(), entries.end(), [numeric](const Entry& a, const Entry& b) {
    if (!numeric) return a.key < b.key;
    // Decimal strings: negatives first; then by magnitude, which is length, then text.
    const bool a_neg = a.key[0] == '-', b_neg = b.key[0] == '-';
    if (a_neg != b_neg) return a_neg;
    auto magnitude_less = [](const std::string& x, const std::string& y) {
      return x.size() != y.size() ? x.size() < y.size() : x < y;
    };
    return a_neg ? magnitude_less(b.key, a.key) : magnitude_less(a.key, b.key);
  });
  w->StartObject();
  for (const Entry& entry : entries) {
    WriteJsonString(*w, entry.key);
    WriteValue(*entry.message, value_field, -1, w);
  }
  w->EndObject();
}

// Every field in declaration order, defaults included; fields with presence (oneof members,
// singular messages) only when set.
void WriteMessage(const pb::Message& message, JsonWriter* w) {
  const pb::Descriptor* descriptor = message.GetDescriptor();
  const pb::Reflection* r = message.GetReflection();
  w->StartObject();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const pb::FieldDescriptor* f = descriptor->field(i);
    if (!f->is_repeated() && f->has_presence() && !r->HasField(message, f)) continue;
    WriteJsonString(*w, f->name());
    if (f->is_map()) {
      WriteMap(message, f, w);
    } else if (f->is_repeated()) {
      w->StartArray();
      for (int j = 0; j < r->FieldSize(message, f); ++j) WriteValue(message, f, j, w);
      w->EndArray();
    } else {
      WriteValue(message, f, -1, w);
    }
  }
  w->EndObject();
}

// ---- parsing ----------------------------------------------------------------------------------

// The field a JSON key names: its proto name or its JSON (lowerCamel) name, as protobuf accepts.
const pb::FieldDescriptor* FindJsonField(const pb::Descriptor* d, const std::string& key) {
  const pb::FieldDescriptor* f = d->FindFieldByName(key);
  if (f != nullptr) return f;
  for (int i = 0; i < d->field_count(); ++i) {
    if (d->field(i)->json_name() == key) return d->field(i);
  }
  return nullptr;
}

Status CheckJsonObject(const rapidjson::Value& object, const pb::Descriptor* d,
                       const std::string& prefix);

// Checks one JSON value for the (non-repeated view of) field f.
Status CheckJsonValue(const rapidjson::Value& value, const pb::FieldDescriptor* f,
                      const std::string& path) {
  if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_ENUM && value.IsString()) {
    std::string name(value.GetString(), value.GetStringLength());
    if (f->enum_type()->FindValueByName(name) == nullptr) {
      return Status::InvalidArgument(
          fmt::format("{}: \"{}\" is not a value of {}", path, name, f->enum_type()->full_name()));
    }
  }
  if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE && value.IsObject()) {
    return CheckJsonObject(value, f->message_type(), path + ".");
  }
  return Status::Ok();
}

// With ignore_unknown_fields, protobuf's JSON parser also drops enum names it does not know
// (the field keeps its default, e.g. KIND_AUTO). vramd rejects them, so they are found first.
// Anything else malformed is left for protobuf's parser to report.
Status CheckJsonObject(const rapidjson::Value& object, const pb::Descriptor* d,
                       const std::string& prefix) {
  for (auto it = object.MemberBegin(); it != object.MemberEnd(); ++it) {
    std::string key(it->name.GetString(), it->name.GetStringLength());
    const pb::FieldDescriptor* f = FindJsonField(d, key);
    if (f == nullptr) continue;  // other unknown fields are ignored
    const rapidjson::Value& value = it->value;
    std::string path = prefix + f->name();
    if (f->is_map() && value.IsObject()) {
      for (auto e = value.MemberBegin(); e != value.MemberEnd(); ++e) {
        std::string map_key(e->name.GetString(), e->name.GetStringLength());
        VRAMD_RETURN_IF_ERROR(CheckJsonValue(e->value, f->message_type()->map_value(),
                                             fmt::format("{}[\"{}\"]", path, map_key)));
      }
    } else if (f->is_repeated() && value.IsArray()) {
      for (rapidjson::SizeType i = 0; i < value.Size(); ++i) {
        VRAMD_RETURN_IF_ERROR(CheckJsonValue(value[i], f, fmt::format("{}[{}]", path, i)));
      }
    } else {
      VRAMD_RETURN_IF_ERROR(CheckJsonValue(value, f, path));
    }
  }
  return Status::Ok();
}

}  // namespace

std::string ModelConfigToJson(const ModelConfig& config) {
  rapidjson::StringBuffer buffer;
  JsonWriter writer(buffer);
  WriteMessage(config, &writer);
  return std::string(buffer.GetString(), buffer.GetSize());
}

Result<ModelConfig> ModelConfigFromJson(std::string_view json) {
  // The depth bound also bounds CheckJsonObject's recursion and protobuf's, below.
  VRAMD_ASSIGN_OR_RETURN(const rapidjson::Document document,
                         ParseJson(json, "model config JSON"));
  if (!document.IsObject()) {
    return Status::InvalidArgument("model config JSON must be an object");
  }
  Status values = CheckJsonObject(document, ModelConfig::descriptor(), "");
  if (!values.ok()) return values.WithContext("model config JSON");

  ModelConfig config;
  pb::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  auto status = pb::util::JsonStringToMessage(pb::StringPiece(json.data(), json.size()), &config,
                                              options);
  if (!status.ok()) {
    return Status::InvalidArgument(
        fmt::format("model config JSON does not match ModelConfig: {}",
                    std::string(status.message().data(), status.message().size())));
  }
  // Ignored means not kept: protobuf 3.21's parser, skipping an unknown key whose value is an
  // object inside a repeated message, leaves an empty unknown field behind
  // ({"model_warmup":[{"":{}}]} gave model_warmup[0] an unknown field 16), which ToJson cannot
  // write, so the config no longer read back as itself.
  config.DiscardUnknownFields();
  values = CheckFieldValues(config);
  if (!values.ok()) return values.WithContext("model config JSON");
  return config;
}

}  // namespace vramd::config
