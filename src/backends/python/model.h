// A Python model version (PythonModel: the package its model.py is imported into and the
// TritonPythonModel class) and its instances (PythonInstance: one TritonPythonModel object
// each, initialize / execute / finalize, an asyncio loop for async def execute).
//
// Module globals are per model version here: every instance of a version shares the one
// imported model.py (Triton runs each instance in its own stub process, so globals there are
// per instance). Instances that keep state on `self` behave the same in both.
//
// Requests: inputs are zero-copy views of the request's tensors for a model that is not
// decoupled (valid until execute returns, as in Triton, where the request's shared memory is
// released after the response); a decoupled model may keep requests after execute returned, so
// its inputs are copied when the request object is made. GPU inputs are copied to host unless
// the config sets FORCE_CPU_ONLY_INPUT_TENSORS "no" (Triton's default "yes").
//
// Threads: Create, the destructors and ExecuteRequests take the GIL themselves; call them
// without it. vramd never overlaps one instance's calls.
#ifndef VRAMD_BACKENDS_PYTHON_MODEL_H_
#define VRAMD_BACKENDS_PYTHON_MODEL_H_

#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <vector>

#include "context.h"
#include "request_state.h"
#include "vramd/backend.h"

namespace vramd::python {

class PythonModel {
 public:
  // Imports the version's model file. *error holds the Python traceback on failure.
  static VramdCode Create(const VramdModelInfo& info, std::unique_ptr<PythonModel>* out,
                          std::string* error);
  ~PythonModel();

  const std::shared_ptr<ModelShared>& shared() const { return shared_; }
  // The TritonPythonModel class. Needs the GIL.
  pybind11::object model_class() const { return *class_; }

 private:
  PythonModel() = default;
  std::shared_ptr<ModelShared> shared_;
  std::unique_ptr<pybind11::object> class_;  // reset under the GIL
};

class PythonInstance {
 public:
  // TritonPythonModel() and its initialize(args). *error holds the traceback on failure.
  static VramdCode Create(PythonModel* model, const VramdInstanceInfo& info,
                          std::unique_ptr<PythonInstance>* out, std::string* error);
  // finalize(), then every request still open is answered with an error.
  ~PythonInstance();

  VramdCode ExecuteRequests(VramdRequest* const* requests, size_t count, VramdError* error);

  // The model's is_ready() (model_hooks.cc), Triton's rules: absent, ready; True ready; False,
  // a raise or a value that is not a bool ("is_ready() must return a boolean value") not
  // ready, *error saying why. An async def runs on a loop of its own (not execute's), in a
  // thread of its own. Takes the GIL itself; vramd never overlaps two calls of one instance,
  // but a call may run while the instance executes on another thread.
  VramdCode Ready(VramdError* error);

 private:
  PythonInstance() = default;
  CallContext Context(Phase phase, VramdOwner owner) const;
  pybind11::object Loop();  // the instance's InstanceLoop, made on first use
  std::shared_ptr<PyInferRequest> MakeRequest(const VramdRequest& request);
  // Checks what execute returned and builds its responses, one per state (null where the
  // model answered through the sender or returned None). `returned` is taken: what it holds is
  // dropped before this returns, so before the caller sends (after releasing the GIL).
  std::vector<std::unique_ptr<PreparedResponse>> ProcessReturned(
      const std::vector<std::shared_ptr<RequestState>>& states, pybind11::object returned);
  // fn(*args), inside the instance's torch pool when it has one (torch_ledger.h).
  pybind11::object Call(const pybind11::object& fn,
                        const pybind11::tuple& args = pybind11::tuple());

  std::shared_ptr<ModelShared> model_;
  std::shared_ptr<InstanceStatus> status_ = std::make_shared<InstanceStatus>();
  std::string name_;
  VramdOwner owner_ = 0;
  int32_t device_ = 0;  // the instance's CUDA ordinal (0 for KIND_CPU)
  std::unique_ptr<pybind11::object> torch_pool_;  // torch_ledger.h; reset under the GIL
  std::unique_ptr<pybind11::object> object_;  // reset under the GIL
  std::unique_ptr<pybind11::object> loop_;
  std::shared_ptr<OutstandingRequests> outstanding_ = std::make_shared<OutstandingRequests>();
  // The asyncio loop of an async is_ready, made on first use; stopped and released under the
  // GIL by its deleter.
  std::shared_ptr<pybind11::object> readiness_loop_;
};

// Triton's auto_complete_config (model_hooks.cc): imports the version's model file into a
// package of its own, removed afterwards (Triton runs it in a process of its own, so
// module-level code runs again when the model loads), and calls the static
// TritonPythonModel.auto_complete_config(pb_utils.ModelConfig(config)) when the class has it.
// *completed: the returned config as JSON; left empty when there is nothing to call (no
// function, no model file: the load then says so). *error on failure, with Triton's text for
// a return that is not a ModelConfig. Takes the GIL itself.
VramdCode AutoCompleteConfig(const VramdModelInfo& info, std::string* completed,
                             std::string* error);

}  // namespace vramd::python

#endif  // VRAMD_BACKENDS_PYTHON_MODEL_H_
