#include "runtime/sequence_batcher.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

#include "memory/allocator.h"
#include "memory/cuda_devices.h"
#include "runtime/batch_assembly.h"

namespace vramd::runtime {
namespace {

uint64_t ElapsedNs(SchedulerClock::time_point start) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(SchedulerClock::now() - start).count());
}

bool IsString(const InferRequest& r) { return !r.correlation_id_string.empty(); }

std::string SequenceKey(const InferRequest& r) {
  return IsString(r) ? "'" + r.correlation_id_string : fmt::format("#{}", r.correlation_id);
}

std::string SequenceLabel(const InferRequest& r) {
  return IsString(r) ? fmt::format("'{}'", r.correlation_id_string)
                     : std::to_string(r.correlation_id);
}

bool HasFlag(const QueuedRequest& q, uint32_t flag) { return (q.request->flags & flag) != 0; }

// The sequence's ledger owner: closed when the last state block charged to it has gone, so
// state still read by a request in flight never shows as a leak.
struct SequenceOwner {
  memory::ScopedOwner owner;
  ~SequenceOwner() { owner.Close(); }  // leaks are filed and logged by the ledger's callback
};

// One state tensor's bytes, charged to its sequence.
struct StateBlock {
  std::shared_ptr<SequenceOwner> sequence;  // first: destroyed after the buffer
  memory::Buffer buffer;
};

}  // namespace

struct SequenceBatcher::Sequence {
  std::string key;
  std::string label;  // "42" or "'abc'"
  bool string_id = false;
  uint64_t correlation_id = 0;
  std::string correlation_id_string;
  int instance = -1;  // -1: in the backlog
  size_t slot = 0;
  std::deque<QueuedRequest> pending;
  bool in_flight = false;
  bool ended = false;  // its END has run: the next request must START
  SchedulerClock::time_point last_active;
  std::shared_ptr<SequenceOwner> owner;  // opened with its slot
  std::vector<Tensor> state;             // per StateSpec, as the next request reads it
};

struct SequenceBatcher::Released {
  enum class Why { kEnded, kIdle, kUnload };
  std::unique_ptr<Sequence> sequence;
  Why why = Why::kEnded;
};

SequenceBatcher::Options SequenceBatcher::Options::From(const config::ModelConfig& config,
                                                        std::string name,
                                                        size_t instance_count,
                                                        bool request_lists) {
  const auto& seq = config.sequence_batching();
  Options options;
  options.name = std::move(name);
  options.model_name = config.name();
  options.thread_name = config.name();
  options.instance_count = std::max<size_t>(1, instance_count);
  options.max_batch_size = config.max_batch_size();
  const size_t batch = static_cast<size_t>(std::max(1, config.max_batch_size()));
  options.oldest = seq.has_oldest();
  if (options.oldest) {
    const int candidates = seq.oldest().max_candidate_sequences();
    options.slots_per_instance = candidates > 0 ? static_cast<size_t>(candidates) : batch;
    options.max_queue_delay = std::chrono::microseconds(seq.oldest().max_queue_delay_microseconds());
    options.preferred_batch_sizes.assign(seq.oldest().preferred_batch_size().begin(),
                                         seq.oldest().preferred_batch_size().end());
  } else {
    options.slots_per_instance = batch;
    options.max_queue_delay = std::chrono::microseconds(seq.direct().max_queue_delay_microseconds());
    options.minimum_slot_utilization = seq.direct().minimum_slot_utilization();
  }
  if (seq.max_sequence_idle_microseconds() > 0) {
    options.idle_timeout = std::chrono::microseconds(seq.max_sequence_idle_microseconds());
  }
  options.joins_batches = !request_lists;
  return options;
}

SequenceBatcher::SequenceBatcher(Options options, SequenceControls controls,
                                 const MemoryContext& memory,
                                 std::vector<memory::OwnerId> instance_owners, RunBatch run,
                                 InferenceStatistics* stats)
    : options_(std::move(options)),
      controls_(std::move(controls)),
      memory_(memory),
      instance_owners_(std::move(instance_owners)),
      run_(std::move(run)),
      stats_(stats),
      slots_(std::max<size_t>(1, options_.instance_count),
             std::vector<Sequence*>(std::max<size_t>(1, options_.slots_per_instance), nullptr)) {
  const size_t count = slots_.size();
  workers_.reserve(count);
  for (size_t i = 0; i < count; ++i) workers_.push_back(std::make_unique<Worker>());
  for (size_t i = 0; i < count; ++i) {
    workers_[i]->thread = std::thread([this, i] { WorkerLoop(i); });
  }
}

