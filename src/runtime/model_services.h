// ModelServices: the runtime's backends::ServerServices, what a model may ask of the server
// (ModelContext::services): calls into other models through the one request path
// (infer_router.h), model control over the manager (explicit mode only), and custom metrics in
// the server's registry (custom_metrics.h). The ModelManager makes one and hands it to every
// version it loads.
//
// InferAsync. With `decoupled`, the request's stream is set so that each response of a
// decoupled model reaches `on_result` as it is sent (final false), and the request's completion
// then comes final, without outputs; a model that is not decoupled answers once, final, with its
// outputs. Without `decoupled` (and no stream of the caller's), a decoupled target is refused
// before anything runs, with Triton's text (python_backend src/request_executor.cc), Internal as
// there:
//   "Model <m> - Error when running inference: Model <m> is using the decoupled. The current
//    BLS request call doesn't support models using the decoupled transaction policy. Please use
//    'decoupled=True' argument to the 'exec' or 'async_exec' calls for decoupled models.'"
// The final response holds the version that ran it (its outputs' memory) for as long as one of
// its tensors is referenced.
//
// Model control. Load and Unload act only in explicit mode; otherwise Unsupported, naming the
// mode, with Triton's text ("explicit model load / unload is not allowed if polling is
// enabled", triton core src/model_repository_manager.cc). Unloading a model unloads the
// ensembles that use it with `unload_dependents`, and otherwise leaves them loaded (their
// requests then fail naming the missing step). Blocking: not to be called from an execute that the model
// loaded or unloaded may itself need (include/vramd/backend.h says so to backends).
//
// Lifetime: the manager owns its ModelServices and destroys it after every version it loaded
// (so after every model that holds it); the registry must outlive the manager.
//
// Thread safety: every method is safe from any thread; the class has no state of its own.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "backends/server_services.h"
#include "core/infer_request.h"
#include "core/request_trace.h"
#include "core/status.h"

namespace vramd::runtime {

class CustomMetricsRegistry;
class ModelManager;

class ModelServices final : public backends::ServerServices {
 public:
  // `manager` runs the requests and the model control; `metrics` (may be null: MetricFamily is
  // then Unsupported) keeps the custom metrics; `tracer` (may be null) traces the calls that
  // carry a trace_parent. All must outlive this object.
  ModelServices(ModelManager* manager, CustomMetricsRegistry* metrics,
                ChildTracer* tracer = nullptr)
      : manager_(manager), metrics_(metrics), tracer_(tracer) {}

  void InferAsync(std::shared_ptr<InferRequest> request, bool decoupled,
                  ResultCallback on_result) override;

  Status LoadModel(std::string_view model, std::string_view config_json,
                   const ModelFiles& files = {}) override;
  Status UnloadModel(std::string_view model, bool unload_dependents) override;
  bool IsModelReady(std::string_view model, int64_t version) const override;
  Result<std::shared_ptr<const config::ModelConfig>> ServingConfig(
      std::string_view model, int64_t version) const override;

  Result<std::shared_ptr<backends::CustomMetricFamily>> MetricFamily(
      std::string_view name, std::string_view description, backends::MetricKind kind) override;

 private:
  Status CheckExplicitMode() const;

  ModelManager* const manager_;
  CustomMetricsRegistry* const metrics_;
  ChildTracer* const tracer_;
};

}  // namespace vramd::runtime
