#include "server/metrics/lifecycle_text.h"

#include <fmt/format.h>
#include <rapidjson/document.h>

#include <ctime>
#include <string>
#include <vector>

#include "core/json_parse.h"
#include "server/metrics/memory_report_text.h"

namespace vramd::metrics {
namespace {

using Value = rapidjson::Value;

std::string Str(const Value& object, const char* key) {
  auto it = object.FindMember(key);
  return it != object.MemberEnd() && it->value.IsString() ? it->value.GetString() : "";
}

double Num(const Value& object, const char* key) {
  auto it = object.FindMember(key);
  return it != object.MemberEnd() && it->value.IsNumber() ? it->value.GetDouble() : 0.0;
}

std::string Versions(const Value& object, const char* key) {
  auto it = object.FindMember(key);
  if (it == object.MemberEnd() || !it->value.IsArray() || it->value.Empty()) return "none";
  std::vector<std::string> out;
  for (const auto& v : it->value.GetArray()) out.push_back(v.IsString() ? v.GetString() : "?");
  return fmt::format("{}", fmt::join(out, ", "));
}

std::string DeviceBytes(const Value& object, const char* key) {
  auto it = object.FindMember(key);
  if (it == object.MemberEnd() || !it->value.IsObject() || it->value.ObjectEmpty()) return "-";
  std::vector<std::string> out;
  for (const auto& m : it->value.GetObject()) {
    out.push_back(fmt::format("{} {}", m.name.GetString(),
                              HumanBytes(m.value.IsInt64() ? m.value.GetInt64() : 0)));
  }
  return fmt::format("{}", fmt::join(out, ", "));
}

std::string Clock(int64_t epoch_ms) {
  const std::time_t t = static_cast<std::time_t>(epoch_ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%H:%M:%S", &tm);
  return fmt::format("{}.{:03d}Z", buf, static_cast<int>(epoch_ms % 1000));
}

}  // namespace

Result<std::string> RenderLifecycleText(std::string_view json, size_t history_rows) {
  // vramctl's HTTP client already bounds the answer at 256 MiB; the depth limit still applies.
  VRAMD_ASSIGN_OR_RETURN(const rapidjson::Document doc,
                         ParseJson(json, "the lifecycle answer", {.max_bytes = size_t{256} << 20}));
  if (!doc.IsObject()) return Status::InvalidArgument("the lifecycle answer is not a JSON object");
  std::string out = fmt::format("model '{}': {}", Str(doc, "name"), Str(doc, "state"));
  if (!Str(doc, "reason").empty()) out += fmt::format(" ({})", Str(doc, "reason"));
  out += fmt::format("\n  serving versions: {}\n", Versions(doc, "serving"));

  auto last = doc.FindMember("last_load");
  if (last != doc.MemberEnd() && last->value.IsObject()) {
    const Value& load = last->value;
    const bool ok = load.HasMember("ok") && load["ok"].IsBool() && load["ok"].GetBool();
    out += fmt::format("  last load: versions {}, {}, {:.3f} s, {}\n", Versions(load, "versions"),
                       ok ? "succeeded" : "failed: " + Str(load, "error"),
                       Num(load, "total_seconds"), Str(load, "policy"));
    if (!Str(load, "policy_reason").empty()) {
      out += fmt::format("    why: {}\n", Str(load, "policy_reason"));
    }
    out += fmt::format("    footprint predicted: {} (from {})\n", DeviceBytes(load, "predicted_bytes"),
                       Str(load, "predicted_from"));
    out += fmt::format("    footprint measured:  {}\n", DeviceBytes(load, "measured_bytes"));
    auto phases = load.FindMember("phases");
    if (phases != load.MemberEnd() && phases->value.IsArray()) {
      for (const auto& p : phases->value.GetArray()) {
        if (!p.IsObject()) continue;
        const double seconds = Num(p, "seconds");
        const double bytes = Num(p, "bytes");
        std::string rate;
        if (bytes > 0) {
          rate = fmt::format("  {}", HumanBytes(static_cast<int64_t>(bytes)));
          if (seconds > 0) rate += fmt::format(", {:.1f} GB/s", bytes / seconds / 1e9);
        }
        out += fmt::format("    {:<13} {:>9.3f} s{}\n", Str(p, "name"), seconds, rate);
      }
    }
  } else {
    out += "  last load: none\n";
  }

  auto history = doc.FindMember("history");
  if (history != doc.MemberEnd() && history->value.IsArray() && !history->value.Empty()) {
    const auto& rows = history->value;
    const size_t first = rows.Size() > history_rows ? rows.Size() - history_rows : 0;
    out += fmt::format("  transitions (last {} of {}):\n", rows.Size() - first, rows.Size());
    for (size_t i = first; i < rows.Size(); ++i) {
      const Value& t = rows[static_cast<rapidjson::SizeType>(i)];
      if (!t.IsObject()) continue;
      const auto at = t.HasMember("at_ms") && t["at_ms"].IsInt64() ? t["at_ms"].GetInt64() : 0;
      out += fmt::format("    {} {} -> {}{}\n", Clock(at), Str(t, "from"), Str(t, "to"),
                         Str(t, "reason").empty() ? "" : ": " + Str(t, "reason"));
    }
  }
  return out;
}

}  // namespace vramd::metrics
