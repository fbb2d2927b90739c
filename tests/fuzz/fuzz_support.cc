#include "fuzz_support.h"

#include <rapidjson/document.h>
#include <rapidjson/error/en.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <optional>

namespace vramd::fuzz {
namespace {

// Long enough for a load under ASan on a loaded machine, short of libFuzzer's own -timeout, so a
// lost answer is reported as one rather than as a slow input.
constexpr auto kAnswerTimeout = std::chrono::seconds(60);

struct FixtureModel {
  const char* name;
  const char* config;
  std::vector<const char*> versions;
  // Files in the model's folder besides config.pbtxt: {name, contents}.
  std::vector<std::pair<const char*, const char*>> files = {};
};

// Small models, each covering a path the others do not: the kinds of scheduling (inline, on a
// dynamic batcher's thread), batching and not, reshape, classification labels, versions, the
// data type families (integers, floats of each width, BOOL, BYTES) and an optional input.
const std::vector<FixtureModel>& FixtureModels() {
  static const std::vector<FixtureModel> models = {
      {"add_sub", R"(
backend: "add_sub"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
)",
       {"1"}},
      {"identity_int32", R"(
backend: "identity"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
)",
       {"1"}},
      {"identity_bytes", R"(
backend: "identity"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]
)",
       {"1"}},
      {"identity_bool", R"(
backend: "identity"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_BOOL dims: [ -1, -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_BOOL dims: [ -1, -1 ] } ]
)",
       {"1"}},
      {"batched_fp16", R"(
backend: "identity"
max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_FP16 dims: [ 2, 3 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP16 dims: [ 2, 3 ] } ]
dynamic_batching { max_queue_delay_microseconds: 50 }
)",
       {"1"}},
      {"reshaped_bf16", R"(
backend: "identity"
max_batch_size: 2
input [ { name: "INPUT0" data_type: TYPE_BF16 dims: [ 4 ] reshape { shape: [ 2, 2 ] } } ]
output [ { name: "OUTPUT0" data_type: TYPE_BF16 dims: [ 4 ] reshape { shape: [ 2, 2 ] } } ]
)",
       {"1"}},
      {"labelled_fp64", R"(
backend: "identity"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP64 dims: [ 4 ] },
        { name: "INPUT1" data_type: TYPE_UINT8 dims: [ -1 ] optional: true } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP64 dims: [ 4 ] label_filename: "labels.txt" },
         { name: "OUTPUT1" data_type: TYPE_UINT8 dims: [ -1 ] } ]
)",
       {"1"},
       {{"labels.txt", "zero\none\ntwo\nthree\n"}}},
      {"versioned_int64", R"(
backend: "identity"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_INT64 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT64 dims: [ -1 ] } ]
version_policy: { all: {} }
)",
       {"1", "2"}},
      // A load that fails: the index lists it UNAVAILABLE with its reason.
      {"broken", "backend: \"identity\"\ninput [ { name: \"INPUT0\" data_type: TYPE_NOPE } ]\n",
       {"1"}},
  };
  return models;
}

}  // namespace

void Fail(std::string_view what) {
  std::fprintf(stderr, "fuzz check failed: %.*s\n", static_cast<int>(what.size()), what.data());
  std::fflush(stderr);
  std::abort();
}

bool IsJson(std::string_view text) {
  // Without kParseStopWhenDoneFlag, anything but whitespace after the value is an error.
  rapidjson::Document doc;
  doc.Parse<rapidjson::kParseIterativeFlag>(text.data(), text.size());
  return !doc.HasParseError();
}

void CheckResponse(const http::HttpRequest& request, const http::HttpResponse& response) {
  auto fail = [&](std::string_view why) {
    Fail(std::string(why) + " (" + request.method + " " + request.target.substr(0, 200) +
         " -> " + std::to_string(response.status) + ", body " +
         response.body.substr(0, 300) + ")");
  };
  if (response.status < 100 || response.status > 599) fail("status out of range");
  std::string_view json = response.body;
  if (response.inference_header_length) {
    if (*response.inference_header_length > response.body.size()) {
      fail("Inference-Header-Content-Length is larger than the body");
    }
    json = json.substr(0, *response.inference_header_length);
  } else if (response.content_type != "application/json") {
    return;  // metrics text and the like: any bytes
  }
  if (json.empty()) return;
  rapidjson::Document doc;
  doc.Parse<rapidjson::kParseIterativeFlag>(json.data(), json.size());
  if (doc.HasParseError()) {
    fail(std::string("the answer is not JSON: ") + rapidjson::GetParseError_En(doc.GetParseError()) +
         " at byte " + std::to_string(doc.GetErrorOffset()));
  }
  if (response.status >= 400) {
    if (!doc.IsObject() || !doc.HasMember("error") || !doc["error"].IsString()) {
      fail("an error answer without an \"error\" string");
    }
  }
}

