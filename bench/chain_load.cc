// chain_load: a closed-loop HTTP load generator for a three-model chain, served either as one
// ensemble request or as three requests a client makes in sequence (issue 16's ensemble target).
//
//   chain_load --mode ensemble [--model ens_chain] [common options]
//   chain_load --mode client [--first ens_identity_in] [--add-sub ens_add_sub]
//              [--last ens_identity_out] [common options]
//   common options: [--host 127.0.0.1] [--port 8000] [--concurrency C] [--duration S]
//                   [--warmup S] [--timeout S]
//
// The chain is identity -> add_sub -> identity on FP32 [1,16] tensors, always sent and asked for
// as binary tensor data (Triton's binary extension: Inference-Header-Content-Length, the JSON
// header, then the raw bytes; binary_data_size on each input, "binary_data":true on each output).
//   ensemble: one POST /v2/models/MODEL/infer with INPUT0 and INPUT1, asking OUTPUT0 (the sum,
//     through the last identity) and OUTPUT1 (the difference); the answer must be 200.
//   client: the ensemble's work done by the client, three requests in sequence on the same
//     connection, each built from the previous answer: (a) --first on INPUT0 -> OUTPUT0;
//     (b) --add-sub on INPUT0 = (a)'s OUTPUT0 bytes and INPUT1 = the client's second tensor ->
//     OUTPUT0 (sum) and OUTPUT1 (difference); (c) --last on INPUT0 = (b)'s OUTPUT0 -> OUTPUT0.
//     Each answer is parsed (its Inference-Header-Content-Length, then each output's
//     binary_data_size in the JSON header, in order) and its bytes are sent on. One iteration of
//     the three calls counts as one request, and its latency is the three calls' together.
// Like infer_load: C threads, each with one keep-alive HTTP/1.1 connection (TCP_NODELAY, plain
// POSIX sockets), each waiting for the whole answer before sending the next request. Before the
// load starts, one iteration on a connection of its own checks the answer: OUTPUT0 must be
// INPUT0 + INPUT1 and OUTPUT1 INPUT0 - INPUT1, exactly. The first --warmup seconds are not
// measured; then iterations that start and end within --duration seconds are counted. A non-200
// answer, an answer that cannot be parsed, or a broken connection is an error (a broken
// connection is reopened); the first error goes to stderr.
// Prints one JSON line (infer_load's keys, plus mode and calls_per_request):
//   {"mode":"client","concurrency":C,"errors":e,"requests":n,"rps":x,"p50_ms":..,"p90_ms":..,
//    "p99_ms":..,"mean_ms":..,"duration_s":..,"connect_failures":..,"calls_per_request":3}
// Exit status: 0; 2 for bad arguments or no connection at all; 3 when every request failed
// (the checking iteration included: a model that is not served); 4 when the checking
// iteration's answer is wrong.
#include "latency_summary.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kElements = 16;
constexpr size_t kTensorBytes = kElements * sizeof(float);
constexpr size_t kMaxHeaderBytes = 64 * 1024;

struct Options {
  std::string host = "127.0.0.1";
  std::string port = "8000";
  std::string mode;
  std::string model = "ens_chain";
  std::string first = "ens_identity_in";
  std::string add_sub = "ens_add_sub";
  std::string last = "ens_identity_out";
  int concurrency = 1;
  double duration_s = 5.0;
  double warmup_s = 1.0;
  double timeout_s = 30.0;
};

[[noreturn]] void Usage(const std::string& why) {
  std::cerr << "chain_load: " << why << "\n"
            << "usage: chain_load --mode ensemble [--model M]\n"
            << "       chain_load --mode client [--first M] [--add-sub M] [--last M]\n"
            << "         [--host H] [--port P] [--concurrency C] [--duration S] [--warmup S]\n"
            << "         [--timeout S]\n";
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
      else if (a == "--mode") o.mode = v;
      else if (a == "--model") o.model = v;
      else if (a == "--first") o.first = v;
      else if (a == "--add-sub") o.add_sub = v;
      else if (a == "--last") o.last = v;
      else if (a == "--concurrency") o.concurrency = std::stoi(v);
      else if (a == "--duration") o.duration_s = std::stod(v);
      else if (a == "--warmup") o.warmup_s = std::stod(v);
      else if (a == "--timeout") o.timeout_s = std::stod(v);
      else Usage("unknown option " + a);
    } catch (const std::exception&) {
      Usage("bad value '" + v + "' for " + a);
    }
  }
  if (o.mode != "ensemble" && o.mode != "client") Usage("--mode must be ensemble or client");
  if (o.concurrency < 1 || o.concurrency > 4096) Usage("--concurrency must be 1..4096");
  if (o.duration_s <= 0 || o.warmup_s < 0 || o.timeout_s <= 0) Usage("bad duration/warmup/timeout");
  return o;
}

