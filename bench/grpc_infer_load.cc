// grpc_infer_load: a closed-loop gRPC load generator for ModelInfer, the gRPC counterpart of
// infer_load (HTTP), and a raw TCP baseline for the same bytes.
//
//   grpc_infer_load --model M [--host 127.0.0.1] [--port 8001] [--input INPUT0]
//                   [--elements N] [--concurrency C] [--duration S] [--warmup S]
//                   [--library-client [--threads T] [--tls-root PEM] | --streams K]
//   grpc_infer_load --tcp-echo [--echo-copy] --elements N [--concurrency C] [--duration S]
//   grpc_infer_load --library-server [--parse] [--elements N] [--port P]
//
// gRPC: C threads, each with a connection of its own (as infer_load has), each sending
// ModelInfer with one FP32 input of N elements in raw_input_contents and waiting for the
// answer before sending the next; the answer's raw output must have N * 4 bytes. The request
// is serialized once and sent as it is, as infer_load sends one prebuilt body, and the client
// speaks HTTP/2 itself (grpc_h2_client.h), so that it costs about what infer_load costs and
// the servers are what differ.
// --streams K: C / K connections (threads), each keeping K calls in flight on streams of its
// own, as gRPC's clients multiplex a channel's concurrent calls (H2UnaryClient::Multiplex).
// --library-client: through gRPC's own C++ client instead (asynchronous, a GenericStub per
// channel, the answer's slices looked at in place), C channels over T threads (default C),
// each thread's channels completing on one queue: what a client built on gRPC's library pays.
// --tls-root PEM: the library client speaks TLS, trusting the CAs in PEM (a server run with
// --grpc-use-ssl; --host must be a name its certificate carries), to measure what TLS costs.
// --tcp-echo: no server of vramd's: C loopback TCP connections to an echo server in this
// process, each sending N * 4 bytes and reading them back, the floor any protocol carrying the
// same tensor in and out pays on this machine. --echo-copy: the echo server also copies each
// block once before sending it back, as the identity model copies its input to its output.
// --library-server: no load, and no vramd: a server built on gRPC's library, set up as vramd's
// is (its asynchronous API, a completion queue and thread per hardware thread, the `poll`
// engine, vramd's malloc settings), that answers each ModelInfer at once with one prebuilt
// answer of N FP32 elements. It neither parses the request nor runs a model, so no server on
// gRPC's library serves more; loaded by this program's default client from another process,
// as vramd is, it says how much of a gap is gRPC's library and how much vramd's. It listens on
// 127.0.0.1:P (0, the default here: a free port), prints {"port":P} once it does, and serves
// until its standard input ends. --parse: it also parses each request into a
// ModelInferRequest (gRPC's reader hands a message over in 64 KiB slices; a server that needs
// a tensor in one piece pays this copy).
// The first --warmup seconds are not measured. Prints one JSON line:
//   {"concurrency":C,"requests":n,"errors":e,"rps":..,"p50_ms":..,..,"duration_s":..}
// Exit status: 0; 2 for bad arguments; 3 when every request failed.
#include "latency_summary.h"

#include <absl/synchronization/mutex.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <malloc.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "grpc_h2_client.h"
#include "server/grpc/grpc_service.grpc.pb.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string host = "127.0.0.1";
  std::string port = "8001";
  std::string model;
  std::string input = "INPUT0";
  long elements = 16;
  int concurrency = 1;
  double duration_s = 5.0;
  double warmup_s = 1.0;
  bool library_client = false;
  std::string tls_root;  // the library client's trusted CAs (PEM file); empty: plaintext
  int threads = 0;  // --library-client's threads; 0: one per request in flight
  int streams = 1;  // calls in flight per connection of the default client
  bool tcp_echo = false;
  bool echo_copy = false;
  bool library_server = false;
  bool parse = false;  // --library-server parses each request
};

