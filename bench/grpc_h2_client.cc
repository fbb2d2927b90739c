#include "grpc_h2_client.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <unordered_map>

namespace vramd::bench {
namespace {

constexpr uint8_t kData = 0x0, kHeaders = 0x1, kRstStream = 0x3, kSettings = 0x4, kPing = 0x6,
                  kGoAway = 0x7, kWindowUpdate = 0x8;
constexpr uint8_t kEndStream = 0x1, kAck = 0x1, kEndHeaders = 0x4, kPadded = 0x8;
constexpr uint16_t kInitialWindowSize = 0x4, kMaxFrameSize = 0x5;
constexpr int64_t kMaxWindow = 0x7fffffff;
constexpr uint32_t kLargestFrame = 0xffffff;  // 2^24 - 1, the most SETTINGS_MAX_FRAME_SIZE allows
constexpr size_t kInBuffer = 64 * 1024;
constexpr char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

void Put32(uint32_t v, char* out) {
  out[0] = static_cast<char>(v >> 24);
  out[1] = static_cast<char>(v >> 16);
  out[2] = static_cast<char>(v >> 8);
  out[3] = static_cast<char>(v);
}
uint32_t Get32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

void FrameHeaderBytes(uint32_t length, uint8_t type, uint8_t flags, uint32_t stream, char out[9]) {
  out[0] = static_cast<char>(length >> 16);
  out[1] = static_cast<char>(length >> 8);
  out[2] = static_cast<char>(length);
  out[3] = static_cast<char>(type);
  out[4] = static_cast<char>(flags);
  Put32(stream & 0x7fffffff, out + 5);
}

// HPACK's integer with an N-bit prefix (RFC 7541 section 5.1), the prefix's other bits `first`.
void HpackInteger(uint64_t v, int bits, uint8_t first, std::string* out) {
  const uint64_t max = (1u << bits) - 1;
  if (v < max) {
    out->push_back(static_cast<char>(first | v));
    return;
  }
  out->push_back(static_cast<char>(first | max));
  v -= max;
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}
void HpackString(std::string_view s, std::string* out) {
  HpackInteger(s.size(), 7, 0x00, out);  // not Huffman-coded
  out->append(s);
}
// A literal header field with incremental indexing (it enters the server's dynamic table)
// whose name is static-table entry `index`; 0: a new name, `name`.
void HpackIndexedLiteral(int index, std::string_view name, std::string_view value,
                         std::string* out) {
  HpackInteger(static_cast<uint64_t>(index), 6, 0x40, out);
  if (index == 0) HpackString(name, out);
  HpackString(value, out);
}

}  // namespace

H2UnaryClient::~H2UnaryClient() { Close(); }

void H2UnaryClient::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

bool H2UnaryClient::Fail(std::string why) {
  error_ = std::move(why);
  Close();
  stream_ = 0;
  return false;
}

bool H2UnaryClient::Connect(const std::string& host, int port) {
  Close();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 ||
      found == nullptr) {
    return Fail("cannot resolve " + host);
  }
  fd_ = ::socket(found->ai_family, found->ai_socktype, found->ai_protocol);
  const bool connected = fd_ >= 0 && ::connect(fd_, found->ai_addr, found->ai_addrlen) == 0;
  ::freeaddrinfo(found);
  if (!connected) return Fail("cannot connect to " + host + ":" + std::to_string(port));
  const int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  authority_ = host + ":" + std::to_string(port);
  in_.assign(kInBuffer, 0);
  in_begin_ = in_end_ = 0;
  next_stream_ = 1;
  stream_ = 0;
  peer_max_frame_ = 16384;
  peer_initial_window_ = 65535;
  connection_window_ = 65535;
  consumed_ = 0;
  header_path_.clear();
  // Our SETTINGS: the largest stream window and frame size; then the connection's window to
  // match (it starts at 65,535 whatever SETTINGS say).
  std::string settings;
  for (auto [id, value] : {std::pair<uint16_t, uint32_t>{kInitialWindowSize, kMaxWindow},
                           {kMaxFrameSize, kLargestFrame}}) {
    settings.push_back(static_cast<char>(id >> 8));
    settings.push_back(static_cast<char>(id));
    char v[4];
    Put32(value, v);
    settings.append(v, 4);
  }
  char increment[4];
  Put32(static_cast<uint32_t>(kMaxWindow - 65535), increment);
  return SendAll(kPreface, sizeof kPreface - 1) && SendFrame(kSettings, 0, 0, settings) &&
         SendFrame(kWindowUpdate, 0, 0, std::string_view(increment, 4));
}

