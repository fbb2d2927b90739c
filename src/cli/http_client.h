// A small synchronous HTTP/1.1 client (Boost.Beast) for vramctl: one request, one connection, a
// deadline on each step. Plain http:// only. (The trace exporter has its own few lines of
// POSIX sockets, server/trace/otlp_post.h: Beast's client templates are the heaviest code to
// compile, and the server has no other use for them.)
//
// Thread safety: HttpGet and HttpPost may be called from any thread; each call has its own
// connection.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace vramd::cli {

struct Url {
  std::string host;
  std::string port = "80";
  std::string path;  // without a trailing '/', "" for the root
  // Sent with every request to this server, (name, value): a restricted API's key
  // (--http-restricted-api).
  std::vector<std::pair<std::string, std::string>> headers;
};

// Parses "http://host[:port][/path]" (a bare "host[:port]" means http). InvalidArgument for
// any other scheme or an empty host.
Result<Url> ParseUrl(std::string_view url);

struct HttpGetResponse {
  unsigned status = 0;
  std::string content_type;
  std::string body;
};

// GETs `target` (path and query) from `url`'s host. Unavailable, naming the address, the step
// (resolve, connect, send, receive) and the system's reason, when the server cannot be reached
// or does not answer within `timeout` per step. Any HTTP status is a successful result.
Result<HttpGetResponse> HttpGet(const Url& url, std::string_view target,
                                std::chrono::milliseconds timeout = std::chrono::seconds(10));

// POSTs `body` as application/json to `target`; as HttpGet, but the answer may take up to
// `answer_timeout` (a model load can take a while).
Result<HttpGetResponse> HttpPost(const Url& url, std::string_view target, std::string body,
                                 std::chrono::milliseconds timeout,
                                 std::chrono::milliseconds answer_timeout);

}  // namespace vramd::cli