RoutesFixture::RoutesFixture(runtime::ModelControlMode mode, Access access) {
  // Loads, failures and warnings would otherwise be logged for every input.
  spdlog::set_level(spdlog::level::off);
  for (const std::string& value : access.restricted) {
    Status added = restricted_.Add("--http-restricted-api", value, "");
    if (!added.ok()) Fail("the fixture's restriction: " + added.ToString());
  }
  if (!access.forward_pattern.empty()) {
    auto compiled = server::HeaderForwarding::Compile("--http-header-forward-pattern",
                                                      access.forward_pattern);
    if (!compiled.ok()) Fail("the fixture's forward pattern: " + compiled.status().ToString());
    forward_.emplace(std::move(compiled).value());
  }
  root_ = std::filesystem::temp_directory_path() /
          ("vramd-fuzz-" + std::to_string(::getpid()));
  std::filesystem::remove_all(root_);
  for (const auto& m : FixtureModels()) {
    std::filesystem::create_directories(root_ / m.name);
    std::ofstream(root_ / m.name / "config.pbtxt") << m.config;
    for (const char* v : m.versions) std::filesystem::create_directories(root_ / m.name / v);
    for (const auto& [file, text] : m.files) std::ofstream(root_ / m.name / file) << text;
  }

  memory::MemoryReportOptions report_options;
  report_options.nvml_unavailable_reason = "no NVML in the fuzz targets";
  memory_report_ = std::make_unique<memory::LiveMemoryReportSource>(&ledger_, &allocator_, nullptr,
                                                                    nullptr, report_options);
  runtime::ModelManager::Options options;
  options.repositories = {root_};
  options.memory = {&ledger_, &allocator_, nullptr};
  options.model_control_mode = mode;
  if (mode == runtime::ModelControlMode::kExplicit) options.startup_models = {"*"};
  auto manager = runtime::ModelManager::Create(options);
  if (!manager.ok()) Fail("the fixture's manager: " + manager.status().ToString());
  manager_ = std::move(manager).value();
  http::KServeRoutes::ServerInfo info{"vramd", "fuzz"};
  if (!restricted_.empty()) info.restricted = &restricted_;
  if (forward_.has_value()) info.forward_headers = &*forward_;
  routes_ = std::make_unique<http::KServeRoutes>(manager_.get(), memory_report_.get(), info);
  for (const auto& name : ModelNames()) {
    if (name != "broken" && !manager_->Find(name, 0).ok()) Fail("fixture model " + name + " did not load");
  }
}

RoutesFixture::~RoutesFixture() {
  routes_.reset();
  manager_.reset();
  std::error_code ignored;
  std::filesystem::remove_all(root_, ignored);
}

bool RoutesFixture::PassesHeader(std::string_view name) const {
  return routes_->ReadsHeader(name);
}

const std::vector<std::string>& RoutesFixture::ModelNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& m : FixtureModels()) n.emplace_back(m.name);
    return n;
  }();
  return names;
}

http::HttpResponse RoutesFixture::Call(http::HttpRequest request) {
  // Shared with the responder, which may run after a Fail elsewhere or, if it is ever called
  // twice, after this call returned.
  struct Answer {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<http::HttpResponse> response;
    int calls = 0;
  };
  auto answer = std::make_shared<Answer>();
  const http::HttpRequest copy = request;
  routes_->Handle(std::move(request), [answer](http::HttpResponse r) {
    std::lock_guard lock(answer->mu);
    if (++answer->calls > 1) Fail("a request was answered twice");
    answer->response = std::move(r);
    answer->cv.notify_all();
  });
  std::unique_lock lock(answer->mu);
  if (!answer->cv.wait_for(lock, kAnswerTimeout, [&] { return answer->response.has_value(); })) {
    Fail("no answer within " + std::to_string(kAnswerTimeout.count()) + " s to " + copy.method +
         " " + copy.target.substr(0, 200));
  }
  http::HttpResponse response = std::move(*answer->response);
  lock.unlock();
  // For reading what a reproducer does: VRAMD_FUZZ_VERBOSE=1 <target> <file>.
  static const bool verbose = std::getenv("VRAMD_FUZZ_VERBOSE") != nullptr;
  if (verbose) {
    std::fprintf(stderr, "%s %.200s -> %u %.300s\n", copy.method.c_str(), copy.target.c_str(),
                 response.status, response.body.c_str());
  }
  CheckResponse(copy, response);
  return response;
}

}  // namespace vramd::fuzz
