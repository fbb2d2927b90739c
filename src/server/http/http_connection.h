// Connection: one client connection of an HttpServer, from accept to close (internal to
// server/http). Every member is touched only from the connection's strand.
//
// A connection waits for a request's first byte (idle_timeout), reads its header
// (header_timeout) and body (body_timeout between reads, within the body budget), hands the
// request to the Handler, writes the answer and goes back to waiting. The limits of
// http_server.h are enforced here; each refusal is answered with its status and reason, then
// the connection closes gracefully.
#pragma once

#include <utility>  // before Asio: Boost 1.74 uses std::exchange without including it
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "server/http/http_server_impl.h"

namespace vramd::http {

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(boost::asio::ip::tcp::socket socket, HttpServer::Impl* server);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  void Start();
  // Answers `status` without reading a request (a connection over the server's limit), then
  // closes.
  void Refuse(unsigned status, std::string message);
  // Closes the connection if it is waiting for a request; one in progress is answered first.
  void CloseIfIdle();

 private:
  enum class Phase { kWaiting, kHeader, kBody, kHandling, kWriting, kClosing };
  using Parser = boost::beast::http::request_parser<boost::beast::http::string_body>;

  void WaitForRequest();
  void BeginRequest();
  void OnHeader(boost::beast::error_code ec);
  // Refusals a header can earn (framing, size, budget); nullopt when the body may be read.
  std::optional<std::pair<unsigned, std::string>> CheckHeader();
  void ReadBody();
  void OnBodyRead(boost::beast::error_code ec);
  void OnReadError(boost::beast::error_code ec);
  bool ChargeBody(size_t total);
  void Dispatch();
  void Answer(uint64_t request, HttpResponse response);
  // Answers `status` and closes after the answer is written.
  void Reject(unsigned status, std::string message);
  void Write(HttpResponse response);
  void OnWritten(boost::beast::error_code ec, bool close);
  void EndRequest();
  // FIN, then read and drop what the client still sends for a moment, then close: closing
  // with unread bytes queued would reset the connection and could destroy the last answer.
  void CloseGracefully();
  void Linger();
  void Close();
  // Reads of a request run under this timer rather than the stream's own expiry, which closes
  // the socket: on expiry it only cancels the read, so the client can still be told 408.
  void ArmReadDeadline(std::chrono::milliseconds timeout);
  void DisarmReadDeadline();

  boost::beast::tcp_stream stream_;
  HttpServer::Impl* const server_;
  boost::beast::flat_buffer buffer_;
  boost::asio::steady_timer read_deadline_;
  bool read_timed_out_ = false;
  uint64_t deadline_generation_ = 0;
  std::optional<Parser> parser_;
  Phase phase_ = Phase::kWaiting;
  bool in_request_ = false;  // counted in the server's busy requests
  size_t charged_ = 0;       // body bytes held in the server's budget
  uint64_t request_ = 0;     // sequence of the request being handled, for its Responder
  bool answered_ = false;
  bool keep_alive_ = true;
  unsigned version_ = 11;
};

}  // namespace vramd::http
