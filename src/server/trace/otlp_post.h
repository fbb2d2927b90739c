// How the tracer sends a batch to an OpenTelemetry collector: one HTTP/1.1 POST of a JSON body
// on a fresh connection, with a deadline on each step. Plain http:// only, as OTLP/HTTP's usual
// local collector is; a new connection per batch (one every bsp_schedule_delay at most) costs
// nothing worth a pool.
//
// Thread safety: PostJson from any thread; an endpoint is a value.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "core/status.h"

namespace vramd::trace {

struct HttpEndpoint {
  std::string host;
  std::string port = "80";
  std::string path = "/";
};

// Parses "http://host[:port][/path]"; InvalidArgument naming what is wrong otherwise.
Result<HttpEndpoint> ParseHttpEndpoint(std::string_view url);

// POSTs `body` as application/json; Ok for a 2xx answer. Unavailable naming the step (resolve,
// connect, send, receive) and the reason, or the status line of any other answer.
Status PostJson(const HttpEndpoint& endpoint, std::string_view body,
                std::chrono::milliseconds timeout);

}  // namespace vramd::trace