SequenceBatcher::~SequenceBatcher() { Shutdown(); }

SequenceBatcher::Counts SequenceBatcher::counts() const {
  Counts counts;
  counts.idle_timeouts = stats_->Snapshot().sequence_idle_releases;
  MutexLock lock(mu_);
  counts.backlogged = backlog_.size();
  counts.live = sequences_.size() - backlog_.size();
  return counts;
}

Status SequenceBatcher::CheckRequest(const QueuedRequest& queued) const {
  const InferRequest& r = *queued.request;
  if (r.correlation_id == 0 && r.correlation_id_string.empty()) {
    return Status::InvalidArgument(fmt::format(
        "inference request to model '{}' must specify a non-zero or non-empty correlation ID",
        options_.model_name));
  }
  if (options_.max_batch_size > 0 && queued.batch_size != 1) {
    return Status::InvalidArgument(fmt::format(
        "inference request to model '{}' must specify batch-size 1 due to requirements of "
        "sequence batcher",
        options_.model_name));
  }
  if (auto type = controls_.correlation_type()) {
    const bool wants_string = *type == DataType::kBytes;
    if (wants_string != IsString(r)) {
      return Status::InvalidArgument(fmt::format(
          "inference request for sequence {} to model '{}' has a {} correlation ID, but the "
          "model's CORRID control '{}' is {}",
          SequenceLabel(r), options_.model_name, IsString(r) ? "string" : "integer",
          controls_.correlation_input(), DataTypeConfigName(*type)));
    }
  }
  return Status::Ok();
}

void SequenceBatcher::Fail(QueuedRequest queued, const Status& status,
                           FailureReason reason) const {
  stats_->RecordFailure(ElapsedNs(queued.arrival), reason);
  queued.done(status);
}

void SequenceBatcher::Submit(QueuedRequest request) {
  auto refused = SubmitOrReturn(std::move(request));
  if (!refused) return;
  Fail(std::move(*refused), Status::Unavailable(fmt::format("{} is unloading", options_.name)),
       FailureReason::kRejected);
}

std::optional<QueuedRequest> SequenceBatcher::SubmitOrReturn(QueuedRequest request, bool) {
  const auto now = SchedulerClock::now();
  request.enqueued = now;
  if (Status invalid = CheckRequest(request); !invalid.ok()) {
    Fail(std::move(request), invalid, FailureReason::kOther);
    return std::nullopt;
  }
  const InferRequest& r = *request.request;
  MutexLock lock(mu_);
  if (stopping_) return request;
  auto it = sequences_.find(SequenceKey(r));
  if (it == sequences_.end()) {
    if (!HasFlag(request, kRequestFlagSequenceStart)) {
      lock.Unlock();
      Fail(std::move(request),
           Status::InvalidArgument(fmt::format(
               "inference request for sequence {} to model '{}' must specify the START flag on "
               "the first request of the sequence",
               SequenceLabel(r), options_.model_name)),
           FailureReason::kOther);
      return std::nullopt;
    }
    auto seq = std::make_unique<Sequence>();
    seq->key = SequenceKey(r);
    seq->label = SequenceLabel(r);
    seq->string_id = IsString(r);
    seq->correlation_id = r.correlation_id;
    seq->correlation_id_string = r.correlation_id_string;
    it = sequences_.emplace(seq->key, std::move(seq)).first;
    stats_->AddLiveSequences(1);
    Place(it->second.get());
  }
  Sequence* seq = it->second.get();
  seq->last_active = now;
  seq->pending.push_back(std::move(request));
  stats_->AddPending(1);
  if (seq->instance >= 0) workers_[seq->instance]->wake.notify_one();
  return std::nullopt;
}

void SequenceBatcher::Place(Sequence* seq) {
  size_t best = slots_.size();
  size_t best_free = 0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const size_t free = static_cast<size_t>(std::count(slots_[i].begin(), slots_[i].end(), nullptr));
    if (free > best_free) {
      best = i;
      best_free = free;
    }
  }
  if (best == slots_.size()) {
    backlog_.push_back(seq);
    return;
  }
  const auto slot = std::find(slots_[best].begin(), slots_[best].end(), nullptr);
  Assign(seq, best, static_cast<size_t>(slot - slots_[best].begin()));
}

