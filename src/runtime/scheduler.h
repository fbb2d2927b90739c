// Scheduler: the queue of one model version and the instance threads that drain it.
//
// Each instance of the version is a thread of the server (DESIGN.md, decision 1) that takes
// work from this one queue, runs it on its instance through RunBatch, and goes back for more.
// An instance runs one execution at a time, whoever drives it.
//
// Two modes, from the config:
//   - Default (no dynamic_batching): FIFO, one request per execution, no queue limits (as in
//     Triton, the queue policy is part of dynamic_batching).
//     Fast path: when no request is waiting, an instance is idle and the version's executions
//     are known to be short, Submit runs the request right there, on the caller's thread, with
//     that instance (marked busy meanwhile, so still one execution at a time per instance).
//     This saves two thread hand-offs per request, which is what a small model behind the HTTP
//     server pays for most. But the caller is an HTTP I/O thread that also serves every other
//     connection given to it (health probes, metadata, metrics, other models): an execution
//     held there delays all of them for its whole length. So the fast path is taken only while
//     the version's execution estimate is below Options::inline_budget; otherwise the request
//     goes to the instance threads and the caller returns at once.
//     The estimate is a decaying maximum of the lengths of its executions, inline or on the
//     instance threads (each one measured around RunBatch, response encoding included, since
//     that too runs on the caller when inline). A longer execution raises it at once; each
//     shorter one lowers it by 1/8 of the way, so a version that was slow needs several fast
//     executions (about 60 to come down from 3 s to 1 ms) before it runs inline again: an
//     execution time that varies is treated as its recent worst. It starts unknown, so a new
//     version's first execution (a warmup sample, if it has one) runs on an instance thread.
//     An execution still running past the budget counts as soon as a Submit sees it, so when
//     a model's execution time jumps, one slow inline execution holds one caller, not every
//     caller that arrives while it runs.
//     Idle spin (Options::idle_spin; the server's setting is DefaultIdleSpin(): 50 us on a
//     machine of 8 or more hardware threads): an instance thread that finds the queue empty
//     after an execution polls for the next request for that long before it sleeps on its
//     condition variable, and Submit hands a request to a polling thread by a flag, not a
//     wake-up. Where the fast path is off (python models run on their instance threads only),
//     each request otherwise pays the wake-up of a sleeping thread, which in a virtual machine
//     means waking an idle vCPU (on the H200 machine: python identity at c=1 12.8k -> 14.5k
//     req/s, docs/benchmarks.md). One spin per idle stretch: a thread that polled in vain sleeps
//     until woken, so an idle server burns no CPU. Small machines get none: there the spinning
//     thread takes the core the client or the HTTP thread needs (slower on a 2-core one).
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

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/mutex.h"
#include "core/status.h"
#include "runtime/dynamic_batcher.h"
#include "runtime/inference_statistics.h"
#include "runtime/request_queue.h"
#include "runtime/request_scheduler.h"

namespace vramd::runtime {

// Names the calling thread "<base>#<index>", cut to the system's 15 bytes, as top, gdb and crash
// reports show an instance's thread; an empty `base` leaves it unnamed.
void NameInstanceThread(const std::string& base, size_t index);

class Scheduler : public RequestScheduler {
 public:
  // Runs `batch` (one or more requests, in queue order) on instance `instance` and answers
  // every request in it, each exactly once.
  using RunBatch = std::function<void(size_t instance, std::vector<QueuedRequest> batch)>;

  struct Options {
    std::string name;  // "model 'm' version 1", for errors
    // Instance threads are named "<thread_name>#<i>" (cut to the system's 15 bytes), as top,
    // gdb and crash reports (core/crash_report.h) show them; empty: left unnamed.
    std::string thread_name;
    size_t instance_count = 1;  // at least 1
    // Dynamic batching; unset: the default mode (one request per execution, fast path).
    std::optional<BatcherOptions> batching;
    // Used with dynamic batching only.
    RequestQueue::Policy queue_policy;
    // Default mode only: false never takes the fast path (every request runs on an instance
    // thread).
    bool inline_execution = true;
    // Default mode only: the fast path is taken only while the execution estimate is below
    // this. 1 ms: the hand-offs the fast path saves cost tens of microseconds, which matters
    // only for executions of that order, while a caller held for 1 ms adds at most that to
    // the requests queued behind it on its I/O thread, far below what a health probe or
    // client timeout notices.
    std::chrono::nanoseconds inline_budget = std::chrono::milliseconds(1);
    // How long an idle instance thread polls for work before it sleeps (see the top of this
    // file); 0: never. DefaultIdleSpin() is the server's setting.
    std::chrono::nanoseconds idle_spin{0};
  };

