#include "backends/ensemble/ensemble_backend.h"

#include <fmt/format.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backends/ensemble/ensemble_graph.h"
#include "backends/server_services.h"
#include "core/request_trace.h"
#include "memory/allocator.h"
#include "memory/ledger.h"

namespace vramd::backends {
namespace {

using ensemble::EnsembleGraph;

struct EnsembleShared {
  std::string name;
  EnsembleGraph graph;
  ServerServices* services = nullptr;
  std::vector<std::string> outputs;  // the ensemble's outputs, in config order
  bool decoupled = false;            // the ensemble's own model_transaction_policy
  std::vector<bool> step_decoupled;  // by step: its model was decoupled when the ensemble loaded
  // after[d][s]: step s reads, directly or through other steps, what step d writes.
  std::vector<std::vector<bool>> after;
  memory::Ledger* ledger = nullptr;  // null: intermediate tensors stay where their steps made them
};

// The ledger owner of one ensemble request's tensors: what its steps made, moved there from
// the step requests that allocated them. Each tensor charged to it holds it, so it closes after
// the last of them is freed (intermediate tensors may outlive the answer by a moment: a step's
// request lets go of its inputs after it has answered), and never reports them as leaks.
struct RunOwner {
  memory::LazyOwner owner;
  ~RunOwner() { owner.Close(); }  // leaks are filed and logged by the ledger's callback
};

// after[d][s] for every pair of steps, from the graph's edges.
std::vector<std::vector<bool>> Reachable(const EnsembleGraph& graph) {
  const size_t n = graph.steps().size();
  std::vector<std::vector<bool>> after(n, std::vector<bool>(n, false));
  // In reverse topological order, each step's set is its next steps' sets and themselves.
  for (auto it = graph.order().rbegin(); it != graph.order().rend(); ++it) {
    for (size_t next : graph.steps()[*it].next) {
      after[*it][next] = true;
      for (size_t s = 0; s < n; ++s) {
        if (after[next][s]) after[*it][s] = true;
      }
    }
  }
  return after;
}

// One request's walk through the graph. Held by the callbacks of its steps in flight; answers
// its responder: once (final) for an ensemble that is not decoupled; for a decoupled one, once
// per line that makes every ensemble output, then the final flag.
//
// Lines: a request starts on one line, the tensors made so far and the steps still waiting.
// Each response of a decoupled step forks a new line from the one it ran on, with the tensors
// known then, and only the steps after that decoupled step run on the new line (each response
// is carried through the rest of the graph on its own, as Triton does). A step that does not
// come after it runs once, on the line it became ready on, and its outputs reach every line
// forked from there, before or after it finishes. A line that has answered and runs nothing
// more lets its tensors go.
class EnsembleRun : public std::enable_shared_from_this<EnsembleRun> {
 public:
  EnsembleRun(std::shared_ptr<const EnsembleShared> shared, const InferRequest& request,
              std::shared_ptr<Responder> responder, memory::OwnerId instance_owner)
      : shared_(std::move(shared)),
        instance_owner_(instance_owner),
        responder_(std::move(responder)),
        cancel_(request.cancel),
        request_id_(request.id),
        parameters_(request.parameters),
        flags_(request.flags),
        correlation_id_(request.correlation_id),
        correlation_id_string_(request.correlation_id_string),
        trace_parent_(request.trace != nullptr ? request.trace->Traceparent() : std::string()) {
    auto root = std::make_unique<Line>();
    root->waits = shared_->graph.waits();
    for (const Tensor& input : request.inputs) root->tensors[input.name] = input;
    lines_.push_back(std::move(root));
  }

  void Start() {
    Line* root = lines_.front().get();
    std::vector<Launch> launch;
    {
      std::lock_guard lock(mu_);
      for (size_t step : shared_->graph.first()) launch.push_back({root, step});
      in_flight_ = launch.size();
      for (const Launch& l : launch) ++l.line->running;
    }
    Run(launch);
  }

