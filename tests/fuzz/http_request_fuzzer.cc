// Fuzz target: the bytes a client sends on one connection, read the way vramd's HTTP server
// reads them (Boost.Beast's request parser with the server's limits and read buffer), and each
// request that parses handled by KServeRoutes over a small repository (fuzz_support.h).
//
// Input: byte 0 picks how the bytes arrive (the size of each read from the "socket") and the
// body limit (--http-max-input-size: the default or 100 bytes); the rest is the stream.
// Requests are read one after another while the connection stays open (keep-alive and
// pipelining), at most kMaxRequests per input. The routes serve under a restriction
// (statistics and model-config need `x-key: k`) and forward headers starting `x-fwd-`; every
// answer is checked against the restriction: 403 exactly when the request's category is
// restricted and it lacks the key.
//
// The read loop mirrors src/server/http/http_connection.cc: async_read_header there is
// read_header here (the same parse loop in Beast, over a stream that returns the input), then
// the body from what is buffered through parser.put (the server catches exceptions there, so
// this does too), then read_some until the message is done. Exceptions the server does not
// catch are not caught here either: one escaping is a crash of the server's I/O thread.
// The server's own checks of a parsed header (Transfer-Encoding, the body budget) are left
// out, so the routes also see requests the server would refuse; they must cope with any.
// If that file's limits or read loop change, change them here.
#include <boost/asio/buffer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <string_view>

#include "fuzz_support.h"

namespace {
namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

// From http_connection.cc (kReadBufferBytes, kHeaderLimit) and HttpServer::Options.
constexpr size_t kReadBufferBytes = 64 * 1024;
constexpr size_t kHeaderLimit = 8 * 1024;
const size_t kDefaultBodyLimit = vramd::http::HttpServer::Options{}.max_body_bytes;
constexpr size_t kSmallBodyLimit = 100;
constexpr int kMaxRequests = 16;

// A SyncReadStream serving `bytes` at most `chunk` at a time, then end of file: what a socket
// gives a server whose client sends in pieces and then half-closes.
class InputStream {
 public:
  using executor_type = net::any_io_executor;

  InputStream(std::string_view bytes, size_t chunk) : bytes_(bytes), chunk_(chunk) {}

  template <class MutableBufferSequence>
  size_t read_some(const MutableBufferSequence& buffers, beast::error_code& ec) {
    if (bytes_.empty()) {
      ec = net::error::eof;
      return 0;
    }
    ec = {};
    const size_t n = net::buffer_copy(buffers, net::buffer(bytes_.data(), std::min(chunk_, bytes_.size())));
    bytes_.remove_prefix(n);
    return n;
  }
  template <class MutableBufferSequence>
  size_t read_some(const MutableBufferSequence& buffers) {
    beast::error_code ec;
    const size_t n = read_some(buffers, ec);
    if (ec) throw beast::system_error(ec);
    return n;
  }

 private:
  std::string_view bytes_;
  const size_t chunk_;
};

class Connection {
 public:
  Connection(vramd::fuzz::RoutesFixture* routes, InputStream* stream, size_t body_limit)
      : routes_(routes), stream_(stream), body_limit_(body_limit), buffer_(kReadBufferBytes) {
    buffer_.reserve(kReadBufferBytes);
  }

  // Serves requests until the connection would close.
  void Run() {
    for (int i = 0; i < kMaxRequests; ++i) {
      if (!ReadHeader() || !ReadBody() || !Dispatch()) return;
    }
  }

 private:
  bool ReadHeader() {
    parser_.emplace();
    parser_->header_limit(kHeaderLimit);
    parser_->body_limit(body_limit_);
    beast::error_code ec;
    bhttp::read_header(*stream_, buffer_, *parser_, ec);
    if (ec) return false;  // answered 400/408/413/431 (or dropped) and closed
    const auto length = parser_->content_length();
    return !(length && *length > body_limit_);  // 413
  }

  bool ReadBody() {
    for (;;) {
      beast::error_code ec;
      try {
        while (buffer_.size() != 0 && !parser_->is_done()) {
          const size_t used = parser_->put(buffer_.data(), ec);
          buffer_.consume(used);
          if (ec == bhttp::error::need_more) {
            ec = {};
            break;
          }
          if (ec) return false;
          if (used == 0) break;
        }
      } catch (const std::exception&) {
        return false;  // the server answers 400
      }
      if (parser_->is_done()) return true;
      bhttp::read_some(*stream_, buffer_, *parser_, ec);
      if (ec) return false;
    }
  }

  // As Connection::Dispatch: the request the handler sees; then whether the connection stays.
  bool Dispatch() {
    auto req = parser_->release();
    parser_.reset();
    vramd::http::HttpRequest request;
    request.method = std::string(req.method_string());
    request.target = std::string(req.target());
    auto ihcl = req.find("Inference-Header-Content-Length");
    if (ihcl != req.end()) request.inference_header_length = std::string(ihcl->value());
    for (const auto& field : req) {
      const std::string_view name(field.name_string().data(), field.name_string().size());
      if (routes_->PassesHeader(name)) request.headers.emplace_back(name, std::string(field.value()));
    }
    request.body = std::make_shared<const std::string>(std::move(req.body()));
    const std::optional<unsigned> must = RestrictedAnswer(request);
    const vramd::http::HttpRequest sent = request;
    const vramd::http::HttpResponse answer = routes_->Call(std::move(request));
    if (must.has_value() && answer.status != *must) {
      FailOn(sent, "a request to a restricted category without its key was answered " +
                       std::to_string(answer.status) + ", not 403");
    }
    if (!must.has_value() && answer.status == 403) {
      FailOn(sent, "a request the restrictions let through was answered 403");
    }
    return req.keep_alive();
  }

  // 403 when the request's category is restricted and it lacks the key (the first header of
  // the name counts, its value exactly); nullopt when it may pass.
  std::optional<unsigned> RestrictedAnswer(const vramd::http::HttpRequest& request) const {
    const auto category = vramd::http::HttpApiCategory(request.target);
    if (!category.has_value()) return std::nullopt;
    const auto* restriction = routes_->restricted().Find(*category);
    if (restriction == nullptr) return std::nullopt;
    for (const auto& [name, value] : request.headers) {
      if (beast::iequals(name, restriction->header)) {
        if (value == restriction->value) return std::nullopt;
        break;
      }
    }
    return 403u;
  }

  static void FailOn(const vramd::http::HttpRequest& request, const std::string& what) {
    vramd::fuzz::Fail(what + ": " + request.method + " " + request.target);
  }

  vramd::fuzz::RoutesFixture* routes_;
  InputStream* stream_;
  const size_t body_limit_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Deliberately kept across inputs: loading the models for each would leave no time to fuzz.
  // Statistics and model configs behind a key, headers starting x-fwd- forwarded: the
  // restriction's answer is checked for every request (Dispatch), and the rest of the surface
  // stays open to the fuzzer.
  static vramd::fuzz::RoutesFixture routes(
      vramd::runtime::ModelControlMode::kNone,
      {{"statistics,model-config:x-key=k"}, "^x-fwd-"});
  if (size == 0) return 0;
  static constexpr size_t kChunks[] = {1, 3, 17, 256, 1460, 4096, 16384, 65536};
  const size_t chunk = kChunks[data[0] & 7];
  const size_t body_limit = (data[0] & 8) != 0 ? kSmallBodyLimit : kDefaultBodyLimit;
  InputStream stream(std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1), chunk);
  Connection(&routes, &stream, body_limit).Run();
  return 0;
}