  // The server's idle spin, read once: VRAMD_INSTANCE_IDLE_SPIN_US in microseconds (0: none)
  // when set, else kDefaultIdleSpinUs on a machine with at least kIdleSpinMinCpus hardware
  // threads and none on a smaller one.
  static std::chrono::nanoseconds DefaultIdleSpin();
  static constexpr long kDefaultIdleSpinUs = 50;
  static constexpr unsigned kIdleSpinMinCpus = 8;

  // Starts one thread per instance. `run` and `stats` must outlive the Scheduler.
  Scheduler(Options options, RunBatch run, InferenceStatistics* stats);
  ~Scheduler() override;  // Shutdown()
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Takes `request` (its `enqueued` time is set here): runs it now on an idle instance (fast
  // path), queues it, or answers it with one of the errors above.
  void Submit(QueuedRequest request) override EXCLUDES(mu_);

  // Submit, except that a request arriving after Shutdown began is handed back untouched
  // (nothing answered or counted), so the caller can take it to the version that replaced this
  // one.
  // `allow_inline` false: never the fast path (the caller's thread must not run executions).
  std::optional<QueuedRequest> SubmitOrReturn(QueuedRequest request,
                                              bool allow_inline = true) override EXCLUDES(mu_);

  // Whether the calling thread is one of this scheduler's instance threads.
  bool OnWorkerThread() const override;

  // The execution estimate that decides the fast path (see the top of this file); unset
  // until the first execution has ended.
  std::optional<SchedulerClock::duration> ExecutionEstimate() const EXCLUDES(mu_);

  // Stops accepting, runs what is queued, waits for executions in flight, joins the threads.
  // Idempotent. REQUIRES: not called from RunBatch or a request's callback.
  void Shutdown() override EXCLUDES(shutdown_mu_, mu_);

 private:
  struct Worker {
    std::condition_variable wake;  // waited on with mu_
    // Set (with mu_ held) to end the thread's spin: a request was handed to it, or stopping.
    std::atomic<bool> spin_ended{false};
    std::thread thread;
  };
  // An instance's state, beside its Worker so that mu_ can guard it.
  struct Busy {
    bool busy = false;  // running an execution, on its thread or inline
    SchedulerClock::time_point since;  // when that execution began
    // Polling for work without mu_ and not yet handed a request (WakeIdleWorker's first pick).
    bool spinning = false;
  };

  void WorkerLoop(size_t index) EXCLUDES(mu_);
  // Hands the queue's news to one worker that is not busy, if any: a spinning one by its flag,
  // else a sleeping one by its condition variable.
  void WakeIdleWorker() REQUIRES(mu_);
  // Polls for at most idle_spin until a request is handed to `self` (its spin_ended is set).
  void PollForWork(const Worker& self) const EXCLUDES(mu_);
  // Whether a request submitted at `now` may run on the caller's thread: the estimate is
  // known and below the budget, and no execution in flight has run past it (which raises the
  // estimate).
  bool ShortEnoughToRunInline(SchedulerClock::time_point now) REQUIRES(mu_);
  // Folds an execution of `length` into the estimate.
  void RecordExecution(SchedulerClock::duration length) REQUIRES(mu_);
  // Answers each of `requests` with `status`, counting them as rejected.
  void Reject(std::vector<QueuedRequest> requests, const Status& status) EXCLUDES(mu_);

  // Constant after construction.
  const Options options_;
  const RunBatch run_;
  InferenceStatistics* const stats_;
  std::vector<std::unique_ptr<Worker>> workers_;

  Mutex shutdown_mu_ ACQUIRED_BEFORE(mu_);  // serializes Shutdown

  mutable Mutex mu_;
  std::vector<Busy> busy_ GUARDED_BY(mu_);  // by instance, as workers_
  RequestQueue queue_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  size_t inline_running_ GUARDED_BY(mu_) = 0;  // fast-path executions in flight
  // Decaying maximum of execution lengths (see the top of this file); unset until the first
  // execution ends.
  std::optional<SchedulerClock::duration> execution_estimate_ GUARDED_BY(mu_);
  std::condition_variable inline_done_;  // waited on with mu_
};

}  // namespace vramd::runtime