void SequenceBatcher::Assign(Sequence* seq, size_t instance, size_t slot) {
  slots_[instance][slot] = seq;
  seq->instance = static_cast<int>(instance);
  seq->slot = slot;
  seq->owner = std::make_shared<SequenceOwner>();
  seq->owner->owner = memory::ScopedOwner(memory_.ledger, instance_owners_.at(instance),
                                          memory::OwnerKind::kSequence,
                                          "sequence " + seq->label);
}

bool SequenceBatcher::SlotsEmpty(size_t index) const {
  return std::all_of(slots_[index].begin(), slots_[index].end(),
                     [](const Sequence* s) { return s == nullptr; });
}

void SequenceBatcher::Sweep(size_t index, SchedulerClock::time_point now,
                            std::vector<Released>* released) {
  for (size_t slot = 0; slot < slots_[index].size(); ++slot) {
    Sequence* seq = slots_[index][slot];
    if (seq == nullptr || seq->in_flight || !seq->pending.empty()) continue;
    Released::Why why;
    if (seq->ended) {
      why = Released::Why::kEnded;
    } else if (now - seq->last_active >= options_.idle_timeout) {
      why = Released::Why::kIdle;
      stats_->RecordSequenceIdleRelease();
    } else if (stopping_) {
      why = Released::Why::kUnload;
    } else {
      continue;
    }
    slots_[index][slot] = nullptr;
    auto node = sequences_.extract(seq->key);
    stats_->AddLiveSequences(-1);
    released->push_back({std::move(node.mapped()), why});
    if (!backlog_.empty()) {
      Sequence* next = backlog_.front();
      backlog_.pop_front();
      Assign(next, index, slot);
    }
  }
}

std::shared_ptr<InferRequest> SequenceBatcher::Augment(const InferRequest& client,
                                                       const SequenceSignals& signals,
                                                       const std::vector<Tensor>& state) const {
  auto request = std::make_shared<InferRequest>(client);
  controls_.AddControls(signals, &request->inputs);
  request->inputs.insert(request->inputs.end(), state.begin(), state.end());
  if (!request->outputs.empty()) {
    // The state output must come back from the backend even where the client named others.
    for (const StateSpec& spec : controls_.states()) {
      const bool named = std::any_of(request->outputs.begin(), request->outputs.end(),
                                     [&](const RequestedOutput& o) { return o.name == spec.output_name; });
      if (!named) request->outputs.push_back({spec.output_name, true, 0});
    }
  }
  return request;
}

QueuedRequest SequenceBatcher::NullRequest(const InferRequest& like) const {
  auto request = std::make_shared<InferRequest>();
  request->model_name = like.model_name;
  request->model_version = like.model_version;
  request->outputs = like.outputs;
  auto zeros = [](const Tensor& t) {
    // A BYTES tensor of empty elements is a zero length per element.
    const size_t size = t.datatype == DataType::kBytes
                            ? 4 * static_cast<size_t>(std::max<int64_t>(0, ElementCount(t.shape)))
                            : t.data.size();
    return Tensor{t.name, t.datatype, t.shape, SharedBuffer::FromString(std::string(size, '\0')),
                  kOnHost};
  };
  // As Augment orders them: the inputs, the controls (READY false), then the state.
  for (const Tensor& t : like.inputs) {
    if (!controls_.IsControl(t.name) && !controls_.IsState(t.name)) {
      request->inputs.push_back(zeros(t));
    }
  }
  SequenceSignals signals;
  signals.ready = false;
  controls_.AddControls(signals, &request->inputs);
  for (const Tensor& t : like.inputs) {
    if (controls_.IsState(t.name)) request->inputs.push_back(zeros(t));
  }
  QueuedRequest queued;
  queued.request = std::move(request);
  queued.done = [](Result<InferOutcome>) {};
  queued.null_request = true;
  queued.arrival = queued.enqueued = SchedulerClock::now();
  return queued;
}

