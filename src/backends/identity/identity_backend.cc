#include "backends/identity/identity_backend.h"

#include <fmt/format.h>

#include <charconv>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backends/abi/backend_kit.h"

namespace vramd::backends {
namespace {

static_assert(static_cast<int>(config::TYPE_STRING) == static_cast<int>(DataType::kBytes) &&
                  static_cast<int>(config::TYPE_BF16) == static_cast<int>(DataType::kBf16),
              "config::DataType must keep vramd::DataType's (Triton's) numbering");

// One output and the input it returns.
struct Route {
  std::string input;
  std::string output;
  DataType datatype = DataType::kInvalid;
};

// Model-level state: the routes, fixed at load and shared read-only by every instance.
using Routes = std::vector<Route>;

constexpr std::string_view kInputPrefix = "INPUT";
constexpr std::string_view kOutputPrefix = "OUTPUT";

// The input index OUTPUT<suffix> maps to by name, or -1.
int NamedInput(const config::ModelConfig& config, const std::string& output_name) {
  if (output_name.rfind(kOutputPrefix, 0) != 0) return -1;
  const std::string want = std::string(kInputPrefix) + output_name.substr(kOutputPrefix.size());
  for (int i = 0; i < config.input_size(); ++i)
    if (config.input(i).name() == want) return i;
  return -1;
}

// For each output, the index of the input it returns.
std::vector<int> MapOutputs(const config::ModelConfig& config) {
  std::vector<int> by_name;
  for (const auto& out : config.output()) {
    const int i = NamedInput(config, out.name());
    if (i < 0) break;
    by_name.push_back(i);
  }
  if (static_cast<int>(by_name.size()) == config.output_size()) return by_name;
  std::vector<int> by_position;
  for (int i = 0; i < config.output_size(); ++i) by_position.push_back(i);
  return by_position;
}

Result<Routes> PlanRoutes(const std::string& name, const config::ModelConfig& config) {
  if (config.input_size() == 0 || config.input_size() != config.output_size()) {
    return Status::InvalidArgument(fmt::format(
        "model '{}': the identity backend needs one output per input and at least one: config "
        "has {} input(s) and {} output(s)",
        name, config.input_size(), config.output_size()));
  }
  const std::vector<int> inputs = MapOutputs(config);
  std::vector<bool> used(config.input_size(), false);
  Routes routes;
  for (int o = 0; o < config.output_size(); ++o) {
    const auto& out = config.output(o);
    const auto& in = config.input(inputs[o]);
    if (used[inputs[o]]) {
      return Status::InvalidArgument(
          fmt::format("model '{}': output[{}] '{}' would return input '{}' a second time", name,
                      o, out.name(), in.name()));
    }
    used[inputs[o]] = true;
    if (out.data_type() != in.data_type()) {
      return Status::InvalidArgument(fmt::format(
          "model '{}': output[{}].data_type of '{}' is {} but its input '{}' is {}; the identity "
          "backend returns inputs unchanged",
          name, o, out.name(), config::DataType_Name(out.data_type()), in.name(),
          config::DataType_Name(in.data_type())));
    }
    routes.push_back(
        {in.name(), out.name(), static_cast<DataType>(static_cast<int>(out.data_type()))});
  }
  return routes;
}

// The config parameter execute_delay_us: absent is 0; otherwise a non-negative integer.
Result<std::chrono::microseconds> ExecuteDelay(const std::string& name,
                                               const config::ModelConfig& config) {
  const auto& parameters = config.parameters();
  auto it = parameters.find(std::string(kIdentityExecuteDelayParameter));
  if (it == parameters.end()) return std::chrono::microseconds(0);
  const std::string& text = it->second.string_value();
  int64_t us = -1;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), us);
  if (ec != std::errc() || end != text.data() + text.size() || us < 0) {
    return Status::InvalidArgument(fmt::format(
        "model '{}': parameter '{}' must be a non-negative integer (microseconds), got '{}'",
        name, kIdentityExecuteDelayParameter, text));
  }
  return std::chrono::microseconds(us);
}

class IdentityInstance {
 public:
  IdentityInstance(std::shared_ptr<const Routes> routes, std::string name,
                   std::chrono::microseconds delay)
      : routes_(std::move(routes)), name_(std::move(name)), delay_(delay) {}

  Status Execute(const VramdRequest& request, const VramdOutputs& outputs) {
    if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
    for (const Route& r : *routes_) {
      const VramdTensor* in = abi::FindInput(request, r.input);
      if (in == nullptr) continue;  // an optional input that was not sent
      const DataType type = abi::ToDataType(in->datatype);
      if (type != r.datatype) {
        return Status::InvalidArgument(fmt::format(
            "identity instance '{}': input '{}' is {}, output '{}' is {}", name_, r.input,
            DataTypeWireName(type), r.output, DataTypeWireName(r.datatype)));
      }
      // The input's own memory, host or GPU, with no copy: a pass-through costs a model nothing.
      VRAMD_RETURN_IF_ERROR(abi::AddFromInput(outputs, r.output, request, *in));
    }
    return Status::Ok();
  }

 private:
  const std::shared_ptr<const Routes> routes_;
  const std::string name_;
  const std::chrono::microseconds delay_;
};

class IdentityModel {
 public:
  using Instance = IdentityInstance;

  static Result<std::unique_ptr<IdentityModel>> Create(const VramdModelInfo& info) {
    VRAMD_ASSIGN_OR_RETURN(config::ModelConfig config, abi::ModelConfigOf(info));
    const std::string name = info.name != nullptr ? info.name : "";
    VRAMD_ASSIGN_OR_RETURN(Routes routes, PlanRoutes(name, config));
    VRAMD_ASSIGN_OR_RETURN(std::chrono::microseconds delay, ExecuteDelay(name, config));
    return std::make_unique<IdentityModel>(std::move(routes), delay);
  }

  IdentityModel(Routes routes, std::chrono::microseconds delay)
      : routes_(std::make_shared<const Routes>(std::move(routes))), delay_(delay) {}

  Result<std::unique_ptr<IdentityInstance>> CreateInstance(const VramdInstanceInfo& info) {
    return std::make_unique<IdentityInstance>(routes_, info.name != nullptr ? info.name : "",
                                              delay_);
  }

 private:
  const std::shared_ptr<const Routes> routes_;
  const std::chrono::microseconds delay_;
};

}  // namespace

const VramdBackendApi* IdentityBackendApi() {
  // Inputs stay where they are (a client's CUDA shared memory, a GPU tensor from BLS or an
  // ensemble step) and so do the outputs made of them; vramd moves one to host for a consumer
  // that takes host memory.
  return abi::BackendApiFor<IdentityModel>("identity", /*supports_gpu=*/false,
                                           /*accepts_gpu_inputs=*/true);
}

}  // namespace vramd::backends
