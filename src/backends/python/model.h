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

 private:
  PythonInstance() = default;
  CallContext Context(Phase phase, VramdOwner owner) const;
  pybind11::object Loop();  // the instance's InstanceLoop, made on first use
  std::shared_ptr<PyInferRequest> MakeRequest(const VramdRequest& request);
  // `returned` is taken: what it holds is dropped before the responses are sent.
  void ProcessReturned(const std::vector<std::shared_ptr<RequestState>>& states,
                       pybind11::object returned);
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
};

}  // namespace vramd::python

#endif  // VRAMD_BACKENDS_PYTHON_MODEL_H_
