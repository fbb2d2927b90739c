// Fuzz target: the model repository extension's bodies through KServeRoutes::Handle, over a
// manager in explicit mode (fuzz_support.h's repository, every model loaded at start):
//   POST /v2/repository/index                   {"ready": bool}
//   POST /v2/repository/models/{m}/load         {"parameters": {"config": "<ModelConfig JSON>", ...}}
//   POST /v2/repository/models/{m}/unload       {"parameters": {...}}
// so a load's config override goes through ModelConfigFromJson, validation and a real load of
// whatever config the input describes.
//
// Input: byte 0 picks the endpoint (byte0 % 3: index, load, unload) and the model (byte0 / 3,
// over the repository's models and one name no repository holds); the rest is the body.
//
// Between inputs the repository is put back as it was: a model that an input unloaded, or
// loaded with another config, is loaded again from its config.pbtxt (which must succeed), so
// each input meets the same server.
#include <google/protobuf/util/message_differencer.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "fuzz_support.h"

namespace {
using vramd::fuzz::Fail;
using vramd::fuzz::RoutesFixture;

struct Repository {
  RoutesFixture routes{vramd::runtime::ModelControlMode::kExplicit};
  // The config each loadable model serves with at start.
  std::map<std::string, std::shared_ptr<const vramd::config::ModelConfig>> configs;

  Repository() {
    for (const auto& name : RoutesFixture::ModelNames()) {
      if (name == "broken") continue;
      auto config = routes.manager().FindConfig(name);
      if (!config.ok()) Fail("fixture config of " + name + ": " + config.status().ToString());
      configs[name] = *config;
    }
  }

  // Loads `name` from its folder again if it no longer serves its start-up config.
  void Restore(const std::string& name) {
    auto it = configs.find(name);
    if (it == configs.end()) return;
    auto config = routes.manager().FindConfig(name);
    const bool same =
        config.ok() && routes.manager().Find(name, 0).ok() &&
        google::protobuf::util::MessageDifferencer::Equals(**config, *it->second);
    if (same) return;
    vramd::Status status = routes.manager().Load(name);
    if (!status.ok()) Fail("model " + name + " does not load again: " + status.ToString());
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Deliberately kept across inputs (loading every model per input would leave no time to
  // fuzz); Restore puts back what an input changed.
  static Repository repository;
  if (size == 0) return 0;
  const auto& names = RoutesFixture::ModelNames();
  const int action = data[0] % 3;
  const size_t pick = (data[0] / 3) % (names.size() + 1);
  const std::string model = pick < names.size() ? names[pick] : "not_in_any_repository";

  vramd::http::HttpRequest request;
  request.method = "POST";
  request.target = action == 0 ? "/v2/repository/index"
                               : "/v2/repository/models/" + model +
                                     (action == 1 ? "/load" : "/unload");
  request.body = std::make_shared<const std::string>(reinterpret_cast<const char*>(data) + 1,
                                                     size - 1);
  repository.routes.Call(std::move(request));
  if (action != 0) repository.Restore(model);
  return 0;
}