// A broken or timed-out connection (the worker reopens it); an HTTP error is not one.
struct ConnectionError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Response {
  int status = 0;
  bool keep_alive = true;
  long header_length = -1;  // Inference-Header-Content-Length, -1 when absent
  std::string body;
};

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

long ToLong(std::string_view s, int base = 10) {
  std::string text(Trim(s));
  if (text.empty()) throw ConnectionError("bad number in an answer's header");
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(text.c_str(), &end, base);
  if (errno != 0 || v < 0 || (*end != '\0' && *end != ';')) {
    throw ConnectionError("bad number '" + text + "' in an answer's header");
  }
  return v;
}

// One keep-alive HTTP/1.1 connection over a blocking socket, with send/receive timeouts.
class Connection {
 public:
  explicit Connection(const Options& o) : o_(o) {}
  ~Connection() { Close(); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  bool is_open() const { return fd_ >= 0; }

  void Open() {
    Close();
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    int rc = getaddrinfo(o_.host.c_str(), o_.port.c_str(), &hints, &res);
    if (rc != 0) throw ConnectionError("resolve " + o_.host + ": " + gai_strerror(rc));
    std::string why = "no address";
    for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
      int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
      if (fd < 0) {
        why = std::strerror(errno);
        continue;
      }
      if (ConnectWithTimeout(fd, ai->ai_addr, ai->ai_addrlen, &why)) {
        fd_ = fd;
        break;
      }
      ::close(fd);
    }
    freeaddrinfo(res);
    if (fd_ < 0) throw ConnectionError("connect " + o_.host + ":" + o_.port + ": " + why);
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(o_.timeout_s);
    tv.tv_usec = static_cast<suseconds_t>((o_.timeout_s - static_cast<double>(tv.tv_sec)) * 1e6);
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    buf_.clear();
    pos_ = 0;
  }

  void Close() {
    if (fd_ >= 0) {
      ::shutdown(fd_, SHUT_RDWR);
      ::close(fd_);
      fd_ = -1;
    }
  }

  void Send(const std::string& data) {
    size_t done = 0;
    while (done < data.size()) {
      ssize_t n = ::send(fd_, data.data() + done, data.size() - done, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        throw ConnectionError(errno == EAGAIN || errno == EWOULDBLOCK
                                  ? std::string("send timed out")
                                  : std::string("send: ") + std::strerror(errno));
      }
      done += static_cast<size_t>(n);
    }
  }

