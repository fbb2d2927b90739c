#include "core/request_trace.h"

#include <algorithm>
#include <random>

namespace vramd {
namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;  // the spec allows lowercase hex only
}

template <size_t N>
bool ParseHex(std::string_view text, std::array<uint8_t, N>* out) {
  if (text.size() != 2 * N) return false;
  for (size_t i = 0; i < N; ++i) {
    const int hi = HexDigit(text[2 * i]);
    const int lo = HexDigit(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    (*out)[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}

template <size_t N>
bool AllZero(const std::array<uint8_t, N>& bytes) {
  for (uint8_t b : bytes) {
    if (b != 0) return false;
  }
  return true;
}

std::mt19937_64& Generator() {
  thread_local std::mt19937_64 generator{[] {
    std::random_device device;
    return (uint64_t{device()} << 32) ^ device();
  }()};
  return generator;
}

template <size_t N>
std::array<uint8_t, N> RandomNonZero() {
  std::array<uint8_t, N> out{};
  do {
    for (size_t i = 0; i < N; i += 8) {
      uint64_t word = Generator()();
      for (size_t j = i; j < N && j < i + 8; ++j, word >>= 8) out[j] = static_cast<uint8_t>(word);
    }
  } while (AllZero(out));
  return out;
}

}  // namespace

std::optional<TraceContext> TraceContext::Parse(std::string_view header) {
  // version "-" trace-id "-" parent-id "-" flags: 2 + 1 + 32 + 1 + 16 + 1 + 2 = 55 characters.
  constexpr size_t kLength = 55;
  if (header.size() < kLength) return std::nullopt;
  std::array<uint8_t, 1> version{};
  std::array<uint8_t, 1> flags{};
  TraceContext context;
  if (!ParseHex(header.substr(0, 2), &version) || version[0] == 0xff || header[2] != '-' ||
      !ParseHex(header.substr(3, 32), &context.trace_id) || header[35] != '-' ||
      !ParseHex(header.substr(36, 16), &context.span_id) || header[52] != '-' ||
      !ParseHex(header.substr(53, 2), &flags)) {
    return std::nullopt;
  }
  // Version 00 is exactly 55 characters; a later version may append fields after a '-'.
  if (header.size() > kLength && (version[0] == 0 || header[kLength] != '-')) return std::nullopt;
  if (AllZero(context.trace_id) || AllZero(context.span_id)) return std::nullopt;
  context.flags = flags[0];
  return context;
}

std::string HexOf(const uint8_t* bytes, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[bytes[i] >> 4];
    out[2 * i + 1] = kDigits[bytes[i] & 0xf];
  }
  return out;
}

std::string TraceContext::TraceIdHex() const { return HexOf(trace_id.data(), trace_id.size()); }
std::string TraceContext::SpanIdHex() const { return HexOf(span_id.data(), span_id.size()); }

std::array<uint8_t, 16> NewTraceId() { return RandomNonZero<16>(); }
std::array<uint8_t, 8> NewSpanId() { return RandomNonZero<8>(); }

std::string_view TracePointName(TracePoint point, TraceProtocol protocol) {
  // A model's call has no front end: it is never stamped at receive or send, and those points
  // take the HTTP names should one ever be.
  const bool http = protocol != TraceProtocol::kGrpc;
  switch (point) {
    case TracePoint::kReceiveStart: return http ? "HTTP_RECV_START" : "GRPC_WAITREAD_START";
    case TracePoint::kReceiveEnd: return http ? "HTTP_RECV_END" : "GRPC_WAITREAD_END";
    case TracePoint::kRequestStart: return "REQUEST_START";
    case TracePoint::kQueueStart: return "QUEUE_START";
    case TracePoint::kComputeStart: return "COMPUTE_START";
    case TracePoint::kComputeInputEnd: return "COMPUTE_INPUT_END";
    case TracePoint::kComputeOutputStart: return "COMPUTE_OUTPUT_START";
    case TracePoint::kComputeEnd: return "COMPUTE_END";
    case TracePoint::kRequestEnd: return "REQUEST_END";
    case TracePoint::kSendStart: return http ? "HTTP_SEND_START" : "GRPC_SEND_START";
    case TracePoint::kSendEnd: return http ? "HTTP_SEND_END" : "GRPC_SEND_END";
  }
  return "UNKNOWN";
}

RequestTrace::RequestTrace(uint64_t id, std::string model, TraceProtocol protocol,
                           std::optional<TraceContext> parent,
                           std::optional<std::array<uint8_t, 8>> span_id, uint64_t parent_id)
    : id_(id),
      parent_id_(parent_id),
      model_(std::move(model)),
      protocol_(protocol),
      parent_(parent),
      trace_id_(parent ? parent->trace_id : NewTraceId()),
      span_id_(span_id ? *span_id : NewSpanId()),
      steady_origin_(Clock::now()),
      wall_origin_(std::chrono::system_clock::now()) {}

std::string RequestTrace::Traceparent() const {
  return "00-" + HexOf(trace_id_.data(), trace_id_.size()) + "-" +
         HexOf(span_id_.data(), span_id_.size()) + "-01";
}

void RequestTrace::Stamp(TracePoint point, Clock::time_point at) {
  int64_t unset = 0;
  // A clock at exactly its epoch would read as unset; one tick later is the same time.
  const int64_t ticks = std::max<int64_t>(1, at.time_since_epoch().count());
  points_[static_cast<size_t>(point)].compare_exchange_strong(unset, ticks,
                                                              std::memory_order_relaxed);
}

void RequestTrace::SetRequestId(std::string id) {
  MutexLock lock(mu_);
  request_id_ = std::move(id);
}

void RequestTrace::SetFigure(const char* name, uint64_t value) {
  MutexLock lock(mu_);
  for (size_t i = 0; i < figure_count_; ++i) {
    if (std::string_view(figures_[i].first) == name) {
      figures_[i].second = value;
      return;
    }
  }
  if (figure_count_ < kMaxFigures) figures_[figure_count_++] = {name, value};
}

void RequestTrace::SetError(std::string message) {
  MutexLock lock(mu_);
  if (error_.empty()) error_ = std::move(message);
}

RequestTrace::Snapshot RequestTrace::Read() const {
  Snapshot s;
  s.version = version_.load(std::memory_order_relaxed);
  for (size_t i = 0; i < kTracePointCount; ++i) {
    const int64_t ticks = points_[i].load(std::memory_order_relaxed);
    if (ticks != 0) s.points[i] = Clock::time_point(Clock::duration(ticks));
  }
  MutexLock lock(mu_);
  s.request_id = request_id_;
  s.error = error_;
  s.figures.assign(figures_.begin(), figures_.begin() + static_cast<std::ptrdiff_t>(figure_count_));
  return s;
}

uint64_t RequestTrace::UnixNanos(Clock::time_point at) const {
  const auto wall = wall_origin_ + std::chrono::duration_cast<std::chrono::system_clock::duration>(
                                       at - steady_origin_);
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(wall.time_since_epoch()).count());
}

}  // namespace vramd
