// How a finished trace is written out: as entries of Triton's trace file (a JSON array,
// docs/tracing.md) or as OpenTelemetry spans in OTLP/HTTP's JSON encoding
// (https://opentelemetry.io/docs/specs/otlp/: ids in lowercase hex, times as decimal strings of
// Unix nanoseconds, span kind as its number).
//
// A request's spans: the request itself (kind SERVER; from receive start to send end, parented
// to the caller's span when a traceparent came), and below it "queue" (queue start to compute
// start) and "compute" (compute start to end). Triton's timestamp names are events of the
// request span; the model, version, request id and the runtime's memory figures its attributes.
// A load's spans: "load <model>" with one child per phase (load_timing.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/request_trace.h"
#include "runtime/model_manager.h"

namespace vramd::trace {

// One span, ready to encode.
struct Span {
  std::array<uint8_t, 16> trace_id{};
  std::array<uint8_t, 8> span_id{};
  std::array<uint8_t, 8> parent_span_id{};  // all zero: a root span
  std::string name;
  int kind = 1;  // 1 INTERNAL, 2 SERVER
  uint64_t start_unix_ns = 0, end_unix_ns = 0;
  // Keys and event names are static text (literals, TracePointName, a figure's name): a
  // traced request pays no allocation for them.
  std::vector<std::pair<std::string_view, std::string>> string_attributes;
  std::vector<std::pair<std::string_view, int64_t>> int_attributes;
  std::vector<std::pair<std::string_view, uint64_t>> events;  // name, Unix ns
  std::string error;  // empty: status unset (OK)
};

// The spans of one request's trace.
std::vector<Span> RequestSpans(const RequestTrace& trace);

// The spans of one load or reload: `steady_now` and `unix_now_ns` read together map the
// report's steady times to Unix time.
std::vector<Span> LoadSpans(const std::string& model, const runtime::LoadReport& report,
                            std::chrono::steady_clock::time_point steady_now, uint64_t unix_now_ns);

// The span of one rollback: "rollback <model>", with the rule, its figures and the versions.
std::vector<Span> RollbackSpans(const runtime::RollbackRecord& record,
                                std::chrono::steady_clock::time_point steady_now,
                                uint64_t unix_now_ns);

// An ExportTraceServiceRequest in OTLP JSON: one resource with `resource` attributes, one scope.
std::string EncodeOtlpJson(const std::vector<Span>& spans,
                           const std::vector<std::pair<std::string, std::string>>& resource);

// One trace's entries for Triton's trace file, without the enclosing array's brackets: the
// model entry and the timestamps entry, comma-separated.
std::string EncodeTritonEntries(const RequestTrace& trace);

}  // namespace vramd::trace
