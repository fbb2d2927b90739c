// Channel: frames over one end of an AF_UNIX SOCK_SEQPACKET socketpair, between vramd and a
// backend host process (docs/remote-backends.md).
//
// A frame is a 24-byte header (magic, type, call id, flags) and a payload. A payload of up to
// kMaxInlinePayload bytes travels in the datagram itself; a larger one (tensors) is written into
// a memfd_create segment, sealed against shrinking, growing and writing (F_SEAL_*), passed with
// SCM_RIGHTS and mapped read-only by the receiver. memfd segments have no name in any file
// system: nothing is ever left in /dev/shm, whichever process is killed and however (the
// kernel frees a segment with its last descriptor or mapping). That is the point of them here,
// against Triton's python-backend shm regions that outlive a killed stub (server#7481, pb PR
// #450).
//
// Receive checks every frame before it is handed out: the header's magic and size, a known
// type, no truncation (of the datagram or its control data), exactly one descriptor for an
// external payload and none otherwise, and an external segment that is a sealed memfd at least
// as large as the frame says (so that the sender can neither shrink it under the mapping,
// which would fault, nor change bytes after they were checked). A frame that fails is an
// InvalidArgument naming why; descriptors that came with it are closed.
//
// Thread safety: Send is safe from any thread (each frame is one sendmsg, which a SEQPACKET
// socket delivers whole); Receive is one reader thread's. Shutdown may be called from any
// thread and makes a blocked Receive return end-of-stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

#include "backends/remote/unique_fd.h"
#include "backends/remote/wire.h"
#include "core/status.h"

namespace vramd::backends::remote {

inline constexpr size_t kMaxInlinePayload = 32 * 1024;
// The largest external payload a receiver maps (a tensor larger than this cannot cross).
inline constexpr uint64_t kMaxExternalPayload = uint64_t{64} << 30;

// A received frame. Copies share the payload's storage (a buffer or a mapping), which lives as
// long as any copy: views into the payload stay valid while a copy is kept.
class Frame {
 public:
  MessageType type = MessageType::kReply;
  uint64_t id = 0;
  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  bool external() const { return external_; }

 private:
  friend class Channel;
  std::shared_ptr<const void> storage_;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
  bool external_ = false;
};

class Channel {
 public:
  explicit Channel(UniqueFd socket) : socket_(std::move(socket)) {}

  // A connected SOCK_SEQPACKET pair (close-on-exec set on both).
  static Result<std::pair<UniqueFd, UniqueFd>> SocketPair();

  // Sends one frame. Unavailable when the peer is gone (no SIGPIPE is raised), Internal for
  // another failure (making a segment).
  Status Send(MessageType type, uint64_t id, std::string_view payload);

  // The next frame; nullopt at end of stream (the peer closed its end, or Shutdown). Errors:
  // InvalidArgument for a frame that fails the checks above (see the top of this file),
  // Internal for a failing recvmsg or mmap.
  Result<std::optional<Frame>> Receive();

  void Shutdown();
  int fd() const { return socket_.get(); }

 private:
  UniqueFd socket_;
  std::unique_ptr<std::byte[]> receive_buffer_;  // kMaxInlinePayload bytes, made on first use
};

}  // namespace vramd::backends::remote
