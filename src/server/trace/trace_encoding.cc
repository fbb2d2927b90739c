#include "server/trace/trace_encoding.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "core/json_write.h"

namespace vramd::trace {
namespace {

// The text of a number or an id, formatted on the stack: the encoder writes several a span,
// hundreds of thousands a second at trace rate 1.
class Text {
 public:
  explicit Text(uint64_t value) : size_(ToChars(value)) {}
  explicit Text(int64_t value) : size_(ToChars(value)) {}
  template <size_t N>
  explicit Text(const std::array<uint8_t, N>& bytes) : size_(2 * N) {
    static_assert(2 * N <= sizeof(text_));
    constexpr char kDigits[] = "0123456789abcdef";  // OTLP JSON: lowercase hex
    for (size_t i = 0; i < N; ++i) {
      text_[2 * i] = kDigits[bytes[i] >> 4];
      text_[2 * i + 1] = kDigits[bytes[i] & 0xF];
    }
  }
  std::string_view view() const { return {text_, size_}; }

 private:
  template <typename Int>
  size_t ToChars(Int value) {
    return static_cast<size_t>(std::to_chars(text_, text_ + sizeof(text_), value).ptr - text_);
  }
  char text_[32];
  size_t size_;
};

template <size_t N>
bool AllZero(const std::array<uint8_t, N>& bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](uint8_t b) { return b == 0; });
}

uint64_t UnixOf(const RequestTrace& trace,
                const std::optional<RequestTrace::Clock::time_point>& at) {
  return at ? trace.UnixNanos(*at) : 0;
}

void WriteStringAttribute(JsonWriter& w, std::string_view key, std::string_view value) {
  w.StartObject();
  WriteJsonKey(w, "key");
  WriteJsonString(w, key);
  WriteJsonKey(w, "value");
  w.StartObject();
  WriteJsonKey(w, "stringValue");
  WriteJsonString(w, value);
  w.EndObject();
  w.EndObject();
}

void WriteIntAttribute(JsonWriter& w, std::string_view key, int64_t value) {
  w.StartObject();
  WriteJsonKey(w, "key");
  WriteJsonString(w, key);
  WriteJsonKey(w, "value");
  w.StartObject();
  WriteJsonKey(w, "intValue");  // int64 as a decimal string, as OTLP JSON writes 64-bit numbers
  WriteJsonString(w, Text(value).view());
  w.EndObject();
  w.EndObject();
}

std::string_view ProtocolName(TraceProtocol protocol) {
  switch (protocol) {
    case TraceProtocol::kHttp: return "http";
    case TraceProtocol::kGrpc: return "grpc";
    case TraceProtocol::kModel: return "model";
  }
  return "unknown";
}

}  // namespace

std::vector<Span> RequestSpans(const RequestTrace& trace) {
  const RequestTrace::Snapshot s = trace.Read();
  auto at = [&](TracePoint p) { return s.points[static_cast<size_t>(p)]; };
  auto first_of = [&](std::initializer_list<TracePoint> points) {
    for (TracePoint p : points) {
      if (at(p)) return UnixOf(trace, at(p));
    }
    return uint64_t{0};
  };
  Span request;
  request.trace_id = trace.trace_id();
  request.span_id = trace.span_id();
  if (trace.parent()) request.parent_span_id = trace.parent()->span_id;
  request.name = "InferRequest";
  request.kind = trace.protocol() == TraceProtocol::kModel ? 1 : 2;  // INTERNAL : SERVER
  request.start_unix_ns = first_of({TracePoint::kReceiveStart, TracePoint::kReceiveEnd,
                                    TracePoint::kRequestStart});
  request.end_unix_ns = first_of({TracePoint::kSendEnd, TracePoint::kSendStart,
                                  TracePoint::kRequestEnd, TracePoint::kComputeEnd});
  if (request.end_unix_ns < request.start_unix_ns) request.end_unix_ns = request.start_unix_ns;
  request.string_attributes = {
      {"model_name", trace.model()},
      {"request_id", s.request_id},
      {"vramd.protocol", std::string(ProtocolName(trace.protocol()))}};
  request.int_attributes = {{"model_version", s.version},
                            {"triton.trace_id", static_cast<int64_t>(trace.id())}};
  for (const auto& [name, value] : s.figures) {
    request.int_attributes.emplace_back(name, static_cast<int64_t>(value));
  }
  for (size_t i = 0; i < kTracePointCount; ++i) {
    if (!s.points[i]) continue;
    request.events.emplace_back(TracePointName(static_cast<TracePoint>(i), trace.protocol()),
                                trace.UnixNanos(*s.points[i]));
  }
  std::sort(request.events.begin(), request.events.end(),
            [](const auto& a, const auto& b) { return a.second < b.second; });
  request.error = s.error;

  std::vector<Span> spans;
  auto child = [&](std::string name, TracePoint from, TracePoint to) {
    if (!at(from) || !at(to)) return;
    Span span;
    span.trace_id = request.trace_id;
    span.span_id = NewSpanId();
    span.parent_span_id = request.span_id;
    span.name = std::move(name);
    span.start_unix_ns = UnixOf(trace, at(from));
    span.end_unix_ns = std::max(span.start_unix_ns, UnixOf(trace, at(to)));
    span.string_attributes = {{"model_name", trace.model()}};
    span.int_attributes = {{"model_version", s.version}};
    spans.push_back(std::move(span));
  };
  child("queue", TracePoint::kQueueStart, TracePoint::kComputeStart);
  child("compute", TracePoint::kComputeStart, TracePoint::kComputeEnd);
  if (!s.error.empty() && !spans.empty()) spans.back().error = s.error;
  spans.insert(spans.begin(), std::move(request));
  return spans;
}