[[noreturn]] void Usage(const std::string& why) {
  std::cerr << "grpc_infer_load: " << why << "\n"
            << "usage: grpc_infer_load --model M [--host H] [--port P] [--input NAME]\n"
            << "                       [--elements N] [--concurrency C] [--duration S] [--warmup S]\n"
            << "                       [--library-client [--threads T] [--tls-root PEM] | --streams K]\n"
            << "       grpc_infer_load --tcp-echo [--echo-copy] [--elements N] [--concurrency C] [--duration S]\n"
            << "       grpc_infer_load --library-server [--parse] [--elements N] [--port P]\n";
  std::exit(2);
}

Options Parse(int argc, char** argv) {
  Options o;
  bool explicit_port = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) Usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "--model") o.model = value();
    else if (a == "--host") o.host = value();
    else if (a == "--port") {
      o.port = value();
      explicit_port = true;
    }
    else if (a == "--input") o.input = value();
    else if (a == "--elements") o.elements = std::atol(value().c_str());
    else if (a == "--concurrency") o.concurrency = std::atoi(value().c_str());
    else if (a == "--duration") o.duration_s = std::atof(value().c_str());
    else if (a == "--warmup") o.warmup_s = std::atof(value().c_str());
    else if (a == "--threads") o.threads = std::atoi(value().c_str());
    else if (a == "--streams") o.streams = std::atoi(value().c_str());
    else if (a == "--library-client") o.library_client = true;
    else if (a == "--tls-root") o.tls_root = value();
    else if (a == "--tcp-echo") o.tcp_echo = true;
    else if (a == "--echo-copy") o.echo_copy = true;
    else if (a == "--library-server") o.library_server = true;
    else if (a == "--parse") o.parse = true;
    else if (a == "--help") Usage("help");
    else Usage("unknown argument " + a);
  }
  if (o.tcp_echo && o.library_server) Usage("--tcp-echo and --library-server are two servers");
  if (o.parse && !o.library_server) Usage("--parse needs --library-server");
  if (o.echo_copy && !o.tcp_echo) Usage("--echo-copy needs --tcp-echo");
  if (o.library_server && (o.library_client || o.streams > 1)) {
    Usage("--library-server serves; load it with a second grpc_infer_load");
  }
  if (o.library_server && o.model.empty()) o.model = "identity";
  if (o.library_server && !explicit_port) o.port = "0";
  if (!o.tcp_echo && o.model.empty()) Usage("--model is required");
  if (!o.tls_root.empty() && !o.library_client) Usage("--tls-root needs --library-client");
  if (o.elements <= 0 || o.concurrency <= 0 || o.duration_s <= 0) Usage("bad numbers");
  if (o.streams <= 0 || o.concurrency % o.streams != 0) {
    Usage("--streams must divide --concurrency");
  }
  return o;
}

// What each client thread does per request: true on success.
struct Run {
  std::atomic<bool> measuring{false};
  std::atomic<bool> stop{false};
  std::atomic<long> errors{0};
  std::mutex error_mu;
  std::string first_error;
  void Error(const std::string& what) {
    errors.fetch_add(1);
    std::lock_guard<std::mutex> lock(error_mu);
    if (first_error.empty()) first_error = what;
  }
};

template <typename Once>
std::vector<double> Loop(Run& run, Once once) {
  std::vector<double> latencies;
  while (!run.stop.load()) {
    const auto t0 = Clock::now();
    const bool ok = once();
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (ok && run.measuring.load()) latencies.push_back(ms);
  }
  return latencies;
}

inference::ModelInferRequest MakeRequest(const Options& o) {
  inference::ModelInferRequest request;
  request.set_model_name(o.model);
  auto* input = request.add_inputs();
  input->set_name(o.input);
  input->set_datatype("FP32");
  input->add_shape(o.elements);
  std::vector<float> values(static_cast<size_t>(o.elements));
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 1000);
  request.add_raw_input_contents(reinterpret_cast<const char*>(values.data()),
                                 values.size() * sizeof(float));
  return request;
}

