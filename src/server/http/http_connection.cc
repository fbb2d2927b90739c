#include "server/http/http_connection.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>
#include <sstream>

#include "core/mutex.h"
#include "server/http/infer_codec.h"

namespace vramd::http {
namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;

namespace {

// The read buffer every connection keeps. Beast reads at most its free capacity at a time:
// left at its first size (the header's), a 150 KB tensor body took ~300 reads of 512 bytes.
// It is also the bound on what is buffered but not yet parsed (a header, a chunk-size line, a
// chunked body's trailer): Beast bounds the header itself (kHeaderLimit) but not the trailer,
// whose fields it stores with 16-bit lengths and throws on at 64 KiB.
constexpr size_t kReadBufferBytes = 64 * 1024;
constexpr size_t kHeaderLimit = 8 * 1024;  // Beast's default for requests, kept explicit
// How long a closing connection reads and drops what the client still sends.
constexpr auto kLinger = std::chrono::seconds(1);
// An answer must leave at this rate or better (after body_timeout of grace), or the
// connection is dropped: a client that does not read cannot hold a large answer forever.
constexpr size_t kMinSendBytesPerSecond = 1 << 20;

bool IsDisconnect(const beast::error_code& ec) {
  return ec == bhttp::error::end_of_stream || ec == net::error::operation_aborted ||
         ec == net::error::eof || ec == net::error::connection_reset ||
         ec == net::error::bad_descriptor || ec == net::error::broken_pipe;
}

beast::string_view Trim(beast::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string Seconds(std::chrono::milliseconds d) {
  return fmt::format("{:g} s", static_cast<double>(d.count()) / 1000.0);
}

}  // namespace

Connection::Connection(tcp::socket socket, HttpServer::Impl* server)
    : stream_(std::move(socket)),
      server_(server),
      buffer_(kReadBufferBytes),
      watchdog_(stream_.get_executor()) {
  buffer_.reserve(kReadBufferBytes);
}

Connection::~Connection() {
  if (charged_ != 0) server_->body_budget().Release(charged_);
  if (in_request_) server_->RequestFinished();
  server_->Unregister(this);
}

void Connection::Start() {
  net::dispatch(stream_.get_executor(), [self = shared_from_this()] {
    self->ArmWatchdog();
    self->WaitForRequest();
  });
}

void Connection::Refuse(unsigned status, std::string message) {
  net::dispatch(stream_.get_executor(), [self = shared_from_this(), status, m = std::move(message)] {
    self->ArmWatchdog();
    self->Reject(status, m);
  });
}

void Connection::CloseIfIdle(std::function<void()> done) {
  net::dispatch(stream_.get_executor(), [self = shared_from_this(), done = std::move(done)] {
    if (self->phase_ == Phase::kWaiting) {
      if (self->buffer_.size() == 0) {
        self->Close();
      } else {
        self->BeginRequest();  // its bytes are here: it is read and answered
      }
    }
    done();
  });
}

void Connection::WaitForRequest() {
  phase_ = Phase::kWaiting;
  response_coding_ = ContentCoding::kIdentity;
  phase_since_ = Clock::now();
  header_started_.reset();
  if (server_->stopping()) return CloseGracefully();
  if (buffer_.size() != 0) BeginRequest();  // pipelined: already here
  parser_.emplace();
  parser_->header_limit(kHeaderLimit);
  parser_->body_limit(server_->options().max_body_bytes);
  bhttp::async_read_header(stream_, buffer_, *parser_,
                           [self = shared_from_this()](beast::error_code ec, size_t) {
                             self->OnHeader(ec);
                           });
}

void Connection::BeginRequest() {
  if (in_request_) return;
  in_request_ = true;
  server_->RequestStarted();
}

void Connection::ArmWatchdog() {
  const auto& o = server_->options();
  auto shortest = std::min(o.header_timeout, o.body_timeout);
  if (o.idle_timeout.count() > 0) shortest = std::min(shortest, o.idle_timeout);
  const auto tick = std::max<std::chrono::milliseconds>(shortest / 2, std::chrono::milliseconds(50));
  watchdog_.expires_after(tick);
  watchdog_.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (ec || self->closed_) return;
    self->OnWatchdog();
    self->ArmWatchdog();
  });
}

