#include "server/http/stats_routes.h"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <string>
#include <utility>

#include "core/json_write.h"
#include "server/http/http_status.h"
#include "server/http/infer_codec.h"

namespace vramd::http {
namespace {

void WriteDuration(JsonWriter& w, const char* key, const runtime::DurationStat& d) {
  w.Key(key);
  w.StartObject();
  w.Key("count");
  w.Uint64(d.count);
  w.Key("ns");
  w.Uint64(d.ns);
  w.EndObject();
}

void WriteModelStat(JsonWriter& w, const runtime::VersionStatistics& v) {
  const runtime::InferenceStatsSnapshot& s = v.stats;
  w.StartObject();
  w.Key("name");
  WriteJsonString(w, v.model);
  w.Key("version");
  WriteJsonString(w, std::to_string(v.version));
  w.Key("last_inference");
  w.Uint64(s.last_inference_ms);
  w.Key("inference_count");
  w.Uint64(s.inference_count);
  w.Key("execution_count");
  w.Uint64(s.execution_count);

  w.Key("inference_stats");
  w.StartObject();
  WriteDuration(w, "success", s.success);
  WriteDuration(w, "fail", s.fail);
  WriteDuration(w, "queue", s.queue);
  WriteDuration(w, "compute_input", s.compute_input);
  WriteDuration(w, "compute_infer", s.compute_infer);
  WriteDuration(w, "compute_output", s.compute_output);
  WriteDuration(w, "cache_hit", {});   // no response cache
  WriteDuration(w, "cache_miss", {});
  w.EndObject();

  w.Key("response_stats");  // only decoupled models answer with several responses
  w.StartObject();
  w.EndObject();

  w.Key("batch_stats");
  w.StartArray();
  for (const runtime::BatchStat& b : s.batch_stats) {
    w.StartObject();
    w.Key("batch_size");
    w.Uint64(b.batch_size);
    WriteDuration(w, "compute_input", b.compute_input);
    WriteDuration(w, "compute_infer", b.compute_infer);
    WriteDuration(w, "compute_output", b.compute_output);
    w.EndObject();
  }
  w.EndArray();

  w.Key("memory_usage");  // see the header: vramd reports memory in /v2/memory
  w.StartArray();
  w.EndArray();
  w.EndObject();
}

HttpResponse ErrorResponse(const Status& status) {
  HttpResponse r;
  r.status = HttpStatusFor(status.code());
  r.body = EncodeError(status.message());
  return r;
}

}  // namespace

std::string ModelStatsToJson(const std::vector<runtime::VersionStatistics>& versions) {
  rapidjson::StringBuffer sb;
  JsonWriter w(sb);
  w.StartObject();
  w.Key("model_stats");
  w.StartArray();
  for (const auto& v : versions) WriteModelStat(w, v);
  w.EndArray();
  w.EndObject();
  return sb.GetString();
}

HttpResponse ModelStatsResponse(const runtime::ModelManager& manager, std::string_view model,
                                int64_t version) {
  auto stats = runtime::StatisticsOf(manager, model, version);
  if (!stats.ok()) return ErrorResponse(stats.status());
  HttpResponse r;
  r.status = 200;
  r.body = ModelStatsToJson(*stats);
  return r;
}

}  // namespace vramd::http
