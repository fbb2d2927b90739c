// vramctl: asks a running vramd about itself. `vramctl memory` prints the memory report
// (GET /v2/memory) as a tree: devices, pools, owners, leaks. `vramctl load MODEL` and
// `vramctl unload MODEL` ask a server in explicit model control mode to load or unload a model
// (POST /v2/repository/models/MODEL/load|unload); `--config FILE` sends FILE (a JSON model
// config) as the load's config override. `vramctl lifecycle MODEL` prints the model's state,
// its last load (policy, footprint, phases) and recent transitions.
//
// Exit status: 0 on success; 1 when vramd answers with an error or something unreadable;
// 2 when vramd cannot be reached.
#include <CLI/CLI.hpp>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>


#include <cctype>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "cli/http_client.h"
#include "core/json_parse.h"
#include "server/metrics/lifecycle_text.h"
#include "server/metrics/memory_report_text.h"

namespace {

// The message of a {"error": "..."} body, else the body itself, shortened.
std::string ErrorMessage(const std::string& body) {
  auto doc = vramd::ParseJson(body, "the answer", {.max_bytes = size_t{256} << 20});
  if (doc.ok() && doc->IsObject() && doc->HasMember("error") && (*doc)["error"].IsString()) {
    return (*doc)["error"].GetString();
  }
  return body.size() > 200 ? body.substr(0, 200) + "..." : body;
}

// 0 for a 200 answer; otherwise says why on stderr and returns vramctl's exit code: 2 when
// vramd could not be reached, 1 when it answered an error.
int ExitCodeFor(const vramd::Result<vramd::cli::HttpGetResponse>& response,
                const std::string& url_text, const std::string& target) {
  if (!response.ok()) {
    std::fprintf(stderr, "vramctl: cannot reach vramd at %s: %s\n", url_text.c_str(),
                 response.status().message().c_str());
    return 2;
  }
  if (response->status != 200) {
    std::fprintf(stderr, "vramctl: vramd at %s answered %u for %s: %s\n", url_text.c_str(),
                 response->status, target.c_str(), ErrorMessage(response->body).c_str());
    return 1;
  }
  return 0;
}

// The server a command talks to: --url, and the --header values sent with each request.
struct Server {
  std::string url = "http://localhost:8000";
  std::vector<std::string> headers;  // "NAME: VALUE"
};

// The server's URL with its headers; an error (printed) when either is malformed.
std::optional<vramd::cli::Url> Resolve(const Server& server) {
  auto url = vramd::cli::ParseUrl(server.url);
  if (!url.ok()) {
    std::fprintf(stderr, "vramctl: %s\n", url.status().message().c_str());
    return std::nullopt;
  }
  const auto trim = [](std::string_view text) {
    const size_t first = text.find_first_not_of(' ');
    if (first == std::string_view::npos) return std::string();
    return std::string(text.substr(first, text.find_last_not_of(' ') - first + 1));
  };
  for (const std::string& header : server.headers) {
    const size_t colon = header.find(':');
    std::string name = colon == std::string::npos ? "" : trim(header.substr(0, colon));
    if (name.empty()) {
      std::fprintf(stderr, "vramctl: --header '%s' is not NAME: VALUE\n", header.c_str());
      return std::nullopt;
    }
    url->headers.emplace_back(std::move(name), trim(std::string_view(header).substr(colon + 1)));
  }
  return *std::move(url);
}

void AddServerOptions(CLI::App* command, Server* server) {
  command->add_option("--url", server->url, "vramd's HTTP address")->capture_default_str();
  command->add_option("--header", server->headers,
                      "NAME: VALUE sent with each request, e.g. the key of a restricted API "
                      "(vramd's --http-restricted-api); repeat for several");
}

// GETs `path` and prints it: the JSON itself with `raw_json`, else `render`'s text.
int FetchAndPrint(const Server& server, const std::string& path, bool raw_json,
                  int timeout_ms,
                  const std::function<vramd::Result<std::string>(std::string_view)>& render) {
  const std::string& url_text = server.url;
  auto url = Resolve(server);
  if (!url.has_value()) return 2;
  const std::string target = url->path + path;
  auto response = vramd::cli::HttpGet(*url, target, std::chrono::milliseconds(timeout_ms));
  if (int code = ExitCodeFor(response, url_text, target); code != 0) return code;
  if (raw_json) {
    std::printf("%s\n", response->body.c_str());
    return 0;
  }
  auto text = render(response->body);
  if (!text.ok()) {
    std::fprintf(stderr, "vramctl: %s answered %s with %s\n", url_text.c_str(), target.c_str(),
                 text.status().message().c_str());
    return 1;
  }
  std::fputs(text->c_str(), stdout);
  return 0;
}

// Percent-encodes what is not unreserved in a path segment.
std::string EncodeSegment(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

// The body of a load request: {} or {"parameters": {"config": "<FILE's text>"}}.
vramd::Result<std::string> ControlBody(const std::string& config_file) {
  if (config_file.empty()) return std::string("{}");
  std::ifstream in(config_file);
  if (!in) return vramd::Status::NotFound("cannot read the config override '" + config_file + "'");
  std::stringstream text;
  text << in.rdbuf();
  rapidjson::Document doc;
  doc.SetObject();
  auto& a = doc.GetAllocator();
  rapidjson::Value parameters(rapidjson::kObjectType);
  const std::string config = text.str();
  parameters.AddMember("config", rapidjson::Value(config.c_str(), a), a);
  doc.AddMember("parameters", parameters, a);
  rapidjson::StringBuffer sb;
  rapidjson::Writer<rapidjson::StringBuffer> w(sb);
  doc.Accept(w);
  return std::string(sb.GetString(), sb.GetSize());
}

int Control(const Server& server, const std::string& model, bool load,
            const std::string& config_file, int timeout_ms) {
  const std::string& url_text = server.url;
  auto url = Resolve(server);
  if (!url.has_value()) return 2;
  auto body = ControlBody(config_file);
  if (!body.ok()) {
    std::fprintf(stderr, "vramctl: %s\n", body.status().message().c_str());
    return 1;
  }
  const std::string target =
      url->path + "/v2/repository/models/" + EncodeSegment(model) + (load ? "/load" : "/unload");
  // Loading a model can take a while: the answer may take ten times the step deadline.
  auto response = vramd::cli::HttpPost(*url, target, *body, std::chrono::milliseconds(timeout_ms),
                                       std::chrono::milliseconds(timeout_ms) * 10);
  if (int code = ExitCodeFor(response, url_text, target); code != 0) return code;
  std::printf("%s '%s'\n", load ? "loaded" : "unloaded", model.c_str());
  return 0;
}

// vramctl sleep / wake: POST .../sleep with the level, or .../wake.
int SleepControl(const Server& server, const std::string& model, bool sleep, int level,
                 int timeout_ms) {
  const std::string& url_text = server.url;
  auto url = Resolve(server);
  if (!url.has_value()) return 2;
  const std::string body =
      sleep ? "{\"parameters\": {\"level\": " + std::to_string(level) + "}}" : "{}";
  const std::string target = url->path + "/v2/repository/models/" + EncodeSegment(model) +
                             (sleep ? "/sleep" : "/wake");
  // A wake copies the weights back, a sleep may wait for executions in flight (30 s).
  auto response = vramd::cli::HttpPost(*url, target, body, std::chrono::milliseconds(timeout_ms),
                                       std::chrono::milliseconds(timeout_ms) * 10);
  if (int code = ExitCodeFor(response, url_text, target); code != 0) return code;
  std::printf("%s '%s'\n", sleep ? "asleep:" : "awake:", model.c_str());
  return 0;
}

// vramctl rollback / hold / release: POST .../rollback (with the reason), .../hold, .../release.
int RollbackAction(const Server& server, const std::string& model,
                   const std::string& action, const std::string& reason, int timeout_ms) {
  const std::string& url_text = server.url;
  auto url = Resolve(server);
  if (!url.has_value()) return 2;
  std::string body = "{}";
  if (action == "rollback" && !reason.empty()) {
    rapidjson::StringBuffer sb;
    rapidjson::Writer<rapidjson::StringBuffer> w(sb);
    w.StartObject();
    w.Key("parameters");
    w.StartObject();
    w.Key("reason");
    w.String(reason.data(), static_cast<rapidjson::SizeType>(reason.size()));
    w.EndObject();
    w.EndObject();
    body = sb.GetString();
  }
  const std::string target =
      url->path + "/v2/repository/models/" + EncodeSegment(model) + "/" + action;
  // A rollback waits for the versions it replaces to drain; a release may load a change.
  auto response = vramd::cli::HttpPost(*url, target, body, std::chrono::milliseconds(timeout_ms),
                                        std::chrono::milliseconds(timeout_ms) * 10);
  if (int code = ExitCodeFor(response, url_text, target); code != 0) return code;
  std::printf("%s '%s'\n",
              action == "rollback" ? "rolled back" : action == "hold" ? "held" : "released",
              model.c_str());
  return 0;
}

// vramctl drain: POST /v2/drain and wait for its answer (a preStop hook's command). Exit 0 when
// the server went quiet, 3 when the wait timed out with requests still coming.
int DrainControl(const Server& server, int quiet_ms, int timeout_ms) {
  const std::string& url_text = server.url;
  auto url = Resolve(server);
  if (!url.has_value()) return 2;
  const std::string body = "{\"quiet_ms\": " + std::to_string(quiet_ms) +
                           ", \"timeout_ms\": " + std::to_string(timeout_ms) + "}";
  const std::string target = url->path + "/v2/drain";
  // The answer comes when the drain ends: give it the drain's timeout and ten seconds more.
  auto response = vramd::cli::HttpPost(*url, target, body, std::chrono::seconds(10),
                                       std::chrono::milliseconds(timeout_ms) +
                                           std::chrono::seconds(10));
  if (int code = ExitCodeFor(response, url_text, target); code != 0) return code;
  auto doc = vramd::ParseJson(response->body, "drain answer");
  if (!doc.ok() || !doc->IsObject() || !doc->HasMember("quiet") || !(*doc)["quiet"].IsBool()) {
    std::fprintf(stderr, "vramctl: %s answered %s with %s\n", url_text.c_str(), target.c_str(),
                 response->body.c_str());
    return 1;
  }
  const bool quiet = (*doc)["quiet"].GetBool();
  const auto number = [&](const char* key) -> uint64_t {
    return doc->HasMember(key) && (*doc)[key].IsUint64() ? (*doc)[key].GetUint64() : 0;
  };
  if (quiet) {
    std::printf("drained: no request for %d ms, after %llu ms\n", quiet_ms,
                static_cast<unsigned long long>(number("waited_ms")));
    return 0;
  }
  std::printf("drain timed out after %llu ms with %llu request(s) in flight\n",
              static_cast<unsigned long long>(number("waited_ms")),
              static_cast<unsigned long long>(number("in_flight")));
  return 3;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"vramctl: inspect a running vramd"};
  app.require_subcommand(1);

  Server server;
  bool raw_json = false;
  int timeout_ms = 10000;
  CLI::App* memory = app.add_subcommand(
      "memory", "Print the memory report: devices, pools, the owner tree and leaks");
  AddServerOptions(memory, &server);
  memory->add_flag("--json", raw_json, "Print the report as the server's JSON");
  memory->add_option("--timeout-ms", timeout_ms, "Deadline for each network step")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();

  std::string model;
  CLI::App* load = app.add_subcommand("load", "Load (or reload) a model (explicit mode)");
  CLI::App* unload = app.add_subcommand("unload", "Unload a model (explicit mode)");
  std::string config_file;
  load->add_option("--config", config_file,
                   "A JSON model config to load instead of the repository's config.pbtxt");
  CLI::App* lifecycle = app.add_subcommand(
      "lifecycle", "Print a model's state, its last load (policy, footprint, phases) and "
                   "recent transitions");
  lifecycle->add_flag("--json", raw_json, "Print the server's JSON");
  CLI::App* sleep = app.add_subcommand(
      "sleep", "Put a model to sleep: its device memory goes back to the driver until a request "
               "or `vramctl wake` wakes it");
  int sleep_level = 1;
  sleep->add_option("--level", sleep_level,
                    "1: keep its weights in host memory; 2: read them again from the repository "
                    "on wake")
      ->check(CLI::Range(1, 2))
      ->capture_default_str();
  CLI::App* wake = app.add_subcommand("wake", "Wake a sleeping model");
  CLI::App* rollback = app.add_subcommand(
      "rollback", "Put back the versions a model served before its last reload (kept while "
                  "vramd.rollback.* watches it) and hold it there");
  std::string reason;
  rollback->add_option("--reason", reason, "Why, for the log and the lifecycle history");
  CLI::App* hold = app.add_subcommand(
      "hold", "No automatic change to a model (repository polls, automatic rollbacks)");
  CLI::App* release = app.add_subcommand(
      "release", "End a hold (or a rollback's); in poll mode a change kept back loads now");
  for (CLI::App* sub : {load, unload, lifecycle, sleep, wake, rollback, hold, release}) {
    sub->add_option("model", model, "The model's name")->required();
    AddServerOptions(sub, &server);
    sub->add_option("--timeout-ms", timeout_ms, "Deadline for each network step")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
  }

  CLI::App* drain = app.add_subcommand(
      "drain", "Take vramd out of rotation (readiness fails, requests are still served) and "
               "wait until no request has been in flight for --quiet-ms; exit 3 on timeout");
  int quiet_ms = 1000;
  int drain_timeout_ms = 30000;
  AddServerOptions(drain, &server);
  drain->add_option("--quiet-ms", quiet_ms, "How long no request may arrive before it is quiet")
      ->check(CLI::Range(0, 86'400'000))
      ->capture_default_str();
  drain->add_option("--timeout-ms", drain_timeout_ms, "The longest the drain may wait")
      ->check(CLI::Range(0, 86'400'000))
      ->capture_default_str();

  CLI11_PARSE(app, argc, argv);
  if (drain->parsed()) return DrainControl(server, quiet_ms, drain_timeout_ms);
  if (memory->parsed()) {
    return FetchAndPrint(server, "/v2/memory", raw_json, timeout_ms, [](std::string_view json) {
      return vramd::metrics::RenderMemoryReportText(json);
    });
  }
  if (load->parsed()) return Control(server, model, true, config_file, timeout_ms);
  if (unload->parsed()) return Control(server, model, false, "", timeout_ms);
  if (sleep->parsed()) return SleepControl(server, model, true, sleep_level, timeout_ms);
  if (wake->parsed()) return SleepControl(server, model, false, 0, timeout_ms);
  if (rollback->parsed()) return RollbackAction(server, model, "rollback", reason, timeout_ms);
  if (hold->parsed()) return RollbackAction(server, model, "hold", "", timeout_ms);
  if (release->parsed()) return RollbackAction(server, model, "release", "", timeout_ms);
  if (lifecycle->parsed()) {
    return FetchAndPrint(server, "/v2/repository/models/" + EncodeSegment(model) + "/lifecycle",
                         raw_json, timeout_ms, [](std::string_view json) {
                           return vramd::metrics::RenderLifecycleText(json);
                         });
  }
  return 0;
}
