// GrpcServer: serves inference.GRPCInferenceService (grpc_service.proto) with GrpcRoutes, and
// grpc.health.v1.Health (health.proto), on gRPC's asynchronous completion-queue API: a thread
// per queue and no thread per call. gRPC's poll engine gives each connection to one queue, so
// one thread reads, runs (on the scheduler's fast path) and answers each of its calls. A
// call's answer may come from any thread (an instance thread for ModelInfer); the call object
// lives until gRPC has sent it. ModelInfer is served raw: its large outputs go to the socket
// from the model's buffers (infer_proto_codec.h). The health service is ours, not gRPC's
// default one, whose callback threads would poll the inference connections too.
//
// Access, as Triton's flags: TLS (Options::tls: the server's certificate, and with `mutual` a
// client certificate that the given CAs signed, or the handshake fails), and restricted
// protocols (Options::restricted: a call of a restricted category without the restriction's
// metadata is answered UNAVAILABLE, a stream before any request is read).
//
// Shutdown: ends health watches (NOT_SERVING), stops taking calls, waits up to `drain_timeout`
// for the calls in flight to be sent
// (then cancels them), waits for every call the runtime still owes an answer (it answers each
// exactly once), then drains the queues and joins the threads.
//
// Thread safety: port() and Shutdown() may be called from any thread; Shutdown once.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "server/access/restricted_apis.h"
#include "server/headers/header_forwarding.h"
#include "server/grpc/grpc_routes.h"

namespace vramd::grpc_server {

class GrpcServer {
 public:
  struct Options {
    std::string address = "0.0.0.0";
    uint16_t port = 8001;  // 0: a free one (port() says which)
    int threads = 0;       // completion-queue threads; 0: one per hardware thread
    // Triton's defaults: messages up to INT32_MAX bytes each way.
    int max_message_bytes = 2147483647;
    std::chrono::seconds drain_timeout{30};
    // Keepalive, as Triton's --grpc-keepalive-* and --grpc-http2-* flags (their defaults).
    int keepalive_time_ms = 7200000;
    int keepalive_timeout_ms = 20000;
    bool keepalive_permit_without_calls = false;
    int http2_max_pings_without_data = 2;
    int http2_min_recv_ping_interval_without_data_ms = 300000;
    int http2_max_ping_strikes = 2;
    // Triton's --grpc-max-connection-age[-grace] (ms; 0: unset, gRPC's default of never).
    int max_connection_age_ms = 0;
    int max_connection_age_grace_ms = 0;
    // More integer channel arguments (gRPC's GRPC_ARG_* names), set after the ones above:
    // transport tuning to measure (frame size, read chunks, flow-control lookahead). The
    // server takes them from VRAMD_GRPC_CHANNEL_ARGS (ParseChannelArgs).
    std::vector<std::pair<std::string, int>> channel_args;
    // Triton's --grpc-infer-response-compression-level: ModelInfer and ModelStreamInfer
    // answers are compressed at this level with an algorithm the call's client accepts (gRPC
    // picks it from the call's grpc-accept-encoding); kNone never compresses. Other RPCs'
    // answers are small, and stay uncompressed, as in Triton.
    enum class CompressionLevel { kNone, kLow, kMedium, kHigh };
    CompressionLevel infer_compression_level = CompressionLevel::kNone;
    // Triton's --grpc-use-ssl[-mutual]: PEM texts, as LoadTls reads them from the flags'
    // files. Absent: plaintext.
    struct Tls {
      std::string server_cert;  // the certificate chain, the server's first
      std::string server_key;   // its private key
      std::string root_certs;   // CAs that sign the clients' certificates (mutual)
      bool mutual = false;      // require a client certificate those CAs signed
    };
    std::optional<Tls> tls;
    // Triton's --grpc-restricted-protocol; outlives the server. Null: nothing restricted.
    const server::RestrictedApis* restricted = nullptr;
    // Triton's --grpc-header-forward-pattern: an inference call's matching metadata reaches
    // the model as request parameters; outlives the server. Null: none.
    const server::HeaderForwarding* forward_headers = nullptr;
  };

  // Reads and checks the PEM files of a TLS setting: the certificate, a private key that
  // matches it, and (mutual) at least one root certificate. InvalidArgument naming the flag
  // and file that is unreadable, holds no PEM of its kind, or does not match.
  struct TlsFiles {
    std::string server_cert;  // paths, as the flags give them; root_cert may be empty
    std::string server_key;
    std::string root_cert;
    bool mutual = false;
  };
  static Result<Options::Tls> LoadTls(const TlsFiles& files);

  // none, low, medium or high (any case), as Triton's flag takes them; InvalidArgument else.
  static Result<Options::CompressionLevel> ParseCompressionLevel(std::string_view text);

  // "name=value,name=value" (integers, gRPC's argument names) as channel_args; an empty text
  // is none. InvalidArgument naming the entry that is not name=integer.
  static Result<std::vector<std::pair<std::string, int>>> ParseChannelArgs(std::string_view text);

  // `routes` must outlive the server. Fails naming the address when it cannot listen.
  static Result<std::unique_ptr<GrpcServer>> Start(const Options& options, const GrpcRoutes* routes);
  ~GrpcServer();
  GrpcServer(const GrpcServer&) = delete;
  GrpcServer& operator=(const GrpcServer&) = delete;

  int port() const;
  void Shutdown();

  class Impl;  // defined in grpc_server.cc only: Start is the one way to make one
  explicit GrpcServer(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace vramd::grpc_server