std::shared_ptr<grpc::Channel> NewChannel(const Options& o, int index) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  // A connection each: gRPC shares one among channels whose arguments are equal.
  args.SetInt("vramd.bench.channel", index);
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (!o.tls_root.empty()) {
    std::ifstream in(o.tls_root);
    if (!in) Usage("cannot read --tls-root " + o.tls_root);
    std::stringstream pem;
    pem << in.rdbuf();
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = pem.str();
    credentials = grpc::SslCredentials(ssl);
  }
  return grpc::CreateCustomChannel(o.host + ":" + o.port, credentials, args);
}

// A reader of a message's protobuf wire format across the slices gRPC received it in, which
// are looked at in place (the client copies no tensor bytes, as the TCP echo copies none).
class WireCursor {
 public:
  explicit WireCursor(const std::vector<std::string_view>& slices) : slices_(slices) {}
  bool done() {
    while (slice_ < slices_.size() && offset_ == slices_[slice_].size()) Next();
    return slice_ == slices_.size();
  }
  bool Varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (done()) return false;
      const auto b = static_cast<uint8_t>(slices_[slice_][offset_++]);
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }
  bool Skip(uint64_t n) {
    while (n > 0) {
      if (done()) return false;
      const uint64_t k = std::min<uint64_t>(n, slices_[slice_].size() - offset_);
      offset_ += k;
      n -= k;
    }
    return true;
  }

 private:
  void Next() {
    ++slice_;
    offset_ = 0;
  }
  const std::vector<std::string_view>& slices_;
  size_t slice_ = 0;
  size_t offset_ = 0;
};

// The sizes of the raw_output_contents entries (field 6) of the ModelInferResponse in
// `pieces`; false if the message is not well formed.
bool RawOutputSizes(const std::vector<std::string_view>& pieces, std::vector<uint64_t>* sizes) {
  WireCursor in(pieces);
  sizes->clear();
  while (!in.done()) {
    uint64_t key = 0, n = 0;
    if (!in.Varint(&key)) return false;
    switch (key & 7) {
      case 0:
        if (!in.Varint(&n)) return false;
        break;
      case 1:
        if (!in.Skip(8)) return false;
        break;
      case 2:
        if (!in.Varint(&n) || !in.Skip(n)) return false;
        if ((key >> 3) == 6) sizes->push_back(n);
        break;
      case 5:
        if (!in.Skip(4)) return false;
        break;
      default:
        return false;
    }
  }
  return true;
}

