// What the fuzz targets of tests/fuzz share: the checks an answer must pass whatever was asked,
// and, for the targets that go through the HTTP routes, a small model repository with a
// ModelManager and KServeRoutes over it, wired as vramd's main wires them.
//
// Thread safety: RoutesFixture::Call from one thread at a time (libFuzzer's); the manager's
// own threads answer concurrently with it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "memory/allocator.h"
#include "memory/ledger.h"
#include "memory/memory_report.h"
#include "runtime/model_manager.h"
#include "server/http/http_server.h"
#include "server/http/kserve_routes.h"

namespace vramd::fuzz {

// Writes `what` to stderr and aborts, so that libFuzzer keeps the input. For properties that
// must hold on every input: breaking one is a bug even where nothing crashed.
[[noreturn]] void Fail(std::string_view what);

// True when `text` is one whole JSON value (surrounding whitespace allowed). Parsed without
// recursion, so no depth makes it overflow the stack.
bool IsJson(std::string_view text);

// What every answer of KServeRoutes must be: a status of 100..599; a JSON body (when it is
// application/json and not empty) or, with binary data, a JSON part that parses and is no
// longer than the body; an error status with a body carries {"error": "<string>"}. Fails
// naming the request otherwise.
void CheckResponse(const http::HttpRequest& request, const http::HttpResponse& response);

// A repository of small built-in models (identity and add_sub backends: plain, batching with
// and without a dynamic batcher, reshaped, labelled for classification, two versions, every
// data type family, plus one broken config), written to a fresh temporary folder and removed
// with the fixture.
class RoutesFixture {
 public:
  // Triton's access settings the routes serve under, as main wires them (none by default).
  struct Access {
    std::vector<std::string> restricted;  // --http-restricted-api values
    std::string forward_pattern;          // --http-header-forward-pattern; "": none
  };
  // Loads every model (explicit mode: all at start-up, as --load-model '*').
  explicit RoutesFixture(runtime::ModelControlMode mode, Access access = {});
  ~RoutesFixture();
  RoutesFixture(const RoutesFixture&) = delete;
  RoutesFixture& operator=(const RoutesFixture&) = delete;

  // Handles `request` as the HTTP server would and waits for the answer, which must come
  // exactly once and within kAnswerTimeout (else Fail: a lost or doubled answer is a bug), and
  // pass CheckResponse. With VRAMD_FUZZ_VERBOSE set, each request and answer is printed.
  http::HttpResponse Call(http::HttpRequest request);

  runtime::ModelManager& manager() { return *manager_; }
  const server::RestrictedApis& restricted() const { return restricted_; }
  // Which headers the HTTP server would pass to the routes (HttpServer::Options::pass_header).
  bool PassesHeader(std::string_view name) const;

  // The names of the repository's models, the broken one last.
  static const std::vector<std::string>& ModelNames();

 private:
  std::filesystem::path root_;
  // Declared in the order main declares them: the memory system outlives the models.
  memory::Ledger ledger_;
  memory::Allocator allocator_{&ledger_};
  std::unique_ptr<memory::LiveMemoryReportSource> memory_report_;
  server::RestrictedApis restricted_;
  std::optional<server::HeaderForwarding> forward_;
  std::unique_ptr<runtime::ModelManager> manager_;
  std::unique_ptr<http::KServeRoutes> routes_;
};

}  // namespace vramd::fuzz
