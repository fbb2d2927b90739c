// Small protobuf reflection helpers shared by the config parser and the config JSON printer.
//
// Thread safety: free functions over const messages; safe from any thread.
#pragma once

#include <string>

#include <google/protobuf/message.h>

#include "core/status.h"

namespace vramd::config {

// The key of a map entry message (field 1 of a map<K, V> entry) as text: string keys as they
// are, integer keys in decimal, bool keys "true"/"false". This is also their JSON form.
std::string MapKeyString(const google::protobuf::Message& map_entry);

// Walks `message` (sub-messages, repeated fields and map values included) and fails with
// InvalidArgument naming the first enum field whose value is not one the enum declares, e.g.
// "input[0].data_type: 99 is not a value of vramd.config.DataType". Proto3 enums are open, so
// both text format (`data_type: 99`) and JSON accept numbers the .proto does not list; vramd
// treats them as errors.
Status CheckEnumValuesKnown(const google::protobuf::Message& message);

}  // namespace vramd::config
