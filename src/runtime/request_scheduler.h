// RequestScheduler: what a LoadedModel hands its admitted requests to, and the one place that
// decides which instance runs them and when. Scheduler (scheduler.h) serves the default mode and
// dynamic batching; SequenceBatcher (sequence_batcher.h) serves sequence_batching.
//
// Thread safety: Submit and SubmitOrReturn may be called from any number of threads.
#pragma once

#include <optional>

#include "runtime/request_queue.h"

namespace vramd::runtime {

class RequestScheduler {
 public:
  virtual ~RequestScheduler() = default;

  // Takes `request` and answers it exactly once: runs it, or fails it with the scheduler's
  // error (its header lists them).
  virtual void Submit(QueuedRequest request) = 0;

  // Submit, except that a request arriving after Shutdown began is handed back untouched
  // (nothing answered or counted), so the caller can take it to the version that replaced this
  // one. `allow_inline` false: the caller's thread must not run the execution.
  virtual std::optional<QueuedRequest> SubmitOrReturn(QueuedRequest request,
                                                      bool allow_inline = true) = 0;

  // Whether the calling thread is one of this scheduler's instance threads.
  virtual bool OnWorkerThread() const = 0;

  // Stops accepting, runs what was accepted, waits for executions in flight and joins the
  // threads. Idempotent. REQUIRES: not called from an execution or a request's callback.
  virtual void Shutdown() = 0;
};

}  // namespace vramd::runtime