bool H2UnaryClient::SendAll(const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t k = ::send(fd_, p, size, MSG_NOSIGNAL);
    if (k <= 0) return Fail("the connection broke while sending");
    p += k;
    size -= static_cast<size_t>(k);
  }
  return true;
}

bool H2UnaryClient::SendFrame(uint8_t type, uint8_t flags, uint32_t stream,
                              std::string_view payload) {
  char h[9];
  FrameHeaderBytes(static_cast<uint32_t>(payload.size()), type, flags, stream, h);
  std::string frame(h, 9);
  frame.append(payload);
  return SendAll(frame.data(), frame.size());
}

bool H2UnaryClient::SendData(std::string_view lead, const char prefix[5],
                             std::string_view message, size_t offset, size_t size, bool last) {
  char h[9];
  FrameHeaderBytes(static_cast<uint32_t>(size), kData, last ? kEndStream : 0, stream_, h);
  iovec iov[4];
  int n = 0;
  if (!lead.empty()) iov[n++] = {const_cast<char*>(lead.data()), lead.size()};
  iov[n++] = {h, 9};
  size_t end = offset + size;
  if (offset < 5) {
    const size_t k = std::min<size_t>(5, end) - offset;
    iov[n++] = {const_cast<char*>(prefix + offset), k};
    offset += k;
  }
  if (offset < end) {
    iov[n++] = {const_cast<char*>(message.data() + (offset - 5)), end - offset};
  }
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = static_cast<size_t>(n);
  size_t left = lead.size() + 9 + size;
  while (left > 0) {
    const ssize_t k = ::sendmsg(fd_, &msg, MSG_NOSIGNAL);
    if (k <= 0) return Fail("the connection broke while sending");
    left -= static_cast<size_t>(k);
    size_t skip = static_cast<size_t>(k);
    while (skip > 0 && msg.msg_iovlen > 0) {  // past what was sent
      if (skip >= msg.msg_iov->iov_len) {
        skip -= msg.msg_iov->iov_len;
        ++msg.msg_iov;
        --msg.msg_iovlen;
      } else {
        msg.msg_iov->iov_base = static_cast<char*>(msg.msg_iov->iov_base) + skip;
        msg.msg_iov->iov_len -= skip;
        skip = 0;
      }
    }
  }
  return true;
}

bool H2UnaryClient::ReadExactly(void* out, size_t size) {
  char* p = static_cast<char*>(out);
  const size_t buffered = std::min(size, in_end_ - in_begin_);
  std::memcpy(p, in_.data() + in_begin_, buffered);
  in_begin_ += buffered;
  p += buffered;
  size -= buffered;
  while (size > 0) {
    if (size >= kInBuffer / 2) {  // large: straight into place
      const ssize_t k = ::recv(fd_, p, size, 0);
      if (k <= 0) return Fail("the connection closed while reading");
      p += k;
      size -= static_cast<size_t>(k);
      continue;
    }
    const ssize_t k = ::recv(fd_, in_.data(), in_.size(), 0);
    if (k <= 0) return Fail("the connection closed while reading");
    in_begin_ = 0;
    in_end_ = static_cast<size_t>(k);
    const size_t take = std::min(size, in_end_);
    std::memcpy(p, in_.data(), take);
    in_begin_ = take;
    p += take;
    size -= take;
  }
  return true;
}

