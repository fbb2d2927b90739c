#include "server/trace/otlp_post.h"

#include <fmt/format.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "backends/remote/unique_fd.h"

namespace vramd::trace {
namespace {

using backends::remote::UniqueFd;
using Clock = std::chrono::steady_clock;

// Waits until `fd` is ready for `events` or the deadline passes.
Status WaitFor(int fd, short events, Clock::time_point deadline, std::string_view step) {
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return Status::Unavailable(fmt::format("{}: timed out", step));
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n > 0) return Status::Ok();
    if (n < 0 && errno != EINTR) {
      return Status::Unavailable(fmt::format("{}: {}", step, std::strerror(errno)));
    }
  }
}

Result<UniqueFd> Connect(const HttpEndpoint& endpoint, Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(endpoint.host.c_str(), endpoint.port.c_str(), &hints, &found);
      rc != 0) {
    return Status::Unavailable(fmt::format("resolve {}: {}", endpoint.host, gai_strerror(rc)));
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> addresses(found, &::freeaddrinfo);
  Status last = Status::Unavailable("connect: no address");
  for (addrinfo* a = addresses.get(); a != nullptr; a = a->ai_next) {
    UniqueFd fd(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                         a->ai_protocol));
    if (!fd.valid()) continue;
    if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      last = Status::Unavailable(fmt::format("connect: {}", std::strerror(errno)));
      continue;
    }
    Status ready = WaitFor(fd.get(), POLLOUT, deadline, "connect");
    int error = 0;
    socklen_t length = sizeof error;
    if (ready.ok() && ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &length) == 0 &&
        error == 0) {
      return fd;
    }
    last = ready.ok() ? Status::Unavailable(fmt::format("connect: {}", std::strerror(error)))
                      : ready;
  }
  return last;
}

}  // namespace

Result<HttpEndpoint> ParseHttpEndpoint(std::string_view url) {
  constexpr std::string_view kScheme = "http://";
  if (url.substr(0, kScheme.size()) != kScheme) {
    return Status::InvalidArgument(
        fmt::format("'{}' is not an http:// URL (OTLP/HTTP without TLS)", url));
  }
  url.remove_prefix(kScheme.size());
  HttpEndpoint endpoint;
  const size_t slash = url.find('/');
  std::string_view authority = url.substr(0, slash);
  if (slash != std::string_view::npos) endpoint.path = std::string(url.substr(slash));
  const size_t colon = authority.rfind(':');
  if (colon != std::string_view::npos && authority.find(']') == std::string_view::npos) {
    endpoint.port = std::string(authority.substr(colon + 1));
    authority = authority.substr(0, colon);
  }
  if (authority.size() >= 2 && authority.front() == '[' && authority.back() == ']') {
    authority = authority.substr(1, authority.size() - 2);
  }
  endpoint.host = std::string(authority);
  if (endpoint.host.empty() || endpoint.port.empty() ||
      endpoint.port.find_first_not_of("0123456789") != std::string::npos) {
    return Status::InvalidArgument(fmt::format("'http://{}' has no host or a bad port", url));
  }
  return endpoint;
}

Status PostJson(const HttpEndpoint& endpoint, std::string_view body,
                std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  VRAMD_ASSIGN_OR_RETURN(UniqueFd fd, Connect(endpoint, deadline));
  const std::string head = fmt::format(
      "POST {} HTTP/1.1\r\nHost: {}:{}\r\nContent-Type: application/json\r\n"
      "Content-Length: {}\r\nConnection: close\r\n\r\n",
      endpoint.path, endpoint.host, endpoint.port, body.size());
  for (std::string_view part : {std::string_view(head), body}) {
    while (!part.empty()) {
      const ssize_t n = ::send(fd.get(), part.data(), part.size(), MSG_NOSIGNAL);
      if (n > 0) {
        part.remove_prefix(static_cast<size_t>(n));
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        VRAMD_RETURN_IF_ERROR(WaitFor(fd.get(), POLLOUT, deadline, "send"));
      } else {
        return Status::Unavailable(fmt::format("send: {}", std::strerror(errno)));
      }
    }
  }
  // The status line is all that is read: "HTTP/1.1 200 OK".
  std::string answer;
  char buffer[512];
  while (answer.find("\r\n") == std::string::npos && answer.size() < 4096) {
    const ssize_t n = ::recv(fd.get(), buffer, sizeof buffer, 0);
    if (n > 0) {
      answer.append(buffer, static_cast<size_t>(n));
    } else if (n == 0) {
      break;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      VRAMD_RETURN_IF_ERROR(WaitFor(fd.get(), POLLIN, deadline, "receive"));
    } else {
      return Status::Unavailable(fmt::format("receive: {}", std::strerror(errno)));
    }
  }
  const std::string line = answer.substr(0, answer.find("\r\n"));
  if (line.size() >= 12 && line.compare(0, 5, "HTTP/") == 0 && line[9] == '2') {
    return Status::Ok();
  }
  return Status::Unavailable(fmt::format("the collector answered '{}'",
                                         line.empty() ? "nothing" : line.substr(0, 200)));
}

}  // namespace vramd::trace
