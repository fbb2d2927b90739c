#include "server/trace/tracer.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <charconv>
#include <fstream>

#include "server/trace/otlp_post.h"

namespace vramd::trace {
namespace {

Result<uint64_t> FlagNumber(std::string_view flag, std::string_view text) {
  uint64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) {
    return Status::InvalidArgument(
        fmt::format("--trace-config {}: '{}' is not a non-negative integer", flag, text));
  }
  return value;
}

}  // namespace

Result<TracerOptions> TracerOptions::FromFlags(const std::vector<std::string>& trace_config) {
  TracerOptions options;
  // Global settings go through TraceSettings' own checks, as a POST would.
  TraceSettings::Changes changes;
  bool resource_given = false;
  for (const std::string& text : trace_config) {
    VRAMD_ASSIGN_OR_RETURN(TraceSettings::FlagSetting flag, TraceSettings::ParseFlag(text));
    const std::string& n = flag.name;
    if (flag.mode.empty()) {
      if (n == "mode") {
        if (flag.value == "triton") {
          options.mode = TraceMode::kTriton;
        } else if (flag.value == "opentelemetry") {
          options.mode = TraceMode::kOpenTelemetry;
        } else {
          return Status::InvalidArgument(fmt::format(
              "--trace-config mode: '{}' is not a trace mode (triton, opentelemetry)",
              flag.value));
        }
      } else if (n == "level") {
        // Repeated level flags add up, as Triton's do; OFF alone turns tracing off.
        bool merged = false;
        for (auto& [name, value] : changes) {
          if (name == "trace_level" && value) {
            value->push_back(flag.value);
            merged = true;
          }
        }
        if (!merged) changes.emplace_back("trace_level", std::vector<std::string>{flag.value});
      } else if (n == "rate" || n == "count") {
        changes.emplace_back("trace_" + n, std::vector<std::string>{flag.value});
      } else {
        return Status::InvalidArgument(fmt::format(
            "--trace-config: unknown global setting '{}' (rate, level, count, mode)", n));
      }
    } else if (flag.mode == "triton") {
      if (n == "file") {
        changes.emplace_back("trace_file", std::vector<std::string>{flag.value});
      } else if (n == "log-frequency" || n == "log_frequency") {
        changes.emplace_back("log_frequency", std::vector<std::string>{flag.value});
      } else {
        return Status::InvalidArgument(fmt::format(
            "--trace-config triton: unknown setting '{}' (file, log-frequency)", n));
      }
    } else {  // opentelemetry
      if (n == "url") {
        options.url = flag.value;
      } else if (n == "resource") {
        const size_t eq = flag.value.find('=');
        if (eq == std::string::npos || eq == 0) {
          return Status::InvalidArgument(fmt::format(
              "--trace-config opentelemetry,resource takes key=value, not '{}'", flag.value));
        }
        if (!resource_given) options.resource.clear();  // the first one replaces the default
        resource_given = true;
        options.resource.emplace_back(flag.value.substr(0, eq), flag.value.substr(eq + 1));
      } else if (n == "bsp_max_queue_size") {
        VRAMD_ASSIGN_OR_RETURN(options.max_queue_size, FlagNumber(n, flag.value));
      } else if (n == "bsp_max_export_batch_size") {
        VRAMD_ASSIGN_OR_RETURN(options.max_export_batch_size, FlagNumber(n, flag.value));
      } else if (n == "bsp_schedule_delay") {
        VRAMD_ASSIGN_OR_RETURN(uint64_t ms, FlagNumber(n, flag.value));
        options.schedule_delay = std::chrono::milliseconds(ms);
      } else {
        return Status::InvalidArgument(fmt::format(
            "--trace-config opentelemetry: unknown setting '{}' (url, resource, "
            "bsp_max_queue_size, bsp_schedule_delay, bsp_max_export_batch_size)",
            n));
      }
    }
  }
  if (options.max_export_batch_size == 0 || options.max_queue_size == 0 ||
      options.max_export_batch_size > options.max_queue_size) {
    return Status::InvalidArgument(
        "--trace-config opentelemetry: bsp_max_export_batch_size must be at least 1 and at most "
        "bsp_max_queue_size");
  }
  if (options.mode == TraceMode::kOpenTelemetry) {
    VRAMD_RETURN_IF_ERROR(ParseHttpEndpoint(options.url).status().WithContext(
        "--trace-config opentelemetry,url"));
  }
  TraceSettings check(options.mode);
  VRAMD_RETURN_IF_ERROR(check.Update("", changes).WithContext("--trace-config"));
  options.global = check.Effective("");
  return options;
}

