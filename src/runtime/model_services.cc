#include "runtime/model_services.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <utility>

#include "config/model_config_json.h"
#include "runtime/custom_metrics.h"
#include "runtime/infer_router.h"
#include "runtime/model_manager.h"

namespace vramd::runtime {
namespace {

// The response of `outcome`, each of whose tensors keeps the rest of the outcome (the version
// that ran it, the request's ledger owner) alive while it is referenced: the caller may hold
// the outputs well after the callback (a BLS result kept by the Python model), and the version's
// owners must not close under them (infer_outcome.h).
InferResponse HoldOutcome(InferOutcome outcome) {
  InferResponse response = std::move(outcome.response);
  if (response.outputs.empty()) return response;
  auto rest = std::make_shared<InferOutcome>(std::move(outcome));
  for (Tensor& tensor : response.outputs) {
    // Members go in reverse: the bytes first, then the outcome that accounts for them.
    struct Held {
      std::shared_ptr<InferOutcome> rest;
      SharedBuffer data;
    };
    auto held = std::make_shared<Held>(Held{rest, tensor.data});
    const std::byte* data = held->data.data();
    const size_t size = held->data.size();
    tensor.data = SharedBuffer::View(std::move(held), data, size);
  }
  return response;
}

// Triton's refusal of exec() without decoupled=True on a decoupled model, wrapped as
// RequestExecutor::Infer wraps every failure it throws (python_backend src/request_executor.cc).
Status DecoupledRefusal(std::string_view model) {
  return Status::Internal(fmt::format(
      "Model {0} - Error when running inference: Model {0} is using the decoupled. The current "
      "BLS request call doesn't support models using the decoupled transaction policy. Please "
      "use 'decoupled=True' argument to the 'exec' or 'async_exec' calls for decoupled "
      "models.'",
      model));
}

std::string_view ModeName(ModelControlMode mode) {
  switch (mode) {
    case ModelControlMode::kNone: return "none";
    case ModelControlMode::kPoll: return "poll";
    case ModelControlMode::kExplicit: return "explicit";
  }
  return "unknown";
}

}  // namespace

void ModelServices::InferAsync(std::shared_ptr<InferRequest> request, bool decoupled,
                               ResultCallback on_result) {
  if (request == nullptr) return on_result(Status::InvalidArgument("no request given"), true);
  // Copied: the router sets the request's model_name, and this must not view into it.
  const std::string model = request->model_name;
  const int64_t version = request->model_version;
  // A call on behalf of a traced request is traced under it; the trace ends as the last result
  // is handed back (REQUEST_END has been stamped by then).
  if (tracer_ != nullptr && !request->trace_parent.empty() && request->trace == nullptr) {
    request->trace = tracer_->StartChild(model, request->trace_parent);
    if (request->trace != nullptr) {
      on_result = [on_result = std::move(on_result), trace = request->trace, tracer = tracer_](
                      Result<InferResponse> response, bool final) {
        if (final && !response.ok()) trace->SetError(response.status().message());
        on_result(std::move(response), final);
        if (final) tracer->Finish(trace);
      };
    }
  }
  if (decoupled) {
    // Each response of a decoupled model as it comes; the completion (final) follows the last.
    request->stream = [on_result](Result<InferResponse> response) {
      on_result(std::move(response), /*final=*/false);
    };
  }
  const bool takes_several = static_cast<bool>(request->stream);
  InferRequest* const target = request.get();
  // The build step sees the config of the version chosen, so a reload that makes the model
  // decoupled is seen; the request itself is already made and goes back in unchanged.
  auto build = [target, takes_several, model](
                   const config::ModelConfig& config) -> Result<InferRequest> {
    if (!takes_several && config.model_transaction_policy().decoupled()) {
      return DecoupledRefusal(model);
    }
    return std::move(*target);
  };
  InferRouter(manager_).InferAsync(
      model, version, std::move(request), std::move(build),
      [on_result = std::move(on_result)](Result<InferOutcome> outcome) {
        if (!outcome.ok()) return on_result(outcome.status(), /*final=*/true);
        on_result(HoldOutcome(std::move(outcome).value()), /*final=*/true);
      });
}

Status ModelServices::CheckExplicitMode() const {
  const ModelControlMode mode = manager_->model_control_mode();
  if (mode == ModelControlMode::kExplicit) return Status::Ok();
  return Status::Unsupported(fmt::format(
      "explicit model load / unload is not allowed if polling is enabled (the server's model "
      "control mode is '{}'; a model can load and unload models only in mode 'explicit')",
      ModeName(mode)));
}

Status ModelServices::LoadModel(std::string_view model, std::string_view config_json,
                                const ModelFiles& files) {
  VRAMD_RETURN_IF_ERROR(CheckExplicitMode());
  std::shared_ptr<const config::ModelConfig> config_override;
  if (!config_json.empty()) {
    auto parsed = config::ModelConfigFromJson(config_json);
    if (!parsed.ok()) {
      return Status::InvalidArgument(fmt::format("failed to load '{}': the config override: {}",
                                                 model, parsed.status().message()));
    }
    config_override = std::make_shared<const config::ModelConfig>(std::move(parsed).value());
  }
  return manager_->Load(model, std::move(config_override), files);
}

Status ModelServices::UnloadModel(std::string_view model, bool unload_dependents) {
  VRAMD_RETURN_IF_ERROR(CheckExplicitMode());
  return manager_->Unload(model, unload_dependents);
}

bool ModelServices::IsModelReady(std::string_view model, int64_t version) const {
  auto ready = manager_->ReadyVersions(model);
  if (!ready.ok()) return false;
  if (version == 0) return !ready->empty();
  return std::find(ready->begin(), ready->end(), version) != ready->end();
}

Result<std::shared_ptr<const config::ModelConfig>> ModelServices::ServingConfig(
    std::string_view model, int64_t version) const {
  if (!IsModelReady(model, version)) {
    VRAMD_RETURN_IF_ERROR(manager_->ReadyVersions(model).status());
    return Status::Unavailable(
        version == 0 ? fmt::format("model '{}' is not loaded", model)
                     : fmt::format("model '{}' has no version {} loaded", model, version));
  }
  return manager_->FindConfig(model);
}

Result<std::shared_ptr<backends::CustomMetricFamily>> ModelServices::MetricFamily(
    std::string_view name, std::string_view description, backends::MetricKind kind) {
  if (metrics_ == nullptr) {
    return Status::Unsupported("this server keeps no custom metrics (no registry was given)");
  }
  return metrics_->Family(name, description, kind);
}

}  // namespace vramd::runtime
