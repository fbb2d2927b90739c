#include "config/sequence_checks.h"

#include <fmt/format.h>

#include <set>
#include <string>

namespace vramd::config {
namespace {

using Control = ModelSequenceBatching::Control;

Status Invalid(std::string_view model, std::string_view what) {
  return Status::InvalidArgument(fmt::format("{}: sequence_batching: {}", model, what));
}

Status CheckControl(std::string_view model, const ModelSequenceBatching::ControlInput& input,
                    std::set<Control::Kind>* kinds) {
  const std::string where = fmt::format("control_input '{}'", input.name());
  if (input.control_size() != 1) {
    return Invalid(model, fmt::format("{} has {} controls; it must have exactly one", where,
                                      input.control_size()));
  }
  const Control& control = input.control(0);
  const std::string kind = Control::Kind_Name(control.kind());
  if (!kinds->insert(control.kind()).second) {
    return Invalid(model, fmt::format("{}: {} is given by two control inputs", where, kind));
  }
  const int lists = (control.int32_false_true_size() > 0) + (control.fp32_false_true_size() > 0) +
                    (control.bool_false_true_size() > 0);
  if (control.kind() == Control::CONTROL_SEQUENCE_CORRID) {
    if (lists != 0) {
      return Invalid(model, fmt::format("{}: {} takes data_type, not *_false_true values", where,
                                        kind));
    }
    switch (control.data_type()) {
      case TYPE_UINT64:
      case TYPE_INT64:
      case TYPE_UINT32:
      case TYPE_INT32:
      case TYPE_STRING:
        return Status::Ok();
      default:
        return Invalid(model, fmt::format(
                                  "{}: {} data_type is {}; it must be TYPE_UINT64, TYPE_INT64, "
                                  "TYPE_UINT32, TYPE_INT32 or TYPE_STRING",
                                  where, kind, DataType_Name(control.data_type())));
    }
  }
  if (lists != 1) {
    return Invalid(model, fmt::format(
                              "{}: {} needs exactly one of int32_false_true, fp32_false_true and "
                              "bool_false_true, and has {}",
                              where, kind, lists));
  }
  const int size = control.int32_false_true_size() + control.fp32_false_true_size() +
                   control.bool_false_true_size();
  if (size != 2) {
    return Invalid(model, fmt::format("{}: {} has {} values; it needs two, [false, true]", where,
                                      kind, size));
  }
  return Status::Ok();
}

Status CheckDimsOf(std::string_view model, const std::string& where,
                   const google::protobuf::RepeatedField<int64_t>& dims, bool allow_variable) {
  if (dims.empty()) return Invalid(model, fmt::format("{} has no dims", where));
  for (int i = 0; i < dims.size(); ++i) {
    if (dims[i] > 0 || (allow_variable && dims[i] == -1)) continue;
    return Invalid(model, fmt::format("{}: dims[{}] is {}; it must be {}", where, i, dims[i],
                                      allow_variable ? "positive or -1" : "positive"));
  }
  return Status::Ok();
}

Status CheckState(std::string_view model, const ModelSequenceBatching::State& state) {
  const std::string where = fmt::format("state '{}'", state.input_name());
  if (state.input_name().empty() || state.output_name().empty()) {
    return Invalid(model, "a state needs both input_name and output_name");
  }
  if (state.data_type() == TYPE_INVALID || state.data_type() == TYPE_STRING) {
    return Invalid(model, fmt::format("{}: data_type {} is not served for implicit state", where,
                                      DataType_Name(state.data_type())));
  }
  VRAMD_RETURN_IF_ERROR(CheckDimsOf(model, where, state.dims(), /*allow_variable=*/true));
  if (state.initial_state_size() > 1) {
    return Invalid(model, fmt::format("{} has {} initial_state entries; at most one is served",
                                      where, state.initial_state_size()));
  }
  for (const auto& initial : state.initial_state()) {
    const std::string init = fmt::format("{}: initial_state '{}'", where, initial.name());
    if (initial.data_type() != state.data_type()) {
      return Invalid(model, fmt::format("{} data_type is {}, the state's is {}", init,
                                        DataType_Name(initial.data_type()),
                                        DataType_Name(state.data_type())));
    }
    VRAMD_RETURN_IF_ERROR(CheckDimsOf(model, init, initial.dims(), /*allow_variable=*/false));
    bool agrees = initial.dims_size() == state.dims_size();
    for (int i = 0; agrees && i < state.dims_size(); ++i) {
      agrees = state.dims(i) == -1 || state.dims(i) == initial.dims(i);
    }
    if (!agrees) {
      return Invalid(model, fmt::format("{} dims do not fit the state's dims", init));
    }
    switch (initial.state_data_case()) {
      case ModelSequenceBatching::InitialState::kZeroData:
        break;
      case ModelSequenceBatching::InitialState::kDataFile: {
        const std::string& file = initial.data_file();
        if (file.empty() || file.front() == '/' || file.find("..") != std::string::npos) {
          return Invalid(model, fmt::format(
                                    "{} data_file '{}' must be a file name under the model's "
                                    "initial_state folder",
                                    init, file));
        }
        break;
      }
      default:
        return Invalid(model, fmt::format("{} needs zero_data or data_file", init));
    }
  }
  return Status::Ok();
}

}  // namespace

Status CheckSequenceBatching(std::string_view model, const ModelConfig& config) {
  if (!config.has_sequence_batching()) return Status::Ok();
  const ModelSequenceBatching& seq = config.sequence_batching();
  if (seq.iterative_sequence()) {
    return Invalid(model, "iterative_sequence is not served (vramd does not reschedule "
                          "requests); the model would not see the iterations it expects");
  }
  std::set<std::string> input_names;
  for (const auto& input : config.input()) input_names.insert(input.name());
  std::set<std::string> taken = input_names;
  std::set<Control::Kind> kinds;
  for (const auto& control : seq.control_input()) {
    if (control.name().empty()) return Invalid(model, "a control_input has no name");
    if (!taken.insert(control.name()).second) {
      return Invalid(model, fmt::format("control_input '{}' has the name of {}", control.name(),
                                        input_names.count(control.name()) != 0
                                            ? "a model input"
                                            : "another control input"));
    }
    VRAMD_RETURN_IF_ERROR(CheckControl(model, control, &kinds));
  }
  std::set<std::string> state_outputs;
  for (const auto& state : seq.state()) {
    VRAMD_RETURN_IF_ERROR(CheckState(model, state));
    if (!taken.insert(state.input_name()).second) {
      return Invalid(model, fmt::format(
                                "state input_name '{}' is already a model input, a control "
                                "input or another state's input",
                                state.input_name()));
    }
    if (!state_outputs.insert(state.output_name()).second) {
      return Invalid(model, fmt::format("state output_name '{}' is given twice",
                                        state.output_name()));
    }
  }
  if (!seq.state().empty() && config.model_transaction_policy().decoupled()) {
    return Invalid(model, "implicit state on a decoupled model is not served (its state output "
                          "may come after the sequence's next request has run)");
  }
  if (seq.has_direct()) {
    const float utilization = seq.direct().minimum_slot_utilization();
    if (!(utilization >= 0.0f && utilization <= 1.0f)) {
      return Invalid(model, fmt::format("direct.minimum_slot_utilization is {}; it must be in "
                                        "[0, 1]",
                                        utilization));
    }
  }
  if (seq.has_oldest()) {
    const auto& oldest = seq.oldest();
    if (oldest.max_candidate_sequences() < 0) {
      return Invalid(model, fmt::format("oldest.max_candidate_sequences is {}; it must not be "
                                        "negative",
                                        oldest.max_candidate_sequences()));
    }
    for (int size : oldest.preferred_batch_size()) {
      if (size < 1 || size > std::max(1, config.max_batch_size())) {
        return Invalid(model, fmt::format(
                                  "oldest.preferred_batch_size {} is outside [1, {}] "
                                  "(max_batch_size)",
                                  size, std::max(1, config.max_batch_size())));
      }
    }
  }
  return Status::Ok();
}

}  // namespace vramd::config
