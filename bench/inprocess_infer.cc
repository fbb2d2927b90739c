// inprocess_infer: requests/s of a model served by vramd's runtime without HTTP, for splitting a
// gap between `infer_load` (over HTTP) and a framework's direct calls (bench/torch/direct_bench)
// into what the front end costs and what the runtime and backend cost.
//
//   inprocess_infer --repository R --model M [--backend-directory D] --input FILE --shape 1,3,H,W
//                   [--concurrency 1,2,4] [--duration 3] [--warmup 1]
//                   [--memory-budget SPEC [--memory-admission false]]
//                   [--trace-config SPEC ...]
//
// --memory-budget (vramd's flag: "cuda:0=100GiB") bounds the server and turns memory-aware
// admission on for that device (as `vramd serve` does; --memory-admission false leaves the
// budget alone): with a budget too large to be reached, the difference against a run without
// it is what the checks cost per request (bench/governance_cost.py).
//
// --trace-config (vramd's flag, Triton's forms: "level=TIMESTAMPS", "rate=1", "triton,file=F")
// makes a tracer, and every request goes through it as the HTTP front end's does: Start before
// the request is submitted, the reply stamped and Finish after it is answered. Given only as
// "level=OFF", the tracer exists and samples nothing: against a run without the flag, what
// tracing off costs a request (bench/trace_off_cost.py).
//
// Loads M from R with vramd's ModelManager (the same ledger, allocator and backends as `vramd
// serve`), then for each concurrency c runs c threads that each send the FP32 tensor in FILE as
// the model's first input, back to back, the way the HTTP front end submits requests
// (runtime::InferRouter), waiting for each. Prints one JSON line per concurrency, in
// infer_load's fields.
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "backends/backend.h"
#include "core/infer_request.h"
#include "latency_summary.h"
#include "memory/admission.h"
#include "memory/allocator.h"
#include "memory/ledger.h"
#include "memory/quota.h"
#include "runtime/infer_router.h"
#include "runtime/model_manager.h"
#include "server/trace/tracer.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string repository, model, backend_directory, input;
  std::vector<int64_t> shape;
  std::vector<int> concurrency{1};
  double duration_s = 3, warmup_s = 1;
  std::string memory_budget;
  bool memory_admission = true;
  std::vector<std::string> trace_config;  // empty: no tracer
};

[[noreturn]] void Usage(const std::string& why) {
  std::cerr << "inprocess_infer: " << why << "\n"
            << "usage: inprocess_infer --repository R --model M [--backend-directory D] --input "
               "FILE --shape 1,3,H,W [--concurrency 1,2,4] [--duration S] [--warmup S] "
               "[--memory-budget SPEC [--memory-admission false]] [--trace-config SPEC ...]\n";
  std::exit(2);
}

template <typename T>
std::vector<T> ParseList(const std::string& text) {
  std::vector<T> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) out.push_back(static_cast<T>(std::stoll(item)));
  return out;
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) Usage("missing value for " + a);
    const std::string v = argv[++i];
    if (a == "--repository") o.repository = v;
    else if (a == "--model") o.model = v;
    else if (a == "--backend-directory") o.backend_directory = v;
    else if (a == "--input") o.input = v;
    else if (a == "--shape") o.shape = ParseList<int64_t>(v);
    else if (a == "--concurrency") o.concurrency = ParseList<int>(v);
    else if (a == "--duration") o.duration_s = std::stod(v);
    else if (a == "--warmup") o.warmup_s = std::stod(v);
    else if (a == "--memory-budget") o.memory_budget = v;
    else if (a == "--memory-admission") o.memory_admission = v != "false" && v != "0";
    else if (a == "--trace-config") o.trace_config.push_back(v);
    else Usage("unknown option " + a);
  }
  if (o.repository.empty() || o.model.empty() || o.input.empty() || o.shape.empty()) {
    Usage("--repository, --model, --input and --shape are required");
  }
  return o;
}

