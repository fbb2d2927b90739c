#include "backends/ensemble/ensemble_backend.h"

#include <fmt/format.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "backends/ensemble/ensemble_graph.h"
#include "backends/server_services.h"

namespace vramd::backends {
namespace {

using ensemble::EnsembleGraph;

struct EnsembleShared {
  std::string name;
  EnsembleGraph graph;
  ServerServices* services = nullptr;
  std::vector<std::string> outputs;  // the ensemble's outputs, in config order
};

// One request's walk through the graph. Held by the callbacks of its steps in flight; answers
// its responder exactly once.
class EnsembleRun : public std::enable_shared_from_this<EnsembleRun> {
 public:
  EnsembleRun(std::shared_ptr<const EnsembleShared> shared, const InferRequest& request,
              std::shared_ptr<Responder> responder)
      : shared_(std::move(shared)),
        responder_(std::move(responder)),
        cancel_(request.cancel),
        request_id_(request.id),
        parameters_(request.parameters),
        flags_(request.flags),
        correlation_id_(request.correlation_id),
        correlation_id_string_(request.correlation_id_string),
        waits_(shared_->graph.waits()),
        unfinished_(shared_->graph.steps().size()) {
    for (const Tensor& input : request.inputs) tensors_[input.name] = input;
  }

  void Start() {
    for (size_t step : shared_->graph.first()) Launch(step);
  }

 private:
  void Launch(size_t index) {
    const EnsembleGraph::Step& step = shared_->graph.steps()[index];
    auto request = std::make_shared<InferRequest>();
    request->id = request_id_;
    request->model_name = step.model;
    request->model_version = step.version;
    request->cancel = cancel_;
    // A sequence through an ensemble is a sequence for each of its steps (a stateful step model
    // sees the client's correlation ID and start / end), as in Triton.
    request->parameters = parameters_;
    request->flags = flags_;
    request->correlation_id = correlation_id_;
    request->correlation_id_string = correlation_id_string_;
    request->output_gpu = kAnyGpu;
    request->binary_data_output = true;
    {
      std::lock_guard lock(mu_);
      if (done_) return;
      for (const auto& in : step.inputs) {
        Tensor tensor = tensors_.at(in.ensemble_tensor);  // shares the bytes
        tensor.name = in.model_tensor;
        request->inputs.push_back(std::move(tensor));
      }
    }
    for (const auto& out : step.outputs) request->outputs.push_back({out.model_tensor});
    shared_->services->InferAsync(
        std::move(request), /*decoupled=*/false,
        [self = shared_from_this(), index](Result<InferResponse> response, bool final) {
          if (final) self->StepDone(index, std::move(response));
        });
  }

  void StepDone(size_t index, Result<InferResponse> response) {
    const EnsembleGraph::Step& step = shared_->graph.steps()[index];
    if (!response.ok()) return Fail(step, response.status());
    std::vector<size_t> ready;
    bool finished = false;
    {
      std::lock_guard lock(mu_);
      if (done_) return;
      for (const auto& out : step.outputs) {
        Tensor* made = nullptr;
        for (Tensor& t : response->outputs) {
          if (t.name == out.model_tensor) made = &t;
        }
        if (made == nullptr) {
          done_ = true;
          return Answer(Status::Internal(fmt::format(
              "ensemble '{}': {} answered without its output '{}'", shared_->name, step.label,
              out.model_tensor)));
        }
        made->name = out.ensemble_tensor;
        tensors_[out.ensemble_tensor] = std::move(*made);
      }
      for (size_t k = 0; k < step.next.size(); ++k) {
        if ((waits_[step.next[k]] -= step.next_reads[k]) == 0) ready.push_back(step.next[k]);
      }
      finished = --unfinished_ == 0;
      if (finished) done_ = true;
    }
    if (finished) return Finish();
    for (size_t next : ready) Launch(next);
  }

  void Fail(const EnsembleGraph::Step& step, const Status& status) {
    {
      std::lock_guard lock(mu_);
      if (done_) return;
      done_ = true;
    }
    Answer(Status(status.code(), fmt::format("ensemble '{}': {}: {}", shared_->name, step.label,
                                             status.message())));
  }

  void Finish() {
    BackendResponse response;
    for (const std::string& name : shared_->outputs) {
      auto it = tensors_.find(name);
      if (it != tensors_.end()) response.outputs.push_back(std::move(it->second));
    }
    tensors_.clear();
    Answer(std::move(response));
  }

