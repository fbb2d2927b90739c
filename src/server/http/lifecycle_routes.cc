#include "server/http/lifecycle_routes.h"

#include <fmt/format.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <chrono>
#include <string>

#include "core/json_write.h"
#include "server/http/infer_codec.h"

namespace vramd::http {
namespace {

void WriteEpochMs(JsonWriter& w, std::chrono::system_clock::time_point at) {
  w.Int64(std::chrono::duration_cast<std::chrono::milliseconds>(at.time_since_epoch()).count());
}

void WriteVersions(JsonWriter& w, const std::vector<int64_t>& versions) {
  w.StartArray();
  for (int64_t v : versions) WriteJsonString(w, std::to_string(v));  // strings, as Triton's index
  w.EndArray();
}

void WriteDeviceBytes(JsonWriter& w, const runtime::DeviceBytes& bytes) {
  w.StartObject();
  for (const auto& [device, n] : bytes) {
    w.Key(device.c_str());
    w.Int64(n);
  }
  w.EndObject();
}

void WriteLoadReport(JsonWriter& w, const runtime::LoadReport& load) {
  w.StartObject();
  w.Key("ok");
  w.Bool(load.ok);
  w.Key("error");
  WriteJsonString(w, load.error);
  w.Key("versions");
  WriteVersions(w, load.versions);
  w.Key("policy");
  WriteJsonString(w, runtime::ReloadPolicyName(load.policy));
  w.Key("policy_reason");
  WriteJsonString(w, load.policy_reason);
  w.Key("predicted_bytes");
  WriteDeviceBytes(w, load.predicted.bytes);
  w.Key("predicted_from");
  WriteJsonString(w, load.predicted.source);
  w.Key("measured_bytes");
  WriteDeviceBytes(w, load.measured);
  w.Key("phases");
  w.StartArray();
  for (const auto& phase : load.phases) {
    w.StartObject();
    w.Key("name");
    WriteJsonString(w, phase.name);
    w.Key("seconds");
    w.Double(phase.seconds);
    w.Key("bytes");
    w.Uint64(phase.bytes);
    w.EndObject();
  }
  w.EndArray();
  w.Key("total_seconds");
  w.Double(load.total_seconds);
  w.Key("finished_ms");
  WriteEpochMs(w, load.finished);
  w.EndObject();
}

}  // namespace

HttpResponse ModelLifecycleResponse(const runtime::ModelManager& manager, std::string_view model) {
  HttpResponse r;
  auto view = manager.Lifecycle(model);
  if (!view) {
    r.status = 404;
    r.body = EncodeError(fmt::format("Request for unknown model: '{}' is not found", model));
    return r;
  }
  rapidjson::StringBuffer sb;
  JsonWriter w(sb);
  w.StartObject();
  w.Key("name");
  WriteJsonString(w, view->name);
  w.Key("state");
  WriteJsonString(w, runtime::LifecycleStateName(view->state));
  w.Key("reason");
  WriteJsonString(w, view->reason);
  w.Key("serving");
  WriteVersions(w, view->serving);
  w.Key("held");
  w.Bool(view->held);
  w.Key("rollback_kept");
  WriteVersions(w, view->rollback_kept);
  w.Key("rollback_kept_asleep");
  WriteVersions(w, view->rollback_kept_asleep);
  w.Key("rollback_reload");
  WriteVersions(w, view->rollback_reload);
  w.Key("rollback_fallback");
  WriteJsonString(w, view->rollback_fallback);
  w.Key("served_by");
  WriteJsonString(w, view->served_by);
  w.Key("history");
  w.StartArray();
  for (const auto& t : view->history) {
    w.StartObject();
    w.Key("from");
    WriteJsonString(w, runtime::LifecycleStateName(t.from));
    w.Key("to");
    WriteJsonString(w, runtime::LifecycleStateName(t.to));
    w.Key("reason");
    WriteJsonString(w, t.reason);
    w.Key("at_ms");
    WriteEpochMs(w, t.at);
    w.EndObject();
  }
  w.EndArray();
  w.Key("last_load");
  if (view->last_load) {
    WriteLoadReport(w, *view->last_load);
  } else {
    w.Null();
  }
  w.EndObject();
  r.status = 200;
  r.body = sb.GetString();
  return r;
}

}  // namespace vramd::http
