// infer_load: a closed-loop HTTP load generator for KServe v2 infer requests.
//
//   infer_load --model M --body-file F [--header-length N] [--host 127.0.0.1] [--port 8000]
//              [--version V] [--concurrency C] [--duration S] [--warmup S] [--timeout S]
//
// C threads, each with one keep-alive HTTP/1.1 connection, each sending the same prebuilt body
// (the file's bytes) to POST /v2/models/M[/versions/V]/infer and waiting for the whole answer
// before sending the next (closed loop). --header-length N > 0 sends
// Inference-Header-Content-Length: N (Triton's binary tensor extension: the body is N bytes of
// JSON followed by the tensor bytes); 0 (the default) sends a plain JSON body. The first
// --warmup seconds are not measured; then requests completed during --duration seconds are
// counted. A non-200 answer or a broken connection is an error (the connection is reopened);
// the first error's status and body go to stderr.
// Prints one JSON line:
//   {"concurrency":C,"requests":n,"errors":e,"rps":x,"p50_ms":..,"p90_ms":..,"p99_ms":..,
//    "mean_ms":..,"duration_s":..}
// Exit status: 0, or 2 for bad arguments / no connection at all, 3 when every request failed.
#include "latency_summary.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace {

namespace beast = boost::beast;
namespace bhttp = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string host = "127.0.0.1";
  std::string port = "8000";
  std::string model;
  std::string version;
  std::string body_file;
  long header_length = 0;
  int concurrency = 1;
  double duration_s = 5.0;
  double warmup_s = 1.0;
  double timeout_s = 30.0;
};

[[noreturn]] void Usage(const std::string& why) {
  std::cerr << "infer_load: " << why << "\n"
            << "usage: infer_load --model M --body-file F [--header-length N] [--host H]\n"
            << "                  [--port P] [--version V] [--concurrency C] [--duration S]\n"
            << "                  [--warmup S] [--timeout S]\n";
  std::exit(2);
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") Usage("help");
    if (i + 1 >= argc) Usage("missing value for " + a);
    std::string v = argv[++i];
    try {
      if (a == "--host") o.host = v;
      else if (a == "--port") o.port = v;
      else if (a == "--model") o.model = v;
      else if (a == "--version") o.version = v;
      else if (a == "--body-file") o.body_file = v;
      else if (a == "--header-length") o.header_length = std::stol(v);
      else if (a == "--concurrency") o.concurrency = std::stoi(v);
      else if (a == "--duration") o.duration_s = std::stod(v);
      else if (a == "--warmup") o.warmup_s = std::stod(v);
      else if (a == "--timeout") o.timeout_s = std::stod(v);
      else Usage("unknown option " + a);
    } catch (const std::exception&) {
      Usage("bad value '" + v + "' for " + a);
    }
  }
  if (o.model.empty()) Usage("--model is required");
  if (o.body_file.empty()) Usage("--body-file is required");
  if (o.concurrency < 1 || o.concurrency > 4096) Usage("--concurrency must be 1..4096");
  if (o.duration_s <= 0 || o.warmup_s < 0 || o.timeout_s <= 0) Usage("bad duration/warmup/timeout");
  if (o.header_length < 0) Usage("--header-length must be >= 0");
  return o;
}

struct WorkerResult {
  std::vector<double> latencies_ms;  // measured window only
  long errors = 0;                   // measured window only
  long connect_failures = 0;
};

struct Shared {
  const Options* opt = nullptr;
  std::string body;
  std::string target;
  Clock::time_point measure_begin;
  Clock::time_point measure_end;
  std::once_flag first_error;
};

void ReportFirstError(Shared& s, const std::string& what) {
  std::call_once(s.first_error, [&] { std::cerr << "infer_load: first error: " << what << "\n"; });
}