 private:
  struct Line {
    Line* parent = nullptr;
    std::optional<size_t> forked_by;  // the decoupled step whose response made it; root: none
    std::map<std::string, Tensor> tensors;
    std::vector<size_t> waits;  // by step: tensors it still waits for on this line
    std::vector<Line*> children;
    size_t running = 0;         // steps in flight on this line
    bool answered = false;
    bool finished = false;  // answered and runs nothing more: its tensors are gone
  };
  struct Launch {
    Line* line;
    size_t step;
  };

  void Run(const std::vector<Launch>& launch) {
    for (const Launch& l : launch) LaunchStep(l.line, l.step);
  }

  void LaunchStep(Line* line, size_t index) {
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
    // A traced ensemble request's steps are its children, as in Triton.
    request->trace_parent = trace_parent_;
    request->output_gpu = kAnyGpu;
    request->binary_data_output = true;
    {
      std::lock_guard lock(mu_);
      if (done_) return;
      for (const auto& in : step.inputs) {
        Tensor tensor = line->tensors.at(in.ensemble_tensor);  // shares the bytes
        tensor.name = in.model_tensor;
        request->inputs.push_back(std::move(tensor));
      }
    }
    for (const auto& out : step.outputs) request->outputs.push_back({out.model_tensor});
    shared_->services->InferAsync(
        std::move(request), /*decoupled=*/shared_->step_decoupled[index],
        [self = shared_from_this(), line, index](Result<InferResponse> response, bool final) {
          self->StepAnswered(line, index, std::move(response), final);
        });
  }

  // A response of step `index` run on `line` (a decoupled step's several, each forking a line;
  // `final` once, last).
  void StepAnswered(Line* line, size_t index, Result<InferResponse> response, bool final) {
    const EnsembleGraph::Step& step = shared_->graph.steps()[index];
    if (!response.ok()) return Fail(step, response.status());
    const bool decoupled = shared_->step_decoupled[index];
    std::vector<Launch> launch;
    std::vector<BackendResponse> answers;
    std::vector<Line*> answered_lines;
    bool finished = false;
    Status missing = Status::Ok();
    {
      std::unique_lock lock(mu_);
      if (done_) return;
      // A decoupled step's final flag may come alone, with no response (no outputs).
      const bool carries = !decoupled || !final || !response->outputs.empty();
      if (carries) {
        std::vector<std::pair<std::string, Tensor>> made;
        for (const auto& out : step.outputs) {
          Tensor* found = nullptr;
          for (Tensor& t : response->outputs) {
            if (t.name == out.model_tensor) found = &t;
          }
          if (found == nullptr) {
            missing = Status::Internal(fmt::format(
                "ensemble '{}': {} answered without its output '{}'", shared_->name, step.label,
                out.model_tensor));
            break;
          }
          found->name = out.ensemble_tensor;
          made.emplace_back(out.ensemble_tensor, std::move(*found));
        }
        if (!missing.ok()) {
          done_ = true;
          lock.unlock();
          return Answer(std::move(missing), /*final=*/true);
        }
        for (auto& [name, tensor] : made) ChargeToRun(&tensor);
        Line* target = line;
        if (decoupled) {
          auto fork = std::make_unique<Line>();
          fork->parent = line;
          fork->forked_by = index;
          fork->tensors = line->tensors;
          fork->waits = line->waits;
          target = fork.get();
          line->children.push_back(target);
          lines_.push_back(std::move(fork));
        }
        Apply(target, index, made, &launch, &answers, &answered_lines);
      }
      if (final) {
        --line->running;
        --in_flight_;
      }
      in_flight_ += launch.size();
      for (const Launch& l : launch) ++l.line->running;
      Retire(line);
      for (Line* answered : answered_lines) Retire(answered);
      finished = in_flight_ == 0;
      if (finished) done_ = true;
    }
    for (BackendResponse& answer : answers) Answer(std::move(answer), /*final=*/false);
    if (finished) return Finish();
    Run(launch);
  }