void Connection::OnWatchdog() {
  const auto& o = server_->options();
  const auto now = Clock::now();
  switch (phase_) {
    case Phase::kWaiting:
      if (buffer_.size() == 0) {  // idle: no byte of a request yet
        if (o.idle_timeout.count() > 0 && now - phase_since_ >= o.idle_timeout) Close();
        return;
      }
      // A partial header waits unparsed in the buffer. Its first byte came since the last
      // tick at the earliest, so it is counted from this tick.
      if (!header_started_) {
        header_started_ = now;
        BeginRequest();
      } else if (now - *header_started_ >= o.header_timeout) {
        TimeOutRead();
      }
      return;
    case Phase::kBody:
      if (now - phase_since_ >= o.body_timeout) TimeOutRead();
      return;
    case Phase::kWriting:
      if (now - phase_since_ >= write_limit_) Close();  // the client does not read its answer
      return;
    case Phase::kStreaming:
      // Between parts the model takes its time; only a part being written is timed.
      if (part_writing_ && now - phase_since_ >= write_limit_) Close();
      return;
    case Phase::kHandling:
    case Phase::kClosing:
      return;
  }
}

void Connection::TimeOutRead() {
  read_timed_out_ = true;
  beast::error_code ignored;
  stream_.socket().cancel(ignored);
}

void Connection::OnHeader(beast::error_code ec) {
  if (ec) return OnReadError(ec);
  header_read_ = Clock::now();
  BeginRequest();
  phase_ = Phase::kBody;
  phase_since_ = header_read_;
  if (auto refusal = CheckHeader()) return Reject(refusal->first, std::move(refusal->second));
  const auto& req = parser_->get();
  if (beast::iequals(req[bhttp::field::expect], "100-continue")) {
    auto cont = std::make_shared<bhttp::response<bhttp::empty_body>>(bhttp::status::continue_,
                                                                       req.version());
    bhttp::async_write(stream_, *cont,
                       [self = shared_from_this(), cont](beast::error_code ec, size_t) {
                         if (ec) return self->Close();
                         self->ReadBody();
                       });
    return;
  }
  ReadBody();
}

std::optional<std::pair<unsigned, std::string>> Connection::CheckHeader() {
  const auto& req = parser_->get();
  // Beast frames a body by Content-Length when Transfer-Encoding does not end in chunked; a
  // proxy in front may frame it otherwise, which is how requests are smuggled.
  auto te = req.equal_range(bhttp::field::transfer_encoding);
  if (te.first != te.second) {
    const auto value = te.first->value();
    if (std::next(te.first) != te.second ||
        !beast::iequals(Trim(value), "chunked")) {
      return std::pair{400u, fmt::format("Transfer-Encoding '{}' is not supported: a request "
                                         "body is framed by Content-Length or by "
                                         "'Transfer-Encoding: chunked' alone",
                                         std::string(value))};
    }
    if (req.find(bhttp::field::content_length) != req.end()) {
      return std::pair{400u, std::string("a request may not carry both Transfer-Encoding and "
                                         "Content-Length")};
    }
  }
  const auto length = parser_->content_length();
  const size_t max_body = server_->options().max_body_bytes;
  if (length && *length > max_body) {
    return std::pair{413u, fmt::format("request body of {} bytes exceeds the limit of {} bytes "
                                       "(--http-max-input-size)",
                                       *length, max_body)};
  }
  if (length && !ChargeBody(static_cast<size_t>(*length))) {
    return std::pair{503u, fmt::format("the server is holding {} bytes of request bodies and "
                                       "this one's {} would pass the limit of {} "
                                       "(--http-body-memory-mib); try again later",
                                       server_->body_budget().used(), *length,
                                       server_->body_budget().limit())};
  }
  return std::nullopt;
}