void SequenceBatcher::WrapAnswer(Sequence* seq, size_t instance, QueuedRequest* queued) {
  const bool end = HasFlag(*queued, kRequestFlagSequenceEnd);
  queued->done = [this, seq, instance, end, owner = seq->owner,
                  done = std::move(queued->done)](Result<InferOutcome> outcome) mutable {
    // The state is copied out of the response before the sequence may run its next request.
    std::vector<Tensor> state;
    Status kept = Status::Ok();
    if (outcome.ok()) {
      auto& outputs = outcome->response.outputs;
      for (const StateSpec& spec : controls_.states()) {
        auto it = std::find_if(outputs.begin(), outputs.end(),
                               [&](const Tensor& t) { return t.name == spec.output_name; });
        if (it == outputs.end()) continue;  // not updated: the state stays as it was
        if (it->datatype != spec.datatype) {
          kept = Status::InvalidArgument(fmt::format(
              "{}: state output '{}' is {}, and the state is {}", options_.name, spec.output_name,
              DataTypeConfigName(it->datatype), DataTypeConfigName(spec.datatype)));
          break;
        }
        bool fits = it->shape.size() == spec.dims.size();
        for (size_t d = 0; fits && d < spec.dims.size(); ++d) {
          fits = spec.dims[d] == -1 || spec.dims[d] == it->shape[d];
        }
        if (!fits) {
          kept = Status::InvalidArgument(fmt::format(
              "{}: state output '{}' has shape {}, and the state's is {}", options_.name,
              spec.output_name, ShapeToString(it->shape), ShapeToString(spec.dims)));
          break;
        }
        Tensor copy{spec.input_name, spec.datatype, it->shape, {}, it->gpu};
        const size_t size = it->data.size();
        if (size > 0) {
          const memory::Device device = memory::Device::OfTensorGpu(it->gpu);
          auto block = std::make_shared<StateBlock>();
          block->sequence = owner;
          auto buffer = memory_.allocator->Allocate(device, size, 0, owner->owner.id());
          if (!buffer.ok()) {
            kept = buffer.status().WithContext(
                fmt::format("{}: keeping state '{}'", options_.name, spec.input_name));
            break;
          }
          block->buffer = std::move(buffer).value();
          kept = memory::CopyBytes(device, block->buffer.data(), device, it->data.data(), size,
                                  nullptr);
          if (!kept.ok()) break;
          const auto* bytes = static_cast<const std::byte*>(block->buffer.data());
          copy.data = SharedBuffer::View(std::move(block), bytes, size);
        }
        state.push_back(std::move(copy));
        if (!spec.also_output) outputs.erase(it);
      }
    }
    {
      MutexLock lock(mu_);
      if (kept.ok()) {
        for (Tensor& t : state) {
          for (Tensor& current : seq->state) {
            if (current.name == t.name) current = std::move(t);
          }
        }
      }
      seq->in_flight = false;
      seq->last_active = SchedulerClock::now();
      if (end) seq->ended = true;
      workers_[instance]->wake.notify_one();
    }
    // `seq` may be released from here on.
    if (!kept.ok()) outcome = std::move(kept);
    done(std::move(outcome));
  };
}