Tracer::Tracer(TracerOptions options)
    : options_(std::move(options)),
      settings_(options_.mode, options_.global),
      writer_([this](std::stop_token stop) { Run(std::move(stop)); }) {}

Tracer::~Tracer() {
  writer_.request_stop();
  writer_.join();  // Run writes and exports what is queued before it returns
  for (auto& [path, file] : files_) {
    if (file.count > 0) WriteTritonFile(path, &file, /*at_exit=*/true);
  }
}

std::shared_ptr<RequestTrace> Tracer::Start(std::string_view model, TraceProtocol protocol,
                                            std::string_view traceparent,
                                            RequestTrace::Clock::time_point received) {
  if (!settings_.any_on()) return nullptr;
  std::optional<TraceContext> parent;
  if (!traceparent.empty()) parent = TraceContext::Parse(traceparent);
  // Only OpenTelemetry mode follows a caller's context past the rate (Triton's rule).
  const bool follows_parent = parent.has_value() && options_.mode == TraceMode::kOpenTelemetry;
  if (!settings_.Sample(model, follows_parent)) return nullptr;
  auto trace = NewTrace(model, protocol,
                        options_.mode == TraceMode::kOpenTelemetry ? parent : std::nullopt);
  trace->Stamp(TracePoint::kReceiveStart, received);
  trace->Stamp(TracePoint::kReceiveEnd);
  return trace;
}

namespace {

std::array<uint8_t, 8> BigEndian(uint64_t n) {
  std::array<uint8_t, 8> out{};
  for (size_t i = 0; i < 8; ++i) out[7 - i] = static_cast<uint8_t>(n >> (8 * i));
  return out;
}

uint64_t FromBigEndian(const std::array<uint8_t, 8>& bytes) {
  uint64_t n = 0;
  for (uint8_t b : bytes) n = n << 8 | b;
  return n;
}

}  // namespace

std::shared_ptr<RequestTrace> Tracer::NewTrace(std::string_view model, TraceProtocol protocol,
                                               std::optional<TraceContext> parent,
                                               uint64_t parent_id) {
  const uint64_t id = next_id_.fetch_add(1, std::memory_order_relaxed);
  std::optional<std::array<uint8_t, 8>> span_id;
  if (options_.mode == TraceMode::kTriton) span_id = BigEndian(id);
  return std::make_shared<RequestTrace>(id, std::string(model), protocol, std::move(parent),
                                        span_id, parent_id);
}

std::shared_ptr<RequestTrace> Tracer::StartChild(std::string_view model,
                                                 std::string_view traceparent) {
  if (!settings_.any_on()) return nullptr;
  std::optional<TraceContext> parent = TraceContext::Parse(traceparent);
  if (!parent.has_value()) return nullptr;
  if (!settings_.Sample(model, /*has_parent=*/true)) return nullptr;
  if (options_.mode == TraceMode::kOpenTelemetry) return NewTrace(model, TraceProtocol::kModel, parent);
  return NewTrace(model, TraceProtocol::kModel, std::nullopt, FromBigEndian(parent->span_id));
}

void Tracer::Finish(std::shared_ptr<RequestTrace> trace) {
  if (trace == nullptr) return;
  // A model's call ends at REQUEST_END: nothing is sent.
  if (trace->protocol() != TraceProtocol::kModel) trace->Stamp(TracePoint::kSendEnd);
  Pending pending;
  pending.trace = std::move(trace);
  MutexLock lock(mu_);
  // A request's trace is three spans; the queue bound counts spans, as the batch processor's.
  if (options_.mode == TraceMode::kOpenTelemetry && queued_spans_ + 3 > options_.max_queue_size) {
    counts_.spans_dropped += 3;
    return;
  }
  queued_spans_ += 3;
  queue_.push_back(std::move(pending));
  if (queued_spans_ >= options_.max_export_batch_size) wake_.notify_one();
}