bool Connection::ChargeBody(size_t total) {
  if (total <= charged_) return true;
  if (!server_->body_budget().TryCharge(total - charged_)) return false;
  charged_ = total;
  return true;
}

void Connection::ReadBody() {
  // What arrived with the header is parsed here, without a trip through the reactor: a small
  // request is then complete at once.
  beast::error_code ec;
  try {
    while (buffer_.size() != 0 && !parser_->is_done()) {
      const size_t used = parser_->put(buffer_.data(), ec);
      buffer_.consume(used);
      if (ec == bhttp::error::need_more) {
        ec = {};
        break;
      }
      if (ec) return OnReadError(ec);
      if (used == 0) break;
    }
  } catch (const std::exception& e) {
    return Reject(400, fmt::format("malformed HTTP request: {}", e.what()));
  }
  if (!parser_->content_length() && !ChargeBody(parser_->get().body().size())) {
    return Reject(503, fmt::format("the server is holding {} bytes of request bodies, the limit "
                                   "(--http-body-memory-mib); try again later",
                                   server_->body_budget().limit()));
  }
  if (parser_->is_done()) return Dispatch();
  bhttp::async_read_some(stream_, buffer_, *parser_,
                         [self = shared_from_this()](beast::error_code ec, size_t) {
                           self->OnBodyRead(ec);
                         });
}

void Connection::OnBodyRead(beast::error_code ec) {
  if (ec) return OnReadError(ec);
  phase_since_ = Clock::now();
  ReadBody();
}

void Connection::OnReadError(beast::error_code ec) {
  const auto& options = server_->options();
  if (read_timed_out_) {
    return Reject(408, phase_ == Phase::kWaiting
                           ? fmt::format("request header not complete within {} of its first "
                                         "byte (--http-header-timeout-secs)",
                                         Seconds(options.header_timeout))
                           : fmt::format("request body stalled for {} (--http-body-timeout-secs)",
                                         Seconds(options.body_timeout)));
  }
  if (IsDisconnect(ec)) return Close();
  if (ec == bhttp::error::body_limit) {
    return Reject(413, fmt::format("request body exceeds the limit of {} bytes "
                                   "(--http-max-input-size)",
                                   options.max_body_bytes));
  }
  if (ec == bhttp::error::header_limit) {
    return Reject(431, fmt::format("request header larger than {} bytes", kHeaderLimit));
  }
  if (ec == bhttp::error::buffer_overflow) {
    return Reject(431, fmt::format("a request header, chunk-size line or chunked trailer is "
                                   "larger than {} bytes",
                                   kReadBufferBytes));
  }
  if (ec.category() == bhttp::make_error_code(bhttp::error::end_of_stream).category()) {
    return Reject(400, fmt::format("malformed HTTP request: {}", ec.message()));
  }
  Close();
}

