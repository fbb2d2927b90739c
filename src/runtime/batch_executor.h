// BatchExecutor: runs one batch of requests on one instance and answers each request.
//
// For every request it opens a RequestOwner under the instance (lazily: nothing is written to
// the ledger unless the request allocates). The execution itself runs under the owner of the
// batch's first request, so a batch of one is charged exactly as a lone request, and what a
// batched execution leaves behind is reported against a real request; the other requests'
// owners stay unopened unless something is charged to them later.
//
// Steps, timed for the statistics (built-in backends: compute_input is batch assembly,
// compute_infer is Execute, compute_output is splitting and filtering):
//   1. assemble: a batch of more than one is concatenated along dim 0 (batch_assembly.h);
//   2. Execute on the instance, with inputs and outputs reshaped where the config says so
//      (tensor_reshape.h);
//   3. split the outputs back by each request's batch size and keep the outputs each request
//      asked for, in its order, as its top classes where it asked for them (classification.h).
// A failed Execute answers every request with its error (naming the model and version) and
// counts each as a BACKEND failure; no execution is counted. Otherwise the execution is
// counted (with the batch's sample count), then each request's success or failure, and then
// its callback is called with its response and owner.
//
// Request lists (RunRequests), for backends that take them (Backend::TakesRequestLists): the
// batch's requests go to ExecuteRequests as they are, each with a RequestResponder
// (request_responder.h) that answers it when the backend responds, during the call or later.
// The execution is counted when ExecuteRequests succeeds; a failed one answers every request
// not yet answered with its error. It runs under the instance's owner: a response may complete
// its request during the call, so no request's owner can be the scope around it.
//
// Thread safety: Run and RunRequests may be called concurrently for different instances; the
// accessors and ShapeOutputs from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "memory/ledger.h"
#include "runtime/classification.h"
#include "runtime/execute_memory_log.h"
#include "runtime/inference_statistics.h"
#include "runtime/memory_context.h"
#include "runtime/request_queue.h"
#include "runtime/tensor_reshape.h"

namespace vramd::runtime {

class BatchExecutor {
 public:
  // `stats` must outlive the executor. `reshape`: the config's input and output reshapes,
  // applied around Execute.
  BatchExecutor(std::string model_name, int64_t version, const MemoryContext& memory,
                InferenceStatistics* stats, TensorReshape reshape = TensorReshape(),
                Classifier classifier = Classifier());

  // Runs `batch` (not empty; every pair CanBatchTogether) on `instance`, whose ledger owner is
  // `instance_owner`, and calls each request's callback exactly once.
  void Run(backends::BackendInstance& instance, memory::OwnerId instance_owner,
           std::vector<QueuedRequest> batch);

  // As Run, for a backend that takes request lists; `decoupled`: the model's
  // model_transaction_policy.decoupled.
  void RunRequests(backends::BackendInstance& instance, memory::OwnerId instance_owner,
                   bool decoupled, std::vector<QueuedRequest> batch);

  // A backend's outputs for `request` as the client gets them: reshaped to the config's shapes,
  // those it asked for in its order, as top classes where it asked.
  Result<std::vector<Tensor>> ShapeOutputs(const InferRequest& request,
                                           std::vector<Tensor> outputs) const;

  // Logs each execution's memory figures (execute_memory_log.h). REQUIRES: before any Run.
  void set_memory_log(std::optional<ExecuteMemoryLog> log) { memory_log_ = std::move(log); }

  const std::string& model_name() const { return model_name_; }
  int64_t version() const { return version_; }
  const std::string& where() const { return where_; }  // "model 'm' version 1"
  InferenceStatistics* stats() const { return stats_; }
  const MemoryContext& memory() const { return memory_; }

 private:
  void FailAll(std::vector<QueuedRequest>& batch, const Status& status);
  // `outputs` with those the request asked to classify replaced by their top classes.
  Result<std::vector<Tensor>> Classified(const InferRequest& request,
                                         Result<std::vector<Tensor>> outputs) const;

  const std::string model_name_;
  const int64_t version_;
  const std::string where_;  // "model 'm' version 1"
  const MemoryContext memory_;
  InferenceStatistics* const stats_;
  const TensorReshape reshape_;
  const Classifier classifier_;
  std::optional<ExecuteMemoryLog> memory_log_;  // constant once requests come
  std::atomic<uint64_t> request_sequence_{0};
};

}  // namespace vramd::runtime
