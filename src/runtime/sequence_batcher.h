// SequenceBatcher: the scheduler of a model with sequence_batching (Triton's sequence batcher).
//
// A sequence is the requests that carry one correlation ID, from the one flagged START to the
// one flagged END. It holds a slot of one instance for its whole life, so its requests run on
// that instance one after another, in the order they arrived: the next one is not scheduled
// until the previous one has been answered. Each instance has `slots_per_instance` slots
// (direct: max_batch_size, at least 1; oldest: max_candidate_sequences, or max_batch_size when
// unset). A START that finds every slot taken waits in a backlog, in arrival order, with the
// requests that follow it, until a slot frees.
//
// What each request carries to the backend, besides the client's inputs (sequence_controls.h):
// the control inputs (START, END, READY true, CORRID) and, for implicit state, the state the
// sequence's previous request produced (its initial value on a START). After the request, the
// state output named by the config is copied into memory charged to the sequence and removed
// from the client's response (unless the config also lists it as an output).
//
// Batches, per instance:
//   - direct: the next request of every slot that has one, at its slot's position: where the
//     requests are joined into one batch (a backend without request lists) a slot without a
//     request below the highest one taken is filled by a null request (zeros, READY false),
//     which is not counted and whose answer is dropped, so a model may keep per-slot state by
//     batch index. With minimum_slot_utilization, a batch waits until that share of the slots
//     has a request or max_queue_delay has passed since the oldest one arrived.
//   - oldest: the oldest next requests across the instance's sequences, up to max_batch_size,
//     waiting up to max_queue_delay for a full or preferred-size batch.
//   Joined batches take only requests whose shapes can be joined with the first one's; the
//   others wait for the next execution.
//
// Memory: each sequence that holds a slot is a ledger owner ("sequence 42") under its
// instance; its implicit state is charged to it. When its END has run, when it has been idle
// (no request queued or running) for max_sequence_idle_microseconds (1 s when unset), or at
// unload, it is released: its slot frees, its state goes, and its owner closes, so anything
// left is a leak report naming it. An idle release is logged as a warning with the state it
// freed and counted (counts()); a later request of that sequence without START is refused.
//
// Errors given to a request's callback (Triton's words, InvalidArgument unless noted):
//   - "inference request to model 'm' must specify a non-zero or non-empty correlation ID";
//   - "... must specify batch-size 1 due to requirements of sequence batcher";
//   - "inference request for sequence 42 to model 'm' must specify the START flag on the first
//     request of the sequence" (also after an END, or once the sequence idled out);
//   - a string correlation ID for a model whose CORRID control is an integer type, or the
//     reverse;
//   - Unavailable "<name> is unloading" after Shutdown began.
// Each counts as a failure in the statistics.
//
// Shutdown stops accepting, runs every request already accepted (a backlogged sequence gets a
// slot as the others are released), releases every sequence and joins the threads.
//
// Thread safety: Submit may be called from any number of threads; a request's callback runs on
// an instance thread, or on whichever thread a decoupled model answers from.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "config/model_config.pb.h"
#include "core/mutex.h"
#include "core/status.h"
#include "memory/ledger.h"
#include "runtime/inference_statistics.h"
#include "runtime/memory_context.h"
#include "runtime/request_queue.h"
#include "runtime/request_scheduler.h"
#include "runtime/scheduler.h"
#include "runtime/sequence_controls.h"

namespace vramd::runtime {

class SequenceBatcher : public RequestScheduler {
 public:
  using RunBatch = Scheduler::RunBatch;

  struct Options {
    std::string name;        // "model 'm' version 1", for logs and the unloading error
    std::string model_name;  // "m", as Triton's request errors name it
    std::string thread_name;  // as Scheduler::Options::thread_name
    size_t instance_count = 1;
    int max_batch_size = 0;
    bool oldest = false;  // the strategy; false: direct
    size_t slots_per_instance = 1;
    std::chrono::microseconds idle_timeout{1'000'000};
    std::chrono::microseconds max_queue_delay{0};
    float minimum_slot_utilization = 0;       // direct
    std::vector<int> preferred_batch_sizes;  // oldest
    // The backend runs an execution's requests joined into one batch (no request lists):
    // shapes must agree, and direct fills gaps with null requests.
    bool joins_batches = true;

