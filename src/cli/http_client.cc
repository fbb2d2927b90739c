#include "cli/http_client.h"

#include <fmt/format.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <optional>

namespace vramd::cli {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = asio::ip::tcp;

constexpr uint64_t kMaxBodyBytes = uint64_t{256} << 20;

}  // namespace

Result<Url> ParseUrl(std::string_view url) {
  constexpr std::string_view kHttp = "http://";
  if (url.substr(0, kHttp.size()) == kHttp) {
    url.remove_prefix(kHttp.size());
  } else if (url.find("://") != std::string_view::npos) {
    return Status::InvalidArgument(
        fmt::format("unsupported URL '{}': only http:// is supported", url));
  }
  Url out;
  const size_t slash = url.find('/');
  std::string_view authority = url.substr(0, slash);
  if (slash != std::string_view::npos) out.path = std::string(url.substr(slash));
  while (!out.path.empty() && out.path.back() == '/') out.path.pop_back();
  // "[::1]:8000", "host:8000", "host"
  size_t colon = authority.rfind(':');
  if (colon != std::string_view::npos && authority.find(']', colon) == std::string_view::npos) {
    out.port = std::string(authority.substr(colon + 1));
    authority = authority.substr(0, colon);
  }
  if (authority.size() >= 2 && authority.front() == '[' && authority.back() == ']') {
    authority = authority.substr(1, authority.size() - 2);
  }
  out.host = std::string(authority);
  if (out.host.empty() || out.port.empty()) {
    return Status::InvalidArgument(fmt::format("invalid URL '{}': expected http://host[:port]", url));
  }
  return out;
}

namespace {

// One request on its own connection: each step within `timeout`, the answer within
// `answer_timeout`.
Result<HttpGetResponse> Exchange(const Url& url, bhttp::request<bhttp::string_body> request,
                                 std::chrono::milliseconds timeout,
                                 std::chrono::milliseconds answer_timeout) {
  asio::io_context ioc;
  tcp::resolver resolver(ioc);
  beast::tcp_stream stream(ioc);
  beast::flat_buffer buffer;
  request.set(bhttp::field::host, url.host);
  request.set(bhttp::field::user_agent, "vramctl");
  for (const auto& [name, value] : url.headers) request.set(name, value);
  request.prepare_payload();
  bhttp::response_parser<bhttp::string_body> parser;
  parser.body_limit(kMaxBodyBytes);

  std::optional<Status> failure;
  bool done = false;
  auto fail = [&](const char* step, const beast::error_code& ec) {
    failure = Status::Unavailable(
        fmt::format("{} {}:{}: {}", step, url.host, url.port, ec.message()));
  };

  resolver.async_resolve(url.host, url.port, [&](beast::error_code ec,
                                                 tcp::resolver::results_type results) {
    if (ec) return fail("cannot resolve", ec);
    stream.expires_after(timeout);
    stream.async_connect(results, [&](beast::error_code ec, const tcp::endpoint&) {
      if (ec) return fail("cannot connect to", ec);
      stream.expires_after(timeout);
      bhttp::async_write(stream, request, [&](beast::error_code ec, size_t) {
        if (ec) return fail("cannot send to", ec);
        stream.expires_after(answer_timeout);
        bhttp::async_read(stream, buffer, parser, [&](beast::error_code ec, size_t) {
          if (ec) return fail("no answer from", ec);
          done = true;
        });
      });
    });
  });
  // The resolver has no deadline of its own: bound the whole exchange, then cancel what is left
  // and let the handlers finish before the locals they use go away.
  ioc.run_for(timeout * 3 + answer_timeout);
  if (!ioc.stopped()) {
    resolver.cancel();
    beast::error_code ignored;
    stream.socket().close(ignored);
    ioc.restart();
    ioc.run();
    if (!done) {
      failure = Status::Unavailable(fmt::format("no answer from {}:{} within {} ms", url.host,
                                                url.port, answer_timeout.count()));
    }
  }
  if (failure) return *failure;
  if (!done) {
    return Status::Unavailable(fmt::format("no answer from {}:{}", url.host, url.port));
  }
  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  auto& response = parser.get();
  HttpGetResponse out;
  out.status = response.result_int();
  out.content_type = std::string(response[bhttp::field::content_type]);
  out.body = std::move(response.body());
  return out;
}

}  // namespace

Result<HttpGetResponse> HttpGet(const Url& url, std::string_view target,
                                std::chrono::milliseconds timeout) {
  return Exchange(url, {bhttp::verb::get, std::string(target), 11}, timeout, timeout);
}

Result<HttpGetResponse> HttpPost(const Url& url, std::string_view target, std::string body,
                                 std::chrono::milliseconds timeout,
                                 std::chrono::milliseconds answer_timeout) {
  bhttp::request<bhttp::string_body> request{bhttp::verb::post, std::string(target), 11};
  request.set(bhttp::field::content_type, "application/json");
  request.body() = std::move(body);
  return Exchange(url, std::move(request), timeout, answer_timeout);
}

}  // namespace vramd::cli