// One request through the runtime as the HTTP front end submits it (InferRouter), traced as it
// traces one when `tracer` is given, waited for; its outcome's status.
vramd::Status InferOnce(const vramd::runtime::ModelManager& manager, vramd::trace::Tracer* tracer,
                        const std::string& model, std::shared_ptr<vramd::InferRequest> request) {
  // The HTTP front end reads the clock as a request's header arrives whether or not anything
  // traces it (its phase timer): so does every series here.
  const auto received = Clock::now();
  std::shared_ptr<vramd::RequestTrace> trace;
  if (tracer != nullptr) {
    trace = tracer->Start(model, vramd::TraceProtocol::kHttp, "", received);
    request->trace = trace;
  }
  // Shared with the callback, which may still be returning from set_value when get() does.
  auto promise = std::make_shared<std::promise<vramd::Status>>();
  auto future = promise->get_future();
  vramd::runtime::InferRouter(&manager).InferAsync(
      model, 0, std::move(request),
      [promise, tracer, trace](vramd::Result<vramd::runtime::InferOutcome> r) {
        if (trace != nullptr) {
          trace->Stamp(vramd::TracePoint::kSendStart);
          tracer->Finish(trace);
        }
        promise->set_value(r.ok() ? vramd::Status::Ok() : r.status());
      });
  return future.get();
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = Parse(argc, argv);
  spdlog::set_level(spdlog::level::warn);
  std::ifstream in(o.input, std::ios::binary);
  if (!in) Usage("cannot read " + o.input);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!o.backend_directory.empty()) vramd::backends::SetBackendDirectory(o.backend_directory);

  // Before the manager, so it outlives every request it traces (as in `vramd serve`).
  std::optional<vramd::trace::Tracer> tracer;
  if (!o.trace_config.empty()) {
    auto tracer_options = vramd::trace::TracerOptions::FromFlags(o.trace_config);
    if (!tracer_options.ok()) Usage("--trace-config: " + tracer_options.status().ToString());
    tracer.emplace(std::move(tracer_options).value());
  }
  vramd::memory::Ledger::Options ledger_options;
  if (!o.memory_budget.empty()) {
    auto budget = vramd::memory::ParseMemoryQuota(o.memory_budget);
    if (!budget.ok()) Usage("--memory-budget: " + budget.status().ToString());
    ledger_options.budget = *budget;
  }
  vramd::memory::Ledger ledger(ledger_options);
  vramd::memory::Allocator allocator(&ledger);
  std::optional<vramd::memory::Admission> admission;
  if (o.memory_admission && !ledger_options.budget.empty()) admission.emplace(&ledger, &allocator);
  vramd::runtime::ModelManager::Options mo;
  mo.repositories = {o.repository};
  mo.memory = {&ledger, &allocator, nullptr};
  mo.memory.admission = admission ? &*admission : nullptr;
  mo.model_control_mode = vramd::runtime::ModelControlMode::kExplicit;
  mo.startup_models = {o.model};
  auto manager = vramd::runtime::ModelManager::Create(mo);
  if (!manager.ok()) {
    std::cerr << "inprocess_infer: " << manager.status().ToString() << "\n";
    return 1;
  }
  auto first = (*manager)->Find(o.model, 0);
  if (!first.ok()) {
    std::cerr << "inprocess_infer: " << first.status().ToString() << "\n";
    return 1;
  }
  const std::string input_name = (*first)->config().input(0).name();
  first->reset();

  int rc = 0;
  for (int c : o.concurrency) {
    std::vector<std::vector<double>> latencies(static_cast<size_t>(c));
    std::atomic<long> errors{0};
    const auto begin = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(o.warmup_s));
    const auto end = begin + std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(o.duration_s));
    std::vector<std::thread> threads;
    for (int t = 0; t < c; ++t) {
      threads.emplace_back([&, t] {
        for (uint64_t seq = 0;; ++seq) {
          const auto t0 = Clock::now();
          if (t0 >= end) break;
          auto request = std::make_shared<vramd::InferRequest>();
          request->id = std::to_string(t) + "-" + std::to_string(seq);
          request->inputs.push_back(vramd::Tensor{input_name, vramd::DataType::kFp32, o.shape,
                                                  vramd::SharedBuffer::CopyOf(bytes.data(),
                                                                            bytes.size())});
          const vramd::Status s = InferOnce(**manager, tracer ? &*tracer : nullptr, o.model,
                                               std::move(request));
          const auto t1 = Clock::now();
          if (!s.ok()) {
            if (errors.fetch_add(1) == 0) std::cerr << "inprocess_infer: " << s.ToString() << "\n";
            continue;
          }
          if (t0 >= begin && t1 <= end) {
            latencies[static_cast<size_t>(t)].push_back(
                std::chrono::duration<double, std::milli>(t1 - t0).count());
          }
        }
      });
    }
    for (auto& th : threads) th.join();
    const auto summary = vramd::bench::Summarize(latencies, o.duration_s);
    std::printf("{\"mode\":\"inprocess\",\"concurrency\":%d,\"errors\":%ld,%s,\"duration_s\":%.3f}\n",
                c, errors.load(), vramd::bench::JsonFields(summary).c_str(), o.duration_s);
    std::fflush(stdout);
    if (summary.requests == 0) rc = 3;
  }
  return rc;
}