void Connection::Dispatch() {
  phase_ = Phase::kHandling;
  auto req = parser_->release();
  parser_.reset();
  keep_alive_ = req.keep_alive();
  version_ = req.version();

  auto accept = req.find(bhttp::field::accept_encoding);
  response_coding_ =
      accept == req.end() ? ContentCoding::kIdentity : ChooseResponseCoding(
                                    std::string_view(accept->value().data(), accept->value().size()));
  auto decoded = DecodeRequestBody(req);
  if (!decoded.ok()) {
    // The whole body was read, so the connection can take the next request.
    answered_ = true;
    HttpResponse r;
    r.status = decoded.status().code() == StatusCode::kUnsupported ? 415
               : decoded.status().code() == StatusCode::kResourceExhausted ? 413
               : decoded.status().code() == StatusCode::kUnavailable      ? 503
                                                                            : 400;
    r.body = EncodeError(decoded.status().message());
    return Write(std::move(r));
  }

  HttpRequest request;
  request.method = std::string(req.method_string());
  request.target = std::string(req.target());
  auto ihcl = req.find("Inference-Header-Content-Length");
  if (ihcl != req.end()) request.inference_header_length = std::string(ihcl->value());
  auto traceparent = req.find("traceparent");
  if (traceparent != req.end()) request.traceparent = std::string(traceparent->value());
  if (const auto& pass = server_->options().pass_header) {
    for (const auto& field : req) {
      const std::string_view name(field.name_string().data(), field.name_string().size());
      if (pass(name)) request.headers.emplace_back(name, std::string(field.value()));
    }
  }
  request.received = header_read_;
  request.body = std::move(*decoded);
  if (cancel_ == nullptr) cancel_ = std::make_shared<CancelFlag>();
  request.cancel = cancel_;

  const uint64_t id = ++request_;
  answered_ = false;
  // The Responder may run on any thread, at any time, even after the server is gone (a load
  // that outlives the drain). So it holds nothing of the io_context: not the connection (whose
  // socket and timer would be destroyed after their services) nor its strand, only a weak
  // reference, locked while the gate says the server still takes answers. The connection stays
  // alive meanwhile through its watchdog.
  auto gate = server_->response_gate();
  Responder respond = [weak = weak_from_this(), gate, id](HttpResponse response) {
    ReaderLock lock(gate->mu);
    auto self = gate->open ? weak.lock() : nullptr;
    if (!self) {  // closed meanwhile: nobody to answer, and nothing will be written
      if (response.written) response.written();
      return;
    }
    auto executor = self->stream_.get_executor();
    net::dispatch(executor, [self = std::move(self), id, r = std::move(response)]() mutable {
      self->Answer(id, std::move(r));
    });
  };
  try {
    server_->handler()(std::move(request), std::move(respond));
  } catch (const std::exception& e) {
    if (auto held_back = server_->error_log().Allow()) {
      spdlog::error("HTTP handler threw: {} ({} more since the last such message)", e.what(),
                    *held_back);
    }
    HttpResponse r;
    r.status = 500;
    r.body = EncodeError(fmt::format("internal error: {}", e.what()));
    Answer(id, std::move(r));
  }
  // Answered later (an instance thread, a parked request, a stream): learn meanwhile whether
  // the client leaves.
  if (!answered_) WatchForClose();
}

Result<std::shared_ptr<const std::string>> Connection::DecodeRequestBody(Request& req) {
  auto field = req.find(bhttp::field::content_encoding);
  if (field == req.end()) return std::make_shared<const std::string>(std::move(req.body()));
  VRAMD_ASSIGN_OR_RETURN(const ContentCoding coding, ParseContentEncoding(std::string_view(
                                                        field->value().data(), field->value().size())));
  if (coding == ContentCoding::kIdentity) {
    return std::make_shared<const std::string>(std::move(req.body()));
  }
  // The limit is the decoded size's, as if the body had come uncoded; the decoded bytes are
  // charged to the body budget beside the coded ones until the request ends.
  const size_t max_body = server_->options().max_body_bytes;
  auto decoded = DecodeBody(coding, req.body(), max_body);
  if (!decoded.ok()) {
    if (decoded.status().code() != StatusCode::kResourceExhausted) return decoded.status();
    return Status::ResourceExhausted(
        fmt::format("{} (--http-max-input-size)", decoded.status().message()));
  }
  if (!ChargeBody(charged_ + decoded->size())) {
    return Status::Unavailable(fmt::format(
        "the server is holding {} bytes of request bodies and this one's {} decoded bytes "
        "would pass the limit of {} (--http-body-memory-mib); try again later",
        server_->body_budget().used(), decoded->size(), server_->body_budget().limit()));
  }
  req.body().clear();
  req.body().shrink_to_fit();
  return std::make_shared<const std::string>(std::move(*decoded));
}