std::vector<std::string_view> Views(const std::vector<grpc::Slice>& slices) {
  std::vector<std::string_view> views;
  for (const grpc::Slice& s : slices) {
    views.emplace_back(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return views;
}

// One client thread: `slots` channels, a request in flight on each, all completing on this
// thread's queue; each answer is checked and the slot's next request sent at once (closed loop
// per channel). Each request is the same ModelInferRequest, serialized once and sent from
// there, as infer_load sends one prebuilt body; each answer is checked for its raw output's
// size without parsing the rest.
void AsyncClient(const Options& o, Run& run, int first_slot, int slots, std::vector<double>* out) {
  const std::string serialized = MakeRequest(o).SerializeAsString();
  const grpc::Slice body(serialized.data(), serialized.size(), grpc::Slice::STATIC_SLICE);
  const grpc::ByteBuffer request(&body, 1);
  const uint64_t want = static_cast<uint64_t>(o.elements) * sizeof(float);
  const std::string method = "/inference.GRPCInferenceService/ModelInfer";
  grpc::CompletionQueue cq;
  struct Slot {
    std::unique_ptr<grpc::GenericStub> stub;
    std::unique_ptr<grpc::ClientContext> context;
    std::unique_ptr<grpc::ClientAsyncResponseReader<grpc::ByteBuffer>> reader;
    grpc::ByteBuffer response;
    grpc::Status status;
    Clock::time_point sent;
  };
  std::vector<Slot> table(static_cast<size_t>(slots));
  auto send = [&](Slot& slot) {
    slot.context = std::make_unique<grpc::ClientContext>();
    slot.response.Clear();
    slot.sent = Clock::now();
    slot.reader = slot.stub->PrepareUnaryCall(slot.context.get(), method, request, &cq);
    slot.reader->StartCall();
    slot.reader->Finish(&slot.response, &slot.status, &slot);
  };
  for (int i = 0; i < slots; ++i) {
    table[static_cast<size_t>(i)].stub =
        std::make_unique<grpc::GenericStub>(NewChannel(o, first_slot + i));
  }
  for (auto& slot : table) send(slot);
  int in_flight = slots;
  void* tag = nullptr;
  bool ok = false;
  std::vector<uint64_t> sizes;
  std::vector<grpc::Slice> slices;
  while (in_flight > 0 && cq.Next(&tag, &ok)) {
    Slot& slot = *static_cast<Slot*>(tag);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - slot.sent).count();
    if (!ok || !slot.status.ok()) {
      run.Error(ok ? slot.status.error_message() : "the call did not complete");
    } else if (!slot.response.Dump(&slices).ok() || !RawOutputSizes(Views(slices), &sizes) ||
               sizes.size() != 1 || sizes[0] != want) {
      run.Error("the answer's raw output has the wrong size");
    } else if (run.measuring.load()) {
      out->push_back(ms);
    }
    if (run.stop.load()) {
      --in_flight;
    } else {
      send(slot);
    }
  }
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

// One client thread of the default client: one HTTP/2 connection of its own (H2UnaryClient),
// closed loop, as infer_load's threads each have a connection; a failed call reconnects.
void H2Client(const Options& o, Run& run, std::vector<double>* out) {
  const std::string request = MakeRequest(o).SerializeAsString();
  const uint64_t want = static_cast<uint64_t>(o.elements) * sizeof(float);
  const int port = std::atoi(o.port.c_str());
  vramd::bench::H2UnaryClient client;
  bool connected = client.Connect(o.host, port);
  std::vector<uint64_t> sizes;
  *out = Loop(run, [&] {
    std::string_view answer;
    if (!connected) connected = client.Connect(o.host, port);
    if (!connected || !client.Call("/inference.GRPCInferenceService/ModelInfer", request, &answer)) {
      run.Error(client.error());
      connected = false;
      return false;
    }
    if (!RawOutputSizes({answer}, &sizes) || sizes.size() != 1 || sizes[0] != want) {
      run.Error("the answer's raw output has the wrong size");
      return false;
    }
    return true;
  });
}

// One connection with `o.streams` calls in flight (H2UnaryClient::Multiplex), closed loop per
// stream; a failure reconnects.
void H2MultiplexClient(const Options& o, Run& run, std::vector<double>* out) {
  const std::string request = MakeRequest(o).SerializeAsString();
  const uint64_t want = static_cast<uint64_t>(o.elements) * sizeof(float);
  const int port = std::atoi(o.port.c_str());
  vramd::bench::H2UnaryClient client;
  std::vector<uint64_t> sizes;
  while (!run.stop.load()) {
    const bool ok =
        client.Connect(o.host, port) &&
        client.Multiplex(
            "/inference.GRPCInferenceService/ModelInfer", request, o.streams,
            [&] { return !run.stop.load(); },
            [&](std::string_view answer, double seconds) {
              if (!RawOutputSizes({answer}, &sizes) || sizes.size() != 1 || sizes[0] != want) {
                run.Error("the answer's raw output has the wrong size");
              } else if (run.measuring.load()) {
                out->push_back(seconds * 1000.0);
              }
            });
    if (!ok) run.Error(client.error());
  }
}

bool SendAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}
bool RecvAll(int fd, char* p, size_t n) {
  while (n > 0) {
    const ssize_t k = ::recv(fd, p, n, 0);
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

// A loopback echo server: a thread per connection, each echoing blocks of `size` bytes
// (copied once first with `copy`).
class EchoServer {
 public:
  EchoServer(size_t size, bool copy) : size_(size), copy_(copy) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(listen_fd_, 128) != 0) {
      Usage("cannot listen on loopback");
    }
    socklen_t len = sizeof addr;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
  }
  ~EchoServer() {
    ::shutdown(listen_fd_, SHUT_RDWR);
    ::close(listen_fd_);
    for (auto& t : threads_) t.join();
  }
  int port() const { return port_; }
  void Accept(int n) {
    for (int i = 0; i < n; ++i) {
      const int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) Usage("accept failed");
      threads_.emplace_back([fd, size = size_, copy = copy_] {
        std::vector<char> buf(size), out(copy ? size : 0);
        while (RecvAll(fd, buf.data(), size)) {
          if (copy) std::memcpy(out.data(), buf.data(), size);
          if (!SendAll(fd, copy ? out.data() : buf.data(), size)) break;
        }
        ::close(fd);
      });
    }
  }

 private:
  size_t size_;
  bool copy_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::vector<std::thread> threads_;
};