  // Reads one whole answer (Content-Length or chunked framing).
  void Read(Response& r) {
    size_t header_end;
    while ((header_end = buf_.find("\r\n\r\n", pos_)) == std::string::npos) {
      if (buf_.size() - pos_ > kMaxHeaderBytes) throw ConnectionError("answer header too large");
      Fill();
    }
    std::string_view head(buf_.data() + pos_, header_end - pos_);
    size_t line_end = head.find("\r\n");
    std::string_view status_line = head.substr(0, line_end);
    if (status_line.size() < 12 || status_line.substr(0, 5) != "HTTP/") {
      throw ConnectionError("bad status line '" + std::string(status_line.substr(0, 80)) + "'");
    }
    const bool http10 = status_line.substr(5, 3) == "1.0";
    r.status = static_cast<int>(ToLong(status_line.substr(9, 3)));
    r.keep_alive = !http10;
    r.header_length = -1;
    long content_length = -1;
    bool chunked = false;
    while (line_end != std::string_view::npos && line_end < head.size()) {
      size_t next = head.find("\r\n", line_end + 2);
      std::string_view line =
          head.substr(line_end + 2, next == std::string_view::npos ? std::string_view::npos
                                                                    : next - line_end - 2);
      line_end = next;
      size_t colon = line.find(':');
      if (colon == std::string_view::npos) continue;
      const std::string name = Lower(Trim(line.substr(0, colon)));
      std::string_view value = Trim(line.substr(colon + 1));
      if (name == "content-length") content_length = ToLong(value);
      else if (name == "inference-header-content-length") r.header_length = ToLong(value);
      else if (name == "transfer-encoding") chunked = Lower(value).find("chunked") != std::string::npos;
      else if (name == "connection") {
        const std::string v = Lower(value);
        if (v.find("close") != std::string::npos) r.keep_alive = false;
        else if (v.find("keep-alive") != std::string::npos) r.keep_alive = true;
      }
    }
    pos_ = header_end + 4;
    r.body.clear();
    const bool no_body = r.status / 100 == 1 || r.status == 204 || r.status == 304;
    if (no_body) {
      // nothing
    } else if (chunked) {
      for (;;) {
        size_t eol;
        while ((eol = buf_.find("\r\n", pos_)) == std::string::npos) Fill();
        const long size = ToLong(std::string_view(buf_).substr(pos_, eol - pos_), 16);
        pos_ = eol + 2;
        if (size == 0) {  // trailer lines up to an empty one
          for (;;) {
            while ((eol = buf_.find("\r\n", pos_)) == std::string::npos) Fill();
            const bool empty = eol == pos_;
            pos_ = eol + 2;
            if (empty) break;
          }
          break;
        }
        Need(static_cast<size_t>(size) + 2);
        r.body.append(buf_, pos_, static_cast<size_t>(size));
        pos_ += static_cast<size_t>(size) + 2;
      }
    } else if (content_length >= 0) {
      Need(static_cast<size_t>(content_length));
      r.body.assign(buf_, pos_, static_cast<size_t>(content_length));
      pos_ += static_cast<size_t>(content_length);
    } else {  // to the end of the connection
      for (;;) {
        try {
          Fill();
        } catch (const ConnectionError&) {
          break;
        }
      }
      r.body.assign(buf_, pos_, std::string::npos);
      pos_ = buf_.size();
      r.keep_alive = false;
    }
    if (pos_ == buf_.size()) {
      buf_.clear();
      pos_ = 0;
    } else if (pos_ > 64 * 1024) {
      buf_.erase(0, pos_);
      pos_ = 0;
    }
  }

 private:
  static bool ConnectWithTimeout(int fd, const sockaddr* addr, socklen_t len, std::string* why) {
    int flags = ::fcntl(fd, F_GETFL, 0);
    ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
    int rc = ::connect(fd, addr, len);
    if (rc < 0 && errno != EINPROGRESS) {
      *why = std::strerror(errno);
      return false;
    }
    if (rc < 0) {
      pollfd p{fd, POLLOUT, 0};
      rc = ::poll(&p, 1, 30000);
      if (rc <= 0) {
        *why = rc == 0 ? "timed out" : std::strerror(errno);
        return false;
      }
      int err = 0;
      socklen_t err_len = sizeof err;
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &err_len);
      if (err != 0) {
        *why = std::strerror(err);
        return false;
      }
    }
    ::fcntl(fd, F_SETFL, flags);
    return true;
  }

  // Reads at least one more byte into buf_.
  void Fill() {
    char chunk[16384];
    for (;;) {
      ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
      if (n > 0) {
        buf_.append(chunk, static_cast<size_t>(n));
        return;
      }
      if (n == 0) throw ConnectionError("the server closed the connection");
      if (errno == EINTR) continue;
      throw ConnectionError(errno == EAGAIN || errno == EWOULDBLOCK
                                ? std::string("receive timed out")
                                : std::string("receive: ") + std::strerror(errno));
    }
  }

  // Makes buf_ hold at least n bytes from pos_.
  void Need(size_t n) {
    while (buf_.size() - pos_ < n) Fill();
  }

  const Options& o_;
  int fd_ = -1;
  std::string buf_;
  size_t pos_ = 0;
};

// One output of a binary answer: its name and its bytes (a view into the answer's body).
struct Output {
  std::string name;
  std::string_view bytes;
};

// The string value after "key": in text; empty when there is none.
std::string StringAfter(std::string_view text, std::string_view key) {
  size_t k = text.find(key);
  if (k == std::string_view::npos) return {};
  size_t colon = text.find(':', k + key.size());
  if (colon == std::string_view::npos) return {};
  size_t q1 = text.find('"', colon + 1);
  if (q1 == std::string_view::npos) return {};
  size_t q2 = text.find('"', q1 + 1);
  if (q2 == std::string_view::npos) return {};
  return std::string(text.substr(q1 + 1, q2 - q1 - 1));
}