void Connection::Answer(uint64_t request, HttpResponse response) {
  // Only the request being handled is answered: once, or part by part up to its last part.
  if (request != request_ || answered_ || closed_) {
    if (response.written) response.written();  // it failed to be written: it never will be
    return;
  }
  if (phase_ == Phase::kHandling) {
    if (response.more) return StartStream(std::move(response));
    answered_ = true;
    return Write(std::move(response));
  }
  if (phase_ == Phase::kStreaming) {
    if (!response.more) stream_written_ = std::move(response.written);
    SendPart(std::move(response.body), !response.more);
  }
}

void Connection::StartStream(HttpResponse first) {
  phase_ = Phase::kStreaming;
  // HTTP/1.0 has no chunked coding: the body runs to the end of the connection.
  chunked_ = version_ == 11;
  if (!chunked_) keep_alive_ = false;
  bhttp::response<bhttp::empty_body> head(static_cast<bhttp::status>(first.status), version_);
  head.set(bhttp::field::content_type, first.content_type);
  if (chunked_) head.chunked(true);
  head.keep_alive(keep_alive_ && !server_->stopping());
  std::ostringstream text;
  text << head.base();  // the status line and fields, through the blank line
  parts_ = std::move(text).str();
  SendPart(std::move(first.body), false);
}

void Connection::SendPart(std::string body, bool last) {
  if (!body.empty()) {
    if (chunked_) {
      parts_.append(fmt::format("{:x}\r\n", body.size()));
      parts_.append(body);
      parts_.append("\r\n");
    } else {
      parts_.append(body);
    }
  }
  if (last) {
    answered_ = true;
    stream_ending_ = true;
    if (chunked_) parts_.append("0\r\n\r\n");
  }
  if (!part_writing_) FlushParts();
}

void Connection::FlushParts() {
  if (parts_.empty()) {
    if (stream_ending_) {
      stream_ending_ = false;
      if (auto written = std::exchange(stream_written_, nullptr)) written();
      OnWritten({}, !keep_alive_ || server_->stopping());
    }
    return;
  }
  auto bytes = std::make_shared<std::string>(std::move(parts_));
  parts_.clear();
  part_writing_ = true;
  phase_since_ = Clock::now();
  write_limit_ = server_->options().body_timeout +
                 std::chrono::seconds(bytes->size() / kMinSendBytesPerSecond);
  net::async_write(stream_, net::buffer(*bytes),
                   [self = shared_from_this(), bytes](beast::error_code ec, size_t) {
                     self->part_writing_ = false;
                     if (ec) {
                       if (auto written = std::exchange(self->stream_written_, nullptr)) written();
                       return self->Close();
                     }
                     self->FlushParts();
                   });
}

void Connection::Reject(unsigned status, std::string message) {
  BeginRequest();
  keep_alive_ = false;
  version_ = parser_ ? parser_->get().version() : 11;
  if (version_ != 10 && version_ != 11) version_ = 11;
  parser_.reset();
  // The body is gone with the parser: its share of the budget goes back before the answer is
  // written, so a client that reads the refusal finds the room already free.
  if (charged_ != 0) {
    server_->body_budget().Release(charged_);
    charged_ = 0;
  }
  HttpResponse r;
  r.status = status;
  r.body = EncodeError(message);
  Write(std::move(r));
}

