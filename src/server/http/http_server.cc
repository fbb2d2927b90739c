#include "server/http/http_server.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <exception>
#include <memory>
#include <thread>
#include <vector>

#include "server/http/http_connection.h"
#include "server/http/http_server_impl.h"

namespace vramd::http {
namespace net = boost::asio;
namespace beast = boost::beast;
using tcp = net::ip::tcp;

namespace {

// After a failed accept the listener stays readable (the connection waits in the backlog), so
// accepting again at once fails again at once: out of file descriptors, that loop burned a
// core and wrote a log line per turn. Retries back off from the first delay to the last.
constexpr auto kFirstAcceptRetry = std::chrono::milliseconds(10);
constexpr auto kLastAcceptRetry = std::chrono::milliseconds(1000);
// How long Shutdown gives connections closing gracefully once no request is in flight.
constexpr auto kCloseGrace = std::chrono::milliseconds(1500);

int ThreadCount(const HttpServer::Options& options) {
  return options.threads > 0 ? options.threads
                             : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

std::vector<std::unique_ptr<net::io_context>> MakeContexts(const HttpServer::Options& options) {
  const int n = ThreadCount(options);
  std::vector<std::unique_ptr<net::io_context>> contexts;
  contexts.reserve(n);
  // Concurrency hint 1: each loop is run by one thread only.
  for (int i = 0; i < n; ++i) contexts.push_back(std::make_unique<net::io_context>(1));
  return contexts;
}

}  // namespace

HttpServer::Impl::Impl(const Options& options, Handler handler)
    : options_(options),
      handler_(std::move(handler)),
      body_budget_(options.max_body_memory_bytes),
      contexts_(MakeContexts(options)),
      acceptor_(net::make_strand(*contexts_.front())),
      accept_retry_(acceptor_.get_executor()) {}

void HttpServer::Impl::RequestFinished() {
  busy_.fetch_sub(1);
  // Shutdown waits on changed_ only after it set stopping_; both atomics are sequentially
  // consistent, so either this sees stopping_ or Shutdown sees the decrement.
  if (stopping_.load()) {
    MutexLock lock(mu_);
    changed_.notify_all();
  }
}

std::shared_ptr<Connection> HttpServer::Impl::Register(tcp::socket socket) {
  {
    MutexLock lock(mu_);
    if (connections_.size() < options_.max_connections) {
      auto c = std::make_shared<Connection>(std::move(socket), this);
      connections_.emplace(c.get(), c);
      return c;
    }
  }
  Refuse(std::move(socket));
  return nullptr;
}

void HttpServer::Impl::Refuse(tcp::socket socket) {
  if (auto held_back = accept_log_.Allow()) {
    spdlog::warn("HTTP: refused a connection: {} are open, the limit (--http-max-connections) "
                 "({} more refusals or accept failures since the last such message)",
                 options_.max_connections, *held_back);
  }
  // Answered and closed like any refused request (so the client reads a 503, not a reset),
  // but never registered: it does not count against the limit, and lasts a second at most.
  auto c = std::make_shared<Connection>(std::move(socket), this);
  c->Refuse(503, "the server has as many connections open as it takes "
                 "(--http-max-connections); try again later");
}

void HttpServer::Impl::Unregister(Connection* c) {
  MutexLock lock(mu_);
  connections_.erase(c);
  if (stopping_.load()) changed_.notify_all();
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
  net::io_context& home = *contexts_[next_context_];
  next_context_ = (next_context_ + 1) % contexts_.size();
  acceptor_.async_accept(net::make_strand(home), [this](beast::error_code ec, tcp::socket socket) {
    if (ec) return OnAcceptError(ec);
    accept_backoff_ = std::chrono::milliseconds(0);
    if (stopping()) return;
    beast::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    if (auto connection = Register(std::move(socket))) {
      connection->Start();
    }
    Accept();
  });
}

void HttpServer::Impl::OnAcceptError(const beast::error_code& ec) {
  if (ec == net::error::operation_aborted || !acceptor_.is_open() || stopping()) return;
  accept_backoff_ = std::clamp(accept_backoff_ * 2, std::chrono::milliseconds(kFirstAcceptRetry),
                               std::chrono::milliseconds(kLastAcceptRetry));
  if (auto held_back = accept_log_.Allow()) {
    const bool out_of_fds = ec.value() == EMFILE || ec.value() == ENFILE;
    spdlog::warn("HTTP accept failed: {}{}; retrying in {} ms ({} more failures since the last "
                 "such message)",
                 ec.message(),
                 out_of_fds ? " (out of file descriptors: raise `ulimit -n` or lower "
                              "--http-max-connections)"
                            : "",
                 accept_backoff_.count(), *held_back);
  }
  accept_retry_.expires_after(accept_backoff_);
  accept_retry_.async_wait([this](beast::error_code ec) {
    if (!ec && !stopping()) Accept();
  });
}

void HttpServer::Impl::RunThread(net::io_context& context) {
  // run() returns only once stopped (the work guard keeps it running while no socket
  // operation is pending); an exception from a handler ends that handler's connection, not
  // the thread, and run() may be called again after one.
  for (;;) {
    try {
      context.run();
      return;
    } catch (const std::exception& e) {
      if (auto held_back = error_log_.Allow()) {
        spdlog::error("HTTP: a connection's handler threw ({}); that connection is closed ({} "
                      "more since the last such message)",
                      e.what(), *held_back);
      }
    } catch (...) {
      if (auto held_back = error_log_.Allow()) {
        spdlog::error("HTTP: a connection's handler threw; that connection is closed ({} more "
                      "since the last such message)",
                      *held_back);
      }
    }
  }
}

void HttpServer::Impl::Run() {
  for (auto& context : contexts_) work_.emplace_back(context->get_executor());
  Accept();
  threads_.reserve(contexts_.size());
  for (auto& context : contexts_) {
    threads_.emplace_back([this, c = context.get()] { RunThread(*c); });
  }
}

void HttpServer::Impl::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  stopping_.store(true);
  net::dispatch(acceptor_.get_executor(), [this] {
    beast::error_code ignored;
    acceptor_.close(ignored);
    accept_retry_.cancel();
  });

  // Connections waiting for a request close now; the others answer theirs first. Each says
  // which it is before the wait below counts the requests in flight.
  std::vector<std::shared_ptr<Connection>> live;
  {
    MutexLock lock(mu_);
    for (auto& [p, w] : connections_)
      if (auto c = w.lock()) live.push_back(std::move(c));
    undecided_ = live.size();
  }
  for (auto& c : live) {
    c->CloseIfIdle([this] {
      MutexLock lock(mu_);
      --undecided_;
      changed_.notify_all();
    });
  }
  live.clear();

  const auto deadline = std::chrono::steady_clock::now() + options_.drain_timeout;
  MutexLock lock(mu_);
  if (!lock.WaitUntil(changed_, deadline,
                      [this]() REQUIRES(mu_) { return undecided_ == 0 && busy_.load() == 0; })) {
    spdlog::warn("HTTP: {} request(s) still unanswered after the drain timeout "
                 "(--exit-timeout-secs); stopping anyway",
                 busy_.load());
  }
  lock.WaitUntil(changed_, std::min(deadline, std::chrono::steady_clock::now() + kCloseGrace),
                 [this]() REQUIRES(mu_) { return connections_.empty(); });
  lock.Unlock();

  work_.clear();
  for (auto& context : contexts_) context->stop();
  for (auto& t : threads_) t.join();
  threads_.clear();
  WriterLock gate(gate_->mu);
  gate_->open = false;
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
