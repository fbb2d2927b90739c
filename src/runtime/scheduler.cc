#include "runtime/scheduler.h"

#include <fmt/format.h>
#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

namespace vramd::runtime {
namespace {

uint64_t NsSince(SchedulerClock::time_point start) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(SchedulerClock::now() - start).count());
}

}  // namespace

void NameInstanceThread(const std::string& base, size_t index) {
  if (base.empty()) return;
  const std::string suffix = fmt::format("#{}", index);
  std::string name = base;
  name.resize(std::min(name.size(), suffix.size() < 15 ? 15 - suffix.size() : 0));
  name += suffix;
  pthread_setname_np(pthread_self(), name.c_str());
}

Scheduler::Scheduler(Options options, RunBatch run, InferenceStatistics* stats)
    : options_(std::move(options)),
      run_(std::move(run)),
      stats_(stats),
      busy_(std::max<size_t>(1, options_.instance_count)),
      queue_(options_.batching ? RequestQueue(options_.queue_policy) : RequestQueue()) {
  const size_t count = busy_.size();
  workers_.reserve(count);
  for (size_t i = 0; i < count; ++i) workers_.push_back(std::make_unique<Worker>());
  for (size_t i = 0; i < count; ++i) {
    workers_[i]->thread = std::thread([this, i] { WorkerLoop(i); });
  }
}

Scheduler::~Scheduler() { Shutdown(); }

void Scheduler::Submit(QueuedRequest request) {
  auto refused = SubmitOrReturn(std::move(request));
  if (!refused) return;
  std::vector<QueuedRequest> one;
  one.push_back(std::move(*refused));
  Reject(std::move(one), Status::Unavailable(fmt::format("{} is unloading", options_.name)));
}

std::optional<QueuedRequest> Scheduler::SubmitOrReturn(QueuedRequest request,
                                                      bool allow_inline) {
  const auto now = SchedulerClock::now();
  request.enqueued = now;
  MutexLock lock(mu_);
  if (stopping_) return request;
  if (allow_inline && options_.inline_execution && !options_.batching && queue_.empty() &&
      ShortEnoughToRunInline(now)) {
    for (size_t i = 0; i < workers_.size(); ++i) {
      if (busy_[i].busy) continue;
      // Fast path: run it here, on the caller's thread, with instance i.
      busy_[i] = {true, now};
      ++inline_running_;
      lock.Unlock();
      std::vector<QueuedRequest> batch;
      batch.push_back(std::move(request));
      run_(i, std::move(batch));
      const auto end = SchedulerClock::now();
      lock.Lock();
      RecordExecution(end - now);
      busy_[i].busy = false;
      --inline_running_;
      // Its thread takes what came meanwhile, or, once stopping, sees that it may exit: it was
      // told to stop while this call held the instance, and nothing else wakes it again.
      if (!queue_.empty() || stopping_) workers_[i]->wake.notify_one();
      if (inline_running_ == 0) inline_done_.notify_all();
      return std::nullopt;
    }
  }
  if (queue_.Full()) {
    const size_t queued = queue_.size();
    lock.Unlock();
    std::vector<QueuedRequest> one;
    one.push_back(std::move(request));
    Reject(std::move(one),
           Status::Unavailable(fmt::format(
               "Exceeds maximum queue size: {} already has {} request(s) queued "
               "(dynamic_batching.default_queue_policy.max_queue_size {})",
               options_.name, queued, options_.queue_policy.max_queue_size)));
    return std::nullopt;
  }
  const auto enqueued = request.enqueued;
  queue_.Push(std::move(request), enqueued);
  stats_->AddPending(1);
  WakeIdleWorker();
  return std::nullopt;
}

std::chrono::nanoseconds Scheduler::DefaultIdleSpin() {
  static const std::chrono::nanoseconds spin = [] {
    const char* text = std::getenv("VRAMD_INSTANCE_IDLE_SPIN_US");
    long us = kDefaultIdleSpinUs;
    if (text != nullptr) {
      us = std::strtol(text, nullptr, 10);
    } else if (std::thread::hardware_concurrency() < kIdleSpinMinCpus) {
      us = 0;  // a spinning thread would take the core its client or another thread needs
    }
    return std::chrono::nanoseconds(std::chrono::microseconds(std::clamp(us, 0L, 100000L)));
  }();
  return spin;
}

void Scheduler::WakeIdleWorker() {
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (!busy_[i].busy && busy_[i].spinning) {
      busy_[i].spinning = false;  // handed this request: the next one goes to another worker
      workers_[i]->spin_ended.store(true, std::memory_order_release);
      return;
    }
  }
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (!busy_[i].busy) {
      workers_[i]->wake.notify_one();
      return;
    }
  }
}

