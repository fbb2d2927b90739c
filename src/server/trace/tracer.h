// Tracer: Triton's trace extension and its OpenTelemetry mode (docs/tracing.md).
//
// The request path: a front end asks Start for each inference request. It returns null unless
// the settings sample the request (trace_settings.h), so an untraced request costs one atomic
// read while tracing is off. A traced request carries its RequestTrace through the runtime,
// which stamps it; the front end stamps the reply and calls Finish.
//
// Output, on the tracer's own thread (the request path never writes a file or a socket):
//   - triton mode: Triton's JSON trace file, `trace_file` (at exit, log_frequency 0) or
//     `trace_file.<n>` every log_frequency traces;
//   - opentelemetry mode: OTLP/HTTP with JSON encoding, POSTed to `url` in batches of up to
//     bsp_max_export_batch_size spans at least every bsp_schedule_delay ms; beyond
//     bsp_max_queue_size waiting spans, new ones are dropped and counted. Loads and reloads
//     (LoadFinished) are exported as spans too.
// The destructor writes and exports what is left.
//
// Thread safety: every method from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "core/mutex.h"
#include "core/request_trace.h"
#include "core/status.h"
#include "runtime/model_manager.h"
#include "server/trace/trace_encoding.h"
#include "server/trace/trace_settings.h"

namespace vramd::trace {

struct TracerOptions {
  TraceMode mode = TraceMode::kTriton;
  TraceSettings::Values global;
  // opentelemetry mode
  std::string url = "http://localhost:4318/v1/traces";
  std::vector<std::pair<std::string, std::string>> resource = {{"service.name", "vramd"}};
  size_t max_queue_size = 2048;
  size_t max_export_batch_size = 512;
  std::chrono::milliseconds schedule_delay{5000};

  // From Triton's flags: each --trace-config value in order, then the deprecated single
  // flags where given (empty: not given). InvalidArgument names the flag and the value.
  static Result<TracerOptions> FromFlags(const std::vector<std::string>& trace_config);
};

class Tracer final : public ChildTracer {
 public:
  explicit Tracer(TracerOptions options);
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  TraceSettings& settings() { return settings_; }
  const TracerOptions& options() const { return options_; }

  // A trace for this request to `model`, or null when it is not sampled. `traceparent`: the
  // W3C header's value, or empty; a malformed one is ignored (the trace starts its own).
  std::shared_ptr<RequestTrace> Start(std::string_view model, TraceProtocol protocol,
                                      std::string_view traceparent,
                                      RequestTrace::Clock::time_point received);

  // A call a model makes on behalf of a traced request (ChildTracer): traced whenever the level
  // is on for `model`, whatever the rate and count, as a child of the caller's trace. In
  // opentelemetry mode its span's parent is the caller's request span; in triton mode its
  // entry's parent_id is the caller's id (a triton-mode trace's span id is its id, big-endian:
  // the trace file has no span ids, so the context can carry the number).
  std::shared_ptr<RequestTrace> StartChild(std::string_view model,
                                           std::string_view traceparent) override;

  // The reply has been sent (or, for a model's call, handed back): hands the trace to the
  // writer thread.
  void Finish(std::shared_ptr<RequestTrace> trace) override EXCLUDES(mu_);

  // A load or reload ended (ModelManager::Options::load_finished): its spans, in
  // opentelemetry mode while the global level is on.
  void LoadFinished(const std::string& model, const runtime::LoadReport& report) EXCLUDES(mu_);

  struct Counts {
    uint64_t traces = 0;          // finished traces taken by the writer
    uint64_t spans_exported = 0;  // opentelemetry: accepted by the collector
    uint64_t spans_dropped = 0;   // the queue was full, or the export failed
    uint64_t export_failures = 0;
    uint64_t files_written = 0;   // triton mode
  };
  Counts counts() const EXCLUDES(mu_);

  // A rollback (ModelManager::Options::rolled_back): its span, as LoadFinished's.
  void RolledBack(const runtime::RollbackRecord& record) EXCLUDES(mu_);

 private:
  struct Pending {
    std::shared_ptr<RequestTrace> trace;  // null for a load's spans
    std::vector<Span> spans;
  };
  struct TraceFile {
    std::string entries;  // comma-separated, without the array's brackets
    uint64_t count = 0;
    uint64_t index = 0;
    uint64_t log_frequency = 0;
  };
  // A trace numbered next; in triton mode its span id is its number (StartChild).
  std::shared_ptr<RequestTrace> NewTrace(std::string_view model, TraceProtocol protocol,
                                         std::optional<TraceContext> parent,
                                         uint64_t parent_id = 0);
  // Queues a lifecycle trace's spans, in opentelemetry mode while the global level is on.
  void QueueLifecycle(std::vector<Span> spans) EXCLUDES(mu_);
  void Run(std::stop_token stop) EXCLUDES(mu_);
  void Write(std::vector<Pending> batch) EXCLUDES(mu_);
  void WriteTritonFile(const std::string& path, TraceFile* file, bool at_exit) EXCLUDES(mu_);
  void Export(const std::vector<Span>& spans) EXCLUDES(mu_);

  const TracerOptions options_;
  TraceSettings settings_;
  std::atomic<uint64_t> next_id_{1};
  mutable Mutex mu_;
  std::condition_variable_any wake_;
  std::deque<Pending> queue_ GUARDED_BY(mu_);
  size_t queued_spans_ GUARDED_BY(mu_) = 0;
  Counts counts_ GUARDED_BY(mu_);
  // The writer thread's alone (no lock).
  std::map<std::string, TraceFile> files_;
  bool warned_no_file_ = false;
  std::jthread writer_;  // last: stops and joins first
};

}  // namespace vramd::trace
