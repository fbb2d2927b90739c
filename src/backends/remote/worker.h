// Worker: one thread running posted tasks in order, joined (after the tasks already posted)
// when the Worker goes. For the backend host's control and per-instance threads and for
// vramd's blocking remote calls.
//
// Thread safety: Post is safe from any thread; the destructor must not run on the worker's own
// thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <thread>
#include <utility>

#include "core/mutex.h"

namespace vramd::backends::remote {

class Worker {
 public:
  Worker() : thread_([this] { Run(); }) {}
  ~Worker() {
    {
      MutexLock lock(mu_);
      stopping_ = true;
      wake_.notify_one();
    }
    thread_.join();
  }
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  void Post(std::function<void()> task) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    tasks_.push_back(std::move(task));
    wake_.notify_one();
  }

  std::thread::id id() const { return thread_.get_id(); }

 private:
  void Run() EXCLUDES(mu_) {
    while (true) {
      std::function<void()> task;
      {
        MutexLock lock(mu_);
        lock.Wait(wake_, [this]() REQUIRES(mu_) { return stopping_ || !tasks_.empty(); });
        if (tasks_.empty()) return;  // stopping, and everything posted ran
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }

  Mutex mu_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> tasks_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace vramd::backends::remote
