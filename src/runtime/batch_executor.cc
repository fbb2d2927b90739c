#include "runtime/batch_executor.h"

#include <fmt/format.h>

#include <chrono>

#include "runtime/batch_assembly.h"
#include "runtime/request_owner.h"
#include "runtime/request_responder.h"
#include "runtime/tensor_memory.h"
#include "runtime/trace_points.h"

namespace vramd::runtime {
namespace {

uint64_t Ns(SchedulerClock::duration d) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
}

bool KeepsGpuOutputs(const std::vector<QueuedRequest>& batch) {
  if (batch.size() != 1 || batch.front().request->output_gpu == kOnHost) return false;
  for (const RequestedOutput& o : batch.front().request->outputs) {
    if (o.classification != 0) return false;
  }
  return true;
}

}  // namespace

BatchExecutor::BatchExecutor(std::string model_name, int64_t version, const MemoryContext& memory,
                             InferenceStatistics* stats, TensorReshape reshape,
                             Classifier classifier)
    : model_name_(std::move(model_name)),
      version_(version),
      where_(fmt::format("model '{}' version {}", model_name_, version)),
      memory_(memory),
      stats_(stats),
      reshape_(std::move(reshape)),
      classifier_(std::move(classifier)) {}

Result<std::vector<Tensor>> BatchExecutor::Classified(const InferRequest& request,
                                                      Result<std::vector<Tensor>> outputs) const {
  if (!outputs.ok()) return outputs;
  // SelectOutputs keeps the request's order, so output i is what request.outputs[i] asked for.
  for (size_t i = 0; i < request.outputs.size() && i < outputs->size(); ++i) {
    const uint32_t count = request.outputs[i].classification;
    if (count == 0) continue;
    auto classes = classifier_.Classify((*outputs)[i], count);
    if (!classes.ok()) return classes.status().WithContext(where_);
    (*outputs)[i] = std::move(classes).value();
  }
  return outputs;
}

void BatchExecutor::FailAll(std::vector<QueuedRequest>& batch, const Status& status) {
  const auto now = SchedulerClock::now();
  for (auto& r : batch) {
    if (r.request->trace) {
      StampExecution(*r.request, version_, r.batch_size, {r.arrival, r.enqueued, now, {}, {}, now},
                     memory_, memory::kNoOwner, nullptr, status);
    }
    if (!r.null_request) {
      stats_->RecordFailure(Ns(SchedulerClock::now() - r.arrival), FailureReason::kBackend,
                            status.code());
    }
    r.done(status);
  }
}

void BatchExecutor::Run(backends::BackendInstance& instance, memory::OwnerId instance_owner,
                        std::vector<QueuedRequest> batch) {
  const auto start = SchedulerClock::now();
  std::vector<RequestOwner> owners;
  owners.reserve(batch.size());  // no reallocation: a lazy owner is in scope below
  std::vector<uint64_t> batch_sizes;
  batch_sizes.reserve(batch.size());
  uint64_t samples = 0;
  for (const auto& r : batch) {
    const std::string& id = r.request->id;
    owners.emplace_back(memory_, instance_owner,
                        id.empty() ? fmt::format("#{}", ++request_sequence_) : id);
    batch_sizes.push_back(r.batch_size);
    if (!r.null_request) samples += r.batch_size;
  }

  // 1. Assemble.
  InferRequest merged;
  const InferRequest* run = batch.front().request.get();
  if (batch.size() > 1) {
    std::vector<const InferRequest*> parts;
    parts.reserve(batch.size());
    for (const auto& r : batch) parts.push_back(r.request.get());
    merged = ConcatenateRequests(parts);
    run = &merged;
  }
  if (!reshape_.empty()) {
    // Only shapes change: the copy shares the inputs' bytes.
    if (run != &merged) merged = *run;
    reshape_.ToBackend(&merged.inputs);
    run = &merged;
  }
  const auto input_end = SchedulerClock::now();

  // 2. Execute.
  std::vector<Tensor> outputs;
  Status status;
  std::optional<ExecuteMemoryLog::Figures> before;
  if (memory_log_) before = memory_log_->Take(instance_owner);
  {
    memory::OwnerScope scope(owners.front().lazy_owner());
    status = instance.Execute(*run, &outputs);
  }
  if (before) memory_log_->Log(instance_owner, batch.size(), *before, memory_log_->Take(instance_owner));
  if (status.ok()) status = reshape_.FromBackend(&outputs);
  // GPU outputs stay there only for a lone request whose consumer takes them on a GPU and
  // asks no classification (which reads the host); the rest are split, filtered and read on
  // the host.
  if (status.ok() && NeedsMoveToHost(outputs) && !KeepsGpuOutputs(batch)) {
    status = MoveToHost(&outputs);
  }
  const auto infer_end = SchedulerClock::now();
  merged = InferRequest();  // outputs that alias its inputs keep their bytes alive
  if (!status.ok()) {
    FailAll(batch, status.WithContext(where_));
    return;
  }

  // 3. Split and filter.
  std::vector<Result<std::vector<Tensor>>> results;
  results.reserve(batch.size());
  if (batch.size() == 1) {
    results.push_back(Classified(*batch.front().request,
                                 SelectOutputs(*batch.front().request, std::move(outputs), where_)));
  } else {
    auto pieces = SplitOutputs(std::move(outputs), batch_sizes);
    if (!pieces.ok()) {
      FailAll(batch, pieces.status().WithContext(
                         fmt::format("{}: splitting a batch of {} request(s)", where_,
                                     batch.size())));
      return;
    }
    for (size_t i = 0; i < batch.size(); ++i) {
      results.push_back(Classified(
          *batch[i].request, SelectOutputs(*batch[i].request, std::move((*pieces)[i]), where_)));
    }
  }
  const auto end = SchedulerClock::now();
  for (size_t i = 0; i < batch.size(); ++i) {
    const QueuedRequest& r = batch[i];
    if (r.request->trace) {
      StampExecution(*r.request, version_, r.batch_size,
                     {r.arrival, r.enqueued, start, input_end, infer_end, end}, memory_,
                     instance_owner, owners[i].lazy_owner(),
                     results[i].ok() ? Status::Ok() : results[i].status());
    }
  }
  const uint64_t input_ns = Ns(input_end - start);
  const uint64_t infer_ns = Ns(infer_end - input_end);
  const uint64_t output_ns = Ns(end - infer_end);
  stats_->RecordExecution(samples, input_ns, infer_ns, output_ns);

  for (size_t i = 0; i < batch.size(); ++i) {
    QueuedRequest& r = batch[i];
    if (!results[i].ok()) {
      if (!r.null_request) {
        stats_->RecordFailure(Ns(SchedulerClock::now() - r.arrival), FailureReason::kBackend,
                              results[i].status().code());
      }
      r.done(results[i].status());
      continue;
    }
    InferOutcome outcome;
    outcome.request_owner = std::move(owners[i]);
    outcome.response.id = r.request->id;
    outcome.response.model_name = model_name_;
    outcome.response.model_version = version_;
    outcome.response.outputs = std::move(results[i]).value();
    if (!r.null_request) {
      stats_->RecordSuccess(Ns(SchedulerClock::now() - r.arrival), Ns(start - r.enqueued),
                            input_ns, infer_ns, output_ns);
    }
    r.done(std::move(outcome));
  }
}

