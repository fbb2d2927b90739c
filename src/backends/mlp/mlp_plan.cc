#include "backends/mlp/mlp_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>
#include <map>
#include <optional>

#include "backends/abi/backend_kit.h"
#include "core/half.h"

namespace vramd::backends::mlp {
namespace {

constexpr std::string_view kPrefix = "layers.";
constexpr std::string_view kWorkspaceParameter = "cublas_workspace_mib";
constexpr int64_t kMaxDim = std::numeric_limits<int32_t>::max();  // cuBLAS takes int sizes
constexpr int64_t kMaxBatch = 1 << 20;
constexpr int64_t kMaxWorkspaceMib = 1024;

std::string DimsString(const google::protobuf::RepeatedField<int64_t>& dims) {
  return fmt::format("[{}]", fmt::join(dims, ","));
}

// Index and role of "layers.{i}.weight" / "layers.{i}.bias" (i in canonical decimal).
struct LayerTensor {
  int64_t index = 0;
  bool is_weight = false;
};
std::optional<LayerTensor> ParseLayerTensorName(std::string_view name) {
  if (name.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  name.remove_prefix(kPrefix.size());
  const size_t dot = name.find('.');
  if (dot == std::string_view::npos || dot == 0) return std::nullopt;
  const std::string_view digits = name.substr(0, dot);
  const std::string_view role = name.substr(dot + 1);
  if (digits.size() > 1 && digits[0] == '0') return std::nullopt;
  LayerTensor t;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), t.index);
  if (ec != std::errc() || end != digits.data() + digits.size() || t.index < 0) {
    return std::nullopt;
  }
  if (role == "weight") {
    t.is_weight = true;
  } else if (role != "bias") {
    return std::nullopt;
  }
  return t;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ","));
}

size_t AlignUp(size_t n) {
  return (n + PackedLayout::kAlignment - 1) / PackedLayout::kAlignment * PackedLayout::kAlignment;
}

}  // namespace

Result<MlpPlan> PlanFromConfig(const std::string& model, const config::ModelConfig& config,
                               const std::filesystem::path& version_dir) {
  auto invalid = [&](const std::string& detail) {
    return Status::InvalidArgument(fmt::format(
        "model '{}': the mlp backend cannot serve this config: {}", model, detail));
  };
  MlpPlan plan;
  plan.model = model;
  if (config.max_batch_size() < 1 || config.max_batch_size() > kMaxBatch) {
    return invalid(fmt::format("max_batch_size: expected 1..{} (the first dimension of the input "
                               "and output is the batch), got {}",
                               kMaxBatch, config.max_batch_size()));
  }
  plan.max_batch_size = config.max_batch_size();
  if (config.input_size() != 1) {
    return invalid(fmt::format("input: expected exactly 1 input, got {}", config.input_size()));
  }
  if (config.output_size() != 1) {
    return invalid(fmt::format("output: expected exactly 1 output, got {}", config.output_size()));
  }
  const auto& in = config.input(0);
  const auto& out = config.output(0);
  if (in.data_type() != config::TYPE_FP32) {
    return invalid(fmt::format("input[0].data_type: expected TYPE_FP32, got {}",
                               config::DataType_Name(in.data_type())));
  }
  if (out.data_type() != config::TYPE_FP32) {
    return invalid(fmt::format("output[0].data_type: expected TYPE_FP32, got {}",
                               config::DataType_Name(out.data_type())));
  }
  if (in.optional()) return invalid(fmt::format("input[0].optional: '{}' is required", in.name()));
  if (in.dims_size() != 1 || in.dims(0) < 1 || in.dims(0) > kMaxDim) {
    return invalid(fmt::format("input[0].dims: expected one fixed width [K], 1 <= K <= {}, got {}",
                               kMaxDim, DimsString(in.dims())));
  }
  if (out.dims_size() != 1 || out.dims(0) < 1 || out.dims(0) > kMaxDim) {
    return invalid(fmt::format("output[0].dims: expected one fixed width [N], 1 <= N <= {}, got {}",
                               kMaxDim, DimsString(out.dims())));
  }
  plan.input_name = in.name();
  plan.output_name = out.name();
  plan.inputs = in.dims(0);
  plan.outputs = out.dims(0);

  const std::string& file = config.default_model_filename();
  if (!file.empty() && (file.find('/') != std::string::npos || file == "." || file == "..")) {
    return invalid(fmt::format(
        "default_model_filename: expected a file name inside the version directory, got '{}'",
        file));
  }
  plan.weights_path = version_dir / (file.empty() ? std::string(kDefaultWeightsFile) : file);

  plan.cublas_workspace_bytes = kDefaultCublasWorkspace;
  if (auto it = config.parameters().find(std::string(kWorkspaceParameter));
      it != config.parameters().end()) {
    const std::string& text = it->second.string_value();
    int64_t mib = -1;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), mib);
    if (ec != std::errc() || end != text.data() + text.size() || mib < 0 ||
        mib > kMaxWorkspaceMib) {
      return invalid(fmt::format("parameters['{}']: expected a whole number of MiB, 0..{}, got "
                                 "'{}'",
                                 kWorkspaceParameter, kMaxWorkspaceMib, text));
    }
    plan.cublas_workspace_bytes = static_cast<size_t>(mib) << 20;
  }

  if (config.instance_group_size() == 0) plan.needs_cpu = true;
  for (const auto& group : config.instance_group()) {
    if (group.kind() == config::ModelInstanceGroup::KIND_GPU) {
      plan.needs_gpu = true;
    } else {
      plan.needs_cpu = true;
    }
  }
  return plan;
}