  // `made` (step `producer`'s outputs, named as the ensemble's tensors) on `line` and every
  // line forked from it: the steps that become ready there and run there, and the answers of
  // lines that now hold every ensemble output (decoupled ensembles answer as they go).
  void Apply(Line* line, size_t producer, const std::vector<std::pair<std::string, Tensor>>& made,
             std::vector<Launch>* launch, std::vector<BackendResponse>* answers,
             std::vector<Line*>* answered) {
    if (line->finished) return;
    for (const auto& [name, tensor] : made) line->tensors[name] = tensor;
    const EnsembleGraph::Step& step = shared_->graph.steps()[producer];
    for (size_t k = 0; k < step.next.size(); ++k) {
      const size_t next = step.next[k];
      if ((line->waits[next] -= step.next_reads[k]) != 0) continue;
      if (!line->forked_by || shared_->after[*line->forked_by][next]) {
        launch->push_back({line, next});
      }
    }
    if (shared_->decoupled && !line->answered && HasEveryOutput(*line)) {
      line->answered = true;
      answers->push_back(Outputs(*line));
      answered->push_back(line);
    }
    for (Line* child : line->children) Apply(child, producer, made, launch, answers, answered);
  }

  // Moves `tensor`'s charge from the step request that made it to this request's RunOwner
  // (when the ledger knows its bytes: pooled host memory and every GPU buffer), so the
  // ensemble's request holds its intermediate tensors in /v2/memory, as Triton's ensemble
  // request holds them.
  void ChargeToRun(Tensor* tensor) {
    memory::Ledger* ledger = shared_->ledger;
    const std::byte* data = tensor->data.data();
    if (ledger == nullptr || tensor->data.empty() || !ledger->Knows(data)) return;
    if (run_owner_ == nullptr) {
      run_owner_ = std::make_shared<RunOwner>();
      run_owner_->owner = memory::LazyOwner(
          ledger, instance_owner_, memory::OwnerKind::kRequest,
          request_id_.empty() ? fmt::format("ensemble#{}", ++unnamed_runs_) : request_id_);
    }
    if (!ledger->Recharge(data, run_owner_->owner.Open()).ok()) return;  // freed meanwhile
    struct Held {
      std::shared_ptr<RunOwner> owner;  // first: closed after the bytes go
      SharedBuffer data;
    };
    const size_t size = tensor->data.size();
    auto held = std::make_shared<Held>(Held{run_owner_, std::move(tensor->data)});
    tensor->data = SharedBuffer::View(std::move(held), data, size);
  }

  bool HasEveryOutput(const Line& line) const {
    for (const std::string& name : shared_->outputs) {
      if (line.tensors.count(name) == 0) return false;
    }
    return true;
  }

  BackendResponse Outputs(const Line& line) const {
    BackendResponse response;
    for (const std::string& name : shared_->outputs) {
      auto it = line.tensors.find(name);
      if (it != line.tensors.end()) response.outputs.push_back(it->second);
    }
    return response;
  }

  // A forked line that has answered, runs nothing and whose forks are finished lets its tensors
  // go: nothing later can change what it sent. Its parent may then be finished too.
  void Retire(Line* line) {
    if (line->finished || !line->forked_by || !line->answered || line->running != 0) return;
    bool children_finished = true;
    for (const Line* child : line->children) children_finished &= child->finished;
    if (!children_finished) return;
    line->finished = true;
    line->tensors.clear();
    if (line->parent != nullptr) Retire(line->parent);
  }

  void Fail(const EnsembleGraph::Step& step, const Status& status) {
    {
      std::lock_guard lock(mu_);
      if (done_) return;
      done_ = true;
    }
    Answer(Status(status.code(), fmt::format("ensemble '{}': {}: {}", shared_->name, step.label,
                                             status.message())),
           /*final=*/true);
  }

