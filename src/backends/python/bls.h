// BLS: InferenceRequest.exec / async_exec over VramdServerApi::infer_async, and the
// ResponseIterator of a decoupled call.
//
// A call's results arrive on a server thread (BlsCall); the Python side waits for them on a
// condition variable with the GIL released. An output is a zero-copy view of the result's
// memory: the result is released (infer_result_release) when the last tensor made from it
// is gone.
//
// Threads: BlsCall is locked; the bindings run under the GIL.
#ifndef VRAMD_BACKENDS_PYTHON_BLS_H_
#define VRAMD_BACKENDS_PYTHON_BLS_H_

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>

#include "context.h"
#include "py_types.h"

namespace vramd::python {

class BlsCall {
 public:
  explicit BlsCall(std::shared_ptr<ModelShared> model) : model_(std::move(model)) {}
  ~BlsCall();

  // Starts `request`; on failure the error becomes the call's one final result.
  static std::shared_ptr<BlsCall> Start(std::shared_ptr<ModelShared> model,
                                        const PyInferRequest& request, bool decoupled,
                                        VramdOwner parent_owner);

  // Waits (call without the GIL) for the next result. False when the call has ended and every
  // result was taken. *result null with *final: the final flag alone; *error_text set (and
  // *result null) for a call that could not start.
  bool Next(VramdInferResult** result, bool* final, std::string* error_text);
  // Drops the results not taken yet and those still to come.
  void Abandon();
  // Cancels the call (VramdServerApi::infer_cancel): the called model reads its request as
  // cancelled; the results still come, to the final one. A no-op on a server without it.
  void Cancel();

  const std::shared_ptr<ModelShared>& model() const { return model_; }

 private:
  struct Item {
    VramdInferResult* result;
    bool final;
  };
  static void OnResult(void* context, VramdInferResult* result, int32_t final);

  std::shared_ptr<ModelShared> model_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> items_;
  std::string start_error_;
  bool ended_ = false;      // the final result arrived
  bool abandoned_ = false;
  void* cancel_token_ = nullptr;  // set by infer_async in Start, then only read
};

// An InferenceResponse over `result` (taken: released when Python is done with it). Needs the
// GIL.
std::shared_ptr<PyInferResponse> ResponseFromResult(const std::shared_ptr<ModelShared>& model,
                                                    VramdInferResult* result);

}  // namespace vramd::python

#endif  // VRAMD_BACKENDS_PYTHON_BLS_H_
