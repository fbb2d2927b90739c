// HttpServer::Impl: the state the acceptor and every connection share (internal to
// server/http). Outlives the connections: Shutdown joins the I/O threads, and destroying the
// io_context destroys whatever handlers still hold a connection, which then unregister here.
#pragma once

#include <atomic>
#include <utility>  // before Asio: Boost 1.74 uses std::exchange without including it
#include <boost/asio.hpp>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/mutex.h"
#include "server/http/body_memory_budget.h"
#include "server/http/http_server.h"
#include "server/http/log_throttle.h"

namespace vramd::http {

class Connection;

// Whether the server still takes responses. A Responder may be called after Shutdown (a
// request answered past the drain timeout); it must not touch an io_context being destroyed.
struct ResponseGate {
  SharedMutex mu;
  bool open GUARDED_BY(mu) = true;
};

class HttpServer::Impl {
 public:
  Impl(const Options& options, Handler handler);

  Status Listen();
  void Run();
  void Shutdown() EXCLUDES(mu_);
  uint16_t port() const { return port_; }

  // For connections.
  const Options& options() const { return options_; }
  const Handler& handler() const { return handler_; }
  const std::shared_ptr<ResponseGate>& response_gate() const { return gate_; }
  BodyMemoryBudget& body_budget() { return body_budget_; }
  LogThrottle& error_log() { return error_log_; }
  bool stopping() const { return stopping_.load(); }
  // A request's first byte has arrived / its answer is written (or the connection is gone).
  void RequestStarted() { busy_.fetch_add(1); }
  void RequestFinished() EXCLUDES(mu_);
  void Unregister(Connection* c) EXCLUDES(mu_);

 private:
  void Accept();
  void OnAcceptError(const boost::system::error_code& ec);
  // A registered connection on `socket`, or nullptr (the socket refused) when the server
  // already has max_connections.
  std::shared_ptr<Connection> Register(boost::asio::ip::tcp::socket socket) EXCLUDES(mu_);
  void Refuse(boost::asio::ip::tcp::socket socket);
  void RunThread(boost::asio::io_context& context);

  const Options options_;
  const Handler handler_;
  const std::shared_ptr<ResponseGate> gate_ = std::make_shared<ResponseGate>();
  BodyMemoryBudget body_budget_;
  LogThrottle error_log_{std::chrono::seconds(10)};
  LogThrottle accept_log_{std::chrono::seconds(10)};

  // Declared before contexts_: destroying them destroys pending handlers, whose connections
  // unregister and release their budget.
  Mutex mu_;
  std::condition_variable changed_;  // a connection left, or a request finished while stopping
  std::unordered_map<Connection*, std::weak_ptr<Connection>> connections_ GUARDED_BY(mu_);
  // Connections Shutdown asked to close if idle that have not said whether they did.
  size_t undecided_ GUARDED_BY(mu_) = 0;
  std::atomic<size_t> busy_{0};  // requests between their first byte and their answer
  std::atomic<bool> stopping_{false};

  // One per I/O thread (see http_server.h); the acceptor lives on the first.
  std::vector<std::unique_ptr<boost::asio::io_context>> contexts_;
  std::vector<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
  size_t next_context_ = 0;  // on the acceptor's strand: where the next connection goes
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer accept_retry_;      // on the acceptor's strand
  std::chrono::milliseconds accept_backoff_{0};  // on the acceptor's strand
  uint16_t port_ = 0;
  std::vector<std::thread> threads_;
  bool shut_down_ = false;  // only the controlling thread
};

}  // namespace vramd::http