bool H2UnaryClient::ReadFrameHeader(FrameHeader* h) {
  unsigned char b[9];
  if (!ReadExactly(b, 9)) return false;
  h->length = (uint32_t{b[0]} << 16) | (uint32_t{b[1]} << 8) | b[2];
  h->type = b[3];
  h->flags = b[4];
  h->stream = Get32(b + 5) & 0x7fffffff;
  return true;
}

bool H2UnaryClient::ReadIntoBody(size_t size) {
  if (body_size_ + size > body_capacity_) {
    const size_t capacity = std::max(body_size_ + size, body_capacity_ * 2);
    auto grown = std::make_unique_for_overwrite<char[]>(capacity);
    if (body_size_ > 0) std::memcpy(grown.get(), body_.get(), body_size_);
    body_ = std::move(grown);
    body_capacity_ = capacity;
  }
  if (!ReadExactly(body_.get() + body_size_, size)) return false;
  body_size_ += size;
  return true;
}

bool H2UnaryClient::Control(const FrameHeader& h) {
  scratch_.resize(h.length);
  if (!ReadExactly(scratch_.data(), h.length)) return false;
  const auto* p = reinterpret_cast<const unsigned char*>(scratch_.data());
  switch (h.type) {
    case kSettings:
      if (h.flags & kAck) return true;
      for (size_t i = 0; i + 6 <= h.length; i += 6) {
        const uint16_t id = static_cast<uint16_t>((p[i] << 8) | p[i + 1]);
        const uint32_t value = Get32(p + i + 2);
        if (id == kInitialWindowSize) {
          // Applies to open streams too, by the difference (RFC 9113 section 6.9.2).
          stream_window_ += static_cast<int64_t>(value) - peer_initial_window_;
          peer_initial_window_ = value;
        } else if (id == kMaxFrameSize) {
          peer_max_frame_ = value;
        }
      }
      return SendFrame(kSettings, kAck, 0, {});
    case kPing:
      if (h.flags & kAck) return true;
      return SendFrame(kPing, kAck, 0, scratch_);
    case kWindowUpdate:
      if (h.length != 4) return Fail("a WINDOW_UPDATE frame of the wrong size");
      if (h.stream == 0) {
        connection_window_ += Get32(p) & 0x7fffffff;
      } else if (h.stream == stream_) {
        stream_window_ += Get32(p) & 0x7fffffff;
      }
      return true;
    case kGoAway:
      return Fail("the server sent GOAWAY");
    case kRstStream:
      if (h.stream == stream_) return Fail("the server reset the call's stream");
      return true;
    default:  // PRIORITY, CONTINUATION of an earlier answer, frames of ended streams
      return true;
  }
}

bool H2UnaryClient::TopUpWindow() {
  if (consumed_ < (uint64_t{1} << 30)) return true;
  char increment[4];
  Put32(static_cast<uint32_t>(consumed_), increment);
  consumed_ = 0;
  return SendFrame(kWindowUpdate, 0, 0, std::string_view(increment, 4));
}

bool H2UnaryClient::HeaderBlock(std::string_view path) {
  if (header_path_.empty()) {
    // The first call's headers enter the server's dynamic table, as a gRPC client's do, and
    // later calls name them by index: entries 62 (the last added) to 65 (the first).
    header_block_.clear();
    header_block_.push_back(static_cast<char>(0x83));  // :method POST (static entry 3)
    header_block_.push_back(static_cast<char>(0x86));  // :scheme http (6)
    HpackIndexedLiteral(4, {}, path, &header_block_);  // :path
    HpackIndexedLiteral(1, {}, authority_, &header_block_);  // :authority
    HpackIndexedLiteral(31, {}, "application/grpc", &header_block_);  // content-type
    HpackIndexedLiteral(0, "te", "trailers", &header_block_);
    header_path_ = std::string(path);
    return true;
  }
  if (header_path_ == path) {
    header_block_ = {static_cast<char>(0x83), static_cast<char>(0x86),
                     static_cast<char>(0x80 | 65), static_cast<char>(0x80 | 64),
                     static_cast<char>(0x80 | 63), static_cast<char>(0x80 | 62)};
    return true;
  }
  return Fail("one connection calls one method: connect again for another");
}

