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

// Walks `message` (sub-messages, repeated fields and maps included) and fails with
// InvalidArgument naming the first field whose value vramd cannot use:
//  - an enum number the enum does not declare: "input[0].data_type: 99 is not a value of
//    vramd.config.DataType". Proto3 enums are open, so text format (`data_type: 99`) and JSON
//    accept numbers the .proto does not list.
//  - a string (or string map key) that is not valid UTF-8: "name: not valid UTF-8". The text
//    format accepts `name: "\xff"`; such a config could not be answered as JSON.
//  - a map key given twice: 'model_warmup[0].inputs: key "INPUT1" is given twice'. The text
//    format accepts it (protobuf says parsers may); its JSON would repeat the name.
Status CheckFieldValues(const google::protobuf::Message& message);

}  // namespace vramd::config
