// Scheduler: the queue of one model version and the instance threads that drain it.
//
// Each instance of the version is a thread of the server (DESIGN.md, decision 1) that takes
// work from this one queue, runs it on its instance through RunBatch, and goes back for more.
// An instance runs one execution at a time, whoever drives it.
//
// Two modes, from the config:
//   - Default (no dynamic_batching): FIFO, one request per execution, no queue limits (as in
//     Triton, the queue policy is part of dynamic_batching).
//     Fast path: when no request is waiting and an instance is idle, Submit runs the request
//     right there, on the caller's thread, with that instance (marked busy meanwhile, so still
//     one execution at a time per instance). This saves two thread hand-offs per request, which
//     is what a small model behind the HTTP server pays for most; the caller (an HTTP I/O
//     thread) is held for the length of the execution, as it was before instance threads.
//   - Dynamic batching: every request goes through the queue and its RequestQueue::Policy
//     (max_queue_size, timeouts); an idle instance thread forms batches with ChooseBatch
//     (dynamic_batcher.h), waiting at most max_queue_delay from the oldest request's arrival.
//
// Errors given to a request's callback (with Triton's codes and words, so clients that match
// on them keep working; Triton: core src/scheduler_utils.cc, src/dynamic_batch_scheduler.cc):
//   - Unavailable "Exceeds maximum queue size ..." when the queue is full at Submit;
//   - Unavailable "Request timeout expired ..." for a request past its deadline under
//     timeout_action REJECT. Deadlines are checked whenever an instance thread looks at the
//     queue: at once while an instance is idle, else when one finishes its execution (as in
//     Triton, a request is not pulled out while every instance is busy);
//   - Unavailable "<name> is unloading" for a request submitted after Shutdown began.
// Each is counted as a failure (REJECTED) in the statistics, with the pending gauge kept as
// requests enter and leave the queue.
//
// Shutdown stops accepting, lets the instance threads run everything still queued (without
// waiting for max_queue_delay), waits for inline executions, and joins the threads. Nothing
// queued is dropped and nothing waits forever.
//
// Thread safety: Submit may be called from any number of threads. RunBatch is called with no
// lock held. A request's callback runs on an instance thread or on Submit's caller.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "runtime/dynamic_batcher.h"
#include "runtime/inference_statistics.h"
#include "runtime/request_queue.h"

namespace vramd::runtime {

class Scheduler {
 public:
  // Runs `batch` (one or more requests, in queue order) on instance `instance` and answers
  // every request in it, each exactly once.
  using RunBatch = std::function<void(size_t instance, std::vector<QueuedRequest> batch)>;

  struct Options {
    std::string name;  // "model 'm' version 1", for errors
    size_t instance_count = 1;  // at least 1
    // Dynamic batching; unset: the default mode (one request per execution, fast path).
    std::optional<BatcherOptions> batching;
    // Used with dynamic batching only.
    RequestQueue::Policy queue_policy;
    // Default mode only: false never takes the fast path (every request runs on an instance
    // thread).
    bool inline_execution = true;
  };

  // Starts one thread per instance. `run` and `stats` must outlive the Scheduler.
  Scheduler(Options options, RunBatch run, InferenceStatistics* stats);
  ~Scheduler();  // Shutdown()
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Takes `request` (its `enqueued` time is set here): runs it now on an idle instance (fast
  // path), queues it, or answers it with one of the errors above.
  void Submit(QueuedRequest request);

  // Submit, except that a request arriving after Shutdown began is handed back untouched
  // (nothing answered or counted), so the caller can take it to the version that replaced this
  // one.
  // `allow_inline` false: never the fast path (the caller's thread must not run executions).
  std::optional<QueuedRequest> SubmitOrReturn(QueuedRequest request, bool allow_inline = true);

  // Whether the calling thread is one of this scheduler's instance threads.
  bool OnWorkerThread() const;

  // Stops accepting, runs what is queued, waits for executions in flight, joins the threads.
  // Idempotent. REQUIRES: not called from RunBatch or a request's callback.
  void Shutdown();

 private:
  struct Worker {
    std::condition_variable wake;
    bool busy = false;  // running an execution, on its thread or inline; guarded by mu_
    std::thread thread;
  };

  void WorkerLoop(size_t index);
  // Notifies one worker that is not busy, if any. REQUIRES: mu_ held.
  void WakeIdleWorker();
  // Answers each of `requests` with `status`, counting them as rejected. REQUIRES: mu_ not held.
  void Reject(std::vector<QueuedRequest> requests, const Status& status);

  // Constant after construction.
  const Options options_;
  const RunBatch run_;
  InferenceStatistics* const stats_;
  std::vector<std::unique_ptr<Worker>> workers_;

  std::mutex shutdown_mu_;  // serializes Shutdown

  std::mutex mu_;
  RequestQueue queue_;         // guarded by mu_
  bool stopping_ = false;      // guarded by mu_
  size_t inline_running_ = 0;  // fast-path executions in flight; guarded by mu_
  std::condition_variable inline_done_;
};

}  // namespace vramd::runtime
