#include "cli/triton_flags.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

namespace vramd::cli {
namespace {

// Accepted, and without effect in vramd: why, as the warning says it.
struct Ignored {
  const char* flag;
  const char* why;
};
constexpr Ignored kIgnored[] = {
    {"--pinned-memory-pool-byte-size",
     "vramd's pinned host pool grows as needed and is accounted in the ledger (docs/memory.md)"},
    {"--cuda-memory-pool-byte-size",
     "vramd's device pools grow as needed and are accounted in the ledger (docs/memory.md)"},
    {"--model-load-gpu-limit", "vramd admits a load by its predicted footprint instead"},
    {"--rate-limit", "vramd has no rate limiter"},
    {"--rate-limit-resource", "vramd has no rate limiter"},
    {"--response-cache-byte-size", "vramd has no response cache"},
    {"--cache-config", "vramd has no response cache"},
    {"--buffer-manager-thread-count", "vramd has no buffer manager threads"},
    {"--min-supported-compute-capability", "vramd uses every visible GPU its CUDA runtime supports"},
    {"--model-load-retry-count", "vramd does not retry a failed load"},
    {"--allow-gpu-metrics", "vramd's GPU figures are always in its memory metrics"},
    {"--allow-cpu-metrics", "vramd exports no CPU metrics"},
    {"--metrics-interval-ms", "vramd's metrics are read when scraped"},
    {"--metrics-config", "vramd's metric set is fixed (docs/metrics.md)"},
    {"--host-policy", "vramd has no host policies"},
    {"--model-namespacing", "vramd's model names are one namespace"},
    {"--allow-sagemaker", "vramd serves no SageMaker endpoint"},
    {"--sagemaker-port", "vramd serves no SageMaker endpoint"},
    {"--sagemaker-safe-port-range", "vramd serves no SageMaker endpoint"},
    {"--sagemaker-thread-count", "vramd serves no SageMaker endpoint"},
    {"--allow-vertex-ai", "vramd serves no Vertex AI endpoint"},
    {"--vertex-ai-port", "vramd serves no Vertex AI endpoint"},
    {"--vertex-ai-thread-count", "vramd serves no Vertex AI endpoint"},
    {"--vertex-ai-default-model", "vramd serves no Vertex AI endpoint"},
    {"--cache-directory", "vramd has no response cache"},
    {"--repoagent-directory", "vramd loads no repository agents"},
    {"--cuda-virtual-address-size",
     "vramd keeps a sequence's implicit state in its pools (use_growable_memory changes "
     "nothing: docs/sequences.md)"},
    {"--reuse-http-port", "vramd does not share its ports"},
    {"--reuse-grpc-port", "vramd does not share its ports"},
    {"--grpc-infer-allocation-pool-size", "vramd's gRPC front end keeps no response pool"},
    {"--grpc-max-response-pool-size", "vramd's gRPC front end keeps no response pool"},
};

}  // namespace

void AddTritonFlags(CLI::App* serve, TritonFlags* flags) {
  serve->add_option("--trace-config", flags->trace_config,
                    "Tracing (docs/tracing.md): [triton,|opentelemetry,]setting=value; repeat "
                    "for several (level=TIMESTAMPS, rate=N, count=N, mode=opentelemetry, "
                    "triton,file=PATH, opentelemetry,url=URL, ...)");
  // Triton's deprecated spellings, kept as --trace-config settings.
  serve->add_option_function<std::string>(
      "--trace-file", [flags](const std::string& v) { flags->trace_config.push_back("triton,file=" + v); },
      "As --trace-config triton,file=PATH");
  serve->add_option_function<std::vector<std::string>>(
      "--trace-level",
      [flags](const std::vector<std::string>& levels) {
        for (const auto& v : levels) flags->trace_config.push_back("level=" + v);
      },
      "As --trace-config level=LEVEL");
  serve->add_option_function<std::string>(
      "--trace-rate", [flags](const std::string& v) { flags->trace_config.push_back("rate=" + v); },
      "As --trace-config rate=N");
  serve->add_option_function<std::string>(
      "--trace-count", [flags](const std::string& v) { flags->trace_config.push_back("count=" + v); },
      "As --trace-config count=N");
  serve->add_option_function<std::string>(
      "--trace-log-frequency",
      [flags](const std::string& v) { flags->trace_config.push_back("triton,log-frequency=" + v); },
      "As --trace-config triton,log-frequency=N");
  serve->add_option("--allow-http", flags->allow_http,
                    "Serve HTTP (Triton's flag; false: only gRPC and metrics)")
      ->capture_default_str();
  serve->add_option("--strict-model-config", flags->strict_model_config,
                    "true: take config.pbtxt as written, as --disable-auto-complete-config")
      ->capture_default_str();
  serve->add_option("--log-file", flags->log_file,
                    "Write the log to this file (appended) instead of standard error");
  serve->add_option("--log-format", flags->log_format,
                    "default, or ISO8601 (timestamps as 2026-12-05T01:02:03.456Z, UTC)")
      ->check(CLI::IsMember({"default", "ISO8601"}))
      ->capture_default_str();
  serve->add_option("--log-info", flags->log_info, "Log information messages")
      ->capture_default_str();
  serve->add_option("--log-warning", flags->log_warning, "Log warnings")->capture_default_str();
  serve->add_option("--log-error", flags->log_error, "Log errors")->capture_default_str();
  serve->add_option("--id", flags->id, "The server's name in metadata (default vramd)");
  for (const Ignored& i : kIgnored) {
    serve->add_option(i.flag, flags->ignored[i.flag],
                      fmt::format("Triton's flag, accepted and ignored: {}", i.why))
        ->expected(1)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
        ->group("Triton flags vramd ignores");
  }
  serve->add_option("--grpc-use-ssl", flags->grpc_use_ssl,
                    "Serve gRPC over TLS with --grpc-server-cert and --grpc-server-key")
      ->capture_default_str();
  serve->add_option_function<bool>(
      "--grpc-use-ssl-mutual",
      [flags](bool mutual) {
        flags->grpc_use_ssl_mutual = mutual;
        if (mutual) flags->grpc_use_ssl = true;
      },
      "Serve gRPC over TLS and require a client certificate signed by --grpc-root-cert "
      "(implies --grpc-use-ssl)");
  serve->add_option("--grpc-server-cert", flags->grpc_server_cert,
                    "PEM file: the gRPC server's certificate chain (with --grpc-use-ssl)");
  serve->add_option("--grpc-server-key", flags->grpc_server_key,
                    "PEM file: the private key of --grpc-server-cert");
  serve->add_option("--grpc-root-cert", flags->grpc_root_cert,
                    "PEM file: the CA certificates that sign clients' certificates "
                    "(--grpc-use-ssl-mutual)");
  serve->add_option("--http-header-forward-pattern", flags->http_header_forward_pattern,
                    "HTTP headers whose name matches this RE2 pattern (anywhere, without case) "
                    "reach the model as request parameters");
  serve->add_option("--grpc-header-forward-pattern", flags->grpc_header_forward_pattern,
                    "gRPC metadata whose key matches this RE2 pattern (anywhere, without case) "
                    "reaches the model as request parameters");
  serve->add_option("--http-restricted-api", flags->http_restricted_api,
                    "<category>[,<category>...]:<key>=<value>: HTTP requests to those "
                    "categories need header <key>: <value>, or are answered 403; may repeat "
                    "(docs/security.md)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  serve->add_option("--grpc-restricted-protocol", flags->grpc_restricted_protocol,
                    "<category>[,<category>...]:<key>=<value>: gRPC calls of those categories "
                    "need metadata triton-grpc-protocol-<key>: <value>, or are answered "
                    "UNAVAILABLE; may repeat (docs/security.md)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

void CheckTritonFlags(const TritonFlags& flags, std::vector<std::string>* warnings) {
  for (const Ignored& i : kIgnored) {
    auto it = flags.ignored.find(i.flag);
    if (it == flags.ignored.end() || it->second.empty()) continue;
    warnings->push_back(fmt::format("{} ignored: {}", i.flag, i.why));
  }
  if (!flags.grpc_use_ssl) {
    for (const auto& [flag, value] : {std::pair{"--grpc-server-cert", &flags.grpc_server_cert},
                                      std::pair{"--grpc-server-key", &flags.grpc_server_key},
                                      std::pair{"--grpc-root-cert", &flags.grpc_root_cert}}) {
      if (value->empty()) continue;
      warnings->push_back(fmt::format(
          "{} ignored: --grpc-use-ssl is not true, so gRPC is served without TLS (as Triton "
          "does)",
          flag));
    }
  }
}

std::vector<std::string> WithServeSubcommand(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  const bool named =
      args.size() > 1 && (args[1] == "serve" || args[1] == "--help" || args[1] == "-h");
  if (!named) args.insert(args.begin() + (args.empty() ? 0 : 1), "serve");
  return args;
}

}  // namespace vramd::cli
