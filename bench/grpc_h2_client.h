// H2UnaryClient: one HTTP/2 connection that sends gRPC unary calls one at a time, speaking the
// protocol itself (as h2load does) rather than through gRPC's client library, so that the load
// generator costs what infer_load's HTTP/1.1 client costs and the server is what is measured.
//
// What it does of HTTP/2 (RFC 9113) and gRPC's mapping onto it:
//   - the preface, its SETTINGS (the largest stream window and frame size, so that answers are
//     never held by flow control) and a connection WINDOW_UPDATE to match, topped up as answers
//     are read; the server's SETTINGS and PINGs acknowledged;
//   - each call: a HEADERS frame (POST, the method's path, content-type application/grpc,
//     te: trailers; added to the server's HPACK table by the first call and named by index
//     after, as gRPC's clients do; one method per connection) and the message in DATA
//     frames within the server's frame size and flow-control windows (its WINDOW_UPDATEs and
//     SETTINGS read while waiting for window);
//   - the answer: DATA frames gathered into one gRPC message, ended by a HEADERS frame with
//     END_STREAM (the trailers). Header blocks are skipped, not decoded: a call succeeds when
//     one whole, uncompressed message came before the trailers, which gRPC servers send only
//     with status OK (an error is a trailers-only answer). RST_STREAM or GOAWAY fail it.
//
// Blocking sockets: a thread per connection, as infer_load has; one call in flight (Call), or
// several on streams of their own (Multiplex).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace vramd::bench {

class H2UnaryClient {
 public:
  H2UnaryClient() = default;
  ~H2UnaryClient();
  H2UnaryClient(const H2UnaryClient&) = delete;
  H2UnaryClient& operator=(const H2UnaryClient&) = delete;

  // Connects and exchanges the preface. False with error() set on failure.
  bool Connect(const std::string& host, int port);

  // One call of `path` ("/package.Service/Method") with the serialized request `message`.
  // True with the answer's serialized message in `*answer`, which views this client's buffer
  // until the next call; false with error() set. After a failure the connection is closed:
  // Connect again.
  bool Call(std::string_view path, std::string_view message, std::string_view* answer);

  // Calls of `path` with `message` kept `depth` at a time in flight on this connection, a
  // stream each, as gRPC's clients multiplex a channel's concurrent calls: a new one starts as
  // each answer comes, while `more()` says so. `answered(answer, seconds)` for each answer (the
  // view lives until the next). The request must fit one DATA frame and the server's initial
  // windows (small tensors). False with error() set on a failure; the connection is closed.
  bool Multiplex(std::string_view path, std::string_view message, int depth,
                 const std::function<bool()>& more,
                 const std::function<void(std::string_view, double)>& answered);

  const std::string& error() const { return error_; }

 private:
  struct FrameHeader {
    uint32_t length = 0;
    uint8_t type = 0;
    uint8_t flags = 0;
    uint32_t stream = 0;
  };

  bool Fail(std::string why);
  // This connection's header block for `path` (the first call's enters the server's dynamic
  // table; later ones name it by index). False: one connection calls one method.
  bool HeaderBlock(std::string_view path);
  // Gives the connection's window back what answers used, once that reaches 1 GiB.
  bool TopUpWindow();
  bool SendAll(const void* data, size_t size);
  bool SendFrame(uint8_t type, uint8_t flags, uint32_t stream, std::string_view payload);
  // Sends `size` bytes of the call's DATA (the 5-byte gRPC prefix, then the message) from
  // `offset` as one frame, END_STREAM if `last`, in one write after `lead` (the call's HEADERS
  // frame before its first DATA, as gRPC's own client writes a call's first bytes: sent
  // apart, they reach the server as two segments and wake it twice).
  bool SendData(std::string_view lead, const char prefix[5], std::string_view message,
                size_t offset, size_t size, bool last);
  // Appends `size` bytes read from the connection to the answer's buffer.
  bool ReadIntoBody(size_t size);
  // Reads exactly `size` bytes, first from what is buffered.
  bool ReadExactly(void* out, size_t size);
  bool ReadFrameHeader(FrameHeader* h);
  // Handles a frame that is not the current call's HEADERS or DATA (SETTINGS, PING,
  // WINDOW_UPDATE, GOAWAY, RST_STREAM...). False on a connection error or when the frame
  // ends the current call with an error.
  bool Control(const FrameHeader& h);
  void Close();

  int fd_ = -1;
  std::string authority_;
  std::string error_;
  std::vector<char> in_;  // bytes read, not yet consumed: [in_begin_, in_end_)
  size_t in_begin_ = 0;
  size_t in_end_ = 0;
  uint32_t next_stream_ = 1;
  uint32_t stream_ = 0;  // the call in flight, 0 for none
  // What the server lets us send: its frame size, and the connection's and current stream's
  // windows (the stream's starts at the server's initial window).
  uint32_t peer_max_frame_ = 16384;
  int64_t peer_initial_window_ = 65535;
  int64_t connection_window_ = 65535;
  int64_t stream_window_ = 0;
  // Answer bytes read since the connection window was last topped up.
  uint64_t consumed_ = 0;
  // The answer's DATA bytes (uninitialized storage, reused from call to call).
  std::unique_ptr<char[]> body_;
  size_t body_capacity_ = 0;
  size_t body_size_ = 0;
  std::string header_path_;   // the method this connection calls, once it has called it
  std::string header_block_;  // HPACK
  std::string scratch_;       // control frames' payloads
};

}  // namespace vramd::bench
