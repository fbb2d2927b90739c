#include "runtime/tensor_reshape.h"

#include <fmt/format.h>

#include <optional>

namespace vramd::runtime {
namespace {

// `shape` (batch dimension first when `batched`) matched against `from` and rewritten as `to`,
// each -1 of `to` taking the size of the same-numbered -1 of `from`; nullopt when `shape` does
// not fit `from` or the counts disagree.
std::optional<Shape> Convert(const Shape& shape, const Shape& from, const Shape& to,
                             bool batched) {
  const size_t prefix = batched ? 1 : 0;
  if (shape.size() != prefix + from.size()) return std::nullopt;
  std::vector<int64_t> variables;
  for (size_t i = 0; i < from.size(); ++i) {
    const int64_t size = shape[prefix + i];
    if (from[i] < 0) {
      variables.push_back(size);
    } else if (size != from[i]) {
      return std::nullopt;
    }
  }
  Shape out(shape.begin(), shape.begin() + static_cast<std::ptrdiff_t>(prefix));
  size_t next = 0;
  for (int64_t d : to) {
    if (d >= 0) {
      out.push_back(d);
    } else if (next < variables.size()) {
      out.push_back(variables[next++]);
    } else {
      return std::nullopt;
    }
  }
  if (next != variables.size() || ElementCount(out) != ElementCount(shape)) return std::nullopt;
  return out;
}

}  // namespace

TensorReshape TensorReshape::From(const config::ModelConfig& config) {
  TensorReshape r;
  r.batched_ = config.max_batch_size() > 0;
  for (const auto& in : config.input()) {
    if (!in.has_reshape()) continue;
    r.inputs_[in.name()] = Rule{Shape(in.dims().begin(), in.dims().end()),
                                Shape(in.reshape().shape().begin(), in.reshape().shape().end())};
  }
  for (const auto& out : config.output()) {
    if (!out.has_reshape()) continue;
    r.outputs_[out.name()] = Rule{
        Shape(out.dims().begin(), out.dims().end()),
        Shape(out.reshape().shape().begin(), out.reshape().shape().end())};
  }
  return r;
}

void TensorReshape::ToBackend(std::vector<Tensor>* inputs) const {
  for (Tensor& t : *inputs) {
    auto rule = inputs_.find(t.name);
    if (rule == inputs_.end()) continue;
    // Validated against dims before it got here, so it converts; if not, it stays as sent.
    if (auto shape = Convert(t.shape, rule->second.dims, rule->second.reshape, batched_)) {
      t.shape = std::move(*shape);
    }
  }
}

Status TensorReshape::FromBackend(std::vector<Tensor>* outputs) const {
  for (Tensor& t : *outputs) {
    auto rule = outputs_.find(t.name);
    if (rule == outputs_.end()) continue;
    if (auto shape = Convert(t.shape, rule->second.reshape, rule->second.dims, batched_)) {
      t.shape = std::move(*shape);
    } else if (!Convert(t.shape, rule->second.dims, rule->second.dims, batched_)) {
      return Status::Internal(fmt::format(
          "output '{}' has shape {}, which fits neither the config's reshape {} nor its dims "
          "{}{}",
          t.name, ShapeToString(t.shape), ShapeToString(rule->second.reshape),
          ShapeToString(rule->second.dims), batched_ ? " (after the batch dimension)" : ""));
    }
  }
  return Status::Ok();
}

}  // namespace vramd::runtime
