#include "runtime/sequence_controls.h"

#include <fmt/format.h>

#include <cstring>
#include <fstream>
#include <iterator>

namespace vramd::runtime {
namespace {

using Control = config::ModelSequenceBatching::Control;

template <typename T>
SharedBuffer BytesOf(T value) {
  return SharedBuffer::CopyOf(&value, sizeof(value));
}

// The flag's [false, true] bytes, as the one *_false_true list the config gives.
void SetValues(const Control& control, DataType* datatype, SharedBuffer* no, SharedBuffer* yes) {
  if (control.int32_false_true_size() == 2) {
    *datatype = DataType::kInt32;
    *no = BytesOf<int32_t>(control.int32_false_true(0));
    *yes = BytesOf<int32_t>(control.int32_false_true(1));
  } else if (control.fp32_false_true_size() == 2) {
    *datatype = DataType::kFp32;
    *no = BytesOf<float>(control.fp32_false_true(0));
    *yes = BytesOf<float>(control.fp32_false_true(1));
  } else {
    *datatype = DataType::kBool;
    *no = BytesOf<uint8_t>(control.bool_false_true(0) ? 1 : 0);
    *yes = BytesOf<uint8_t>(control.bool_false_true(1) ? 1 : 0);
  }
}

Result<Tensor> InitialState(const config::ModelSequenceBatching::State& state, bool batching,
                            const std::filesystem::path& model_dir) {
  Tensor tensor;
  tensor.name = state.input_name();
  tensor.datatype = static_cast<DataType>(state.data_type());
  if (batching) tensor.shape.push_back(1);
  if (state.initial_state().empty()) {
    for (int64_t d : state.dims()) tensor.shape.push_back(d == -1 ? 0 : d);
  } else {
    for (int64_t d : state.initial_state(0).dims()) tensor.shape.push_back(d);
  }
  const uint64_t size = static_cast<uint64_t>(ElementCount(tensor.shape)) *
                        DataTypeByteSize(tensor.datatype);
  if (!state.initial_state().empty() && state.initial_state(0).has_data_file()) {
    const std::filesystem::path file =
        model_dir / "initial_state" / state.initial_state(0).data_file();
    std::ifstream in(file, std::ios::binary);
    if (!in) {
      return Status::InvalidArgument(fmt::format(
          "sequence_batching: state '{}': cannot read initial_state data_file {}",
          state.input_name(), file.string()));
    }
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (bytes.size() != size) {
      return Status::InvalidArgument(fmt::format(
          "sequence_batching: state '{}': initial_state data_file {} has {} bytes; a {} state "
          "of shape {} has {}",
          state.input_name(), file.string(), bytes.size(),
          DataTypeConfigName(tensor.datatype), ShapeToString(tensor.shape), size));
    }
    tensor.data = SharedBuffer::FromString(std::move(bytes));
  } else {
    tensor.data = SharedBuffer::FromString(std::string(size, '\0'));
  }
  return tensor;
}

}  // namespace

Result<SequenceControls> SequenceControls::From(const config::ModelConfig& config,
                                                const std::filesystem::path& model_dir) {
  SequenceControls controls;
  const bool batching = config.max_batch_size() > 0;
  controls.control_shape_ = batching ? Shape{1, 1} : Shape{1};
  const auto& seq = config.sequence_batching();
  for (const auto& input : seq.control_input()) {
    const Control& control = input.control(0);
    if (control.kind() == Control::CONTROL_SEQUENCE_CORRID) {
      controls.corrid_name_ = input.name();
      controls.corrid_type_ = static_cast<DataType>(control.data_type());
      continue;
    }
    Flag flag;
    flag.name = input.name();
    SetValues(control, &flag.datatype, &flag.false_bytes, &flag.true_bytes);
    switch (control.kind()) {
      case Control::CONTROL_SEQUENCE_START: controls.start_ = std::move(flag); break;
      case Control::CONTROL_SEQUENCE_END: controls.end_ = std::move(flag); break;
      default: controls.ready_ = std::move(flag); break;
    }
  }
  for (const auto& state : seq.state()) {
    StateSpec spec;
    spec.input_name = state.input_name();
    spec.output_name = state.output_name();
    spec.datatype = static_cast<DataType>(state.data_type());
    if (batching) spec.dims.push_back(1);
    spec.dims.insert(spec.dims.end(), state.dims().begin(), state.dims().end());
    for (const auto& output : config.output()) {
      if (output.name() == spec.output_name) spec.also_output = true;
    }
    auto initial = InitialState(state, batching, model_dir);
    if (!initial.ok()) return initial.status();
    spec.initial = std::move(initial).value();
    controls.states_.push_back(std::move(spec));
  }
  return controls;
}

bool SequenceControls::IsControl(std::string_view name) const {
  for (const auto* flag : {&start_, &end_, &ready_}) {
    if (*flag && (*flag)->name == name) return true;
  }
  return corrid_type_.has_value() && corrid_name_ == name;
}

bool SequenceControls::IsState(std::string_view name) const {
  for (const StateSpec& spec : states_) {
    if (spec.input_name == name) return true;
  }
  return false;
}

void SequenceControls::AddControls(const SequenceSignals& signals,
                                   std::vector<Tensor>* inputs) const {
  auto add = [&](const std::optional<Flag>& flag, bool value) {
    if (!flag) return;
    inputs->push_back(Tensor{flag->name, flag->datatype, control_shape_,
                             value ? flag->true_bytes : flag->false_bytes, kOnHost});
  };
  add(start_, signals.start);
  add(end_, signals.end);
  add(ready_, signals.ready);
  if (!corrid_type_) return;
  Tensor corrid{corrid_name_, *corrid_type_, control_shape_, {}, kOnHost};
  switch (*corrid_type_) {
    case DataType::kBytes: {
      std::string bytes;
      AppendBytesElement(&bytes, signals.correlation_id_string);
      corrid.data = SharedBuffer::FromString(std::move(bytes));
      break;
    }
    case DataType::kInt32:
    case DataType::kUint32:
      // The low 32 bits, as Triton sends them.
      corrid.data = BytesOf<uint32_t>(static_cast<uint32_t>(signals.correlation_id));
      break;
    default:
      corrid.data = BytesOf<uint64_t>(signals.correlation_id);
      break;
  }
  inputs->push_back(std::move(corrid));
}

}  // namespace vramd::runtime
