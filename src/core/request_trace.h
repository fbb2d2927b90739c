// RequestTrace: the record of one traced inference request (Triton's trace extension, exported
// as Triton's JSON or as OpenTelemetry spans: server/trace/tracer.h). A front end makes one for
// a sampled request and puts it in InferRequest::trace; the runtime stamps the times it alone
// knows (arrival at the model, queue, compute) and the figures it measured; the front end
// stamps its own (receive, send) and hands the record to the tracer when the reply is sent.
// Untraced requests carry a null pointer, and nothing on the request path looks further.
//
// Times are steady-clock nanoseconds (Triton's trace file reports those); the record also keeps
// the wall clock at its creation, from which the OpenTelemetry export derives Unix times.
//
// Thread safety: stamped from the front end's and an instance thread in turn, and read by the
// tracer's thread; every method is safe from any thread. Stamps are atomics (a traced request
// at rate 1 takes a dozen of them); the rest, set once or twice, takes a mutex.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/mutex.h"

namespace vramd {

// W3C Trace Context (https://www.w3.org/TR/trace-context/): ids a client passes in the
// `traceparent` header (HTTP) or metadata key (gRPC) so that a server's spans join its trace.
struct TraceContext {
  std::array<uint8_t, 16> trace_id{};
  std::array<uint8_t, 8> span_id{};  // the caller's span: the parent of ours
  uint8_t flags = 0;                 // bit 0: sampled

  // Parses "00-<32 hex>-<16 hex>-<2 hex>" (version 00; a later version's longer header is read
  // by its first four fields, as the spec asks). nullopt for anything malformed, an all-zero
  // id, or version ff: the request then starts a trace of its own.
  static std::optional<TraceContext> Parse(std::string_view header);
  std::string TraceIdHex() const;
  std::string SpanIdHex() const;
};

// Fresh random ids (a per-thread generator seeded from the system's entropy).
std::array<uint8_t, 16> NewTraceId();
std::array<uint8_t, 8> NewSpanId();
std::string HexOf(const uint8_t* bytes, size_t n);

enum class TracePoint : uint8_t {
  kReceiveStart,   // HTTP: the request's first byte; gRPC: the call's start
  kReceiveEnd,     // the whole request read
  kRequestStart,   // the model accepted it
  kQueueStart,     // handed to the scheduler
  kComputeStart,   // its execution began
  kComputeInputEnd,
  kComputeOutputStart,
  kComputeEnd,
  kRequestEnd,     // the runtime answered it
  kSendStart,      // the front end began the reply
  kSendEnd,        // the reply handed to the transport
};
inline constexpr size_t kTracePointCount = 11;

// How a traced request came: a front end's protocol, or a call from a model (BLS, an ensemble's
// step), which has no receive or send of its own.
enum class TraceProtocol : uint8_t { kHttp, kGrpc, kModel };

// Triton's name for a point ("HTTP_RECV_START", "QUEUE_START", ...).
std::string_view TracePointName(TracePoint point, TraceProtocol protocol);

class RequestTrace {
 public:
  using Clock = std::chrono::steady_clock;

  // `id`: the tracer's number for it (Triton's "id"); `parent`: the caller's context, if any.
  // `span_id`: its own span's id; nullopt: a fresh random one. `parent_id`: the number of the
  // trace this one is a child of (Triton's "parent_id"); 0: none.
  RequestTrace(uint64_t id, std::string model, TraceProtocol protocol,
               std::optional<TraceContext> parent,
               std::optional<std::array<uint8_t, 8>> span_id = std::nullopt,
               uint64_t parent_id = 0);

  // The W3C traceparent naming this trace and its own span: the context a call made on its
  // behalf (a model's BLS call) is traced under.
  std::string Traceparent() const;

  uint64_t id() const { return id_; }
  uint64_t parent_id() const { return parent_id_; }
  const std::string& model() const { return model_; }
  TraceProtocol protocol() const { return protocol_; }
  const std::array<uint8_t, 16>& trace_id() const { return trace_id_; }
  const std::array<uint8_t, 8>& span_id() const { return span_id_; }
  const std::optional<TraceContext>& parent() const { return parent_; }

  // The first stamp of a point wins (a batch's later steps do not move it).
  void Stamp(TracePoint point, Clock::time_point at = Clock::now());
  void SetVersion(int64_t version) { version_.store(version, std::memory_order_relaxed); }
  void SetRequestId(std::string id) EXCLUDES(mu_);
  // A figure the runtime measured, exported as an attribute ("vramd.memory.*"); a later value
  // of the same name replaces it. `name`: a string literal (kept as a pointer). A trace keeps
  // kMaxFigures names, inline (no allocation on the request path); more are dropped.
  static constexpr size_t kMaxFigures = 4;
  void SetFigure(const char* name, uint64_t value) EXCLUDES(mu_);
  void SetError(std::string message) EXCLUDES(mu_);

  struct Snapshot {
    int64_t version = 0;
    std::string request_id;
    std::string error;
    std::array<std::optional<Clock::time_point>, kTracePointCount> points;
    std::vector<std::pair<const char*, uint64_t>> figures;
  };
  Snapshot Read() const EXCLUDES(mu_);

  // Unix nanoseconds of a steady-clock time, through the pair of clocks read at creation.
  uint64_t UnixNanos(Clock::time_point at) const;
  static uint64_t SteadyNanos(Clock::time_point at) {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(at.time_since_epoch()).count());
  }

 private:
  const uint64_t id_;
  const uint64_t parent_id_;
  const std::string model_;
  const TraceProtocol protocol_;
  const std::optional<TraceContext> parent_;
  const std::array<uint8_t, 16> trace_id_;
  const std::array<uint8_t, 8> span_id_;
  const Clock::time_point steady_origin_;
  const std::chrono::system_clock::time_point wall_origin_;
  // Steady-clock ticks since its epoch; 0: not stamped.
  std::array<std::atomic<int64_t>, kTracePointCount> points_{};
  std::atomic<int64_t> version_{0};
  mutable Mutex mu_;
  std::string request_id_ GUARDED_BY(mu_);
  std::string error_ GUARDED_BY(mu_);
  std::array<std::pair<const char*, uint64_t>, kMaxFigures> figures_ GUARDED_BY(mu_){};
  size_t figure_count_ GUARDED_BY(mu_) = 0;
};

// Starts and ends the traces of the calls a model makes (BLS, an ensemble's steps), which no
// front end sees: the runtime asks it for a call that carries InferRequest::trace_parent. The
// server's tracer is one (server/trace/tracer.h). Thread safety: any thread.
class ChildTracer {
 public:
  virtual ~ChildTracer() = default;
  // A trace of a call to `model` under `traceparent` (the calling request's
  // RequestTrace::Traceparent), or null when tracing is off for `model` or the context is
  // malformed (a model passes it through and may have changed it).
  virtual std::shared_ptr<RequestTrace> StartChild(std::string_view model,
                                                   std::string_view traceparent) = 0;
  // The call's last result has been handed to the caller.
  virtual void Finish(std::shared_ptr<RequestTrace> trace) = 0;
};

}  // namespace vramd