std::vector<Span> LoadSpans(const std::string& model, const runtime::LoadReport& report,
                            std::chrono::steady_clock::time_point steady_now,
                            uint64_t unix_now_ns) {
  auto unix_of = [&](std::chrono::steady_clock::time_point at) -> uint64_t {
    const auto delta =
        std::chrono::duration_cast<std::chrono::nanoseconds>(steady_now - at).count();
    return delta > 0 && static_cast<uint64_t>(delta) > unix_now_ns
               ? 0
               : unix_now_ns - static_cast<uint64_t>(delta);
  };
  Span load;
  load.trace_id = NewTraceId();
  load.span_id = NewSpanId();
  load.name = "load " + model;
  load.start_unix_ns = unix_of(report.started);
  load.end_unix_ns = std::max(
      load.start_unix_ns,
      load.start_unix_ns + static_cast<uint64_t>(report.total_seconds * 1e9));
  std::string versions;
  for (int64_t v : report.versions) versions += (versions.empty() ? "" : ",") + std::to_string(v);
  load.string_attributes = {{"model_name", model},
                            {"vramd.versions", versions},
                            {"vramd.reload_policy", std::string(runtime::ReloadPolicyName(report.policy))},
                            {"vramd.outcome", report.ok ? "ok" : "failed"}};
  int64_t measured = 0;
  for (const auto& [device, bytes] : report.measured) measured += static_cast<int64_t>(bytes);
  load.int_attributes = {{"vramd.memory.measured_bytes", measured}};
  load.error = report.error;
  std::vector<Span> spans{load};
  for (const LoadPhase& phase : report.phases) {
    Span span;
    span.trace_id = load.trace_id;
    span.span_id = NewSpanId();
    span.parent_span_id = load.span_id;
    span.name = phase.name;
    span.start_unix_ns = unix_of(phase.start);
    span.end_unix_ns = std::max(span.start_unix_ns, unix_of(phase.end));
    span.string_attributes = {{"model_name", model}};
    span.int_attributes = {{"vramd.phase.busy_ns", static_cast<int64_t>(phase.seconds * 1e9)},
                           {"vramd.phase.bytes", static_cast<int64_t>(phase.bytes)}};
    spans.push_back(std::move(span));
  }
  return spans;
}

std::vector<Span> RollbackSpans(const runtime::RollbackRecord& record,
                                std::chrono::steady_clock::time_point steady_now,
                                uint64_t unix_now_ns) {
  const auto ago =
      std::chrono::duration_cast<std::chrono::nanoseconds>(steady_now - record.started).count();
  Span span;
  span.trace_id = NewTraceId();
  span.span_id = NewSpanId();
  span.name = "rollback " + record.model;
  span.start_unix_ns = ago > 0 && static_cast<uint64_t>(ago) < unix_now_ns
                           ? unix_now_ns - static_cast<uint64_t>(ago)
                           : unix_now_ns;
  span.end_unix_ns = span.start_unix_ns + static_cast<uint64_t>(record.seconds * 1e9);
  auto join = [](const std::vector<int64_t>& versions) {
    std::string out;
    for (int64_t v : versions) out += (out.empty() ? "" : ",") + std::to_string(v);
    return out;
  };
  span.string_attributes = {{"model_name", record.model},
                            {"vramd.rollback.rule", record.rule},
                            {"vramd.rollback.figures", record.figures},
                            {"vramd.rollback.from_versions", join(record.from)},
                            {"vramd.rollback.to_versions", join(record.to)},
                            {"vramd.rollback.to_model",
                             record.to_model.empty() ? record.model : record.to_model}};
  return {span};
}