bool H2UnaryClient::Call(std::string_view path, std::string_view message,
                         std::string_view* answer) {
  if (fd_ < 0) return Fail("not connected");
  if (next_stream_ > 0x7fffffff - 2) return Fail("stream identifiers used up: connect again");
  if (!HeaderBlock(path)) return false;
  stream_ = next_stream_;
  next_stream_ += 2;
  stream_window_ = peer_initial_window_;
  char head[9];
  FrameHeaderBytes(static_cast<uint32_t>(header_block_.size()), kHeaders, kEndHeaders, stream_,
                   head);
  std::string headers(head, 9);
  headers.append(header_block_);
  std::string_view unsent = headers;  // goes with the first DATA frame

  char prefix[5] = {0};  // not compressed, then the message's length
  Put32(static_cast<uint32_t>(message.size()), prefix + 1);
  const size_t total = 5 + message.size();
  size_t sent = 0;
  while (sent < total) {
    const int64_t window = std::min(connection_window_, stream_window_);
    if (window <= 0) {  // wait for the server to open its windows
      if (!unsent.empty()) {  // it sees the call first
        if (!SendAll(unsent.data(), unsent.size())) return false;
        unsent = {};
      }
      FrameHeader h;
      if (!ReadFrameHeader(&h)) return false;
      if (h.stream == stream_ && (h.type == kHeaders || h.type == kData)) {
        return Fail("the server answered before the request was whole");
      }
      if (!Control(h)) return false;
      continue;
    }
    const size_t size = std::min<size_t>({total - sent, peer_max_frame_, static_cast<size_t>(window)});
    if (!SendData(unsent, prefix, message, sent, size, sent + size == total)) return false;
    unsent = {};
    sent += size;
    connection_window_ -= static_cast<int64_t>(size);
    stream_window_ -= static_cast<int64_t>(size);
  }

  body_size_ = 0;
  for (;;) {
    FrameHeader h;
    if (!ReadFrameHeader(&h)) return false;
    if (h.stream != stream_ || (h.type != kData && h.type != kHeaders)) {
      if (!Control(h)) return false;
      continue;
    }
    if (h.type == kData) {
      consumed_ += h.length;
      if (h.flags & kPadded) {
        unsigned char pad = 0;
        if (h.length < 1 || !ReadExactly(&pad, 1) || pad > h.length - 1) {
          return Fail("a padded DATA frame is malformed");
        }
        if (!ReadIntoBody(h.length - 1 - pad)) return false;
        scratch_.resize(pad);
        if (!ReadExactly(scratch_.data(), pad)) return false;
      } else if (!ReadIntoBody(h.length)) {
        return false;
      }
      if (!TopUpWindow()) return false;
      if (h.flags & kEndStream) return Fail("the answer ended without trailers");
      continue;
    }
    // HEADERS: the answer's headers, or with END_STREAM its trailers. The block is skipped;
    // CONTINUATION frames of it, if any, are skipped as frames of an ended stream.
    const bool end = (h.flags & kEndStream) != 0;
    FrameHeader block = h;
    block.type = 0xff;  // read and dropped by Control's default
    if (!Control(block)) return false;
    if (!end) continue;
    stream_ = 0;
    if (body_size_ == 0) return Fail("the call failed: a trailers-only answer (an error status)");
    const auto* b = reinterpret_cast<const unsigned char*>(body_.get());
    if (body_size_ < 5 || b[0] != 0 || Get32(b + 1) != body_size_ - 5) {
      return Fail("the answer is not one whole uncompressed gRPC message");
    }
    *answer = std::string_view(body_.get() + 5, body_size_ - 5);
    return true;
  }
}

