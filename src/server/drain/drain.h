// Drain: how a server leaves a load balancer's rotation without failing a request.
//
// Kubernetes stops sending traffic to a pod only after its readiness probe fails and the
// endpoints are updated everywhere, which takes seconds; requests keep arriving meanwhile. So a
// drain (POST /v2/drain from a preStop hook, `vramctl drain`, or the first stop signal) makes
// readiness fail at once (HTTP /v2/health/ready, gRPC ServerReady and health) while liveness
// holds and every request is still served, and it waits until no inference request has been in
// flight for a quiet window: the sign that traffic has moved away. The stop signal then ends
// the process as before (requests in flight are answered within --exit-timeout-secs).
//
// A drain cannot be undone: like a pod's termination, it ends with the process.
//
// Cost on the request path: one relaxed atomic increment and one decrement per inference
// request; the clock is read and the mutex taken only once draining.
//
// Thread safety: every method from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>

#include "core/mutex.h"

namespace vramd::server {

class Drain {
 public:
  using Clock = std::chrono::steady_clock;

  struct Outcome {
    bool quiet = false;      // the quiet window passed; false: the timeout came first
    uint64_t in_flight = 0;  // inference requests in flight when the wait ended
    std::chrono::milliseconds waited{0};
  };

  // Every inference request from a front end, exactly once each, around its whole handling
  // (parse, run, reply).
  void RequestStarted();
  void RequestEnded();

  bool draining() const { return draining_.load(std::memory_order_acquire); }
  uint64_t in_flight() const { return in_flight_.load(std::memory_order_acquire); }

  // Starts draining (if not yet) without waiting: a stop signal's first step.
  void Begin() EXCLUDES(mu_);

  // Starts draining and blocks until no inference request has been in flight for `quiet`
  // (counted from the later of this call and the last request's end), or until `timeout`.
  Outcome BeginAndWait(std::chrono::milliseconds quiet, std::chrono::milliseconds timeout)
      EXCLUDES(mu_);

 private:
  std::atomic<uint64_t> in_flight_{0};
  std::atomic<bool> draining_{false};
  Mutex mu_;
  std::condition_variable changed_;
  // The last time the count came to zero (or draining began), while draining.
  Clock::time_point last_idle_ GUARDED_BY(mu_);
  // The last time a request started, while draining: a request that began and ended within
  // the window still breaks the quiet.
  Clock::time_point last_start_ GUARDED_BY(mu_);
};

}  // namespace vramd::server

namespace vramd::server {

// Ends one counted request when it goes out of scope, after the reply has been handed on: the
// first line of a front end's done callback. A null drain counts nothing.
class EndsRequest {
 public:
  explicit EndsRequest(Drain* drain) : drain_(drain) {}
  ~EndsRequest() {
    if (drain_ != nullptr) drain_->RequestEnded();
  }
  EndsRequest(const EndsRequest&) = delete;
  EndsRequest& operator=(const EndsRequest&) = delete;

 private:
  Drain* drain_;
};

}  // namespace vramd::server