    // The options `config` (with sequence_batching) gives a version named `name`.
    static Options From(const config::ModelConfig& config, std::string name,
                        size_t instance_count, bool request_lists);
  };

  struct Counts {
    size_t live = 0;        // sequences holding a slot
    size_t backlogged = 0;  // sequences waiting for one
    uint64_t idle_timeouts = 0;  // the statistics' sequence_idle_releases
  };

  // `instance_owners[i]`: instance i's ledger owner, the parent of its sequences' owners.
  // `run`, `stats` and what `memory` points to must outlive the batcher.
  SequenceBatcher(Options options, SequenceControls controls, const MemoryContext& memory,
                  std::vector<memory::OwnerId> instance_owners, RunBatch run,
                  InferenceStatistics* stats);
  ~SequenceBatcher() override;
  SequenceBatcher(const SequenceBatcher&) = delete;
  SequenceBatcher& operator=(const SequenceBatcher&) = delete;

  void Submit(QueuedRequest request) override EXCLUDES(mu_);
  // Never runs on the caller's thread, whatever `allow_inline` says.
  std::optional<QueuedRequest> SubmitOrReturn(QueuedRequest request,
                                              bool allow_inline = true) override EXCLUDES(mu_);
  bool OnWorkerThread() const override;
  void Shutdown() override EXCLUDES(shutdown_mu_, mu_);

  Counts counts() const EXCLUDES(mu_);

 private:
  struct Sequence;
  struct Released;
  struct Worker {
    std::condition_variable wake;  // waited on with mu_
    std::thread thread;
  };
  // What one look at an instance's slots found to do.
  struct Plan {
    std::vector<QueuedRequest> batch;                       // to run now
    std::vector<std::pair<QueuedRequest, Status>> refused;  // to fail now
    SchedulerClock::time_point wake_at = SchedulerClock::time_point::max();
  };

  void WorkerLoop(size_t index) EXCLUDES(mu_);
  // Releases the instance's sequences that are done (ended, idle too long, or any quiescent
  // one while stopping) into `released`, giving their slots to the backlog.
  void Sweep(size_t index, SchedulerClock::time_point now, std::vector<Released>* released)
      REQUIRES(mu_);
  Plan Form(size_t index, SchedulerClock::time_point now) REQUIRES(mu_);
  // A slot for `seq`, or the backlog.
  void Place(Sequence* seq) REQUIRES(mu_);
  void Assign(Sequence* seq, size_t instance, size_t slot) REQUIRES(mu_);
  // The request the backend sees for `client`: its inputs, the controls, the state.
  std::shared_ptr<InferRequest> Augment(const InferRequest& client,
                                        const SequenceSignals& signals,
                                        const std::vector<Tensor>& state) const;
  // A null request shaped as `like` (zeros, READY false) for slot position filling.
  QueuedRequest NullRequest(const InferRequest& like) const;
  // Hands `queued` (a real request of `seq`, run on `instance`) a callback that keeps the state
  // and frees the sequence for its next request before the client's callback runs.
  void WrapAnswer(Sequence* seq, size_t instance, QueuedRequest* queued) REQUIRES(mu_);
  Status CheckRequest(const QueuedRequest& queued) const;
  void Fail(QueuedRequest queued, const Status& status, FailureReason reason) const;
  void Report(const Released& released) const;
  bool SlotsEmpty(size_t index) const REQUIRES(mu_);

  // Constant after construction.
  const Options options_;
  const SequenceControls controls_;
  const MemoryContext memory_;
  const std::vector<memory::OwnerId> instance_owners_;
  const RunBatch run_;
  InferenceStatistics* const stats_;
  std::vector<std::unique_ptr<Worker>> workers_;

  Mutex shutdown_mu_ ACQUIRED_BEFORE(mu_);  // serializes Shutdown

  mutable Mutex mu_;
  // By key ("#42" or "'abc'"); a sequence lives here from its START until released.
  std::map<std::string, std::unique_ptr<Sequence>> sequences_ GUARDED_BY(mu_);
  std::vector<std::vector<Sequence*>> slots_ GUARDED_BY(mu_);  // [instance][slot]; null: free
  std::deque<Sequence*> backlog_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
};

}  // namespace vramd::runtime
