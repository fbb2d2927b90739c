#include "config/model_config_parser.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <climits>
#include <fstream>
#include <set>
#include <sstream>
#include <system_error>
#include <type_traits>
#include <utility>

#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/text_format.h>

#include "config/reflection_util.h"
#include "config/sequence_checks.h"
#include "config/text_format_support.h"

namespace vramd::config {
namespace {

namespace pb = google::protobuf;

std::string TensorLabel(std::string_view kind, int index, const std::string& name) {
  return name.empty() ? fmt::format("{}[{}]", kind, index) : fmt::format("{} '{}'", kind, name);
}

Status CheckDims(const std::string& where, std::string_view field_name,
                 const pb::RepeatedField<int64_t>& dims) {
  for (int i = 0; i < dims.size(); ++i) {
    if (dims[i] != -1 && dims[i] <= 0) {
      return Status::InvalidArgument(fmt::format(
          "{}: {}[{}] is {}; each dimension must be -1 (variable) or positive", where, field_name,
          i, dims[i]));
    }
  }
  return Status::Ok();
}

// The products of the fixed dimensions between variable (-1) ones: [2,-1,3,4] -> {2, 12}.
std::vector<int64_t> FixedSegments(const pb::RepeatedField<int64_t>& dims) {
  std::vector<int64_t> segments{1};
  for (int64_t d : dims) {
    if (d == -1) {
      segments.push_back(1);
    } else if (segments.back() > INT64_MAX / d) {
      segments.back() = INT64_MAX;  // saturate: only equality matters
    } else {
      segments.back() *= d;
    }
  }
  return segments;
}

// A reshape must describe the same elements: the same number of variable dimensions, and the
// same product of fixed dimensions before, between and after them (dims [-1,4] and reshape
// [-1,2,2] agree; [16] and [4,2] do not).
Status CheckReshape(const std::string& where, const pb::RepeatedField<int64_t>& dims,
                    const ModelTensorReshape& reshape) {
  VRAMD_RETURN_IF_ERROR(CheckDims(where, "reshape.shape", reshape.shape()));
  if (FixedSegments(dims) == FixedSegments(reshape.shape())) return Status::Ok();
  auto join = [](const pb::RepeatedField<int64_t>& v) {
    return fmt::format("[{}]", fmt::join(v, ","));
  };
  return Status::InvalidArgument(fmt::format(
      "{}: reshape.shape {} does not have the same elements as dims {}", where,
      join(reshape.shape()), join(dims)));
}

template <typename Tensor>
Status CheckTensors(const std::string& model, std::string_view kind,
                    const pb::RepeatedPtrField<Tensor>& tensors, int max_batch_size) {
  std::set<std::string> seen;
  for (int i = 0; i < tensors.size(); ++i) {
    const Tensor& tensor = tensors[i];
    std::string where = fmt::format("{}: {}", model, TensorLabel(kind, i, tensor.name()));
    if (tensor.name().empty()) {
      return Status::InvalidArgument(fmt::format("{}: name is empty", where));
    }
    if (!seen.insert(tensor.name()).second) {
      return Status::InvalidArgument(
          fmt::format("{}: the name is used by more than one {}", where, kind));
    }
    if (tensor.data_type() == TYPE_INVALID) {
      return Status::InvalidArgument(fmt::format("{}: data_type is not set", where));
    }
    VRAMD_RETURN_IF_ERROR(CheckDims(where, "dims", tensor.dims()));
    if (tensor.has_reshape()) {
      // Triton's rule: the batch dimension is what keeps an empty reshape from being a scalar.
      if (tensor.reshape().shape().empty() && max_batch_size == 0) {
        return Status::InvalidArgument(fmt::format(
            "{}: an empty reshape makes a scalar, which only a batching model may take "
            "(max_batch_size is 0)",
            where));
      }
      VRAMD_RETURN_IF_ERROR(CheckReshape(where, tensor.dims(), tensor.reshape()));
    }
    if (tensor.is_shape_tensor()) {
      return Status::InvalidArgument(fmt::format(
          "{}: is_shape_tensor is for TensorRT models, which vramd does not serve", where));
    }
    if constexpr (std::is_same_v<Tensor, ModelInput>) {
      if (tensor.format() != ModelInput::FORMAT_NONE && tensor.dims_size() != 3) {
        return Status::InvalidArgument(fmt::format(
            "{}: format {} needs 3 dims (an image without the batch dimension), not {}", where,
            ModelInput::Format_Name(tensor.format()), tensor.dims_size()));
      }
    }
  }
  return Status::Ok();
}

Status CheckInstanceGroup(const std::string& model, int index, const ModelInstanceGroup& group) {
  const std::string where = group.name().empty()
                                ? fmt::format("{}: instance_group[{}]", model, index)
                                : fmt::format("{}: instance_group '{}'", model, group.name());
  if (group.count() < 0) {
    return Status::InvalidArgument(
        fmt::format("{}: count is {}; must be 0 (meaning 1) or positive", where, group.count()));
  }
  if (!group.gpus().empty() && (group.kind() == ModelInstanceGroup::KIND_CPU ||
                                group.kind() == ModelInstanceGroup::KIND_MODEL)) {
    return Status::InvalidArgument(fmt::format(
        "{}: kind {} runs on no GPU, yet gpus lists [{}]; drop gpus or make the kind KIND_GPU",
        where, ModelInstanceGroup::Kind_Name(group.kind()), fmt::join(group.gpus(), ", ")));
  }
  for (int i = 0; i < group.gpus_size(); ++i) {
    const int gpu = group.gpus(i);
    if (gpu < 0) {
      return Status::InvalidArgument(
          fmt::format("{}: gpus lists {}; a GPU is named by its index, 0 or more", where, gpu));
    }
    // Two entries would make two sets of instances with the same names; count says how many.
    if (std::find(group.gpus().begin(), group.gpus().begin() + i, gpu) !=
        group.gpus().begin() + i) {
      return Status::InvalidArgument(fmt::format(
          "{}: gpus lists GPU {} twice; list each GPU once and set count for more instances",
          where, gpu));
    }
  }
  return Status::Ok();
}

// Triton's checks of dynamic_batching (its model_config_utils.cc, ValidateModelConfig).
Status CheckDynamicBatching(const std::string& model, const ModelConfig& config) {
  const ModelDynamicBatching& batching = config.dynamic_batching();
  for (int size : batching.preferred_batch_size()) {
    if (size <= 0 || size > config.max_batch_size()) {
      return Status::InvalidArgument(fmt::format(
          "{}: dynamic_batching.preferred_batch_size {} must be positive and at most "
          "max_batch_size ({})",
          model, size, config.max_batch_size()));
    }
  }
  const uint64_t levels = batching.priority_levels();
  if (levels != 0) {
    if (batching.default_priority_level() == 0 || batching.default_priority_level() > levels) {
      return Status::InvalidArgument(fmt::format(
          "{}: dynamic_batching.default_priority_level is {}; with priority_levels {} it must be "
          "in [1, {}]",
          model, batching.default_priority_level(), levels, levels));
    }
    for (const auto& [level, policy] : batching.priority_queue_policy()) {
      if (level == 0 || level > levels) {
        return Status::InvalidArgument(fmt::format(
            "{}: dynamic_batching.priority_queue_policy has level {}; with priority_levels {} "
            "the levels are 1 to {}",
            model, level, levels, levels));
      }
    }
  }
  if (batching.preserve_ordering()) {
    if (levels > 1) {
      return Status::InvalidArgument(fmt::format(
          "{}: dynamic_batching.preserve_ordering allows one priority level, not {}", model,
          levels));
    }
    auto delays = [](const ModelQueuePolicy& policy) {
      return policy.default_timeout_microseconds() != 0 &&
             policy.timeout_action() == ModelQueuePolicy::DELAY;
    };
    bool any_delay = delays(batching.default_queue_policy());
    for (const auto& [level, policy] : batching.priority_queue_policy()) {
      any_delay = any_delay || delays(policy);
    }
    if (any_delay) {
      return Status::InvalidArgument(fmt::format(
          "{}: dynamic_batching.preserve_ordering cannot keep the order with a queue policy "
          "whose timeout_action is DELAY",
          model));
    }
  }
  return Status::Ok();
}

}  // namespace

Result<ParsedModelConfig> ParseModelConfigText(std::string_view text, std::string_view file_name) {
  if (text.size() > static_cast<size_t>(INT_MAX)) {
    return Status::InvalidArgument(fmt::format("{}: config is too large ({} bytes)", file_name,
                                               text.size()));
  }
  ParsedModelConfig parsed;
  text_format::DiagnosticCollector diagnostics;
  pb::TextFormat::Parser parser;
  parser.AllowUnknownField(true);
  parser.RecordErrorsTo(&diagnostics);
  const std::string rewritten = text_format::AddColonsBeforeLists(text);
  pb::io::ArrayInputStream input(rewritten.data(), static_cast<int>(rewritten.size()));
  if (!parser.Parse(&input, &parsed.config)) {
    if (diagnostics.errors().empty()) {
      return Status::InvalidArgument(fmt::format("{}: cannot parse the model config", file_name));
    }
    std::vector<std::string> errors;
    for (const text_format::Diagnostic& error : diagnostics.errors()) {
      errors.push_back(text_format::FormatError(rewritten, file_name, error));
    }
    return Status::InvalidArgument(fmt::format("{}", fmt::join(errors, "; ")));
  }
  Status values = CheckFieldValues(parsed.config);
  if (!values.ok()) return values.WithContext(file_name);
  parsed.unsupported_fields = text_format::DescribeSkippedFields(rewritten, diagnostics.warnings());
  return parsed;
}

Result<ParsedModelConfig> LoadModelConfigFile(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return Status::NotFound(fmt::format("model config {} does not exist", path.string()));
  }
  std::ifstream file(path, std::ios::binary);
  std::ostringstream text;
  text << file.rdbuf();
  if (!file || !text) {
    return Status::Internal(fmt::format("cannot read model config {}", path.string()));
  }
  return ParseModelConfigText(text.str(), path.string());
}