Result<std::vector<Tensor>> BatchExecutor::ShapeOutputs(const InferRequest& request,
                                                        std::vector<Tensor> outputs) const {
  Status reshaped = reshape_.FromBackend(&outputs);
  if (!reshaped.ok()) return reshaped.WithContext(where_);
  return Classified(request, SelectOutputs(request, std::move(outputs), where_));
}

void BatchExecutor::RunRequests(backends::BackendInstance& instance,
                                memory::OwnerId instance_owner, bool decoupled,
                                std::vector<QueuedRequest> batch) {
  const auto start = SchedulerClock::now();
  uint64_t samples = 0;
  // The backend sees the config's shapes; only shapes change, so copies share the bytes.
  std::vector<InferRequest> reshaped;
  if (!reshape_.empty()) reshaped.reserve(batch.size());
  std::vector<std::shared_ptr<RequestResponder>> responders;
  responders.reserve(batch.size());
  std::vector<backends::ListedRequest> list;
  list.reserve(batch.size());
  for (auto& r : batch) {
    samples += r.batch_size;
    const InferRequest* request = r.request.get();
    if (!reshape_.empty()) {
      reshaped.push_back(*request);
      reshape_.ToBackend(&reshaped.back().inputs);
      request = &reshaped.back();
    }
    const std::string& id = r.request->id;
    RequestOwner owner(memory_, instance_owner,
                       id.empty() ? fmt::format("#{}", ++request_sequence_) : id);
    auto responder = std::make_shared<RequestResponder>(this, decoupled, std::move(r),
                                                        std::move(owner), start);
    backends::ListedRequest listed;
    listed.request = request;
    listed.responder = responder;
    listed.open_owner = &RequestResponder::OpenOwner;
    listed.owner_context = responder.get();
    list.push_back(std::move(listed));
    responders.push_back(std::move(responder));
  }
  Status status;
  std::optional<ExecuteMemoryLog::Figures> before;
  if (memory_log_) before = memory_log_->Take(instance_owner);
  {
    memory::OwnerScope scope(instance_owner);
    status = instance.ExecuteRequests(list);
  }
  if (before) memory_log_->Log(instance_owner, list.size(), *before, memory_log_->Take(instance_owner));
  const auto end = SchedulerClock::now();
  if (!status.ok()) {
    const Status failed = status.WithContext(where_);
    for (auto& responder : responders) responder->Fail(failed);
    return;
  }
  stats_->RecordExecution(samples, 0, Ns(end - start), 0);
  // What the backend kept (a decoupled model answering later) stays alive with it; the rest
  // is answered by now, or answers its request with an error as it goes.
}

}  // namespace vramd::runtime