std::string EncodeOtlpJson(const std::vector<Span>& spans,
                           const std::vector<std::pair<std::string, std::string>>& resource) {
  rapidjson::StringBuffer buffer;
  JsonWriter w(buffer);
  w.StartObject();
  WriteJsonKey(w, "resourceSpans");
  w.StartArray();
  w.StartObject();
  WriteJsonKey(w, "resource");
  w.StartObject();
  WriteJsonKey(w, "attributes");
  w.StartArray();
  for (const auto& [key, value] : resource) WriteStringAttribute(w, key, value);
  w.EndArray();
  w.EndObject();
  WriteJsonKey(w, "scopeSpans");
  w.StartArray();
  w.StartObject();
  WriteJsonKey(w, "scope");
  w.StartObject();
  WriteJsonKey(w, "name");
  WriteJsonString(w, "vramd");
  w.EndObject();
  WriteJsonKey(w, "spans");
  w.StartArray();
  for (const Span& span : spans) {
    w.StartObject();
    WriteJsonKey(w, "traceId");
    WriteJsonString(w, Text(span.trace_id).view());
    WriteJsonKey(w, "spanId");
    WriteJsonString(w, Text(span.span_id).view());
    if (!AllZero(span.parent_span_id)) {
      WriteJsonKey(w, "parentSpanId");
      WriteJsonString(w, Text(span.parent_span_id).view());
    }
    WriteJsonKey(w, "name");
    WriteJsonString(w, span.name);
    WriteJsonKey(w, "kind");
    w.Int(span.kind);
    WriteJsonKey(w, "startTimeUnixNano");
    WriteJsonString(w, Text(span.start_unix_ns).view());
    WriteJsonKey(w, "endTimeUnixNano");
    WriteJsonString(w, Text(span.end_unix_ns).view());
    WriteJsonKey(w, "attributes");
    w.StartArray();
    for (const auto& [key, value] : span.string_attributes) WriteStringAttribute(w, key, value);
    for (const auto& [key, value] : span.int_attributes) WriteIntAttribute(w, key, value);
    w.EndArray();
    WriteJsonKey(w, "events");
    w.StartArray();
    for (const auto& [name, ns] : span.events) {
      w.StartObject();
      WriteJsonKey(w, "timeUnixNano");
      WriteJsonString(w, Text(ns).view());
      WriteJsonKey(w, "name");
      WriteJsonString(w, name);
      w.EndObject();
    }
    w.EndArray();
    WriteJsonKey(w, "status");
    w.StartObject();
    if (!span.error.empty()) {
      WriteJsonKey(w, "code");
      w.Int(2);  // STATUS_CODE_ERROR
      WriteJsonKey(w, "message");
      WriteJsonString(w, span.error);
    }
    w.EndObject();
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  w.EndArray();
  w.EndObject();
  w.EndArray();
  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
}

std::string EncodeTritonEntries(const RequestTrace& trace) {
  const RequestTrace::Snapshot s = trace.Read();
  rapidjson::StringBuffer buffer;
  JsonWriter w(buffer);
  w.StartObject();
  WriteJsonKey(w, "id");
  w.Uint64(trace.id());
  WriteJsonKey(w, "model_name");
  WriteJsonString(w, trace.model());
  WriteJsonKey(w, "model_version");
  w.Int64(s.version);
  WriteJsonKey(w, "request_id");
  WriteJsonString(w, s.request_id);
  WriteJsonKey(w, "parent_id");
  w.Uint64(trace.parent_id());
  w.EndObject();
  std::string out(buffer.GetString(), buffer.GetSize());

  std::vector<std::pair<std::string_view, uint64_t>> stamps;
  for (size_t i = 0; i < kTracePointCount; ++i) {
    if (!s.points[i]) continue;
    stamps.emplace_back(TracePointName(static_cast<TracePoint>(i), trace.protocol()),
                        RequestTrace::SteadyNanos(*s.points[i]));
  }
  std::stable_sort(stamps.begin(), stamps.end(),
                   [](const auto& a, const auto& b) { return a.second < b.second; });
  buffer.Clear();
  JsonWriter t(buffer);
  t.StartObject();
  WriteJsonKey(t, "id");
  t.Uint64(trace.id());
  WriteJsonKey(t, "timestamps");
  t.StartArray();
  for (const auto& [name, ns] : stamps) {
    t.StartObject();
    WriteJsonKey(t, "name");
    WriteJsonString(t, name);
    WriteJsonKey(t, "ns");
    t.Uint64(ns);
    t.EndObject();
  }
  t.EndArray();
  t.EndObject();
  out += ",";
  out.append(buffer.GetString(), buffer.GetSize());
  return out;
}

}  // namespace vramd::trace