  void Answer(Result<BackendResponse> response) {
    // Not under mu_: the responder may run the front end's answer inline.
    Status sent = responder_->Respond(std::move(response), /*final=*/true);
    static_cast<void>(sent);  // refused only past the final flag, which done_ rules out
  }

  const std::shared_ptr<const EnsembleShared> shared_;
  const std::shared_ptr<Responder> responder_;
  const std::shared_ptr<CancelFlag> cancel_;
  const std::string request_id_;
  const std::vector<InferParameter> parameters_;
  const uint32_t flags_;
  const uint64_t correlation_id_;
  const std::string correlation_id_string_;
  std::mutex mu_;
  std::map<std::string, Tensor> tensors_;  // the ensemble's tensors made so far
  std::vector<size_t> waits_;
  size_t unfinished_;
  bool done_ = false;
};

class EnsembleInstance final : public BackendInstance {
 public:
  explicit EnsembleInstance(std::shared_ptr<const EnsembleShared> shared)
      : shared_(std::move(shared)) {}

  Status Execute(const InferRequest&, std::vector<Tensor>*) override {
    return Status::Unsupported("the ensemble backend takes request lists");
  }

  Status ExecuteRequests(std::span<const ListedRequest> requests) override {
    for (const ListedRequest& listed : requests) {
      std::make_shared<EnsembleRun>(shared_, *listed.request, listed.responder)->Start();
    }
    return Status::Ok();
  }

 private:
  const std::shared_ptr<const EnsembleShared> shared_;
};

class EnsembleModel final : public BackendModel {
 public:
  explicit EnsembleModel(std::shared_ptr<const EnsembleShared> shared)
      : shared_(std::move(shared)) {}

  Result<std::unique_ptr<BackendInstance>> CreateInstance(const InstanceContext&) override {
    return std::unique_ptr<BackendInstance>(std::make_unique<EnsembleInstance>(shared_));
  }
  // Tensors pass through to the steps as they are; each step's model says what it takes.
  bool TakesGpuInputs() const override { return true; }

 private:
  const std::shared_ptr<const EnsembleShared> shared_;
};

class Ensemble final : public Backend {
 public:
  std::string_view name() const override { return "ensemble"; }
  bool TakesRequestLists() const override { return true; }
  bool AcceptsGpuInputs() const override { return true; }

  Result<std::unique_ptr<BackendModel>> LoadModel(const ModelContext& ctx) override {
    const config::ModelConfig& config = *ctx.config;
    if (ctx.services == nullptr) {
      return Status::Unsupported(fmt::format(
          "ensemble '{}': this server cannot run other models for an ensemble", ctx.name));
    }
    if (config.model_transaction_policy().decoupled()) {
      return Status::InvalidArgument(fmt::format(
          "ensemble '{}': a decoupled ensemble is not served yet", ctx.name));
    }
    VRAMD_ASSIGN_OR_RETURN(EnsembleGraph graph, EnsembleGraph::Build(config));
    for (size_t index : graph.order()) {
      const EnsembleGraph::Step& step = graph.steps()[index];
      if (step.model == ctx.name) {
        return Status::InvalidArgument(
            fmt::format("ensemble '{}': {} names the ensemble itself", ctx.name, step.label));
      }
      auto step_config = ctx.services->ServingConfig(step.model, step.version);
      if (!step_config.ok()) {
        return Status(step_config.status().code(),
                      fmt::format("ensemble '{}': {}: {}", ctx.name, step.label,
                                  step_config.status().message()));
      }
      if ((*step_config)->model_transaction_policy().decoupled()) {
        return Status::InvalidArgument(fmt::format(
            "ensemble '{}': {}: decoupled step models are not served in ensembles yet", ctx.name,
            step.label));
      }
      VRAMD_RETURN_IF_ERROR(graph.CheckStep(index, **step_config));
    }
    auto shared = std::make_shared<EnsembleShared>();
    shared->name = ctx.name;
    shared->graph = std::move(graph);
    shared->services = ctx.services;
    for (const auto& output : config.output()) shared->outputs.push_back(output.name());
    return std::unique_ptr<BackendModel>(std::make_unique<EnsembleModel>(std::move(shared)));
  }
};

}  // namespace

Backend* EnsembleBackend() {
  static Ensemble backend;
  return &backend;
}

}  // namespace vramd::backends