// The non-negative integer after "key": in text; -1 when there is none.
long NumberAfter(std::string_view text, std::string_view key) {
  size_t k = text.find(key);
  if (k == std::string_view::npos) return -1;
  size_t colon = text.find(':', k + key.size());
  if (colon == std::string_view::npos) return -1;
  size_t i = colon + 1;
  while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
  long v = 0;
  size_t digits = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
    v = v * 10 + (text[i++] - '0');
    ++digits;
  }
  return digits ? v : -1;
}

// Splits a binary answer into its outputs: the JSON header is the first header_length bytes;
// its "outputs" array lists the outputs in the order their bytes follow, each with
// parameters.binary_data_size. Returns an empty string, or what is wrong.
std::string ParseOutputs(const Response& r, std::vector<Output>& outputs) {
  outputs.clear();
  if (r.header_length < 0) return "the answer has no Inference-Header-Content-Length";
  if (static_cast<size_t>(r.header_length) > r.body.size()) {
    return "Inference-Header-Content-Length " + std::to_string(r.header_length) +
           " is larger than the body (" + std::to_string(r.body.size()) + " bytes)";
  }
  std::string_view json(r.body.data(), static_cast<size_t>(r.header_length));
  size_t at = json.find("\"outputs\"");
  if (at == std::string_view::npos) return "no \"outputs\" in the answer's JSON header";
  at = json.find('[', at);
  if (at == std::string_view::npos) return "no outputs array in the answer's JSON header";
  // Each top-level object of the array, braces matched outside strings.
  size_t offset = static_cast<size_t>(r.header_length);
  int depth = 0;
  bool in_string = false;
  size_t object_begin = 0;
  for (size_t i = at + 1; i < json.size(); ++i) {
    const char c = json[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{') {
      if (depth++ == 0) object_begin = i;
    } else if (c == '}') {
      if (--depth == 0) {
        std::string_view object = json.substr(object_begin, i - object_begin + 1);
        Output out;
        out.name = StringAfter(object, "\"name\"");
        const long size = NumberAfter(object, "\"binary_data_size\"");
        if (size < 0) return "output '" + out.name + "' has no binary_data_size";
        if (offset + static_cast<size_t>(size) > r.body.size()) {
          return "output '" + out.name + "' runs past the end of the body";
        }
        out.bytes = std::string_view(r.body).substr(offset, static_cast<size_t>(size));
        offset += static_cast<size_t>(size);
        outputs.push_back(std::move(out));
      }
    } else if (c == ']' && depth == 0) {
      break;
    }
  }
  if (offset != r.body.size()) {
    return "the outputs' binary_data_size add up to " +
           std::to_string(offset - static_cast<size_t>(r.header_length)) + " bytes, the body has " +
           std::to_string(r.body.size() - static_cast<size_t>(r.header_length)) + " after the header";
  }
  return {};
}

// The named output's bytes, which must be one FP32 [1,16] tensor; empty string or what is wrong.
std::string Find(const std::vector<Output>& outputs, const std::string& name,
                 std::string_view& bytes) {
  for (const Output& o : outputs) {
    if (o.name != name) continue;
    if (o.bytes.size() != kTensorBytes) {
      return "output '" + name + "' has " + std::to_string(o.bytes.size()) + " bytes, expected " +
             std::to_string(kTensorBytes);
    }
    bytes = o.bytes;
    return {};
  }
  return "the answer has no output '" + name + "'";
}

std::string Tensor(const float (&v)[kElements]) {
  return std::string(reinterpret_cast<const char*>(v), kTensorBytes);
}

// A request's fixed part: the HTTP header and the JSON inference header for FP32 [1,16] inputs
// sent as binary data and outputs asked as binary data; the inputs' bytes follow it.
std::string RequestPrefix(const Options& o, const std::string& model,
                          const std::vector<std::string>& inputs,
                          const std::vector<std::string>& outputs) {
  std::string json = "{\"inputs\":[";
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (i) json += ",";
    json += "{\"name\":\"" + inputs[i] + "\",\"datatype\":\"FP32\",\"shape\":[1," +
            std::to_string(kElements) + "],\"parameters\":{\"binary_data_size\":" +
            std::to_string(kTensorBytes) + "}}";
  }
  json += "],\"outputs\":[";
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (i) json += ",";
    json += "{\"name\":\"" + outputs[i] + "\",\"parameters\":{\"binary_data\":true}}";
  }
  json += "]}";
  const size_t content_length = json.size() + inputs.size() * kTensorBytes;
  std::string head = "POST /v2/models/" + model + "/infer HTTP/1.1\r\n" + "Host: " + o.host +
                     "\r\n" + "User-Agent: chain_load\r\n" +
                     "Content-Type: application/octet-stream\r\n" +
                     "Inference-Header-Content-Length: " + std::to_string(json.size()) + "\r\n" +
                     "Content-Length: " + std::to_string(content_length) + "\r\n\r\n";
  return head + json;
}

