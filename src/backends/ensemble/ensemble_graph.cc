#include "backends/ensemble/ensemble_graph.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

namespace vramd::backends::ensemble {
namespace {

std::string Dims(const std::vector<int64_t>& dims) { return fmt::format("[{}]", fmt::join(dims, ",")); }

// A tensor's dims as the ensemble sees them: with the batch dimension first when `batched`.
std::vector<int64_t> WithBatch(const google::protobuf::RepeatedField<int64_t>& dims, bool batched) {
  std::vector<int64_t> out;
  if (batched) out.push_back(-1);
  out.insert(out.end(), dims.begin(), dims.end());
  return out;
}

bool DimsAgree(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != -1 && b[i] != -1 && a[i] != b[i]) return false;
  }
  return true;
}

}  // namespace

Result<EnsembleGraph> EnsembleGraph::Build(const config::ModelConfig& config) {
  EnsembleGraph g;
  g.name_ = config.name();
  g.max_batch_size_ = config.max_batch_size();
  const std::string where = fmt::format("ensemble '{}'", config.name());
  auto fail = [&](std::string what) {
    return Status::InvalidArgument(fmt::format("{}: {}", where, what));
  };
  const bool batched = config.max_batch_size() > 0;
  for (const auto& input : config.input()) {
    g.known_[input.name()] = {input.data_type(), WithBatch(input.dims(), batched),
                              fmt::format("ensemble input '{}'", input.name())};
  }
  for (const auto& output : config.output()) {
    g.declared_outputs_[output.name()] = {output.data_type(), WithBatch(output.dims(), batched),
                                          fmt::format("ensemble output '{}'", output.name())};
  }
  const auto& steps = config.ensemble_scheduling().step();
  for (int i = 0; i < steps.size(); ++i) {
    const auto& s = steps[i];
    Step step;
    step.model = s.model_name();
    step.version = s.model_version() < 0 ? 0 : s.model_version();
    step.label = fmt::format("step {} ('{}')", i, s.model_name());
    if (s.model_name().empty()) return fail(fmt::format("step {} names no model_name", i));
    if (!s.model_namespace().empty()) {
      return fail(fmt::format("{}: model_namespace is reserved (Triton's) and must be empty",
                              step.label));
    }
    // Map order is protobuf's; sorted for stable errors and requests.
    for (const auto& [model_tensor, tensor] : s.input_map()) {
      step.inputs.push_back({model_tensor, tensor});
    }
    for (const auto& [model_tensor, tensor] : s.output_map()) {
      if (g.known_.count(tensor) > 0) {
        return fail(fmt::format("{} writes tensor '{}', which is an ensemble input", step.label,
                                tensor));
      }
      auto [it, fresh] = g.producer_.emplace(tensor, static_cast<size_t>(i));
      if (!fresh) {
        return fail(fmt::format("tensor '{}' is written by both {} and {}", tensor,
                                g.steps_[it->second].label, step.label));
      }
      step.outputs.push_back({model_tensor, tensor});
    }
    auto by_name = [](const Binding& a, const Binding& b) { return a.model_tensor < b.model_tensor; };
    std::sort(step.inputs.begin(), step.inputs.end(), by_name);
    std::sort(step.outputs.begin(), step.outputs.end(), by_name);
    g.steps_.push_back(std::move(step));
  }
  std::set<std::string> read;
  g.waits_.assign(g.steps_.size(), 0);
  for (size_t i = 0; i < g.steps_.size(); ++i) {
    for (const Binding& in : g.steps_[i].inputs) {
      read.insert(in.ensemble_tensor);
      if (g.known_.count(in.ensemble_tensor) > 0) continue;
      auto producer = g.producer_.find(in.ensemble_tensor);
      if (producer == g.producer_.end()) {
        return fail(fmt::format(
            "{} reads tensor '{}' (for its input '{}'), which is neither an ensemble input nor "
            "written by any step",
            g.steps_[i].label, in.ensemble_tensor, in.model_tensor));
      }
      ++g.waits_[i];
      Step& from = g.steps_[producer->second];
      if (from.next.empty() || from.next.back() != i) {  // i's inputs are walked together
        from.next.push_back(i);
        from.next_reads.push_back(0);
      }
      ++from.next_reads.back();
    }
    if (g.waits_[i] == 0) g.first_.push_back(i);
  }
  for (const auto& [name, info] : g.declared_outputs_) {
    if (g.producer_.count(name) == 0) {
      return fail(fmt::format("ensemble output '{}' is written by no step", name));
    }
  }
  for (const auto& [name, info] : g.known_) {
    if (read.count(name) == 0) {
      return fail(fmt::format("ensemble input '{}' is read by no step", name));
    }
  }
  // Kahn's order; what it cannot reach lies on or behind a cycle.
  std::vector<size_t> waits = g.waits_;
  std::vector<size_t> ready = g.first_;
  while (!ready.empty()) {
    const size_t i = ready.back();
    ready.pop_back();
    g.order_.push_back(i);
    const Step& done = g.steps_[i];
    for (size_t k = 0; k < done.next.size(); ++k) {
      if ((waits[done.next[k]] -= done.next_reads[k]) == 0) ready.push_back(done.next[k]);
    }
  }
  if (g.order_.size() != g.steps_.size()) {
    std::vector<std::string> stuck;
    for (size_t j = 0; j < g.steps_.size(); ++j) {
      if (waits[j] > 0) stuck.push_back(g.steps_[j].label);
    }
    return fail(fmt::format("the steps form a cycle: {} wait on each other's outputs",
                            fmt::join(stuck, ", ")));
  }
  return g;
}

