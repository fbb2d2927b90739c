// Test support for reloads under load (tests/unit/reload_*_test.cc): small CPU mlp models whose
// versions hold different weights, the request path of the HTTP front end (InferRouter, which
// finds the replacement when a reload retired the version between lookup and submit), client
// threads that keep requests flowing and check every response, and what a test compares before
// and after: the ledger's state, the process's threads and open file descriptors.
#pragma once

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "config/model_config_parser.h"
#include "core/status.h"
#include "memory/ledger.h"
#include "runtime/infer_router.h"
#include "runtime/model_manager.h"
#include "support/mlp_reference.h"

namespace vramd::testing {

// ---------------------------------------------------------------------------------------------
// Models.

// The bytes of `m` as the mlp backend's model.safetensors (FP32).
inline std::string MlpSafetensorsBytes(const MlpWeights& m) {
  auto bytes = backends::safetensors::Serialize(MlpTensors(m, /*fp16=*/false));
  return bytes.ok() ? *bytes : std::string();
}

// A config.pbtxt for a CPU mlp model: INPUT0 [K] -> OUTPUT0 [N], max_batch_size 4, `instances`
// CPU instances, then `extra` (parameters, version_policy...).
inline std::string MlpConfigText(const std::string& name, int64_t k, int64_t n, int instances,
                                 const std::string& extra = "") {
  return "name: \"" + name + "\"\nbackend: \"mlp\"\nmax_batch_size: 4\n" +
         "input [ { name: \"INPUT0\" data_type: TYPE_FP32 dims: [ " + std::to_string(k) +
         " ] } ]\n" + "output [ { name: \"OUTPUT0\" data_type: TYPE_FP32 dims: [ " +
         std::to_string(n) + " ] } ]\n" + "instance_group [ { kind: KIND_CPU count: " +
         std::to_string(instances) + " } ]\n" + extra;
}

// `parameters { key: ... }` entries for the reload policy and the unavailable wait.
inline std::string ReloadParameters(const std::string& policy, int64_t wait_ms) {
  return "parameters { key: \"vramd.reload_policy\" value { string_value: \"" + policy +
         "\" } }\n" + "parameters { key: \"vramd.reload_unavailable_wait_ms\" value { "
         "string_value: \"" + std::to_string(wait_ms) + "\" } }\n";
}

// `text` parsed as a config, with version_policy specific { versions: [version] } when
// `version` > 0: a config override for ModelManager::Load. Null (and a test failure) when the
// text does not parse.
inline std::shared_ptr<const config::ModelConfig> ConfigOverride(const std::string& text,
                                                                 int64_t version = 0) {
  auto parsed = config::ParseModelConfigText(text, "test override");
  if (!parsed.ok()) {
    ADD_FAILURE() << parsed.status().ToString();
    return nullptr;
  }
  auto config = std::make_shared<config::ModelConfig>(std::move(parsed->config));
  if (version > 0) {
    config->mutable_version_policy()->mutable_specific()->clear_versions();
    config->mutable_version_policy()->mutable_specific()->add_versions(version);
  }
  return config;
}

// One FP32 request of batch 1.
inline std::shared_ptr<InferRequest> FloatRequest(const std::string& id,
                                                  const std::vector<float>& x) {
  auto r = std::make_shared<InferRequest>();
  r->id = id;
  r->inputs.push_back(Tensor{"INPUT0", DataType::kFp32, {1, static_cast<int64_t>(x.size())},
                             SharedBuffer::CopyOf(x.data(), x.size() * sizeof(float))});
  return r;
}

// OUTPUT0 of a response as floats (empty when there is no such output).
// What the test backends that mark their version in their output execute: OUTPUT0 =
// INPUT0 (INT32) + 1000 * version, so an answer shows which version computed it.
inline Status AddVersionOffset(const InferRequest& request, int64_t version,
                               std::vector<Tensor>* outputs) {
  const Tensor& in = request.inputs[0];
  std::vector<int32_t> v(in.data.size() / sizeof(int32_t));
  std::memcpy(v.data(), in.data.data(), v.size() * sizeof(int32_t));
  for (auto& x : v) x += static_cast<int32_t>(1000 * version);
  outputs->push_back(Tensor{"OUTPUT0", DataType::kInt32, in.shape,
                            SharedBuffer::CopyOf(v.data(), v.size() * sizeof(int32_t))});
  return Status::Ok();
}

inline std::vector<float> FloatOutput(const InferResponse& response) {
  for (const auto& t : response.outputs) {
    if (t.name != "OUTPUT0" || t.datatype != DataType::kFp32) continue;
    std::vector<float> y(t.data.size() / sizeof(float));
    std::memcpy(y.data(), t.data.data(), y.size() * sizeof(float));
    return y;
  }
  return {};
}

// Whether `got` equals `want` within FP32-vs-double rounding (the tolerance mlp_backend_test
// uses): |got - want| <= 1e-5 * max(1, |want|) everywhere.
inline bool CloseTo(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return false;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::abs(double(got[i]) - double(want[i])) > 1e-5 * std::max(1.0, std::abs(double(want[i])))) {
      return false;
    }
  }
  return true;
}

