// ResponseSender: one thread that sends an instance's responses after its execute returned.
// Sending a response is the server's work (encoding it, handing it to its connection, closing
// the request's ledger owner) and was a quarter of a python identity model's instance thread
// (docs/benchmarks.md); done here, the instance thread takes its next requests, and the GIL,
// while the last ones go out.
//
// Tasks run in the order posted and never touch Python. Thread safety: Post is safe from any
// thread; the destructor runs what was posted, then joins (never on the sender's own thread).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace vramd::python {

class ResponseSender {
 public:
  ResponseSender();
  ~ResponseSender();
  ResponseSender(const ResponseSender&) = delete;
  ResponseSender& operator=(const ResponseSender&) = delete;

  void Post(std::function<void()> task);

 private:
  void Run();

  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> tasks_;  // guarded by mu_
  bool stopping_ = false;                    // guarded by mu_
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace vramd::python