SequenceBatcher::Plan SequenceBatcher::Form(size_t index, SchedulerClock::time_point now) {
  Plan plan;
  std::vector<Sequence*> ready;
  for (Sequence* seq : slots_[index]) {
    if (seq == nullptr || seq->in_flight) continue;
    // After an END only a new START may continue the sequence.
    while (seq->ended && !seq->pending.empty() &&
           !HasFlag(seq->pending.front(), kRequestFlagSequenceStart)) {
      plan.refused.emplace_back(
          std::move(seq->pending.front()),
          Status::InvalidArgument(fmt::format(
              "inference request for sequence {} to model '{}' must specify the START flag on "
              "the first request of the sequence",
              seq->label, options_.model_name)));
      seq->pending.pop_front();
      stats_->AddPending(-1);
    }
    if (!seq->pending.empty()) {
      ready.push_back(seq);
    } else if (!seq->ended && !stopping_) {
      plan.wake_at = std::min(plan.wake_at, seq->last_active + options_.idle_timeout);
    }
  }
  if (ready.empty()) return plan;

  auto oldest_arrival = SchedulerClock::time_point::max();
  for (Sequence* seq : ready) {
    oldest_arrival = std::min(oldest_arrival, seq->pending.front().enqueued);
  }
  const size_t max_batch = static_cast<size_t>(std::max(1, options_.max_batch_size));
  const bool delay_over = stopping_ || now >= oldest_arrival + options_.max_queue_delay;
  if (options_.oldest) {
    std::stable_sort(ready.begin(), ready.end(), [](const Sequence* a, const Sequence* b) {
      return a->pending.front().enqueued < b->pending.front().enqueued;
    });
    if (ready.size() > max_batch) ready.resize(max_batch);
    const bool preferred =
        std::find(options_.preferred_batch_sizes.begin(), options_.preferred_batch_sizes.end(),
                  static_cast<int>(ready.size())) != options_.preferred_batch_sizes.end();
    if (ready.size() < max_batch && !preferred && !delay_over) {
      plan.wake_at = std::min(plan.wake_at, oldest_arrival + options_.max_queue_delay);
      return plan;
    }
  } else if (options_.minimum_slot_utilization > 0 && !delay_over &&
             static_cast<float>(ready.size()) <
                 options_.minimum_slot_utilization * static_cast<float>(slots_[index].size())) {
    plan.wake_at = std::min(plan.wake_at, oldest_arrival + options_.max_queue_delay);
    return plan;
  }

  // The requests as the backend sees them; a joined batch takes those that join the first.
  std::vector<std::pair<Sequence*, std::shared_ptr<InferRequest>>> chosen;
  for (Sequence* seq : ready) {
    const QueuedRequest& head = seq->pending.front();
    SequenceSignals signals;
    signals.start = HasFlag(head, kRequestFlagSequenceStart);
    signals.end = HasFlag(head, kRequestFlagSequenceEnd);
    signals.correlation_id = seq->correlation_id;
    signals.correlation_id_string = seq->correlation_id_string;
    if (signals.start) {
      seq->state.clear();
      for (const StateSpec& spec : controls_.states()) seq->state.push_back(spec.initial);
      seq->ended = false;
    }
    auto request = Augment(*head.request, signals, seq->state);
    if (options_.joins_batches && !chosen.empty() &&
        !CanBatchTogether(*chosen.front().second, *request)) {
      continue;
    }
    chosen.emplace_back(seq, std::move(request));
  }
  const bool fill = options_.joins_batches && !options_.oldest && options_.max_batch_size > 0;
  if (fill) {
    std::sort(chosen.begin(), chosen.end(),
              [](const auto& a, const auto& b) { return a.first->slot < b.first->slot; });
  }
  for (auto& [seq, request] : chosen) {
    if (fill) {
      while (plan.batch.size() < seq->slot) plan.batch.push_back(NullRequest(*request));
    }
    QueuedRequest queued = std::move(seq->pending.front());
    seq->pending.pop_front();
    stats_->AddPending(-1);
    queued.request = std::move(request);
    seq->in_flight = true;
    WrapAnswer(seq, index, &queued);
    plan.batch.push_back(std::move(queued));
  }
  return plan;
}

void SequenceBatcher::Report(const Released& released) const {
  const Sequence& seq = *released.sequence;
  if (released.why != Released::Why::kIdle) return;
  int64_t bytes = 0;
  for (const Tensor& t : seq.state) bytes += static_cast<int64_t>(t.data.size());
  spdlog::warn(
      "{}: sequence {} idled out: no request for {} ms (max_sequence_idle_microseconds); its "
      "slot and {} bytes of implicit state are released, and a later request of it must START "
      "again",
      options_.name, seq.label,
      std::chrono::duration_cast<std::chrono::milliseconds>(options_.idle_timeout).count(), bytes);
}

void SequenceBatcher::WorkerLoop(size_t index) {
  NameInstanceThread(options_.thread_name, index);
  Worker& self = *workers_[index];
  MutexLock lock(mu_);
  while (true) {
    const auto now = SchedulerClock::now();
    std::vector<Released> released;
    Sweep(index, now, &released);
    Plan plan = Form(index, now);
    if (!released.empty() || !plan.refused.empty() || !plan.batch.empty()) {
      lock.Unlock();
      for (const Released& r : released) Report(r);
      released.clear();  // the state goes and each sequence's owner closes here
      for (auto& [queued, status] : plan.refused) {
        Fail(std::move(queued), status, FailureReason::kOther);
      }
      if (!plan.batch.empty()) run_(index, std::move(plan.batch));
      lock.Lock();
      continue;
    }
    if (stopping_ && SlotsEmpty(index) && backlog_.empty()) break;
    if (plan.wake_at == SchedulerClock::time_point::max()) {
      lock.Wait(self.wake);
    } else {
      lock.WaitUntil(self.wake, plan.wake_at);
    }
  }
}

bool SequenceBatcher::OnWorkerThread() const {
  const auto self = std::this_thread::get_id();
  for (const auto& worker : workers_) {
    if (worker->thread.get_id() == self) return true;
  }
  return false;
}

void SequenceBatcher::Shutdown() {
  MutexLock shutdown(shutdown_mu_);
  {
    MutexLock lock(mu_);
    stopping_ = true;
    for (auto& worker : workers_) worker->wake.notify_all();
  }
  for (auto& worker : workers_) {
    if (worker->thread.joinable()) worker->thread.join();
  }
}

}  // namespace vramd::runtime
