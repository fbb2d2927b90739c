#include "runtime/trace_points.h"

#include "core/request_trace.h"

namespace vramd::runtime {

void StampExecution(const InferRequest& request, int64_t version, uint64_t batch_size,
                    const ExecutionTimes& times, const MemoryContext& memory,
                    memory::OwnerId instance_owner, const memory::LazyOwner* request_owner,
                    const Status& status) {
  RequestTrace& trace = *request.trace;
  trace.SetVersion(version);
  trace.SetRequestId(request.id);
  trace.Stamp(TracePoint::kRequestStart, times.arrival);
  trace.Stamp(TracePoint::kQueueStart, times.enqueued);
  trace.Stamp(TracePoint::kComputeStart, times.start);
  if (times.input_end) trace.Stamp(TracePoint::kComputeInputEnd, *times.input_end);
  if (times.output_start) trace.Stamp(TracePoint::kComputeOutputStart, *times.output_start);
  trace.Stamp(TracePoint::kComputeEnd, times.end);
  trace.Stamp(TracePoint::kRequestEnd);
  if (batch_size != 0) trace.SetFigure("vramd.batch_size", batch_size);
  if (instance_owner != memory::kNoOwner) {
    if (auto live = memory.ledger->SubtreeLiveBytes(instance_owner); live.ok()) {
      trace.SetFigure("vramd.memory.instance_live_bytes", static_cast<uint64_t>(*live));
    }
  }
  if (request_owner != nullptr && request_owner->opened()) {
    if (auto stats = memory.ledger->Stats(request_owner->id()); stats.ok()) {
      trace.SetFigure("vramd.memory.request_peak_bytes", static_cast<uint64_t>(stats->peak_bytes));
    }
  }
  if (!status.ok()) trace.SetError(status.message());
}

}  // namespace vramd::runtime
