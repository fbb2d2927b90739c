// Peer: one side of the conversation between vramd and a backend host process over a Channel:
// calls that wait for their reply, notifications that do not, and a reader thread that hands
// every other frame to a handler.
//
// Calls carry an id; the other side answers with a kReply frame of that id. Any number of
// threads may call at once. A call may give up at a deadline (CallUntil); its reply, should it
// still come, is dropped. When the stream ends (the other process closed its end or died) or
// a frame fails the checks (channel.h, or the handler refused it), the reader asks on_closed
// for the reason, fails every waiting call with it, and every later call fails at once with it.
//
// The handler runs on the reader thread and must not wait for the other side (it would wait
// for itself): it answers, or hands the work to another thread.
//
// Thread safety: Call, Notify and Reply are safe from any thread. The destructor (or Stop)
// shuts the socket down and joins the reader; it must not run on the reader thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>

#include "backends/remote/channel.h"
#include "core/mutex.h"
#include "core/status.h"

namespace vramd::backends::remote {

// A reply's first fields: the call's outcome.
void EncodeStatus(WireWriter& w, const Status& status);
Status DecodeStatus(WireReader& r);

class Peer {
 public:
  // Handles a frame that is not a reply; an error closes the conversation (as a bad frame).
  using FrameHandler = std::function<Status(Frame frame)>;
  // Why the conversation ended, from what Receive said (OK at end of stream): what waiting and
  // later calls fail with. Runs once, on the reader thread.
  using ClosedHandler = std::function<Status(const Status& receive)>;

  Peer(UniqueFd socket, FrameHandler on_frame, ClosedHandler on_closed);
  ~Peer();
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;

  // Starts the reader thread. REQUIRES: called once.
  void Start();
  // Shuts the socket down and joins the reader (idempotent).
  void Stop();
  // Shuts the socket down without waiting: the reader ends (as at end of stream) on its own.
  void Shutdown();

  // Sends a call and waits for its reply's payload. Fails with the closing reason once the
  // conversation ended.
  Result<Frame> Call(MessageType type, std::string_view payload) EXCLUDES(mu_);
  // Call, giving up at `deadline`: nullopt then (the conversation goes on; the call's reply,
  // should it come later, is dropped).
  Result<std::optional<Frame>> CallUntil(MessageType type, std::string_view payload,
                                         std::chrono::steady_clock::time_point deadline)
      EXCLUDES(mu_);
  // Waits for the conversation to end (someone must end it: Shutdown, or the other side) and
  // returns why it ended.
  Status WaitClosed() const EXCLUDES(mu_);
  Status Notify(MessageType type, std::string_view payload);
  Status Reply(uint64_t id, std::string_view payload);

  // Whether the conversation ended, and why.
  bool closed() const EXCLUDES(mu_);
  Status closed_reason() const EXCLUDES(mu_);

 private:
  struct Pending {
    bool done = false;
    Result<Frame> result = Status::Internal("no reply yet");
  };
  void ReadLoop();
  void Close(const Status& receive) EXCLUDES(mu_);

  Channel channel_;
  const FrameHandler on_frame_;
  const ClosedHandler on_closed_;
  std::thread reader_;

  mutable Mutex mu_;
  mutable std::condition_variable replied_;  // a reply came, or the conversation ended
  uint64_t next_id_ GUARDED_BY(mu_) = 1;
  std::map<uint64_t, Pending*> pending_ GUARDED_BY(mu_);
  // Calls given up at their deadline: a reply to one is not the other side's mistake.
  std::set<uint64_t> abandoned_ GUARDED_BY(mu_);
  bool closed_ GUARDED_BY(mu_) = false;
  Status reason_ GUARDED_BY(mu_);
};

}  // namespace vramd::backends::remote
