#include "backends/remote/channel.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <vector>

namespace vramd::backends::remote {
namespace {

constexpr uint32_t kMagic = 0x444d5256;  // "VRMD"
constexpr uint32_t kFlagExternal = 1;
constexpr int kRequiredSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE;

struct Header {
  uint32_t magic;
  uint32_t type;
  uint64_t id;
  uint32_t flags;
  uint32_t reserved;
};
static_assert(sizeof(Header) == 24);

std::string Errno(const char* what) { return fmt::format("{}: {}", what, std::strerror(errno)); }

// A mapping, unmapped when the last Frame that shares it goes.
struct Mapping {
  void* address = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (address != nullptr && address != MAP_FAILED) ::munmap(address, size);
  }
};

// An aligned copy of an inline payload.
struct AlignedBuffer {
  std::byte* data = nullptr;
  explicit AlignedBuffer(size_t size)
      : data(static_cast<std::byte*>(::operator new(size == 0 ? 1 : size,
                                                     std::align_val_t(kTensorAlignment)))) {}
  ~AlignedBuffer() { ::operator delete(data, std::align_val_t(kTensorAlignment)); }
};

Result<UniqueFd> MakeSegment(std::string_view payload) {
  UniqueFd fd(::memfd_create("vramd-remote", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) return Status::Internal(Errno("memfd_create"));
  size_t written = 0;
  while (written < payload.size()) {
    const ssize_t n = ::write(fd.get(), payload.data() + written, payload.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::ResourceExhausted(Errno("writing a memfd segment"));
    written += static_cast<size_t>(n);
  }
  if (::fcntl(fd.get(), F_ADD_SEALS, kRequiredSeals | F_SEAL_SEAL) != 0) {
    return Status::Internal(Errno("sealing a memfd segment"));
  }
  return fd;
}

}  // namespace

Result<std::pair<UniqueFd, UniqueFd>> Channel::SocketPair() {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0) {
    return Status::Internal(Errno("socketpair"));
  }
  return std::make_pair(UniqueFd(fds[0]), UniqueFd(fds[1]));
}

Status Channel::Send(MessageType type, uint64_t id, std::string_view payload) {
  Header header{kMagic, static_cast<uint32_t>(type), id, 0, 0};
  UniqueFd segment;
  uint64_t external_size = payload.size();
  iovec iov[2];
  iov[0] = {&header, sizeof header};
  if (payload.size() > kMaxInlinePayload) {
    VRAMD_ASSIGN_OR_RETURN(segment, MakeSegment(payload));
    header.flags = kFlagExternal;
    iov[1] = {&external_size, sizeof external_size};
  } else {
    iov[1] = {const_cast<char*>(payload.data()), payload.size()};
  }
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = 2;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  if (segment.valid()) {
    std::memset(control, 0, sizeof control);
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    const int raw = segment.get();
    std::memcpy(CMSG_DATA(c), &raw, sizeof raw);
  }
  while (true) {
    const ssize_t n = ::sendmsg(socket_.get(), &msg, MSG_NOSIGNAL);
    if (n >= 0) return Status::Ok();
    if (errno == EINTR) continue;
    if (errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN || errno == EBADF) {
      return Status::Unavailable(fmt::format("sending {}: the other process is gone",
                                             MessageTypeName(static_cast<uint32_t>(type))));
    }
    return Status::Internal(Errno("sendmsg"));
  }
}

Result<std::optional<Frame>> Channel::Receive() {
  if (receive_buffer_ == nullptr) receive_buffer_ = std::make_unique<std::byte[]>(kMaxInlinePayload);
  Header header{};
  iovec iov[2] = {{&header, sizeof header}, {receive_buffer_.get(), kMaxInlinePayload}};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8)];
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = 2;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = ::recvmsg(socket_.get(), &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    if (errno == ECONNRESET || errno == EBADF || errno == ENOTCONN) return std::optional<Frame>();
    return Status::Internal(Errno("recvmsg"));
  }
  // Every descriptor that came is owned here first, so that a refused frame closes them all.
  std::vector<UniqueFd> fds;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      fds.emplace_back(fd);
    }
  }
  if (n == 0) return std::optional<Frame>();  // end of stream (frames are never empty)
  if ((msg.msg_flags & MSG_CTRUNC) != 0) {
    return Status::InvalidArgument("a frame came with more descriptors than any frame carries");
  }
  if ((msg.msg_flags & MSG_TRUNC) != 0) {
    return Status::InvalidArgument(fmt::format(
        "a frame is larger than {} bytes, which only an external payload may be",
        sizeof header + kMaxInlinePayload));
  }
  if (static_cast<size_t>(n) < sizeof header) {
    return Status::InvalidArgument(fmt::format("a frame of {} bytes is shorter than its header", n));
  }
  if (header.magic != kMagic) {
    return Status::InvalidArgument(fmt::format("a frame has magic {:#x}, not {:#x}", header.magic, kMagic));
  }
  if (!IsKnownMessageType(header.type)) {
    return Status::InvalidArgument(fmt::format("a frame has unknown type {}", header.type));
  }
  if ((header.flags & ~kFlagExternal) != 0 || header.reserved != 0) {
    return Status::InvalidArgument(fmt::format("a frame has unknown flags {:#x}", header.flags));
  }
  const size_t inline_size = static_cast<size_t>(n) - sizeof header;
  Frame frame;
  frame.type = static_cast<MessageType>(header.type);
  frame.id = header.id;
  const std::string name = MessageTypeName(header.type);
  if ((header.flags & kFlagExternal) == 0) {
    if (!fds.empty()) {
      return Status::InvalidArgument(fmt::format("an inline {} frame came with descriptors", name));
    }
    auto buffer = std::make_shared<AlignedBuffer>(inline_size);
    if (inline_size > 0) std::memcpy(buffer->data, receive_buffer_.get(), inline_size);
    frame.data_ = buffer->data;
    frame.size_ = inline_size;
    frame.storage_ = std::move(buffer);
    return std::optional<Frame>(std::move(frame));
  }
  uint64_t size = 0;
  if (inline_size != sizeof size || fds.size() != 1) {
    return Status::InvalidArgument(fmt::format(
        "an external {} frame needs an 8-byte size and one descriptor, not {} bytes and {}", name,
        inline_size, fds.size()));
  }
  std::memcpy(&size, receive_buffer_.get(), sizeof size);
  if (size <= kMaxInlinePayload || size > kMaxExternalPayload) {
    return Status::InvalidArgument(fmt::format(
        "an external {} frame says {} bytes (external payloads are {}..{} bytes)", name, size,
        kMaxInlinePayload + 1, kMaxExternalPayload));
  }
  const int seals = ::fcntl(fds[0].get(), F_GET_SEALS);
  if (seals < 0 || (seals & kRequiredSeals) != kRequiredSeals) {
    return Status::InvalidArgument(fmt::format(
        "an external {} frame's segment is not a memfd sealed against shrinking, growing and "
        "writing", name));
  }
  struct stat st {};
  if (::fstat(fds[0].get(), &st) != 0 || st.st_size < 0 || static_cast<uint64_t>(st.st_size) < size) {
    return Status::InvalidArgument(fmt::format(
        "an external {} frame says {} bytes but its segment has {}", name, size,
        static_cast<long long>(st.st_size)));
  }
  auto mapping = std::make_shared<Mapping>();
  mapping->size = static_cast<size_t>(size);
  mapping->address = ::mmap(nullptr, mapping->size, PROT_READ, MAP_SHARED, fds[0].get(), 0);
  if (mapping->address == MAP_FAILED) return Status::Internal(Errno("mmap of a frame's segment"));
  frame.data_ = static_cast<const std::byte*>(mapping->address);
  frame.size_ = mapping->size;
  frame.external_ = true;
  frame.storage_ = std::move(mapping);
  return std::optional<Frame>(std::move(frame));  // the descriptor closes; the mapping stays
}

void Channel::Shutdown() {
  if (socket_.valid()) ::shutdown(socket_.get(), SHUT_RDWR);
}

}  // namespace vramd::backends::remote