  void Finish() {
    // No step is in flight: nothing else touches the lines.
    if (shared_->decoupled) {
      Status sent = responder_->Respond(std::nullopt, /*final=*/true);
      static_cast<void>(sent);
    } else {
      Answer(Outputs(*lines_.front()), /*final=*/true);
    }
    lines_.clear();
  }

  void Answer(Result<BackendResponse> response, bool final) {
    // Not under mu_: the responder may run the front end's answer inline.
    Status sent = responder_->Respond(std::move(response), final);
    static_cast<void>(sent);  // refused only past the final flag, which done_ rules out
  }

  static inline std::atomic<uint64_t> unnamed_runs_{0};

  const std::shared_ptr<const EnsembleShared> shared_;
  const memory::OwnerId instance_owner_;
  const std::shared_ptr<Responder> responder_;
  const std::shared_ptr<CancelFlag> cancel_;
  const std::string request_id_;
  const std::vector<InferParameter> parameters_;
  const uint32_t flags_;
  const uint64_t correlation_id_;
  const std::string correlation_id_string_;
  const std::string trace_parent_;  // empty: the ensemble's request is not traced
  std::mutex mu_;
  std::vector<std::unique_ptr<Line>> lines_;  // the root first
  std::shared_ptr<RunOwner> run_owner_;  // made with the first tensor charged to it
  size_t in_flight_ = 0;  // steps launched and not yet final, on every line
  bool done_ = false;
};

class EnsembleInstance final : public BackendInstance {
 public:
  EnsembleInstance(std::shared_ptr<const EnsembleShared> shared, memory::OwnerId owner)
      : shared_(std::move(shared)), owner_(owner) {}

  Status Execute(const InferRequest&, std::vector<Tensor>*) override {
    return Status::Unsupported("the ensemble backend takes request lists");
  }

  Status ExecuteRequests(std::span<const ListedRequest> requests) override {
    for (const ListedRequest& listed : requests) {
      std::make_shared<EnsembleRun>(shared_, *listed.request, listed.responder, owner_)->Start();
    }
    return Status::Ok();
  }

 private:
  const std::shared_ptr<const EnsembleShared> shared_;
  const memory::OwnerId owner_;  // the instance's
};

class EnsembleModel final : public BackendModel {
 public:
  explicit EnsembleModel(std::shared_ptr<const EnsembleShared> shared)
      : shared_(std::move(shared)) {}

  Result<std::unique_ptr<BackendInstance>> CreateInstance(const InstanceContext& ctx) override {
    return std::unique_ptr<BackendInstance>(std::make_unique<EnsembleInstance>(shared_, ctx.owner));
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
    const bool decoupled = config.model_transaction_policy().decoupled();
    VRAMD_ASSIGN_OR_RETURN(EnsembleGraph graph, EnsembleGraph::Build(config));
    std::vector<bool> step_decoupled(graph.steps().size(), false);
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
      step_decoupled[index] = (*step_config)->model_transaction_policy().decoupled();
      if (step_decoupled[index] && !decoupled) {
        return Status::InvalidArgument(fmt::format(
            "ensemble '{}': {} is decoupled (it may send any number of responses), so the "
            "ensemble must be decoupled too: set model_transaction_policy {{ decoupled: true }}",
            ctx.name, step.label));
      }
      VRAMD_RETURN_IF_ERROR(graph.CheckStep(index, **step_config));
    }
    auto shared = std::make_shared<EnsembleShared>();
    shared->name = ctx.name;
    shared->graph = std::move(graph);
    shared->services = ctx.services;
    shared->decoupled = decoupled;
    shared->ledger = ctx.allocator != nullptr ? ctx.allocator->ledger() : nullptr;
    shared->step_decoupled = std::move(step_decoupled);
    shared->after = Reachable(shared->graph);
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
