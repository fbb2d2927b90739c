#include "config/reflection_util.h"

#include <fmt/format.h>

#include <cstdint>
#include <set>
#include <vector>

#include <google/protobuf/descriptor.h>

namespace vramd::config {
namespace {

namespace pb = google::protobuf;

// Well-formed UTF-8: no stray continuation bytes, no overlong forms, no surrogates, at most
// U+10FFFF.
bool IsValidUtf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t extra;
    uint32_t code;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      extra = 1, code = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2, code = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      extra = 3, code = c & 0x07;
    } else {
      return false;
    }
    if (extra >= s.size() - i) return false;  // truncated sequence
    for (size_t k = 1; k <= extra; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      code = (code << 6) | (cc & 0x3F);
    }
    static constexpr uint32_t kMinForLength[] = {0, 0x80, 0x800, 0x10000};
    if (code < kMinForLength[extra] || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) {
      return false;
    }
    i += extra + 1;
  }
  return true;
}

Status CheckUtf8(const std::string& value, const std::string& path) {
  if (IsValidUtf8(value)) return Status::Ok();
  return Status::InvalidArgument(fmt::format("{}: not valid UTF-8", path));
}

Status CheckEnumNumber(const pb::FieldDescriptor* field, int number, const std::string& path) {
  if (field->enum_type()->FindValueByNumber(number) != nullptr) return Status::Ok();
  return Status::InvalidArgument(fmt::format("{}: {} is not a value of {}", path, number,
                                             field->enum_type()->full_name()));
}

Status CheckMessage(const pb::Message& message, const std::string& prefix);

// Checks element `index` of a repeated field, or the singular field when index < 0.
Status CheckValue(const pb::Message& message, const pb::FieldDescriptor* field, int index,
                  const std::string& path) {
  const pb::Reflection* reflection = message.GetReflection();
  if (field->cpp_type() == pb::FieldDescriptor::CPPTYPE_ENUM) {
    int number = index < 0 ? reflection->GetEnumValue(message, field)
                           : reflection->GetRepeatedEnumValue(message, field, index);
    return CheckEnumNumber(field, number, path);
  }
  if (field->type() == pb::FieldDescriptor::TYPE_STRING) {
    std::string scratch;
    const std::string& value =
        index < 0 ? reflection->GetStringReference(message, field, &scratch)
                  : reflection->GetRepeatedStringReference(message, field, index, &scratch);
    return CheckUtf8(value, path);
  }
  if (field->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
    const pb::Message& sub = index < 0 ? reflection->GetMessage(message, field)
                                       : reflection->GetRepeatedMessage(message, field, index);
    return CheckMessage(sub, path + ".");
  }
  return Status::Ok();
}

Status CheckMessage(const pb::Message& message, const std::string& prefix) {
  const pb::Reflection* reflection = message.GetReflection();
  std::vector<const pb::FieldDescriptor*> fields;
  reflection->ListFields(message, &fields);  // only set fields: enough to find bad values
  for (const pb::FieldDescriptor* field : fields) {
    std::string path = prefix + field->name();
    if (field->is_map()) {
      const pb::FieldDescriptor* value_field = field->message_type()->map_value();
      // The text format keeps every entry it reads, so a key written twice stays twice here
      // (the map API would keep the last): printed as JSON, it would be a duplicate name.
      std::set<std::string> keys;
      for (int i = 0; i < reflection->FieldSize(message, field); ++i) {
        const pb::Message& entry = reflection->GetRepeatedMessage(message, field, i);
        const std::string key = MapKeyString(entry);
        VRAMD_RETURN_IF_ERROR(CheckUtf8(key, path + " key"));
        if (!keys.insert(key).second) {
          return Status::InvalidArgument(fmt::format("{}: key \"{}\" is given twice", path, key));
        }
        VRAMD_RETURN_IF_ERROR(
            CheckValue(entry, value_field, -1, fmt::format("{}[\"{}\"]", path, key)));
      }
    } else if (field->is_repeated()) {
      for (int i = 0; i < reflection->FieldSize(message, field); ++i) {
        VRAMD_RETURN_IF_ERROR(CheckValue(message, field, i, fmt::format("{}[{}]", path, i)));
      }
    } else {
      VRAMD_RETURN_IF_ERROR(CheckValue(message, field, -1, path));
    }
  }
  return Status::Ok();
}

}  // namespace

std::string MapKeyString(const pb::Message& map_entry) {
  const pb::Reflection* reflection = map_entry.GetReflection();
  const pb::FieldDescriptor* key = map_entry.GetDescriptor()->map_key();
  switch (key->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_STRING:
      return reflection->GetString(map_entry, key);
    case pb::FieldDescriptor::CPPTYPE_INT32:
      return std::to_string(reflection->GetInt32(map_entry, key));
    case pb::FieldDescriptor::CPPTYPE_INT64:
      return std::to_string(reflection->GetInt64(map_entry, key));
    case pb::FieldDescriptor::CPPTYPE_UINT32:
      return std::to_string(reflection->GetUInt32(map_entry, key));
    case pb::FieldDescriptor::CPPTYPE_UINT64:
      return std::to_string(reflection->GetUInt64(map_entry, key));
    case pb::FieldDescriptor::CPPTYPE_BOOL:
      return reflection->GetBool(map_entry, key) ? "true" : "false";
    default:
      return "";  // protobuf allows no other key types
  }
}

Status CheckFieldValues(const pb::Message& message) { return CheckMessage(message, ""); }

}  // namespace vramd::config