inline std::string FloatsString(const std::vector<float>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// ---------------------------------------------------------------------------------------------
// The request path.

struct RetriedOutcome {
  Result<runtime::InferOutcome> outcome = Status::Internal("not run");
};

// A request through the path every front end takes (runtime/infer_router.h): the router finds
// the serving version and, when a reload retired it between the lookup and the submit, submits
// to its replacement; in a resource-preserving gap it parks the request. Waits for the answer;
// the version is not held meanwhile (the router lets go of it once it has submitted).
inline RetriedOutcome InferWithRetry(const runtime::ModelManager& manager,
                                     const std::string& model,
                                     const std::shared_ptr<InferRequest>& request) {
  // Shared with the callback, which may still be returning from set_value when get() does.
  auto promise = std::make_shared<std::promise<Result<runtime::InferOutcome>>>();
  auto future = promise->get_future();
  runtime::InferRouter(&manager).InferAsync(
      model, 0, request,
      [promise](Result<runtime::InferOutcome> outcome) { promise->set_value(std::move(outcome)); });
  RetriedOutcome result;
  result.outcome = future.get();
  return result;
}

// ---------------------------------------------------------------------------------------------
// Client threads.

// `threads` clients that send requests to `model` back to back until Stop(), each through
// InferWithRetry. Every answer is classified:
//   - ok and `check` returns "": a consistent response, counted by the version that answered;
//   - ok but `check` returns a complaint: an inconsistent response (kept, the first 20);
//   - an error that `allowed` accepts: an allowed failure (counted, the first 5 kept);
//   - any other error: a failed request (kept, the first 20).
class LoadClients {
 public:
  // The request client `client` sends as its `seq`-th.
  using MakeRequest = std::function<std::shared_ptr<InferRequest>(int client, uint64_t seq)>;
  // "" when `response` is what `client`'s request should get from the version that answered.
  using Check = std::function<std::string(int client, const InferResponse& response)>;
  using Allowed = std::function<bool(const Status& status)>;

  struct Counts {
    uint64_t answered = 0;  // every request that got its answer
    uint64_t consistent = 0;
    uint64_t allowed_failures = 0;
    uint64_t failed = 0;
    uint64_t inconsistent = 0;
    std::map<int64_t, uint64_t> by_version;  // consistent responses by model_version
    std::vector<std::string> failures;       // the first 20 unexpected errors
    std::vector<std::string> complaints;     // the first 20 inconsistent responses
    std::vector<std::string> allowed_examples;  // the first 5 allowed errors
  };

  LoadClients(const runtime::ModelManager& manager, std::string model, int threads,
              MakeRequest make, Check check, Allowed allowed = nullptr)
      : manager_(manager),
        model_(std::move(model)),
        make_(std::move(make)),
        check_(std::move(check)),
        allowed_(std::move(allowed)) {
    for (int c = 0; c < threads; ++c) threads_.emplace_back([this, c] { Run(c); });
  }
  ~LoadClients() { Stop(); }
  LoadClients(const LoadClients&) = delete;
  LoadClients& operator=(const LoadClients&) = delete;

  void Stop() {
    stop_ = true;
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

  uint64_t answered() const { return answered_.load(); }

  // Waits until `n` more requests than `since` have been answered; false after `timeout`.
  bool WaitAnswered(uint64_t since, uint64_t n,
                    std::chrono::milliseconds timeout = std::chrono::seconds(10)) const {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (answered_.load() < since + n) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return true;
  }

  Counts counts() const {
    std::lock_guard lock(mu_);
    return counts_;
  }

 private:
  void Run(int client) {
    for (uint64_t seq = 0; !stop_.load(); ++seq) {
      auto request = make_(client, seq);
      RetriedOutcome r = InferWithRetry(manager_, model_, request);
      std::string complaint;
      if (r.outcome.ok()) complaint = check_(client, r.outcome->response);
      {
        std::lock_guard lock(mu_);
        ++counts_.answered;
        if (!r.outcome.ok()) {
          if (allowed_ && allowed_(r.outcome.status())) {
            ++counts_.allowed_failures;
            if (counts_.allowed_examples.size() < 5) {
              counts_.allowed_examples.push_back(r.outcome.status().ToString());
            }
          } else {
            ++counts_.failed;
            if (counts_.failures.size() < 20) counts_.failures.push_back(r.outcome.status().ToString());
          }
        } else if (!complaint.empty()) {
          ++counts_.inconsistent;
          if (counts_.complaints.size() < 20) counts_.complaints.push_back(complaint);
        } else {
          ++counts_.consistent;
          ++counts_.by_version[r.outcome->response.model_version];
        }
      }
      r.outcome = Status::Internal("dropped");  // the request's owner closes here
      ++answered_;
    }
  }

  const runtime::ModelManager& manager_;
  const std::string model_;
  const MakeRequest make_;
  const Check check_;
  const Allowed allowed_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> answered_{0};
  mutable std::mutex mu_;
  Counts counts_;  // guarded by mu_
  std::vector<std::thread> threads_;  // last: started once the rest is ready
};

// ---------------------------------------------------------------------------------------------
// What a test compares before and after.

// The ledger as a reload must leave it: live bytes and allocations of the whole tree, the owners
// in it (kind, path, closed), and the leaks filed so far.
struct LedgerState {
  int64_t live_bytes = 0;
  int64_t live_count = 0;
  std::multiset<std::tuple<memory::OwnerKind, std::string, bool>> owners;
  uint64_t leak_reports = 0;
  uint64_t leaked_bytes = 0;

  bool operator==(const LedgerState&) const = default;
};

inline LedgerState CaptureLedger(const memory::Ledger& ledger) {
  LedgerState s;
  for (const auto& o : ledger.Snapshot()) {
    s.live_bytes += o.self.live_bytes;
    s.live_count += o.self.live_count;
    s.owners.insert({o.kind, ledger.OwnerPath(o.id), o.closed});
  }
  s.leak_reports = ledger.leak_reports_total();
  s.leaked_bytes = ledger.leaked_bytes_total();
  return s;
}

inline std::string Describe(const LedgerState& s) {
  std::string text = "live " + std::to_string(s.live_bytes) + " bytes in " +
                     std::to_string(s.live_count) + " allocation(s); leak reports " +
                     std::to_string(s.leak_reports) + " (" + std::to_string(s.leaked_bytes) +
                     " bytes); owners:";
  for (const auto& [kind, path, closed] : s.owners) {
    text += " " + path + (closed ? "(closed)" : "");
  }
  return text;
}

// The leak reports filed after the first `skip`, one per line, for a failure message.
inline std::string DescribeLeaks(const memory::Ledger& ledger, size_t skip) {
  std::string text;
  const auto leaks = ledger.Leaks();
  for (size_t i = skip; i < leaks.size(); ++i) {
    const auto& l = leaks[i];
    text += "  leak: " + l.owner_path + " (" + std::string(memory::OwnerKindName(l.kind)) +
            ") closed holding " + std::to_string(l.bytes) + " bytes in " +
            std::to_string(l.count) + " allocation(s), " + std::to_string(l.still_live_bytes) +
            " still live now\n";
  }
  return text;
}

// Sum of total_allocations (cumulative) over the owners of the subtree of the `kind` owner
// named `name` (the first found), or -1 when there is none.
inline int64_t SubtreeTotalAllocations(const memory::Ledger& ledger, memory::OwnerKind kind,
                                       const std::string& name) {
  std::set<memory::OwnerId> inside;
  int64_t total = 0;
  for (const auto& o : ledger.Snapshot()) {  // parents before children
    const bool root = inside.empty() && o.kind == kind && o.name == name && !o.closed;
    if (!root && inside.count(o.parent) == 0) continue;
    inside.insert(o.id);
    total += o.self.total_allocations;
  }
  return inside.empty() ? -1 : total;
}

inline size_t CountEntries(const char* dir) {
  size_t n = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    ++n;
  }
  return n;
}

// Threads of this process (entries of /proc/self/task).
inline size_t ThreadCount() { return CountEntries("/proc/self/task"); }
// Open file descriptors of this process (entries of /proc/self/fd; the listing's own descriptor
// is one of them, every time, so before/after comparisons are unaffected).
inline size_t OpenFdCount() { return CountEntries("/proc/self/fd"); }

// The thread count once it is at most `limit`, or the last count seen after `timeout`. A thread
// whose std::thread::join() returned may still be listed for a moment: join returns when the
// kernel clears the thread's tid, slightly before the kernel reaps the task.
inline size_t ThreadCountSettledAtMost(size_t limit,
                                       std::chrono::milliseconds timeout = std::chrono::seconds(2)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  size_t n = ThreadCount();
  while (n > limit && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    n = ThreadCount();
  }
  return n;
}

// Ends the process, saying where, when a step of a test does not finish in time, so that a hang
// (a reload that never returns, say) fails the test at once instead of blocking the whole suite
// until ctest's timeout. Its thread lives as long as the test's, so it is in the "before" and
// the "after" thread counts alike.
class Watchdog {
 public:
  Watchdog() : thread_([this] { Watch(); }) {}
  ~Watchdog() {
    {
      std::lock_guard lock(mu_);
      done_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // The test is now doing `what`, which must finish within `limit` (until the next Step).
  void Step(std::string what, std::chrono::seconds limit = std::chrono::seconds(30)) {
    std::lock_guard lock(mu_);
    what_ = std::move(what);
    limit_ = limit;
    deadline_ = std::chrono::steady_clock::now() + limit;
    wake_.notify_all();
  }

 private:
  void Watch() {
    std::unique_lock lock(mu_);
    while (!done_) {
      if (std::chrono::steady_clock::now() >= deadline_) {
        std::fprintf(stderr,
                     "\n*** WATCHDOG: %s: '%s' did not finish within %lld s: the process is "
                     "ended here (a hang; see the test's comments for known causes)\n",
                     ::testing::UnitTest::GetInstance()->current_test_info() != nullptr
                         ? ::testing::UnitTest::GetInstance()->current_test_info()->name()
                         : "?",
                     what_.c_str(), static_cast<long long>(limit_.count()));
        std::fflush(stderr);
        std::_Exit(3);
      }
      wake_.wait_until(lock, deadline_);
    }
  }

  std::mutex mu_;
  std::condition_variable wake_;
  bool done_ = false;  // guarded by mu_
  std::string what_ = "the test";  // guarded by mu_
  std::chrono::seconds limit_{120};  // guarded by mu_
  std::chrono::steady_clock::time_point deadline_ =
      std::chrono::steady_clock::now() + std::chrono::seconds(120);  // guarded by mu_
  std::thread thread_;  // last: starts once the rest is initialized
};

// Quiets the manager's per-load info lines for the scope (hundreds of reloads), keeping
// warnings and errors.
class QuietLog {
 public:
  QuietLog() : saved_(spdlog::get_level()) { spdlog::set_level(spdlog::level::warn); }
  ~QuietLog() { spdlog::set_level(saved_); }
  QuietLog(const QuietLog&) = delete;
  QuietLog& operator=(const QuietLog&) = delete;

 private:
  spdlog::level::level_enum saved_;
};

}  // namespace vramd::testing
