// HttpServer: an asynchronous HTTP/1.1 server (Boost.Beast over Asio) with a fixed pool of
// threads serving any number of keep-alive connections. It knows nothing of inference: each
// complete request goes to a Handler, which answers through a Responder, from any thread,
// now or later.
//
// Limits: a body larger than Options::max_body_bytes is answered 413 and the connection
// closed; an unparsable request is answered 400 and the connection closed.
// Shutdown: stop accepting, close idle connections, let requests in flight (whose header has
// arrived) be read and answered (up to Options::drain_timeout), then stop the threads.
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

#include "core/status.h"

namespace vramd::http {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // path and query, as sent
  // The Inference-Header-Content-Length header, raw, when present.
  std::optional<std::string> inference_header_length;
  std::shared_ptr<const std::string> body;
};

struct HttpResponse {
  unsigned status = 200;
  std::string body;
  std::string content_type = "application/json";
  // Sent as Inference-Header-Content-Length when set (binary tensor data follows the JSON).
  std::optional<size_t> inference_header_length;
};

// Call exactly once per request. Safe from any thread.
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