struct Shared {
  const Options* opt = nullptr;
  std::string input0, input1;  // the client's two tensors
  // ensemble: the whole request; client: (a)'s whole request, (b)'s and (c)'s fixed parts.
  std::string ensemble_request;
  std::string first_request;
  std::string add_sub_prefix;
  std::string last_prefix;
  Clock::time_point measure_begin;
  Clock::time_point measure_end;
  std::once_flag first_error;
};

void ReportFirstError(Shared& s, const std::string& what) {
  std::call_once(s.first_error, [&] { std::cerr << "chain_load: first error: " << what << "\n"; });
}

// Per-connection buffers, reused from one iteration to the next.
struct Scratch {
  Response response;
  std::vector<Output> outputs;
  std::string request;
  std::string sum, difference;  // the iteration's results, when asked for
};

// Sends one request, reads its answer; an empty string, or the HTTP error.
std::string Call(Connection& c, const std::string& model, const std::string& request,
                 Response& r) {
  c.Send(request);
  c.Read(r);
  if (!r.keep_alive) c.Close();
  if (r.status != 200) {
    return "'" + model + "': HTTP " + std::to_string(r.status) + ": " + r.body.substr(0, 2000);
  }
  return {};
}

// One iteration of the chain. Returns an empty string, or what went wrong (an HTTP error or an
// answer that cannot be used); throws ConnectionError. With results, leaves the final OUTPUT0
// and OUTPUT1 in scratch.sum and scratch.difference.
std::string Iteration(Shared& s, Connection& c, Scratch& x, bool results) {
  const Options& o = *s.opt;
  std::string why;
  std::string_view bytes;
  if (!c.is_open()) c.Open();
  if (o.mode == "ensemble") {
    if (!(why = Call(c, o.model, s.ensemble_request, x.response)).empty()) return why;
    if (!results) return {};
    if (!(why = ParseOutputs(x.response, x.outputs)).empty()) return "'" + o.model + "': " + why;
    if (!(why = Find(x.outputs, "OUTPUT0", bytes)).empty()) return "'" + o.model + "': " + why;
    x.sum.assign(bytes);
    if (!(why = Find(x.outputs, "OUTPUT1", bytes)).empty()) return "'" + o.model + "': " + why;
    x.difference.assign(bytes);
    return {};
  }
  // (a) the first identity on the client's INPUT0.
  if (!(why = Call(c, o.first, s.first_request, x.response)).empty()) return why;
  if (!(why = ParseOutputs(x.response, x.outputs)).empty()) return "'" + o.first + "': " + why;
  if (!(why = Find(x.outputs, "OUTPUT0", bytes)).empty()) return "'" + o.first + "': " + why;
  // (b) add_sub on (a)'s OUTPUT0 and the client's INPUT1.
  x.request.assign(s.add_sub_prefix);
  x.request.append(bytes);
  x.request.append(s.input1);
  if (!c.is_open()) c.Open();
  if (!(why = Call(c, o.add_sub, x.request, x.response)).empty()) return why;
  if (!(why = ParseOutputs(x.response, x.outputs)).empty()) return "'" + o.add_sub + "': " + why;
  if (!(why = Find(x.outputs, "OUTPUT1", bytes)).empty()) return "'" + o.add_sub + "': " + why;
  x.difference.assign(bytes);  // the client keeps OUTPUT1, as the ensemble returns it
  if (!(why = Find(x.outputs, "OUTPUT0", bytes)).empty()) return "'" + o.add_sub + "': " + why;
  // (c) the last identity on (b)'s OUTPUT0.
  x.request.assign(s.last_prefix);
  x.request.append(bytes);
  if (!c.is_open()) c.Open();
  if (!(why = Call(c, o.last, x.request, x.response)).empty()) return why;
  if (!(why = ParseOutputs(x.response, x.outputs)).empty()) return "'" + o.last + "': " + why;
  if (!(why = Find(x.outputs, "OUTPUT0", bytes)).empty()) return "'" + o.last + "': " + why;
  x.sum.assign(bytes);
  return {};
}

