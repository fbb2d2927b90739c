#include "backends/remote/peer.h"

#include <fmt/format.h>

#include <exception>
#include <utility>

namespace vramd::backends::remote {

void EncodeStatus(WireWriter& w, const Status& status) {
  w.U32(static_cast<uint32_t>(status.code()));
  w.Str(status.message());
}

Status DecodeStatus(WireReader& r) {
  const uint32_t code = r.U32("code");
  const std::string_view message = r.Str("message");
  if (!r.ok()) return r.status();
  if (code > static_cast<uint32_t>(StatusCode::kUnknown)) {
    return Status::Internal(fmt::format("unknown status code {}: {}", code, message));
  }
  if (code == 0) return Status::Ok();
  return Status(static_cast<StatusCode>(code), std::string(message));
}

Peer::Peer(UniqueFd socket, FrameHandler on_frame, ClosedHandler on_closed)
    : channel_(std::move(socket)), on_frame_(std::move(on_frame)), on_closed_(std::move(on_closed)) {}

Peer::~Peer() { Stop(); }

void Peer::Start() { reader_ = std::thread([this] { ReadLoop(); }); }

void Peer::Stop() {
  channel_.Shutdown();
  if (reader_.joinable()) reader_.join();
}

void Peer::Shutdown() { channel_.Shutdown(); }

void Peer::ReadLoop() {
  Status receive;
  while (true) {
    auto frame = channel_.Receive();
    if (!frame.ok()) {
      receive = frame.status();
      break;
    }
    if (!frame->has_value()) break;  // end of stream
    Frame f = std::move(**frame);
    if (f.type == MessageType::kReply) {
      MutexLock lock(mu_);
      auto it = pending_.find(f.id);
      if (it == pending_.end()) {
        if (abandoned_.erase(f.id) > 0) continue;  // too late: its caller gave up
        receive = Status::InvalidArgument(fmt::format("a reply to call {}, which is not waiting", f.id));
        break;
      }
      it->second->done = true;
      it->second->result = std::move(f);
      pending_.erase(it);
      replied_.notify_all();
      continue;
    }
    Status handled;
    try {
      handled = on_frame_(std::move(f));
    } catch (const std::exception& e) {
      handled = Status::Internal(fmt::format("handling a frame: {}", e.what()));
    }
    if (!handled.ok()) {
      receive = handled;
      break;
    }
  }
  Close(receive);
}

void Peer::Close(const Status& receive) {
  Status reason;
  try {
    reason = on_closed_(receive);
  } catch (const std::exception& e) {
    reason = Status::Unavailable(fmt::format("the connection closed ({})", e.what()));
  }
  if (reason.ok()) reason = Status::Unavailable("the connection closed");
  channel_.Shutdown();
  MutexLock lock(mu_);
  closed_ = true;
  reason_ = reason;
  for (auto& [id, pending] : pending_) {
    pending->done = true;
    pending->result = reason;
  }
  pending_.clear();
  replied_.notify_all();
}

Result<Frame> Peer::Call(MessageType type, std::string_view payload) {
  VRAMD_ASSIGN_OR_RETURN(std::optional<Frame> frame,
                         CallUntil(type, payload, std::chrono::steady_clock::time_point::max()));
  return std::move(*frame);
}

Result<std::optional<Frame>> Peer::CallUntil(MessageType type, std::string_view payload,
                                             std::chrono::steady_clock::time_point deadline) {
  Pending pending;
  uint64_t id;
  {
    MutexLock lock(mu_);
    if (closed_) return reason_;
    id = next_id_++;
    pending_[id] = &pending;
  }
  Status sent = channel_.Send(type, id, payload);
  MutexLock lock(mu_);
  if (!sent.ok() && !pending.done) {
    // Not sent: no reply can come. A closed conversation's reason says more than EPIPE.
    pending_.erase(id);
    return closed_ ? reason_ : sent;
  }
  const auto done = [&]() REQUIRES(mu_) { return pending.done; };
  if (deadline == std::chrono::steady_clock::time_point::max()) {
    lock.Wait(replied_, done);
  } else if (!lock.WaitUntil(replied_, deadline, done)) {
    pending_.erase(id);
    abandoned_.insert(id);
    return std::optional<Frame>();
  }
  VRAMD_ASSIGN_OR_RETURN(Frame frame, std::move(pending.result));
  return std::optional<Frame>(std::move(frame));
}

Status Peer::WaitClosed() const {
  MutexLock lock(mu_);
  lock.Wait(replied_, [this]() REQUIRES(mu_) { return closed_; });
  return reason_;
}

Status Peer::Notify(MessageType type, std::string_view payload) {
  return channel_.Send(type, 0, payload);
}

Status Peer::Reply(uint64_t id, std::string_view payload) {
  return channel_.Send(MessageType::kReply, id, payload);
}

bool Peer::closed() const {
  MutexLock lock(mu_);
  return closed_;
}

Status Peer::closed_reason() const {
  MutexLock lock(mu_);
  return reason_;
}

}  // namespace vramd::backends::remote
