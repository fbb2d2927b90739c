// vramd: the inference server's command line. `vramd serve` takes Triton's flag names where
// the meaning is the same.
#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <csignal>
#include <filesystem>
#include <string>
#include <vector>

#include "memory/cuda_devices.h"
#include "runtime/model_manager.h"
#include "server/http/http_server.h"
#include "server/http/kserve_routes.h"

namespace {

struct ServeOptions {
  std::vector<std::string> repositories;
  std::string http_address = "0.0.0.0";
  int http_port = 8000;
  int http_threads = 0;
  int64_t http_max_input_size = int64_t{64} << 20;
  int log_verbose = 0;
  bool exit_on_error = false;
  bool strict_readiness = true;
  int exit_timeout_secs = 30;
};

// Blocks SIGINT and SIGTERM in this thread and every thread started after, so that only
// WaitForStopSignal sees them.
sigset_t BlockStopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

int WaitForStopSignal(const sigset_t& set) {
  int sig = 0;
  sigwait(&set, &sig);
  return sig;
}

int Serve(const ServeOptions& options) {
  // Logs go to stderr, keeping stdout free for anything a wrapper wants to print.
  spdlog::set_default_logger(spdlog::stderr_color_mt("vramd"));
  spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ %v");
  spdlog::set_level(options.log_verbose > 0 ? spdlog::level::debug : spdlog::level::info);
  const sigset_t stop_signals = BlockStopSignals();

  spdlog::info("vramd {} starting; {}", VRAMD_VERSION, vramd::memory::CudaDescription());

  vramd::runtime::ModelManager::Options manager_options;
  for (const auto& r : options.repositories) manager_options.repositories.emplace_back(r);
  manager_options.exit_on_error = options.exit_on_error;
  auto manager = vramd::runtime::ModelManager::Create(manager_options);
  if (!manager.ok()) {
    spdlog::error("{}", manager.status().message());
    return 1;
  }

  vramd::http::KServeRoutes routes(manager->get(),
                                     {"vramd", VRAMD_VERSION, options.strict_readiness});
  vramd::http::HttpServer::Options http_options;
  http_options.address = options.http_address;
  http_options.port = static_cast<uint16_t>(options.http_port);
  http_options.threads = options.http_threads;
  http_options.max_body_bytes = static_cast<size_t>(options.http_max_input_size);
  http_options.drain_timeout = std::chrono::seconds(options.exit_timeout_secs);
  auto server = vramd::http::HttpServer::Start(
      http_options, [&routes](vramd::http::HttpRequest request, vramd::http::Responder respond) {
        routes.Handle(std::move(request), std::move(respond));
      });
  if (!server.ok()) {
    spdlog::error("{}", server.status().message());
    return 1;
  }
  spdlog::info("HTTP listening on {}:{}", options.http_address, (*server)->port());

  int sig = WaitForStopSignal(stop_signals);
  spdlog::info("received {}: finishing in-flight requests, then exiting",
               sig == SIGINT ? "SIGINT" : "SIGTERM");
  (*server)->Shutdown();
  spdlog::info("vramd stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"vramd: an inference server for Triton model repositories that accounts for "
               "every byte of GPU memory"};
  app.require_subcommand(1);

  ServeOptions options;
  CLI::App* serve = app.add_subcommand("serve", "Serve the models of one or more repositories");
  serve->add_option("--model-repository", options.repositories,
                    "A Triton-style model repository folder; repeat for several")
      ->required()
      ->check(CLI::ExistingDirectory);
  serve->add_option("--http-address", options.http_address, "Address to listen on for HTTP")
      ->capture_default_str();
  serve->add_option("--http-port", options.http_port, "HTTP port; 0 picks a free one")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  serve->add_option("--http-thread-count", options.http_threads,
                    "HTTP server threads; 0 means one per hardware thread")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  serve->add_option("--http-max-input-size", options.http_max_input_size,
                    "Largest request body in bytes; larger ones are answered 413")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  serve->add_option("--log-verbose", options.log_verbose, "Verbose logging level (0 = off)")
      ->capture_default_str();
  serve->add_flag("--exit-on-error", options.exit_on_error,
                  "Exit if any model fails to load (default: serve the others)");
  serve->add_flag("--strict-readiness,!--no-strict-readiness", options.strict_readiness,
                  "/v2/health/ready needs every model ready (default); else only a live server")
      ->capture_default_str();
  serve->add_option("--exit-timeout-secs", options.exit_timeout_secs,
                    "On SIGINT/SIGTERM, how long in-flight requests may take to finish")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();

  CLI11_PARSE(app, argc, argv);
  if (serve->parsed()) return Serve(options);
  return 0;
}
