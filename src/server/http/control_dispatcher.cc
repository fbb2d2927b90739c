#include "server/http/control_dispatcher.h"

#include <algorithm>

namespace vramd::http {

ControlDispatcher::ControlDispatcher(int threads) {
  for (int i = 0; i < std::max(1, threads); ++i) threads_.emplace_back([this] { Run(); });
}

ControlDispatcher::~ControlDispatcher() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& t : threads_) t.join();
}

void ControlDispatcher::Post(std::function<void()> task) {
  {
    MutexLock lock(mu_);
    tasks_.push_back(std::move(task));
  }
  wake_.notify_one();
}

void ControlDispatcher::Run() {
  MutexLock lock(mu_);
  for (;;) {
    lock.Wait(wake_, [this]() REQUIRES(mu_) { return stopping_ || !tasks_.empty(); });
    if (tasks_.empty()) return;  // stopping, and nothing left to answer
    auto task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.Unlock();
    task();
    lock.Lock();
  }
}

}  // namespace vramd::http
