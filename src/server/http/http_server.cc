#include "server/http/http_server.h"

#include "server/http/infer_codec.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

namespace vramd::http {
namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;

namespace {
class Session;
}

// State shared by the acceptor and every session. Outlives them: Shutdown waits for all
// sessions to end before the io_context and this object go away.
class HttpServer::Impl {
 public:
  Impl(const Options& options, Handler handler)
      : options_(options), handler_(std::move(handler)), acceptor_(net::make_strand(ioc_)) {}

  Status Listen();
  void Run();
  void Shutdown();
  uint16_t port() const { return port_; }

  // Called by sessions.
  const Options& options() const { return options_; }
  const Handler& handler() const { return handler_; }
  bool stopping() const { return stopping_.load(std::memory_order_acquire); }
  void Register(Session* s, std::weak_ptr<Session> w);
  void Unregister(Session* s);

 private:
  void Accept();

  const Options options_;
  const Handler handler_;
  // Declared before ioc_: destroying ioc_ destroys pending handlers, whose sessions unregister.
  std::mutex sessions_mu_;
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions_;  // guarded by sessions_mu_
  net::io_context ioc_;
  tcp::acceptor acceptor_;
  uint16_t port_ = 0;
  std::vector<std::thread> threads_;
  std::atomic<bool> stopping_{false};
  bool shut_down_ = false;  // only the controlling thread
};

namespace {

// The read buffer every connection keeps, and so the most one read takes from the socket.
constexpr size_t kReadBufferBytes = 64 * 1024;

// One connection. Every member is touched only from the connection's strand.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, HttpServer::Impl* server)
      : stream_(std::move(socket)), server_(server) {
    // Beast reads at most the buffer's free capacity at a time: left at its first size (the
    // header's), a 150 KB tensor body took ~300 reads of 512 bytes, each a syscall and a trip
    // through the strand.
    buffer_.reserve(kReadBufferBytes);
  }
  ~Session() { server_->Unregister(this); }

  void Start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->ReadHeader(); });
  }

  // Closes the connection unless a request is in flight (its header read); that one is read,
  // answered, and then the connection closes.
  bool busy() const { return busy_.load(); }

  void CloseIfIdle() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] {
      if (!self->busy_) self->Close();
    });
  }

 private:
  void ReadHeader() {
    if (server_->stopping()) return Close();
    parser_.emplace();
    parser_->body_limit(server_->options().max_body_bytes);
    bhttp::async_read_header(stream_, buffer_, *parser_,
                             [self = shared_from_this()](beast::error_code ec, size_t) {
                               self->OnHeader(ec);
                             });
  }

  void OnHeader(beast::error_code ec) {
    if (ec) return OnReadError(ec);
    // From here the request is in flight: shutdown waits for its body and its answer.
    busy_ = true;
    auto& req = parser_->get();
    auto length = parser_->content_length();
    if (length && *length > server_->options().max_body_bytes) {
      return Reject(413, fmt::format("request body of {} bytes exceeds the limit of {} bytes "
                                     "(--http-max-input-size)",
                                     *length, server_->options().max_body_bytes));
    }
    if (beast::iequals(req[bhttp::field::expect], "100-continue")) {
      auto cont = std::make_shared<bhttp::response<bhttp::empty_body>>(bhttp::status::continue_,
                                                                         req.version());
      bhttp::async_write(stream_, *cont, [self = shared_from_this(), cont](beast::error_code ec, size_t) {
        if (ec) return self->Close();
        self->ReadBody();
      });
      return;
    }
    ReadBody();
  }

  void ReadBody() {
    bhttp::async_read(stream_, buffer_, *parser_,
                      [self = shared_from_this()](beast::error_code ec, size_t) {
                        self->OnBody(ec);
                      });
  }

  void OnReadError(beast::error_code ec) {
    if (ec == bhttp::error::end_of_stream || ec == net::error::operation_aborted ||
        ec == net::error::eof || ec == net::error::connection_reset ||
        ec == net::error::bad_descriptor) {
      return Close();
    }
    if (ec == bhttp::error::body_limit) {
      return Reject(413, fmt::format("request body exceeds the limit of {} bytes "
                                     "(--http-max-input-size)",
                                     server_->options().max_body_bytes));
    }
    if (ec.category() == bhttp::make_error_code(bhttp::error::end_of_stream).category()) {
      return Reject(400, fmt::format("malformed HTTP request: {}", ec.message()));
    }
    Close();
  }

  void OnBody(beast::error_code ec) {
    if (ec) return OnReadError(ec);
    auto req = parser_->release();
    parser_.reset();
    keep_alive_ = req.keep_alive();
    version_ = req.version();

    HttpRequest request;
    request.method = std::string(req.method_string());
    request.target = std::string(req.target());
    auto ihcl = req.find("Inference-Header-Content-Length");
    if (ihcl != req.end()) request.inference_header_length = std::string(ihcl->value());
    request.body = std::make_shared<const std::string>(std::move(req.body()));

    // The responder may run on any thread; the answer is written from this connection's strand.
    auto executor = stream_.get_executor();
    server_->handler()(std::move(request),
                       [self = shared_from_this(), executor](HttpResponse response) {
                         net::dispatch(executor, [self, r = std::move(response)]() mutable {
                           self->Write(std::move(r));
                         });
                       });
  }

  void Reject(unsigned status, std::string message) {
    busy_ = true;
    keep_alive_ = false;
    version_ = parser_ ? parser_->get().version() : 11;
    if (version_ != 10 && version_ != 11) version_ = 11;
    HttpResponse r;
    r.status = status;
    r.body = EncodeError(message);
    Write(std::move(r));
  }

  void Write(HttpResponse r) {
    auto res = std::make_shared<bhttp::response<bhttp::string_body>>(
        static_cast<bhttp::status>(r.status), version_);
    res->set(bhttp::field::content_type, r.content_type);
    if (r.inference_header_length) {
      res->set("Inference-Header-Content-Length", std::to_string(*r.inference_header_length));
    }
    res->keep_alive(keep_alive_ && !server_->stopping());
    res->body() = std::move(r.body);
    res->prepare_payload();
    bhttp::async_write(stream_, *res, [self = shared_from_this(), res](beast::error_code ec, size_t) {
      self->busy_ = false;
      if (ec || res->need_eof()) return self->Close();
      self->ReadHeader();
    });
  }

  void Close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.socket().close(ignored);
  }

  beast::tcp_stream stream_;
  HttpServer::Impl* server_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  // A request's header has been read and it is not yet answered. Written on the strand; read
  // by Shutdown's drain too, which waits only for busy connections.
  std::atomic<bool> busy_{false};
  bool keep_alive_ = true;
  unsigned version_ = 11;
};

}  // namespace

