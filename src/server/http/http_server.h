// HttpServer: an asynchronous HTTP/1.1 server (Boost.Beast over Asio) with a fixed pool of
// threads serving any number of keep-alive connections. It knows nothing of inference: each
// complete request goes to a Handler, which answers through a Responder, from any thread,
// now or later.
//
// What a client can hold, and for how long (docs/security.md says why each default):
//   - a connection: at most Options::max_connections at once; one more is answered 503 and
//     closed. A connection waiting for its next request is closed after idle_timeout (0: never).
//   - a request header: 8 KiB, arriving within header_timeout of its first byte (408).
//     Trailers of a chunked body, chunk-size lines and anything else not yet parsed share the
//     connection's 64 KiB read buffer: more is answered 431.
//   - a body: at most max_body_bytes (413), with no pause longer than body_timeout (408).
//     Bodies being read or answered hold at most max_body_memory_bytes between them: a request
//     whose declared length does not fit is answered 503 (a chunked body is counted as it
//     grows) and its connection closed.
//   - framing: a Transfer-Encoding other than exactly "chunked", or one next to a
//     Content-Length, is answered 400 (RFC 9112 section 6.1).
//   Every such answer closes the connection after it is written.
// A client that closes its connection before its answer is complete sets the request's
// CancelFlag (HttpRequest::cancel); the answer is still expected (and then dropped). An answer
// may be sent in parts as it is produced (HttpResponse::more: chunked, for server-sent events).
// Nothing a client sends can throw out of an I/O thread: an exception from the parser or a
// Handler is caught, answered 500 where the request can still be answered, and logged.
//
// Shutdown: stop accepting and close connections waiting for a request; a request whose first
// byte has arrived is read, handed to the Handler and answered, however long the Handler takes
// (up to Options::drain_timeout), and its connection then closed gracefully (FIN, then what the
// client still sends is read and dropped for a moment, so no reset destroys the answer). The
// I/O threads keep running until then even when no socket operation is pending, since a
// Handler answers later from its own thread. A Responder called after Shutdown drops its
// response.
//
// Threads: each I/O thread runs an event loop (an io_context) of its own, and a connection
// lives on one of them (given out in turn at accept) for its whole life. An answer made on
// another thread (an instance thread) then wakes exactly the thread that writes it, where one
// loop shared by every thread had threads waking and handing over to each other (~14 futex
// calls per request for a model answered on its instance thread, against ~5 for one answered
// inline). A connection busy on its thread delays only the connections of that thread.
//
// Thread safety: Start and Shutdown from one controlling thread; the Handler is called
// concurrently from the pool's threads.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/infer_request.h"  // CancelFlag
#include "core/status.h"

namespace vramd::http {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // path and query, as sent
  // The Inference-Header-Content-Length header, raw, when present.
  std::optional<std::string> inference_header_length;
  std::shared_ptr<const std::string> body;
  // Set (Cancel()) once the client has closed its connection (or its answer could not be
  // written) before the answer was complete, so a handler can stop work nobody waits for.
  // One flag per connection, made with its first request: a connection whose client left
  // takes no further request, and so the common case costs one allocation per connection,
  // not one per request. Never null for a request from a connection.
  std::shared_ptr<CancelFlag> cancel;
  // The W3C `traceparent` header, raw; empty when absent (server/trace/tracer.h).
  std::string traceparent;
  // The headers Options::pass_header takes, (name as sent, value), in the order sent.
  std::vector<std::pair<std::string, std::string>> headers;
  // When the request's header had been read (a trace's HTTP_RECV_START).
  std::chrono::steady_clock::time_point received;
};

struct HttpResponse {
  unsigned status = 200;
  std::string body;
  std::string content_type = "application/json";
  // Sent as Inference-Header-Content-Length when set (binary tensor data follows the JSON).
  std::optional<size_t> inference_header_length;
  // A part of an answer sent as it is produced (server-sent events), more parts following.
  // The first part's status, content type and body start the answer (chunked transfer
  // coding; an HTTP/1.0 client gets the bytes as they are and the connection closes at the
  // end); each later part's body is sent as one chunk as soon as the connection can write
  // it (their status and content type are ignored); the part with `more` false ends the
  // answer. A first part with `more` false is an ordinary answer.
  bool more = false;
  // Called once the answer has been written, or failed to be (a trace's HTTP_SEND_END): on the
  // connection's thread, or on the caller's when the connection is gone. Of a streamed
  // answer's parts, only the last part's is called, once the whole stream is out. May be empty.
  std::function<void()> written;
};

// Call exactly once per request, or once per part of a streamed answer (HttpResponse::more),
// in order: parts from one thread, or from threads that hand over to each other, are sent in
// the order of the calls. Safe from any thread; never blocks.
using Responder = std::function<void(HttpResponse)>;
using Handler = std::function<void(HttpRequest, Responder)>;

class HttpServer {
 public:
  struct Options {
    std::string address = "0.0.0.0";
    uint16_t port = 8000;  // 0 picks a free port; see port()
    int threads = 0;       // 0: one per hardware thread
    size_t max_body_bytes = size_t{64} << 20;
    std::chrono::milliseconds drain_timeout{30000};
    // Limits on what clients hold (see above). A zero idle_timeout never closes an idle
    // connection, as Triton does not; the connection cap bounds how many there can be.
    size_t max_connections = 10000;
    std::chrono::milliseconds idle_timeout{0};
    std::chrono::milliseconds header_timeout{30000};
    std::chrono::milliseconds body_timeout{30000};
    size_t max_body_memory_bytes = size_t{1} << 30;
    // Which headers the handler reads besides those HttpRequest names (a restricted API's
    // key, headers forwarded to models), by name as sent: those it is true for are copied
    // into HttpRequest::headers. Empty: none.
    std::function<bool(std::string_view name)> pass_header;
  };

  // Binds, listens and starts the threads. Fails with the address and the system's reason.
  static Result<std::unique_ptr<HttpServer>> Start(const Options& options, Handler handler);

  ~HttpServer();  // Shutdown, if not done yet
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  uint16_t port() const;
  void Shutdown();

  class Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace vramd::http