void Scheduler::PollForWork(const Worker& self) const {
  const auto deadline = SchedulerClock::now() + options_.idle_spin;
  while (!self.spin_ended.load(std::memory_order_acquire)) {
    for (int i = 0; i < 64; ++i) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    if (SchedulerClock::now() >= deadline) break;
  }
}

bool Scheduler::ShortEnoughToRunInline(SchedulerClock::time_point now) {
  for (const Busy& instance : busy_) {
    if (!instance.busy) continue;
    // A lower bound on that execution's length, not a sample: it may only raise the estimate.
    const auto running = now - instance.since;
    if (running >= options_.inline_budget &&
        (!execution_estimate_ || running > *execution_estimate_)) {
      execution_estimate_ = running;
    }
  }
  return execution_estimate_ && *execution_estimate_ < options_.inline_budget;
}

void Scheduler::RecordExecution(SchedulerClock::duration length) {
  if (!execution_estimate_ || length >= *execution_estimate_) {
    execution_estimate_ = length;
    return;
  }
  *execution_estimate_ -= (*execution_estimate_ - length) / 8;
}

void Scheduler::WorkerLoop(size_t index) {
  NameInstanceThread(options_.thread_name, index);
  Worker& self = *workers_[index];
  MutexLock lock(mu_);
  bool may_spin = false;  // once after each execution (see Options::idle_spin)
  while (true) {
    if (queue_.empty() || busy_[index].busy) {  // busy: an inline caller holds this instance
      if (stopping_ && queue_.empty()) break;
      if (may_spin && !busy_[index].busy) {
        may_spin = false;
        busy_[index].spinning = true;
        self.spin_ended.store(false, std::memory_order_relaxed);
        lock.Unlock();
        PollForWork(self);
        lock.Lock();
        busy_[index].spinning = false;
        continue;
      }
      lock.Wait(self.wake);
      continue;
    }
    const auto now = SchedulerClock::now();
    std::vector<QueuedRequest> expired = queue_.TakeExpired(now);
    if (!expired.empty()) {
      stats_->AddPending(-static_cast<int64_t>(expired.size()));
      lock.Unlock();
      Reject(std::move(expired),
             Status::Unavailable(fmt::format(
                 "Request timeout expired: it waited in the queue of {} past its timeout",
                 options_.name)));
      lock.Lock();
      continue;
    }
    size_t count = 1;
    if (options_.batching) {
      const BatchChoice choice = ChooseBatch(queue_, *options_.batching, now, stopping_);
      if (choice.count == 0) {
        if (choice.wake_at == SchedulerClock::time_point::max()) {
          lock.Wait(self.wake);
        } else {
          lock.WaitUntil(self.wake, choice.wake_at);
        }
        continue;
      }
      count = choice.count;
    }
    std::vector<QueuedRequest> batch = queue_.PopFront(count);
    stats_->AddPending(-static_cast<int64_t>(count));
    busy_[index] = {true, SchedulerClock::now()};
    if (!queue_.empty()) WakeIdleWorker();
    lock.Unlock();
    run_(index, std::move(batch));
    const auto end = SchedulerClock::now();
    lock.Lock();
    RecordExecution(end - busy_[index].since);
    busy_[index].busy = false;
    may_spin = options_.idle_spin.count() > 0;
  }
}

void Scheduler::Reject(std::vector<QueuedRequest> requests, const Status& status) {
  for (auto& r : requests) {
    stats_->RecordFailure(NsSince(r.arrival), FailureReason::kRejected);
    r.done(status);
  }
}

bool Scheduler::OnWorkerThread() const {
  const auto self = std::this_thread::get_id();
  for (const auto& worker : workers_) {
    if (worker->thread.get_id() == self) return true;
  }
  return false;
}

std::optional<SchedulerClock::duration> Scheduler::ExecutionEstimate() const {
  MutexLock lock(mu_);
  return execution_estimate_;
}

void Scheduler::Shutdown() {
  MutexLock shutdown(shutdown_mu_);
  {
    MutexLock lock(mu_);
    stopping_ = true;
    for (auto& worker : workers_) {
      worker->spin_ended.store(true, std::memory_order_release);
      worker->wake.notify_all();
    }
  }
  for (auto& worker : workers_) {
    if (worker->thread.joinable()) worker->thread.join();
  }
  MutexLock lock(mu_);
  lock.Wait(inline_done_, [this]() REQUIRES(mu_) { return inline_running_ == 0; });
}

}  // namespace vramd::runtime