Status ValidateAndNormalize(ModelConfig* config, std::string_view model_dir_name) {
  std::string model = fmt::format("model '{}'", model_dir_name);
  if (!config->name().empty() && config->name() != model_dir_name) {
    return Status::InvalidArgument(fmt::format(
        "{}: name '{}' in the config does not match the model directory '{}'", model,
        config->name(), model_dir_name));
  }
  if (config->name().empty() && model_dir_name.empty()) {
    return Status::InvalidArgument("model config: name is empty and no directory name is given");
  }
  if (config->max_batch_size() < 0) {
    return Status::InvalidArgument(fmt::format("{}: max_batch_size is {}; must be 0 or positive",
                                               model, config->max_batch_size()));
  }
  VRAMD_RETURN_IF_ERROR(CheckTensors(model, "input", config->input(), config->max_batch_size()));
  VRAMD_RETURN_IF_ERROR(
      CheckTensors(model, "output", config->output(), config->max_batch_size()));
  for (int i = 0; i < config->instance_group_size(); ++i) {
    VRAMD_RETURN_IF_ERROR(CheckInstanceGroup(model, i, config->instance_group(i)));
  }
  if (config->has_dynamic_batching()) {
    VRAMD_RETURN_IF_ERROR(CheckDynamicBatching(model, *config));
  }
  VRAMD_RETURN_IF_ERROR(CheckSequenceBatching(model, *config));
  const bool ensemble = config->platform() == "ensemble";
  if (config->has_ensemble_scheduling() && !ensemble) {
    return Status::InvalidArgument(fmt::format(
        "{}: ensemble_scheduling is for platform \"ensemble\", and the platform is '{}'", model,
        config->platform()));
  }
  if (ensemble && config->ensemble_scheduling().step().empty()) {
    return Status::InvalidArgument(fmt::format(
        "{}: platform \"ensemble\" needs ensemble_scheduling with at least one step", model));
  }
  if (ensemble && !config->backend().empty() && config->backend() != "ensemble") {
    return Status::InvalidArgument(fmt::format(
        "{}: an ensemble names no backend (its steps' models have theirs), not '{}'", model,
        config->backend()));
  }
  Status values = CheckFieldValues(*config);
  if (!values.ok()) return values.WithContext(model);

  // Valid: fill Triton's defaults.
  if (config->name().empty()) config->set_name(std::string(model_dir_name));
  if (!config->has_version_policy()) {
    config->mutable_version_policy()->mutable_latest()->set_num_versions(1);
  }
  if (ensemble) {
    // An ensemble runs on its steps' instances; Triton ignores its instance_group. Its own
    // instance only walks the graph, on the host.
    config->clear_instance_group();
    ModelInstanceGroup* group = config->add_instance_group();
    group->set_kind(ModelInstanceGroup::KIND_CPU);
    group->set_count(1);
  }
  if (config->instance_group_size() == 0) {
    ModelInstanceGroup* group = config->add_instance_group();
    group->set_kind(ModelInstanceGroup::KIND_AUTO);
    group->set_count(1);
  }
  for (int i = 0; i < config->instance_group_size(); ++i) {
    ModelInstanceGroup* group = config->mutable_instance_group(i);
    if (group->count() == 0) group->set_count(1);
    if (group->name().empty()) group->set_name(fmt::format("{}_{}", config->name(), i));
  }
  return Status::Ok();
}

}  // namespace vramd::config