Status PlanLayers(const safetensors::File& file, MlpPlan* plan) {
  auto invalid = [&](const std::string& detail) {
    return Status::InvalidArgument(
        fmt::format("model '{}': weights file {}: {}", plan->model, file.source(), detail));
  };
  // Find the layers; refuse anything else.
  std::map<int64_t, std::pair<const safetensors::TensorInfo*, const safetensors::TensorInfo*>>
      found;  // index -> (weight, bias)
  const safetensors::TensorInfo* first = nullptr;
  for (const auto& t : file.tensors()) {
    auto lt = ParseLayerTensorName(t.name);
    if (!lt) {
      return invalid(fmt::format("tensor '{}' is not an mlp tensor (expected only "
                                 "layers.{{i}}.weight and layers.{{i}}.bias)",
                                 t.name));
    }
    if (t.dtype != safetensors::Dtype::kF32 && t.dtype != safetensors::Dtype::kF16) {
      return invalid(fmt::format("tensor '{}' is {}; the mlp backend takes F32 or F16 weights",
                                 t.name, safetensors::DtypeName(t.dtype)));
    }
    if (first == nullptr) first = &t;
    if (t.dtype != first->dtype) {
      return invalid(fmt::format("tensor '{}' is {} but tensor '{}' is {}; all weights must "
                                 "share one dtype",
                                 t.name, safetensors::DtypeName(t.dtype), first->name,
                                 safetensors::DtypeName(first->dtype)));
    }
    auto& slot = found[lt->index];
    (lt->is_weight ? slot.first : slot.second) = &t;
  }
  if (found.empty()) return invalid("no layers (expected layers.0.weight and layers.0.bias)");
  plan->weight_type =
      first->dtype == safetensors::Dtype::kF16 ? WeightType::kFp16 : WeightType::kFp32;

  plan->layers.clear();
  plan->max_width = plan->inputs;
  plan->parameter_count = 0;
  int64_t expected = 0;
  int64_t width = plan->inputs;  // what the next layer takes
  for (const auto& [index, tensors] : found) {
    const auto& [weight, bias] = tensors;
    if (index != expected) {
      return invalid(fmt::format("layer {} is missing (found layers.{}.* after it)", expected,
                                 index));
    }
    if (weight == nullptr) return invalid(fmt::format("tensor 'layers.{}.weight' is missing", index));
    if (bias == nullptr) return invalid(fmt::format("tensor 'layers.{}.bias' is missing", index));
    const std::string from =
        index == 0 ? fmt::format("the input's {} values", plan->inputs)
                   : fmt::format("the {} outputs of layer {}", width, index - 1);
    if (weight->shape.size() != 2 || weight->shape[0] < 1 || weight->shape[0] > kMaxDim) {
      return invalid(fmt::format("tensor '{}' has shape {}; expected [out, {}] with 1 <= out <= {}",
                                 weight->name, ShapeString(weight->shape), width, kMaxDim));
    }
    if (weight->shape[1] != width) {
      return invalid(fmt::format("tensor '{}' has shape {}, so it takes {} values, but it gets {}: "
                                 "expected [{}, {}]",
                                 weight->name, ShapeString(weight->shape), weight->shape[1], from,
                                 weight->shape[0], width));
    }
    const int64_t out = weight->shape[0];
    if (bias->shape.size() != 1 || bias->shape[0] != out) {
      return invalid(fmt::format("tensor '{}' has shape {}; expected [{}] to match '{}' {}",
                                 bias->name, ShapeString(bias->shape), out, weight->name,
                                 ShapeString(weight->shape)));
    }
    plan->layers.push_back({width, out});
    plan->max_width = std::max(plan->max_width, out);
    plan->parameter_count += static_cast<uint64_t>(out) * static_cast<uint64_t>(width + 1);
    width = out;
    ++expected;
  }
  if (width != plan->outputs) {
    return invalid(fmt::format("the last layer, 'layers.{}.weight' {}, gives {} values but "
                               "output '{}' has dims [{}]",
                               expected - 1, ShapeString(found.rbegin()->second.first->shape),
                               width, plan->output_name, plan->outputs));
  }
  if (static_cast<uint64_t>(plan->max_batch_size) * static_cast<uint64_t>(plan->max_width) >
      static_cast<uint64_t>(kMaxDim)) {
    return invalid(fmt::format("max_batch_size {} times the widest layer {} is above {} values "
                               "per activation",
                               plan->max_batch_size, plan->max_width, kMaxDim));
  }
  return Status::Ok();
}

