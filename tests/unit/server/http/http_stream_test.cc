// HttpServer's streamed answers (HttpResponse::more) and its CancelFlag (HttpRequest::cancel),
// over a real socket: parts leave as they are given, chunked; a client that leaves before its
// answer sets the flag; pipelined requests behind an answer given later still come in order.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "server/http/http_server.h"

namespace vramd::http {
namespace {

using namespace std::chrono_literals;

// What the handler was given, for the test thread to answer later.
struct Held {
  std::mutex mu;
  std::condition_variable cv;
  // A deque: the references Wait hands out stay valid as more requests come.
  std::deque<std::pair<HttpRequest, Responder>> requests;

  Handler handler() {
    return [this](HttpRequest r, Responder respond) {
      std::lock_guard<std::mutex> lock(mu);
      requests.emplace_back(std::move(r), std::move(respond));
      cv.notify_all();
    };
  }
  std::pair<HttpRequest, Responder>& Wait(size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    EXPECT_TRUE(cv.wait_for(lock, 5s, [&] { return requests.size() >= n; }));
    return requests.at(n - 1);
  }
};

class Client {
 public:
  explicit Client(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    timeval tv{5, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }
  ~Client() { Close(); }
  void Send(const std::string& s) {
    ASSERT_EQ(::send(fd_, s.data(), s.size(), 0), static_cast<ssize_t>(s.size()));
  }
  // Reads until `text` has arrived (or 5 s, or the end of the connection).
  std::string ReadUntil(const std::string& text) {
    while (received_.find(text) == std::string::npos) {
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) break;
      received_.append(buf, n);
    }
    return received_;
  }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  std::string received_;
};

std::unique_ptr<HttpServer> Start(Held* held) {
  HttpServer::Options options;
  options.address = "127.0.0.1";
  options.port = 0;
  options.threads = 2;
  auto server = HttpServer::Start(options, held->handler());
  EXPECT_TRUE(server.ok()) << server.status().ToString();
  return server.ok() ? std::move(server).value() : nullptr;
}

const char kRequest[] = "POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n{}";

HttpResponse Part(std::string body, bool more, unsigned status = 200) {
  HttpResponse r;
  r.status = status;
  r.content_type = "text/event-stream; charset=utf-8";
  r.body = std::move(body);
  r.more = more;
  return r;
}

TEST(HttpStreamTest, PartsLeaveAsTheyAreGivenAsChunks) {
  Held held;
  auto server = Start(&held);
  ASSERT_NE(server, nullptr);
  Client client(server->port());
  client.Send(kRequest);
  auto& [request, respond] = held.Wait(1);
  respond(Part("data: 1\n\n", true));
  std::string got = client.ReadUntil("data: 1\n\n\r\n");
  EXPECT_EQ(got.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << got;
  EXPECT_NE(got.find("Transfer-Encoding: chunked\r\n"), std::string::npos) << got;
  EXPECT_NE(got.find("Content-Type: text/event-stream; charset=utf-8\r\n"), std::string::npos);
  EXPECT_NE(got.find("\r\n\r\n9\r\ndata: 1\n\n\r\n"), std::string::npos) << got;
  respond(Part("data: 22\n\n", true));
  got = client.ReadUntil("data: 22\n\n\r\n");
  EXPECT_NE(got.find("a\r\ndata: 22\n\n\r\n"), std::string::npos) << got;
  respond(Part("", false));
  got = client.ReadUntil("\r\n0\r\n\r\n");
  EXPECT_NE(got.find("data: 22\n\n\r\n0\r\n\r\n"), std::string::npos) << got;
  EXPECT_FALSE(request.cancel->cancelled());

  // The connection serves the next request.
  client.Send(kRequest);
  auto& [second, respond2] = held.Wait(2);
  HttpResponse plain;
  plain.body = "{\"ok\":1}";
  respond2(std::move(plain));
  got = client.ReadUntil("{\"ok\":1}");
  EXPECT_NE(got.find("Content-Length: 8\r\n"), std::string::npos) << got;
  EXPECT_EQ(second.cancel, request.cancel);  // one flag per connection
  server->Shutdown();
}

// A trace's HTTP_SEND_END rides on HttpResponse::written: for a stream it is the last part's,
// called once the whole stream is out.
TEST(HttpStreamTest, TheLastPartsWrittenIsCalledOnceTheStreamIsOut) {
  Held held;
  auto server = Start(&held);
  ASSERT_NE(server, nullptr);
  Client client(server->port());
  client.Send(kRequest);
  auto& [request, respond] = held.Wait(1);
  std::promise<void> written;
  auto written_future = written.get_future();
  HttpResponse first = Part("data: 1\n\n", true);
  first.written = [] { ADD_FAILURE() << "a part before the last one has no written call"; };
  respond(std::move(first));
  client.ReadUntil("data: 1\n\n\r\n");
  HttpResponse last = Part("", false);
  last.written = [&written] { written.set_value(); };
  respond(std::move(last));
  client.ReadUntil("\r\n0\r\n\r\n");
  EXPECT_EQ(written_future.wait_for(5s), std::future_status::ready);
  server->Shutdown();
}

TEST(HttpStreamTest, AClientThatLeavesSetsTheCancelFlag) {
  Held held;
  auto server = Start(&held);
  ASSERT_NE(server, nullptr);
  auto client = std::make_unique<Client>(server->port());
  client->Send(kRequest);
  auto& [request, respond] = held.Wait(1);
  ASSERT_NE(request.cancel, nullptr);
  EXPECT_FALSE(request.cancel->cancelled());
  client->Close();
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!request.cancel->cancelled() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_TRUE(request.cancel->cancelled());
  // Answered once anyway; dropped, nothing breaks, and its written call still comes.
  std::promise<void> written;
  auto written_future = written.get_future();
  HttpResponse late = Part("late", false);
  late.written = [&written] { written.set_value(); };
  respond(std::move(late));
  EXPECT_EQ(written_future.wait_for(5s), std::future_status::ready);
  server->Shutdown();
}

TEST(HttpStreamTest, AClientThatLeavesMidStreamSetsTheCancelFlag) {
  Held held;
  auto server = Start(&held);
  ASSERT_NE(server, nullptr);
  auto client = std::make_unique<Client>(server->port());
  client->Send(kRequest);
  auto& [request, respond] = held.Wait(1);
  respond(Part("data: a\n\n", true));
  client->ReadUntil("data: a\n\n\r\n");
  client->Close();
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!request.cancel->cancelled() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_TRUE(request.cancel->cancelled());
  respond(Part("data: b\n\n", true));
  respond(Part("", false));
  server->Shutdown();
}

TEST(HttpStreamTest, PipelinedRequestsBehindALaterAnswerComeInOrder) {
  Held held;
  auto server = Start(&held);
  ASSERT_NE(server, nullptr);
  Client client(server->port());
  client.Send(kRequest);
  auto& [first, respond1] = held.Wait(1);
  // Arrives while the first is being handled: the watching read takes it into the buffer.
  client.Send(std::string(kRequest) + kRequest);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(held.requests.size(), 1u);
  respond1(Part("one", false));
  auto& [second, respond2] = held.Wait(2);
  respond2(Part("two", false));
  auto& [third, respond3] = held.Wait(3);
  respond3(Part("three", false));
  const std::string got = client.ReadUntil("three");
  const size_t one = got.find("one"), two = got.find("two"), three = got.find("three");
  EXPECT_TRUE(one < two && two < three) << got;
  EXPECT_FALSE(first.cancel->cancelled());
  server->Shutdown();
}

TEST(HttpStreamTest, Http10StreamRunsToTheEndOfTheConnection) {
  Held held;
  auto server = Start(&held);
  ASSERT_NE(server, nullptr);
  Client client(server->port());
  client.Send("POST /x HTTP/1.0\r\nContent-Length: 2\r\n\r\n{}");
  auto& [request, respond] = held.Wait(1);
  respond(Part("data: 1\n\n", true));
  respond(Part("data: 2\n\n", false));
  const std::string got = client.ReadUntil("never");  // until the server closes
  EXPECT_EQ(got.rfind("HTTP/1.0 200 OK\r\n", 0), 0u) << got;
  EXPECT_EQ(got.find("chunked"), std::string::npos) << got;
  EXPECT_NE(got.find("\r\n\r\ndata: 1\n\ndata: 2\n\n"), std::string::npos) << got;
  server->Shutdown();
}

}  // namespace
}  // namespace vramd::http
