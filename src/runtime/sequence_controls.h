// SequenceControls: what a sequence model's config asks the server to add to each request of a
// sequence (config sequence_batching): the control input tensors (START, END, READY, CORRID)
// and the implicit state inputs, with each state's initial value.
//
// Shapes are per request, as the backend sees one request: a control is [1] on a model without
// batching and [1, 1] on one with it; a state is its dims, with a leading 1 on a model with
// batching. A batch joins requests along dim 0 as for any input.
//
// The control tensors' bytes are made once, at load, and shared by every request (a control
// has two values, and CORRID's bytes are the only per-request ones). The initial states are
// read once too: zeros, or the file named by initial_state.data_file under the model's
// initial_state/ folder (its size must be the state's). A state without an initial_state starts
// as zeros, a variable dimension as 0: Triton leaves that first input undefined, and a model
// must not read it on a START request; zeros make a model that does so behave the same every
// time.
//
// Thread safety: const after From; any number of threads may read it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/model_config.pb.h"
#include "core/data_type.h"
#include "core/status.h"
#include "core/tensor.h"

namespace vramd::runtime {

// What the control inputs say for one request.
struct SequenceSignals {
  bool start = false;
  bool end = false;
  bool ready = true;  // false only for a filler that keeps a batch slot's position
  uint64_t correlation_id = 0;
  std::string correlation_id_string;  // used when CORRID is TYPE_STRING
};

struct StateSpec {
  std::string input_name;
  std::string output_name;
  DataType datatype = DataType::kInvalid;
  Shape dims;     // per request (with the leading 1 on a batching model); -1: variable
  Tensor initial;  // named input_name, shaped per request
  bool also_output = false;  // the config lists output_name as an output: the client gets it
};

class SequenceControls {
 public:
  SequenceControls() = default;
  // REQUIRES: `config` passed config::CheckSequenceBatching. Fails naming the file when an
  // initial state's data_file cannot be read or has the wrong size.
  static Result<SequenceControls> From(const config::ModelConfig& config,
                                       const std::filesystem::path& model_dir);

  // Appends the control tensors for `signals` to `inputs`.
  void AddControls(const SequenceSignals& signals, std::vector<Tensor>* inputs) const;

  const std::vector<StateSpec>& states() const { return states_; }
  // Whether `name` is a control input / a state input.
  bool IsControl(std::string_view name) const;
  bool IsState(std::string_view name) const;
  // The CORRID control's type, when the config has one: TYPE_STRING takes string IDs only,
  // the integer types integer IDs only.
  std::optional<DataType> correlation_type() const { return corrid_type_; }
  const std::string& correlation_input() const { return corrid_name_; }

 private:
  struct Flag {
    std::string name;
    DataType datatype = DataType::kInvalid;
    SharedBuffer false_bytes;
    SharedBuffer true_bytes;
  };
  std::optional<Flag> start_, end_, ready_;
  std::string corrid_name_;
  std::optional<DataType> corrid_type_;
  Shape control_shape_;
  std::vector<StateSpec> states_;
};

}  // namespace vramd::runtime
