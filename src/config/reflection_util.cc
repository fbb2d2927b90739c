#include "config/reflection_util.h"

#include <fmt/format.h>

#include <google/protobuf/descriptor.h>

namespace vramd::config {
namespace {

namespace pb = google::protobuf;

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
      for (int i = 0; i < reflection->FieldSize(message, field); ++i) {
        const pb::Message& entry = reflection->GetRepeatedMessage(message, field, i);
        VRAMD_RETURN_IF_ERROR(CheckValue(entry, value_field, -1,
                                         fmt::format("{}[\"{}\"]", path, MapKeyString(entry))));
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

Status CheckEnumValuesKnown(const pb::Message& message) { return CheckMessage(message, ""); }

}  // namespace vramd::config