void Worker(Shared& s, WorkerResult& r) {
  const Options& o = *s.opt;
  net::io_context ioc;
  tcp::resolver resolver(ioc);
  std::optional<beast::tcp_stream> stream;
  beast::flat_buffer buffer;
  const auto timeout = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>(o.timeout_s));

  bhttp::request<bhttp::string_body> req{bhttp::verb::post, s.target, 11};
  req.set(bhttp::field::host, o.host);
  req.set(bhttp::field::user_agent, "infer_load");
  req.set(bhttp::field::connection, "keep-alive");
  if (o.header_length > 0) {
    req.set(bhttp::field::content_type, "application/octet-stream");
    req.set("Inference-Header-Content-Length", std::to_string(o.header_length));
  } else {
    req.set(bhttp::field::content_type, "application/json");
  }
  req.body() = s.body;
  req.prepare_payload();
  req.keep_alive(true);

  for (;;) {
    auto start = Clock::now();
    if (start >= s.measure_end) break;
    bool in_window = start >= s.measure_begin;
    try {
      if (!stream) {
        stream.emplace(ioc);
        stream->expires_after(timeout);
        stream->connect(resolver.resolve(o.host, o.port));
        stream->socket().set_option(tcp::no_delay(true));
        buffer.clear();
      }
      stream->expires_after(timeout);
      bhttp::write(*stream, req);
      bhttp::response_parser<bhttp::string_body> parser;
      parser.body_limit(boost::none);
      bhttp::read(*stream, buffer, parser);
      auto end = Clock::now();
      const auto& res = parser.get();
      bool ok = res.result_int() == 200;
      if (!ok) {
        ReportFirstError(s, "HTTP " + std::to_string(res.result_int()) + ": " +
                                res.body().substr(0, 2000));
      }
      if (!res.keep_alive()) stream.reset();
      if (end <= s.measure_end && start >= s.measure_begin) {
        if (ok) {
          r.latencies_ms.push_back(std::chrono::duration<double, std::milli>(end - start).count());
        } else {
          ++r.errors;
        }
      }
    } catch (const std::exception& e) {
      ReportFirstError(s, std::string("connection: ") + e.what());
      stream.reset();
      if (in_window) ++r.errors;
      ++r.connect_failures;
      // Do not spin on a server that is not there.
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  if (stream) {
    beast::error_code ec;
    stream->socket().shutdown(tcp::socket::shutdown_both, ec);
  }
}


}  // namespace

int main(int argc, char** argv) {
  Options o = Parse(argc, argv);
  Shared s;
  s.opt = &o;
  {
    std::ifstream in(o.body_file, std::ios::binary);
    if (!in) Usage("cannot read " + o.body_file);
    std::ostringstream ss;
    ss << in.rdbuf();
    s.body = ss.str();
  }
  if (o.header_length > 0 && static_cast<size_t>(o.header_length) > s.body.size()) {
    Usage("--header-length is larger than the body");
  }
  s.target = "/v2/models/" + o.model + (o.version.empty() ? "" : "/versions/" + o.version) + "/infer";

  auto now = Clock::now();
  auto to_dur = [](double sec) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(sec));
  };
  s.measure_begin = now + to_dur(o.warmup_s);
  s.measure_end = s.measure_begin + to_dur(o.duration_s);

  std::vector<WorkerResult> results(static_cast<size_t>(o.concurrency));
  std::vector<std::thread> threads;
  threads.reserve(results.size());
  for (auto& r : results) threads.emplace_back([&s, &r] { Worker(s, r); });
  for (auto& t : threads) t.join();

  std::vector<std::vector<double>> latencies;
  long errors = 0, connect_failures = 0;
  for (auto& r : results) {
    latencies.push_back(std::move(r.latencies_ms));
    errors += r.errors;
    connect_failures += r.connect_failures;
  }
  const vramd::bench::LatencySummary summary = vramd::bench::Summarize(latencies, o.duration_s);
  char line[512];
  std::snprintf(line, sizeof line,
                "{\"concurrency\":%d,\"errors\":%ld,%s,\"duration_s\":%.3f,"
                "\"connect_failures\":%ld}",
                o.concurrency, errors, vramd::bench::JsonFields(summary).c_str(), o.duration_s,
                connect_failures);
  std::cout << line << std::endl;
  if (summary.requests == 0 && connect_failures > 0) return 2;
  if (summary.requests == 0) return 3;
  return 0;
}