namespace {

uint64_t UnixNow() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace

void Tracer::LoadFinished(const std::string& model, const runtime::LoadReport& report) {
  if (options_.mode != TraceMode::kOpenTelemetry || !settings_.Effective("").timestamps) return;
  QueueLifecycle(LoadSpans(model, report, std::chrono::steady_clock::now(), UnixNow()));
}

void Tracer::RolledBack(const runtime::RollbackRecord& record) {
  if (options_.mode != TraceMode::kOpenTelemetry || !settings_.Effective("").timestamps) return;
  QueueLifecycle(RollbackSpans(record, std::chrono::steady_clock::now(), UnixNow()));
}

void Tracer::QueueLifecycle(std::vector<Span> spans) {
  Pending pending;
  pending.spans = std::move(spans);
  MutexLock lock(mu_);
  if (queued_spans_ + pending.spans.size() > options_.max_queue_size) {
    counts_.spans_dropped += pending.spans.size();
    return;
  }
  queued_spans_ += pending.spans.size();
  queue_.push_back(std::move(pending));
  wake_.notify_one();
}

Tracer::Counts Tracer::counts() const {
  MutexLock lock(mu_);
  return counts_;
}

void Tracer::Run(std::stop_token stop) {
  while (true) {
    std::vector<Pending> batch;
    {
      MutexLock lock(mu_);
      // A batch goes when it is full, when its delay has passed, or at stop.
      const auto deadline = std::chrono::steady_clock::now() + options_.schedule_delay;
      lock.WaitUntil(wake_, stop, deadline, [this]() REQUIRES(mu_) {
        return queued_spans_ >= options_.max_export_batch_size;
      });
      if (queue_.empty()) {
        if (stop.stop_requested()) return;
        continue;
      }
      size_t spans = 0;
      while (!queue_.empty() && spans < options_.max_export_batch_size) {
        spans += queue_.front().trace ? 3 : queue_.front().spans.size();
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      queued_spans_ -= std::min(queued_spans_, spans);
    }
    Write(std::move(batch));
  }
}

void Tracer::Write(std::vector<Pending> batch) {
  {
    MutexLock lock(mu_);
    for (const Pending& p : batch) counts_.traces += p.trace ? 1 : 0;
  }
  if (options_.mode == TraceMode::kOpenTelemetry) {
    std::vector<Span> spans;
    for (Pending& p : batch) {
      if (p.trace) {
        for (Span& s : RequestSpans(*p.trace)) spans.push_back(std::move(s));
      } else {
        for (Span& s : p.spans) spans.push_back(std::move(s));
      }
    }
    Export(spans);
    return;
  }
  for (Pending& p : batch) {
    if (p.trace == nullptr) continue;
    // The model's file and frequency as they are now, a moment after the request finished:
    // read here, off the request path.
    TraceSettings::Values values = settings_.Effective(p.trace->model());
    if (values.file.empty()) {
      if (!warned_no_file_) {
        spdlog::warn("trace: a request was traced but no trace_file is set; set one with "
                     "--trace-config triton,file=PATH or POST /v2/trace/setting");
        warned_no_file_ = true;
      }
      continue;
    }
    TraceFile& file = files_[values.file];
    file.log_frequency = values.log_frequency;
    if (!file.entries.empty()) file.entries += ',';
    file.entries += EncodeTritonEntries(*p.trace);
    ++file.count;
    if (file.log_frequency > 0 && file.count >= file.log_frequency) {
      WriteTritonFile(values.file, &file, /*at_exit=*/false);
    }
  }
}

void Tracer::WriteTritonFile(const std::string& path, TraceFile* file, bool at_exit) {
  // log_frequency 0 writes once, at exit, to the file itself; otherwise numbered pieces.
  const std::string name =
      at_exit && file->log_frequency == 0 ? path : fmt::format("{}.{}", path, file->index);
  std::ofstream out(name, std::ios::trunc);
  out << '[' << file->entries << "]\n";
  out.close();
  if (!out) {
    spdlog::warn("trace: cannot write the trace file '{}'", name);
  } else {
    MutexLock lock(mu_);
    ++counts_.files_written;
  }
  ++file->index;
  file->entries.clear();
  file->count = 0;
}

void Tracer::Export(const std::vector<Span>& spans) {
  if (spans.empty()) return;
  auto endpoint = ParseHttpEndpoint(options_.url);
  Status failed = endpoint.status();
  if (endpoint.ok()) {
    failed = PostJson(*endpoint, EncodeOtlpJson(spans, options_.resource), std::chrono::seconds(5));
    if (failed.ok()) {
      MutexLock lock(mu_);
      counts_.spans_exported += spans.size();
      return;
    }
  }
  uint64_t failures = 0;
  {
    MutexLock lock(mu_);
    counts_.spans_dropped += spans.size();
    failures = ++counts_.export_failures;
  }
  // The first failure and then every hundredth: a collector that is down must not flood the log.
  if (failures == 1 || failures % 100 == 0) {
    spdlog::warn("trace: exporting {} span(s) to {} failed ({} failure(s) so far): {}",
                 spans.size(), options_.url, failures, failed.message());
  }
}

}  // namespace vramd::trace