struct WorkerResult {
  std::vector<double> latencies_ms;  // measured window only
  long errors = 0;                   // measured window only
  long connect_failures = 0;
};

void Worker(Shared& s, WorkerResult& r) {
  Connection c(*s.opt);
  Scratch x;
  for (;;) {
    auto start = Clock::now();
    if (start >= s.measure_end) break;
    bool in_window = start >= s.measure_begin;
    try {
      std::string why = Iteration(s, c, x, false);
      auto end = Clock::now();
      if (!why.empty()) ReportFirstError(s, why);
      if (end <= s.measure_end && in_window) {
        if (why.empty()) {
          r.latencies_ms.push_back(std::chrono::duration<double, std::milli>(end - start).count());
        } else {
          ++r.errors;
        }
      }
    } catch (const ConnectionError& e) {
      ReportFirstError(s, std::string("connection: ") + e.what());
      c.Close();
      if (in_window) ++r.errors;
      ++r.connect_failures;
      // Do not spin on a server that is not there.
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

// Checks one iteration's answer on a connection of its own; exits unless it is right.
void Verify(Shared& s) {
  Connection c(*s.opt);
  Scratch x;
  std::string why;
  try {
    why = Iteration(s, c, x, true);
  } catch (const ConnectionError& e) {
    std::cerr << "chain_load: checking request: connection: " << e.what() << "\n";
    std::exit(2);
  }
  if (!why.empty()) {
    std::cerr << "chain_load: checking request failed: " << why << "\n";
    std::exit(3);
  }
  float in0[kElements], in1[kElements], sum[kElements], diff[kElements];
  std::memcpy(in0, s.input0.data(), kTensorBytes);
  std::memcpy(in1, s.input1.data(), kTensorBytes);
  std::memcpy(sum, x.sum.data(), kTensorBytes);
  std::memcpy(diff, x.difference.data(), kTensorBytes);
  for (int i = 0; i < kElements; ++i) {
    if (sum[i] != in0[i] + in1[i] || diff[i] != in0[i] - in1[i]) {
      std::fprintf(stderr,
                   "chain_load: wrong answer at element %d: OUTPUT0 %g (expected %g = %g + %g), "
                   "OUTPUT1 %g (expected %g)\n",
                   i, sum[i], in0[i] + in1[i], in0[i], in1[i], diff[i], in0[i] - in1[i]);
      std::exit(4);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o = Parse(argc, argv);
  Shared s;
  s.opt = &o;
  // Values whose sums and differences are exact in FP32, and all different.
  float in0[kElements], in1[kElements];
  for (int i = 0; i < kElements; ++i) {
    in0[i] = static_cast<float>(i) + 0.5f;
    in1[i] = 2.0f * static_cast<float>(i) - 7.0f;
  }
  s.input0 = Tensor(in0);
  s.input1 = Tensor(in1);
  s.ensemble_request =
      RequestPrefix(o, o.model, {"INPUT0", "INPUT1"}, {"OUTPUT0", "OUTPUT1"}) + s.input0 + s.input1;
  s.first_request = RequestPrefix(o, o.first, {"INPUT0"}, {"OUTPUT0"}) + s.input0;
  s.add_sub_prefix = RequestPrefix(o, o.add_sub, {"INPUT0", "INPUT1"}, {"OUTPUT0", "OUTPUT1"});
  s.last_prefix = RequestPrefix(o, o.last, {"INPUT0"}, {"OUTPUT0"});

  Verify(s);

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
  char line[640];
  std::snprintf(line, sizeof line,
                "{\"mode\":\"%s\",\"concurrency\":%d,\"errors\":%ld,%s,\"duration_s\":%.3f,"
                "\"connect_failures\":%ld,\"calls_per_request\":%d}",
                o.mode.c_str(), o.concurrency, errors, vramd::bench::JsonFields(summary).c_str(),
                o.duration_s, connect_failures, o.mode == "client" ? 3 : 1);
  std::cout << line << std::endl;
  if (summary.requests == 0 && connect_failures > 0) return 2;
  if (summary.requests == 0) return 3;
  return 0;
}