// The --library-server: gRPC's library answering ModelInfer with nothing behind it.
class LibraryServer {
 public:
  explicit LibraryServer(const Options& o) : parse_(o.parse) {
    inference::ModelInferResponse answer;
    answer.set_model_name(o.model);
    answer.set_model_version("1");
    auto* output = answer.add_outputs();
    output->set_name("OUTPUT0");
    output->set_datatype("FP32");
    output->add_shape(o.elements);
    answer.add_raw_output_contents(std::string(static_cast<size_t>(o.elements) * sizeof(float), '\0'));
    answer_ = answer.SerializeAsString();
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:" + o.port, grpc::InsecureServerCredentials(), &port_);
    builder.SetMaxReceiveMessageSize(-1);
    builder.SetMaxSendMessageSize(-1);
    builder.RegisterService(&service_);
    const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
    for (unsigned i = 0; i < threads; ++i) queues_.push_back(builder.AddCompletionQueue());
    server_ = builder.BuildAndStart();
    if (!server_ || port_ == 0) Usage("the library server did not start");
    for (auto& queue : queues_) threads_.emplace_back([this, cq = queue.get()] { Serve(cq); });
  }
  ~LibraryServer() {
    server_->Shutdown();
    for (auto& queue : queues_) queue->Shutdown();
    for (auto& t : threads_) t.join();
  }
  int port() const { return port_; }

 private:
  using Service = inference::GRPCInferenceService::WithRawMethod_ModelInfer<
      inference::GRPCInferenceService::AsyncService>;
  struct Call {
    grpc::ServerContext context;
    grpc::ByteBuffer request;
    grpc::ServerAsyncResponseWriter<grpc::ByteBuffer> writer{&context};
    bool answered = false;
  };

  void Listen(grpc::ServerCompletionQueue* cq) {
    auto call = std::make_unique<Call>();
    Call* tag = call.release();  // the queue's until Next hands it back
    service_.RequestModelInfer(&tag->context, &tag->request, &tag->writer, cq, cq, tag);
  }

  // A queue's thread: each call answered as it arrives, on the thread that read it.
  void Serve(grpc::ServerCompletionQueue* cq) {
    Listen(cq);
    void* tag = nullptr;
    bool ok = false;
    while (cq->Next(&tag, &ok)) {
      std::unique_ptr<Call> call(static_cast<Call*>(tag));
      if (call->answered || !ok) continue;  // sent, or never started (shutting down): freed
      Listen(cq);
      call->answered = true;
      if (parse_) {
        inference::ModelInferRequest message;
        if (!grpc::SerializationTraits<inference::ModelInferRequest>::Deserialize(&call->request,
                                                                                &message)
                 .ok()) {
          Call* sent = call.release();
          sent->writer.FinishWithError(
              grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "not a ModelInferRequest"), sent);
          continue;
        }
      }
      const grpc::Slice slice(answer_.data(), answer_.size(), grpc::Slice::STATIC_SLICE);
      const grpc::ByteBuffer response(&slice, 1);
      Call* sent = call.release();
      sent->writer.Finish(response, grpc::Status::OK, sent);
    }
  }

  const bool parse_;
  std::string answer_;  // one ModelInferResponse, serialized once
  Service service_;
  int port_ = 0;
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues_;
  std::unique_ptr<grpc::Server> server_;
  std::vector<std::thread> threads_;
};

