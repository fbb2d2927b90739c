#include "runtime/readiness_probe.h"

#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <future>
#include <memory>
#include <utility>

namespace vramd::runtime {
namespace {

Status TooLate(std::chrono::milliseconds timeout) {
  return Status::Unavailable(
      fmt::format("the backend did not say whether it is ready within {} ms", timeout.count()));
}

}  // namespace

ReadinessProbe::ReadinessProbe(std::function<Status()> round)
    : round_(std::move(round)),
      timer_([this](std::stop_token stop) { ExpireLate(stop); }),
      thread_([this](std::stop_token stop) { Run(stop); }) {}

ReadinessProbe::~ReadinessProbe() {
  thread_.request_stop();
  thread_.join();  // a round in flight finishes first, answering its questions
  timer_.request_stop();
  timer_.join();
  std::vector<Waiter> left;
  {
    MutexLock lock(mu_);
    left.swap(waiters_);
  }
  for (auto& w : left) w.done(Status::Unavailable("the model version is unloading"));
}

Status ReadinessProbe::Check(std::chrono::milliseconds timeout) {
  auto answer = std::make_shared<std::promise<Status>>();
  auto future = answer->get_future();
  CheckAsync([answer](Status status) { answer->set_value(std::move(status)); }, timeout);
  return future.get();
}

void ReadinessProbe::CheckAsync(std::function<void(Status)> done,
                                std::chrono::milliseconds timeout) {
  {
    MutexLock lock(mu_);
    uint64_t round;
    if (started_ > finished_) {
      round = started_;  // the round running now answers this question too
    } else {
      round = ++asked_;
      wake_.notify_one();
    }
    waiters_.push_back(
        Waiter{round, std::chrono::steady_clock::now() + timeout, timeout, std::move(done)});
    ++questions_;
  }
  waiting_.notify_one();
}

void ReadinessProbe::Run(std::stop_token stop) {
  MutexLock lock(mu_);
  for (;;) {
    if (!lock.Wait(wake_, stop, [this]() REQUIRES(mu_) { return asked_ > started_; })) return;
    started_ = asked_;  // every question asked so far is answered by this round
    lock.Unlock();
    Status answer;
    try {
      answer = round_();
    } catch (const std::exception& e) {
      answer = Status::Internal(fmt::format("readiness check failed: {}", e.what()));
    }
    lock.Lock();
    finished_ = started_;
    std::vector<Waiter> answered;
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->round <= finished_) {
        answered.push_back(std::move(*it));
        it = waiters_.erase(it);
      } else {
        ++it;
      }
    }
    lock.Unlock();
    for (auto& w : answered) w.done(answer);
    lock.Lock();
  }
}

void ReadinessProbe::ExpireLate(std::stop_token stop) {
  MutexLock lock(mu_);
  while (!stop.stop_requested()) {
    const auto now = std::chrono::steady_clock::now();
    std::vector<Waiter> late;
    auto next = std::chrono::steady_clock::time_point::max();
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->deadline <= now) {
        late.push_back(std::move(*it));
        it = waiters_.erase(it);
      } else {
        next = std::min(next, it->deadline);
        ++it;
      }
    }
    if (!late.empty()) {
      lock.Unlock();
      for (auto& w : late) w.done(TooLate(w.timeout));
      lock.Lock();
      continue;
    }
    const uint64_t seen = questions_;
    auto asked = [this, seen]() REQUIRES(mu_) { return questions_ != seen; };
    // Until the earliest deadline, a new question (whose may be earlier), or stop.
    if (waiters_.empty()) {
      lock.Wait(waiting_, stop, asked);
    } else {
      lock.WaitUntil(waiting_, stop, next, asked);
    }
  }
}

}  // namespace vramd::runtime