void Connection::Write(HttpResponse r) {
  phase_ = Phase::kWriting;
  auto res = std::make_shared<bhttp::response<bhttp::string_body>>(
      static_cast<bhttp::status>(r.status), version_);
  res->set(bhttp::field::content_type, r.content_type);
  if (response_coding_ != ContentCoding::kIdentity && !r.body.empty()) {
    if (auto coded = EncodeBody(response_coding_, r.body)) {
      r.body = std::move(*coded);
      res->set(bhttp::field::content_encoding, std::string(CodingName(response_coding_)));
    }
  }
  // Whether the client asked for a coding decides the answer's form.
  res->set(bhttp::field::vary, "Accept-Encoding");
  if (r.inference_header_length) {
    res->set("Inference-Header-Content-Length", std::to_string(*r.inference_header_length));
  }
  const bool close = !keep_alive_ || server_->stopping();
  res->keep_alive(!close);
  const size_t bytes = r.body.size();
  res->body() = std::move(r.body);
  res->prepare_payload();
  phase_since_ = Clock::now();
  write_limit_ = server_->options().body_timeout +
                 std::chrono::seconds(bytes / kMinSendBytesPerSecond);
  bhttp::async_write(stream_, *res,
                     [self = shared_from_this(), res, close,
                      written = std::move(r.written)](beast::error_code ec, size_t) {
                       if (written) written();
                       self->OnWritten(ec, close || res->need_eof());
                     });
}

void Connection::OnWritten(beast::error_code ec, bool close) {
  EndRequest();
  if (ec) return Close();
  if (watching_) {
    // One read at a time on a socket: the watching read ends before the next request's read
    // (or the linger's) starts; its handler goes on from there. The write is done, so only
    // that read is cancelled.
    after_watch_ = close ? AfterWatch::kClose : AfterWatch::kNextRequest;
    beast::error_code ignored;
    stream_.socket().cancel(ignored);
    return;
  }
  AfterAnswer(close);
}

void Connection::AfterAnswer(bool close) {
  if (close) return CloseGracefully();
  WaitForRequest();
}

void Connection::WatchForClose() {
  if (watching_ || closed_) return;
  // A pipelined request that fills the buffer waits there; the client is then still sending.
  const size_t room = buffer_.max_size() - buffer_.size();
  if (room == 0) return;
  watching_ = true;
  stream_.async_read_some(buffer_.prepare(room),
                          [self = shared_from_this()](beast::error_code ec, size_t bytes) {
                            self->OnWatch(ec, bytes);
                          });
}

void Connection::OnWatch(beast::error_code ec, size_t bytes) {
  watching_ = false;
  buffer_.commit(bytes);  // a pipelined request's bytes, read when its turn comes
  if (closed_) return;
  if (after_watch_ != AfterWatch::kNone) {
    const bool close = after_watch_ == AfterWatch::kClose;
    after_watch_ = AfterWatch::kNone;
    return AfterAnswer(close);
  }
  if (ec) {
    // End of stream or a reset: the client left, nobody reads the answer. The answer is
    // still written (a half-closed client may read it); its write fails otherwise.
    cancel_->Cancel();
    return;
  }
  if (phase_ == Phase::kHandling || phase_ == Phase::kStreaming || phase_ == Phase::kWriting) {
    WatchForClose();
  }
}

void Connection::EndRequest() {
  if (charged_ != 0) {
    server_->body_budget().Release(charged_);
    charged_ = 0;
  }
  if (in_request_) {
    in_request_ = false;
    server_->RequestFinished();
  }
}

void Connection::CloseGracefully() {
  phase_ = Phase::kClosing;
  beast::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
  stream_.expires_after(kLinger);
  Linger();
}

void Connection::Linger() {
  buffer_.clear();
  stream_.async_read_some(buffer_.prepare(kReadBufferBytes),
                          [self = shared_from_this()](beast::error_code ec, size_t) {
                            if (ec) return self->Close();  // the client closed, or kLinger
                            self->Linger();
                          });
}

void Connection::Close() {
  // Closed with a request in flight (an answer that could not be written, a client that does
  // not read): nobody will read its answer.
  if (in_request_ && cancel_ != nullptr) cancel_->Cancel();
  closed_ = true;
  watchdog_.cancel();
  beast::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
  stream_.socket().close(ignored);
}

}  // namespace vramd::http