bool H2UnaryClient::Multiplex(std::string_view path, std::string_view message, int depth,
                              const std::function<bool()>& more,
                              const std::function<void(std::string_view, double)>& answered) {
  using Clock = std::chrono::steady_clock;
  if (fd_ < 0) return Fail("not connected");
  const size_t total = 5 + message.size();
  struct Pending {
    std::string body;
    Clock::time_point sent;
  };
  std::unordered_map<uint32_t, Pending> pending;
  std::string out;  // one call's HEADERS and DATA frames, sent with one write
  auto start = [&]() -> bool {
    if (next_stream_ > 0x7fffffff - 2) return Fail("stream identifiers used up: connect again");
    if (total > peer_max_frame_ || static_cast<int64_t>(total) > peer_initial_window_) {
      return Fail("a multiplexed call's request must fit one frame and the initial window");
    }
    if (!HeaderBlock(path)) return false;
    const uint32_t stream = next_stream_;
    next_stream_ += 2;
    char h[9];
    out.clear();
    FrameHeaderBytes(static_cast<uint32_t>(header_block_.size()), kHeaders, kEndHeaders, stream, h);
    out.append(h, 9);
    out.append(header_block_);
    FrameHeaderBytes(static_cast<uint32_t>(total), kData, kEndStream, stream, h);
    out.append(h, 9);
    char prefix[5] = {0};  // not compressed, then the message's length
    Put32(static_cast<uint32_t>(message.size()), prefix + 1);
    out.append(prefix, 5);
    out.append(message);
    connection_window_ -= static_cast<int64_t>(total);
    pending[stream].sent = Clock::now();
    return SendAll(out.data(), out.size());
  };
  // Calls to start as soon as the connection's window lets them.
  int owed = 0;
  auto start_owed = [&]() -> bool {
    for (; owed > 0 && connection_window_ >= static_cast<int64_t>(total); --owed) {
      if (!start()) return false;
    }
    return true;
  };
  for (int i = 0; i < depth && more(); ++i) ++owed;
  if (!start_owed()) return false;
  while (!pending.empty() || owed > 0) {
    FrameHeader h;
    if (!ReadFrameHeader(&h)) return false;
    auto it = pending.find(h.stream);
    if (it == pending.end() || (h.type != kData && h.type != kHeaders && h.type != kRstStream)) {
      if (!Control(h) || !start_owed()) return false;  // a WINDOW_UPDATE may let calls start
      continue;
    }
    if (h.type == kRstStream) return Fail("the server reset a call's stream");
    if (h.type == kData) {
      if (h.flags & kPadded) return Fail("a padded DATA frame (not expected from gRPC)");
      consumed_ += h.length;
      const size_t at = it->second.body.size();
      it->second.body.resize(at + h.length);
      if (!ReadExactly(it->second.body.data() + at, h.length)) return false;
      if (!TopUpWindow()) return false;
      if (h.flags & kEndStream) return Fail("an answer ended without trailers");
      continue;
    }
    // HEADERS: skipped (see Call); with END_STREAM, the trailers end the call.
    const bool end = (h.flags & kEndStream) != 0;
    FrameHeader block = h;
    block.type = 0xff;
    if (!Control(block)) return false;
    if (!end) continue;
    Pending done = std::move(it->second);
    pending.erase(it);
    const auto* b = reinterpret_cast<const unsigned char*>(done.body.data());
    if (done.body.empty()) return Fail("a call failed: a trailers-only answer (an error status)");
    if (done.body.size() < 5 || b[0] != 0 || Get32(b + 1) != done.body.size() - 5) {
      return Fail("an answer is not one whole uncompressed gRPC message");
    }
    answered(std::string_view(done.body.data() + 5, done.body.size() - 5),
             std::chrono::duration<double>(Clock::now() - done.sent).count());
    if (more()) ++owed;
    if (!start_owed()) return false;
  }
  return true;
}

}  // namespace vramd::bench
