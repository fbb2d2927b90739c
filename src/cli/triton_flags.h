// tritonserver's command line on vramd (issue 16): `vramd --model-repository DIR` without the
// `serve` word, and the flags Triton deployments commonly pass, each either with its meaning
// (vramd has the feature), or accepted with one warning naming it (a tuning knob or a feature
// vramd does not have, whose absence changes no answer). A flag neither vramd nor this list
// knows is still an error. docs/command-line.md lists them.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/status.h"

namespace vramd::cli {

struct TritonFlags {
  bool allow_http = true;            // --allow-http=false: no HTTP server
  bool strict_model_config = false;  // true: as --disable-auto-complete-config
  std::string log_file;              // "": standard error
  std::string log_format = "default";  // or ISO8601
  bool log_info = true;
  bool log_warning = true;
  bool log_error = true;
  std::string id;  // the server's name in metadata ("" keeps "vramd")
  // --trace-config values in order, the deprecated --trace-* flags among them as their
  // --trace-config spelling (server/trace/tracer.h: TracerOptions::FromFlags).
  std::vector<std::string> trace_config;
  // TLS on gRPC (GrpcServer::LoadTls reads the files). --grpc-use-ssl-mutual=true also sets
  // grpc_use_ssl, as in Triton.
  bool grpc_use_ssl = false;
  bool grpc_use_ssl_mutual = false;
  std::string grpc_server_cert;
  std::string grpc_server_key;
  std::string grpc_root_cert;
  // Headers forwarded to models as request parameters (server/headers/header_forwarding.h);
  // "": none.
  std::string http_header_forward_pattern;
  std::string grpc_header_forward_pattern;
  // Restricted APIs, each value <categories>:<key>=<value> (server/access/restricted_apis.h).
  std::vector<std::string> http_restricted_api;
  std::vector<std::string> grpc_restricted_protocol;
  // Flag name -> the values given, for the accepted-with-a-warning kind.
  std::map<std::string, std::vector<std::string>> ignored;
};

// Adds Triton's flags to `serve`, storing into `flags` (which must outlive the parse).
void AddTritonFlags(CLI::App* serve, TritonFlags* flags);

// After the parse: one warning (into `warnings`) for each ignored flag given, and for each
// TLS file given without --grpc-use-ssl (Triton then serves plaintext, and so does vramd).
void CheckTritonFlags(const TritonFlags& flags, std::vector<std::string>* warnings);

// argv with "serve" put first when no subcommand is named (tritonserver has none), unless the
// first argument asks for help.
std::vector<std::string> WithServeSubcommand(int argc, char** argv);

}  // namespace vramd::cli
