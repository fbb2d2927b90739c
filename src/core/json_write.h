// JsonWriter: how vramd writes a JSON document with rapidjson (replies, reports, configs), and
// the two calls every writer needs that rapidjson spells awkwardly: a string or a key from a
// string_view, length given, so a view that is not NUL-terminated, or holds a NUL, is written
// whole (rapidjson escapes a NUL as \u0000).
//
//   rapidjson::StringBuffer buffer;
//   JsonWriter w(buffer);
//   w.StartObject();
//   WriteJsonKey(w, "name");
//   WriteJsonString(w, model_name);
//   w.EndObject();
//   std::string text(buffer.GetString(), buffer.GetSize());
//
// (The inference response writer appends to a std::string itself, for speed:
// server/http/json_text.h. ParseJson, core/json_parse.h, reads.)
//
// Thread safety: a writer is used by one thread at a time.
#pragma once

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <string_view>

namespace vramd {

using JsonWriter = rapidjson::Writer<rapidjson::StringBuffer>;

inline void WriteJsonString(JsonWriter& w, std::string_view s) {
  w.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
}

inline void WriteJsonKey(JsonWriter& w, std::string_view key) {
  w.Key(key.data(), static_cast<rapidjson::SizeType>(key.size()));
}

}  // namespace vramd
