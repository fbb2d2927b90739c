// Connection: one client connection of an HttpServer, from accept to close (internal to
// server/http). Every member is touched only from the connection's strand.
//
// A connection waits for a request (idle_timeout until its first byte), reads its header
// (header_timeout from the first byte) and body (body_timeout between reads, within the body
// budget), hands the request to the Handler, writes the answer and goes back to waiting. The
// limits of http_server.h are enforced here; each refusal is answered with its status and
// reason, then the connection closes gracefully.
//
// While a request is being handled (its answer not yet, or not yet wholly, written), the
// connection keeps one read pending on the socket, so it learns when the client leaves: end
// of stream or a reset sets the connection's CancelFlag (HttpRequest::cancel); bytes of a
// pipelined request go into the read buffer for later. That read is started only when the
// handler returns without having answered, so the inline fast path does not pay for it, and
// it is cancelled before the next request's read starts. A streamed answer
// (HttpResponse::more) is written part by part as the parts arrive, one write at a time,
// parts that arrive meanwhile joined into the next write.
//
// Time limits are checked by one watchdog timer per connection that ticks at half the shortest
// limit, not by a timer armed and cancelled around every read: that cost ~5% of requests/s
// on small requests. A limit is so enforced within half of itself late, never early.
#pragma once

#include <utility>  // before Asio: Boost 1.74 uses std::exchange without including it
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/status.h"
#include "server/http/content_coding.h"
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
  // Closes the connection if it is waiting for a request; one in progress (its first byte
  // here) is answered first. Calls `done` once decided, so Shutdown counts what it waits for
  // only after every connection has said.
  void CloseIfIdle(std::function<void()> done);

 private:
  // kWaiting: for a request's header, from its first byte or before (header_started_ tells).
  // kStreaming: the first part of a streamed answer is out, the last not yet written.
  enum class Phase { kWaiting, kBody, kHandling, kStreaming, kWriting, kClosing };
  // What the end of the watching read goes on with (OnWritten cancelled it).
  enum class AfterWatch { kNone, kNextRequest, kClose };
  using Clock = std::chrono::steady_clock;
  using Parser = boost::beast::http::request_parser<boost::beast::http::string_body>;
  using Request = boost::beast::http::request<boost::beast::http::string_body>;

  void WaitForRequest();
  // Counts the connection's request as in flight (from its first byte, or its header).
  void BeginRequest();
  void ArmWatchdog();
  void OnWatchdog();
  // Ends the read in progress; it completes as timed out and is answered 408.
  void TimeOutRead();
  void OnHeader(boost::beast::error_code ec);
  // Refusals a header can earn (framing, size, budget); nullopt when the body may be read.
  std::optional<std::pair<unsigned, std::string>> CheckHeader();
  void ReadBody();
  void OnBodyRead(boost::beast::error_code ec);
  void OnReadError(boost::beast::error_code ec);
  bool ChargeBody(size_t total);
  // The body as the handler sees it: decoded when the request has a Content-Encoding
  // (content_coding.h), with the status to answer otherwise (Unsupported 415, InvalidArgument
  // 400, ResourceExhausted 413, Unavailable 503 for the body budget).
  Result<std::shared_ptr<const std::string>> DecodeRequestBody(Request& req);
  void Dispatch();
  void Answer(uint64_t request, HttpResponse response);
  // Answers `status` and closes after the answer is written.
  void Reject(unsigned status, std::string message);
  void Write(HttpResponse response);
  // A streamed answer: its head and first part; each next part; the write of what is queued.
  void StartStream(HttpResponse first);
  void SendPart(std::string body, bool last);
  void FlushParts();
  void OnWritten(boost::beast::error_code ec, bool close);
  // After an answer is written (and the watching read ended): the next request, or close.
  void AfterAnswer(bool close);
  // Keeps a read pending to learn that the client left (see the top of this file).
  void WatchForClose();
  void OnWatch(boost::beast::error_code ec, size_t bytes);
  void EndRequest();
  // FIN, then read and drop what the client still sends for a moment, then close: closing
  // with unread bytes queued would reset the connection and could destroy the last answer.
  void CloseGracefully();
  void Linger();
  void Close();

  boost::beast::tcp_stream stream_;
  HttpServer::Impl* const server_;
  boost::beast::flat_buffer buffer_;
  // Not the stream's own expiry, which closes the socket: a timed-out read is only cancelled,
  // so the client can still be told 408.
  boost::asio::steady_timer watchdog_;
  bool read_timed_out_ = false;
  bool closed_ = false;
  std::optional<Parser> parser_;
  Phase phase_ = Phase::kWaiting;
  Clock::time_point phase_since_;  // kBody: since the body's last read
  std::optional<Clock::time_point> header_started_;  // when the watchdog first saw its bytes
  Clock::time_point header_read_;  // when the request being handled had its header read
  Clock::duration write_limit_{};
  bool in_request_ = false;  // counted in the server's busy requests
  size_t charged_ = 0;       // body bytes held in the server's budget
  uint64_t request_ = 0;     // sequence of the request being handled, for its Responder
  bool answered_ = false;  // the whole answer (its last part) has been handed to the writer
  bool keep_alive_ = true;
  // How this request's answer is coded (Accept-Encoding); streamed answers are sent uncoded.
  ContentCoding response_coding_ = ContentCoding::kIdentity;
  unsigned version_ = 11;
  // Set when the client leaves with a request in flight; made with the first request.
  std::shared_ptr<CancelFlag> cancel_;
  bool watching_ = false;  // the read of WatchForClose is pending
  AfterWatch after_watch_ = AfterWatch::kNone;
  // A streamed answer: whether it is chunked (HTTP/1.1), bytes waiting for the write in
  // progress, whether a write is in progress, and whether the last part is queued.
  bool chunked_ = false;
  std::string parts_;
  bool part_writing_ = false;
  bool stream_ending_ = false;
  std::function<void()> stream_written_;  // the last part's HttpResponse::written
};

}  // namespace vramd::http
