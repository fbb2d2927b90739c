// ControlDispatcher: runs model control actions (repository load and unload) on threads of its
// own, so that a load that takes seconds does not hold one of the HTTP server's I/O threads,
// which on a small machine are few (one per core by default) and serve every other request.
// The client still gets its answer when the action is done.
//
// Thread safety: Post may be called from any thread. The destructor runs what was posted, then
// joins the threads.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "core/mutex.h"

namespace vramd::http {

class ControlDispatcher {
 public:
  explicit ControlDispatcher(int threads);
  ~ControlDispatcher();
  ControlDispatcher(const ControlDispatcher&) = delete;
  ControlDispatcher& operator=(const ControlDispatcher&) = delete;

  void Post(std::function<void()> task) EXCLUDES(mu_);

 private:
  void Run() EXCLUDES(mu_);

  Mutex mu_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> tasks_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;         // last: joined before the rest goes
};

}  // namespace vramd::http