void HttpServer::Impl::Register(Session* s, std::weak_ptr<Session> w) {
  std::lock_guard lock(sessions_mu_);
  sessions_.emplace(s, std::move(w));
}

void HttpServer::Impl::Unregister(Session* s) {
  std::lock_guard lock(sessions_mu_);
  sessions_.erase(s);
}

Status HttpServer::Impl::Listen() {
  beast::error_code ec;
  auto address = net::ip::make_address(options_.address, ec);
  if (ec) {
    return Status::InvalidArgument(
        fmt::format("--http-address '{}' is not an IP address: {}", options_.address, ec.message()));
  }
  tcp::endpoint endpoint(address, options_.port);
  auto fail = [&](std::string_view what) {
    return Status::Unavailable(fmt::format("cannot {} HTTP on {}:{}: {}", what, options_.address,
                                           options_.port, ec.message()));
  };
  acceptor_.open(endpoint.protocol(), ec);
  if (ec) return fail("open");
  acceptor_.set_option(net::socket_base::reuse_address(true), ec);
  if (ec) return fail("set options for");
  acceptor_.bind(endpoint, ec);
  if (ec) return fail("bind");
  acceptor_.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return fail("listen for");
  port_ = acceptor_.local_endpoint().port();
  return Status::Ok();
}

void HttpServer::Impl::Accept() {
  acceptor_.async_accept(net::make_strand(ioc_), [this](beast::error_code ec, tcp::socket socket) {
    if (ec) {
      if (ec == net::error::operation_aborted || !acceptor_.is_open()) return;
      spdlog::warn("HTTP accept failed: {}", ec.message());
    } else if (!stopping()) {
      beast::error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      auto session = std::make_shared<Session>(std::move(socket), this);
      Register(session.get(), session);
      session->Start();
    }
    if (!stopping()) Accept();
  });
}

void HttpServer::Impl::Run() {
  Accept();
  int n = options_.threads > 0 ? options_.threads
                               : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads_.reserve(n);
  for (int i = 0; i < n; ++i) threads_.emplace_back([this] { ioc_.run(); });
}

void HttpServer::Impl::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  stopping_.store(true, std::memory_order_release);
  net::dispatch(acceptor_.get_executor(), [this] {
    beast::error_code ignored;
    acceptor_.close(ignored);
  });

  // Idle connections close now; busy ones close after their answer is written.
  auto deadline = std::chrono::steady_clock::now() + options_.drain_timeout;
  for (bool first = true;; first = false) {
    std::vector<std::shared_ptr<Session>> live;
    {
      std::lock_guard lock(sessions_mu_);
      for (auto& [p, w] : sessions_)
        if (auto s = w.lock()) live.push_back(std::move(s));
    }
    // Done once no connection is answering a request: an idle one may outlive its close for a
    // moment (or longer, while anything still holds it), which is no reason to wait.
    // The first round closes the idle ones on their strands, so a request being read as the
    // server stops is seen busy in the next round and answered.
    bool any_busy = false;
    for (auto& s : live) any_busy = any_busy || s->busy();
    if (live.empty() || (!any_busy && !first)) break;
    for (auto& s : live) s->CloseIfIdle();
    live.clear();
    if (std::chrono::steady_clock::now() > deadline) {
      spdlog::warn("HTTP: connections still busy after the drain timeout; stopping anyway");
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ioc_.stop();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpServer::~HttpServer() { Shutdown(); }
uint16_t HttpServer::port() const { return impl_->port(); }
void HttpServer::Shutdown() { impl_->Shutdown(); }

Result<std::unique_ptr<HttpServer>> HttpServer::Start(const Options& options, Handler handler) {
  auto impl = std::make_unique<Impl>(options, std::move(handler));
  VRAMD_RETURN_IF_ERROR(impl->Listen());
  impl->Run();
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

}  // namespace vramd::http