void TcpClient(const Options& o, int port, Run& run, std::vector<double>* out) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) Usage("connect failed");
  const size_t size = static_cast<size_t>(o.elements) * sizeof(float);
  std::vector<char> data(size, 'x'), back(size);
  *out = Loop(run, [&] {
    if (!SendAll(fd, data.data(), size) || !RecvAll(fd, back.data(), size)) {
      run.Error("the echo connection broke");
      run.stop.store(true);
      return false;
    }
    return true;
  });
  ::shutdown(fd, SHUT_RDWR);
  ::close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  // As the server (grpc_server.cc): each connection read and answered on the thread of its own
  // queue, and no deadlock-detection graph behind gRPC's mutexes.
  setenv("GRPC_POLL_STRATEGY", "poll", 0);
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  const Options o = Parse(argc, argv);
  if (o.library_server) {
    // vramd's malloc settings (vramd_main.cc): a parsed request's buffer reused, not mapped and
    // page-faulted afresh each time.
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
    LibraryServer server(o);
    std::printf("{\"port\":%d}\n", server.port());
    std::fflush(stdout);
    std::cin.ignore(std::numeric_limits<std::streamsize>::max());  // until standard input ends
    return 0;
  }
  Run run;
  std::vector<std::vector<double>> latencies(static_cast<size_t>(o.concurrency));
  std::vector<std::thread> clients;
  std::unique_ptr<EchoServer> echo;
  if (o.tcp_echo) echo = std::make_unique<EchoServer>(static_cast<size_t>(o.elements) * sizeof(float), o.echo_copy);
  if (o.tcp_echo) {
    for (int c = 0; c < o.concurrency; ++c) {
      clients.emplace_back([&, c] { TcpClient(o, echo->port(), run, &latencies[static_cast<size_t>(c)]); });
    }
  } else if (!o.library_client && o.streams > 1) {
    for (int c = 0; c < o.concurrency / o.streams; ++c) {
      clients.emplace_back(
          [&, c] { H2MultiplexClient(o, run, &latencies[static_cast<size_t>(c)]); });
    }
  } else if (!o.library_client) {
    for (int c = 0; c < o.concurrency; ++c) {
      clients.emplace_back([&, c] { H2Client(o, run, &latencies[static_cast<size_t>(c)]); });
    }
  } else {
    // The requests in flight, spread over the client threads as evenly as they go.
    const int threads = std::min(o.threads > 0 ? o.threads : o.concurrency, o.concurrency);
    for (int t = 0, first = 0; t < threads; ++t) {
      const int slots = o.concurrency / threads + (t < o.concurrency % threads ? 1 : 0);
      clients.emplace_back([&, t, first, slots] {
        AsyncClient(o, run, first, slots, &latencies[static_cast<size_t>(t)]);
      });
      first += slots;
    }
  }
  if (echo) echo->Accept(o.concurrency);
  std::this_thread::sleep_for(std::chrono::duration<double>(o.warmup_s));
  run.measuring.store(true);
  const auto start = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(o.duration_s));
  run.measuring.store(false);
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  run.stop.store(true);
  for (auto& t : clients) t.join();
  echo.reset();
  const auto summary = vramd::bench::Summarize(latencies, elapsed);
  std::printf("{\"concurrency\":%d,\"errors\":%ld,%s,\"duration_s\":%.3f}\n", o.concurrency,
              run.errors.load(), vramd::bench::JsonFields(summary).c_str(), elapsed);
  if (!run.first_error.empty()) std::cerr << "first error: " << run.first_error << "\n";
  return summary.requests == 0 && run.errors.load() > 0 ? 3 : 0;
}