Status EnsembleGraph::CheckStep(size_t index, const config::ModelConfig& step_config) {
  const Step& step = steps_[index];
  auto fail = [&](std::string what) {
    return Status::InvalidArgument(
        fmt::format("ensemble '{}': {}: {}", name_, step.label, what));
  };
  const bool batched = max_batch_size_ > 0;
  if (batched && step_config.max_batch_size() < max_batch_size_) {
    return fail(fmt::format(
        "the ensemble's max_batch_size is {}, and the model's is {}: a step must take the "
        "ensemble's whole batch",
        max_batch_size_, step_config.max_batch_size()));
  }
  // What the step model sees of a tensor: its dims, with the batch dimension where the
  // ensemble has one (a non-batching ensemble passes whole shapes, which a batching model
  // reads with its batch dimension first).
  auto model_dims = [&](const google::protobuf::RepeatedField<int64_t>& dims) {
    return WithBatch(dims, batched || step_config.max_batch_size() > 0);
  };
  auto compare = [&](const std::string& tensor, config::DataType type,
                     const std::vector<int64_t>& dims, const TensorInfo& other,
                     const std::string& side) -> Status {
    if (type != other.type) {
      return fail(fmt::format("tensor '{}' is {} for the model's {} and {} as {}", tensor,
                              config::DataType_Name(type), side,
                              config::DataType_Name(other.type), other.where));
    }
    if (!DimsAgree(dims, other.dims)) {
      return fail(fmt::format("tensor '{}' has shape {} for the model's {} and {} as {}", tensor,
                              Dims(dims), side, Dims(other.dims), other.where));
    }
    return Status::Ok();
  };
  std::set<std::string> mapped;
  for (const Binding& in : step.inputs) {
    const config::ModelInput* input = nullptr;
    for (const auto& candidate : step_config.input()) {
      if (candidate.name() == in.model_tensor) input = &candidate;
    }
    if (input == nullptr) {
      return fail(fmt::format("input_map names '{}', which is not an input of model '{}'",
                              in.model_tensor, step.model));
    }
    mapped.insert(in.model_tensor);
    auto known = known_.find(in.ensemble_tensor);
    if (known == known_.end()) continue;  // its producer failed to say; reported there
    VRAMD_RETURN_IF_ERROR(compare(in.ensemble_tensor, input->data_type(),
                                  model_dims(input->dims()), known->second,
                                  fmt::format("input '{}'", in.model_tensor)));
  }
  for (const auto& input : step_config.input()) {
    if (mapped.count(input.name()) == 0 && !input.optional()) {
      return fail(fmt::format("the model's input '{}' is not in the step's input_map",
                              input.name()));
    }
  }
  for (const Binding& out : step.outputs) {
    const config::ModelOutput* output = nullptr;
    for (const auto& candidate : step_config.output()) {
      if (candidate.name() == out.model_tensor) output = &candidate;
    }
    if (output == nullptr) {
      return fail(fmt::format("output_map names '{}', which is not an output of model '{}'",
                              out.model_tensor, step.model));
    }
    TensorInfo info{output->data_type(), model_dims(output->dims()),
                    fmt::format("output '{}' of {}", out.model_tensor, step.label)};
    auto declared = declared_outputs_.find(out.ensemble_tensor);
    if (declared != declared_outputs_.end()) {
      VRAMD_RETURN_IF_ERROR(compare(out.ensemble_tensor, info.type, info.dims, declared->second,
                                    fmt::format("output '{}'", out.model_tensor)));
    }
    known_[out.ensemble_tensor] = std::move(info);
  }
  return Status::Ok();
}

}  // namespace vramd::backends::ensemble