PackedLayout MakeLayout(const MlpPlan& plan, size_t element_bytes) {
  PackedLayout layout;
  layout.element_bytes = element_bytes;
  size_t offset = 0;
  for (const Layer& l : plan.layers) {
    layout.weight_offset.push_back(offset);
    offset = AlignUp(offset + static_cast<size_t>(l.out * l.in) * element_bytes);
    layout.bias_offset.push_back(offset);
    offset = AlignUp(offset + static_cast<size_t>(l.out) * element_bytes);
  }
  layout.total_bytes = offset;
  return layout;
}

namespace {

// Copies one tensor's `count` elements to `dst`, widening F16 to F32 when the layout asks.
void CopyTensor(const safetensors::TensorInfo& t, size_t element_bytes, std::byte* dst) {
  const size_t count = static_cast<size_t>(t.element_count);
  if (safetensors::DtypeSize(t.dtype) == element_bytes) {
    std::memcpy(dst, t.data, count * element_bytes);
    return;
  }
  // F16 file, F32 layout. The file's bytes may be unaligned: read through memcpy.
  for (size_t i = 0; i < count; ++i) {
    uint16_t h;
    std::memcpy(&h, t.data + 2 * i, 2);
    const float f = HalfToFloat(h);
    std::memcpy(dst + 4 * i, &f, 4);
  }
}

}  // namespace

void PackWeights(const safetensors::File& file, const MlpPlan& plan, const PackedLayout& layout,
                 std::byte* dst) {
  size_t filled = 0;  // bytes written or zeroed so far
  auto place = [&](const safetensors::TensorInfo& t, size_t offset) {
    std::memset(dst + filled, 0, offset - filled);
    CopyTensor(t, layout.element_bytes, dst + offset);
    filled = offset + static_cast<size_t>(t.element_count) * layout.element_bytes;
  };
  for (size_t i = 0; i < plan.layers.size(); ++i) {
    place(*file.Find(fmt::format("layers.{}.weight", i)), layout.weight_offset[i]);
    place(*file.Find(fmt::format("layers.{}.bias", i)), layout.bias_offset[i]);
  }
  std::memset(dst + filled, 0, layout.total_bytes - filled);
}

Result<BatchInput> CheckRequest(const MlpPlan& plan, const VramdRequest& request,
                                std::string_view instance) {
  const VramdTensor* in = abi::FindInput(request, plan.input_name);
  if (in == nullptr) {
    return Status::InvalidArgument(
        fmt::format("mlp instance '{}': missing input '{}'", instance, plan.input_name));
  }
  const DataType type = abi::ToDataType(in->datatype);
  if (type != DataType::kFp32) {
    return Status::InvalidArgument(fmt::format("mlp instance '{}': input '{}' is {}, expected FP32",
                                               instance, in->name, DataTypeWireName(type)));
  }
  const Shape shape = abi::ShapeOf(*in);
  if (shape.size() != 2 || shape[1] != plan.inputs || shape[0] < 1 ||
      shape[0] > plan.max_batch_size) {
    return Status::InvalidArgument(fmt::format(
        "mlp instance '{}': input '{}' has shape {}, expected [B, {}] with 1 <= B <= {}", instance,
        in->name, ShapeToString(shape), plan.inputs, plan.max_batch_size));
  }
  const size_t bytes = static_cast<size_t>(shape[0] * shape[1]) * sizeof(float);
  if (in->byte_size != bytes) {
    return Status::InvalidArgument(
        fmt::format("mlp instance '{}': input '{}' of shape {} needs {} bytes, got {}", instance,
                    in->name, ShapeToString(shape), bytes, in->byte_size));
  }
  return BatchInput{in, shape[0], abi::InputMemory(request, *in)};
}

}  // namespace vramd::backends::mlp
