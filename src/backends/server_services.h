// ServerServices: what a model may ask of the server beyond memory (ModelContext::services):
// running a request on another model (Triton's BLS), model control in explicit mode, and its
// own metrics. The runtime implements it over the model manager (runtime/model_services.h);
// backends reach it through VramdServerApi (infer_async, load_model, metric_*).
//
// Thread safety: every method is safe from any thread, the instance threads included.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/model_config.pb.h"
#include "core/infer_request.h"
#include "core/status.h"

namespace vramd::backends {

// A model's custom metric (Triton's pb_utils.Metric), kept by the server's registry and exported
// on the metrics endpoint with the family's name, help text and labels.
class CustomMetric {
 public:
  virtual ~CustomMetric() = default;
  // Triton's rules and codes: a counter only increments by >= 0 (InvalidArgument otherwise);
  // set is for gauges and observe for histograms, and a kind without the operation is
  // Unsupported naming it (runtime/custom_metrics.h).
  virtual Status Increment(double value) = 0;
  virtual Status Set(double value) = 0;
  virtual Status Observe(double value) = 0;
  virtual Result<double> Value() const = 0;  // counters and gauges
};

enum class MetricKind { kCounter = 0, kGauge = 1, kHistogram = 2 };

class CustomMetricFamily {
 public:
  virtual ~CustomMetricFamily() = default;
  // The metric of these labels (a JSON-free list of name/value pairs), made on first use; the
  // same labels again give the same metric. `buckets`: a histogram's ascending upper bounds
  // (required for histograms, refused for the others).
  virtual Result<std::shared_ptr<CustomMetric>> Metric(
      std::vector<std::pair<std::string, std::string>> labels,
      std::vector<double> buckets) = 0;
};

class ServerServices {
 public:
  virtual ~ServerServices() = default;

  // Runs `request` (its model_name and model_version name the target) through the runtime's
  // one request path (runtime/infer_router.h), as a client's request. `on_result` receives each
  // response, the last with `final` true, exactly once final: one response for a model that is
  // not decoupled, and, when `request->stream` is unset and the model is decoupled, an error
  // (Triton's exec() without decoupled=True). Errors (unknown model, invalid inputs) arrive the
  // same way. May run `on_result` before InferAsync returns.
  using ResultCallback = std::function<void(Result<InferResponse> response, bool final)>;
  virtual void InferAsync(std::shared_ptr<InferRequest> request, bool decoupled,
                          ResultCallback on_result) = 0;

  // Explicit model control (Unsupported naming the mode otherwise). Blocking until the load or
  // unload has finished. `config_json`: an override of the model's config, "" for none.
  // `files` (each a path relative to the model's directory and its bytes; they need
  // `config_json`): the model loads from exactly those files (ModelManager::Load).
  using ModelFiles = std::vector<std::pair<std::string, std::string>>;
  virtual Status LoadModel(std::string_view model, std::string_view config_json,
                           const ModelFiles& files = {}) = 0;
  virtual Status UnloadModel(std::string_view model, bool unload_dependents) = 0;
  // Whether `model` has version `version` ready (0: any).
  virtual bool IsModelReady(std::string_view model, int64_t version) const = 0;
  // The config `model` serves version `version` (0: any) with: Unavailable naming the model when
  // no such version is ready, NotFound for a model the server does not know. For a model that
  // composes others (an ensemble), which checks its steps against them.
  virtual Result<std::shared_ptr<const config::ModelConfig>> ServingConfig(
      std::string_view model, int64_t version) const {
    return Status::Unsupported("this server does not tell other models' configs");
  }

  // The family `name` (made on first use; the same name again must give the same kind).
  // InvalidArgument for a name that is not a valid Prometheus metric name, or that a family of
  // another kind or help text took.
  virtual Result<std::shared_ptr<CustomMetricFamily>> MetricFamily(std::string_view name,
                                                                   std::string_view description,
                                                                   MetricKind kind) = 0;
};

}  // namespace vramd::backends
