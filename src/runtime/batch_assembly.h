// Batch assembly: joining several requests into one execution along the batch dimension
// (dim 0) and splitting the execution's outputs back, for the dynamic batcher.
//
// Two requests can share a batch when they send the same inputs (by name) with the same data
// types and the same shapes after dim 0. Data is row-major, so concatenating along dim 0 is
// concatenating the bytes: for BYTES tensors the serialized elements (core/tensor.h).
// Splitting gives each request a view of the output (SharedBuffer::Slice, no copy).
//
// Functions here are pure: safe from any thread.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/infer_request.h"
#include "core/status.h"

namespace vramd::runtime {

// The batch dimension of a validated request of a model with max_batch_size > 0: dim 0 of its
// first input (validation makes it the same for all); 1 for a request without inputs.
uint64_t RequestBatchSize(const InferRequest& request);

// True when `a` and `b` can run in one execution (see the top of this file).
bool CanBatchTogether(const InferRequest& a, const InferRequest& b);

// One request whose inputs are the inputs of `requests`, in order, concatenated along dim 0,
// named and ordered as in the first request. REQUIRES: at least one request, each pair
// CanBatchTogether, every input with a batch dimension. Ids and requested outputs are left
// empty: the split keeps each request's own.
InferRequest ConcatenateRequests(const std::vector<const InferRequest*>& requests);

// Splits each of `outputs` along dim 0 into pieces of `batch_sizes` (in order), returning one
// output list per request. Internal (naming the output) when an output's dim 0 is not the sum
// of the batch sizes or its data does not fit its shape.
Result<std::vector<std::vector<Tensor>>> SplitOutputs(std::vector<Tensor> outputs,
                                                      const std::vector<uint64_t>& batch_sizes);

// The outputs `request` asked for, in the order it named them, or all of `outputs` when it
// named none. Internal, naming the output and `where`, when a requested output is missing.
Result<std::vector<Tensor>> SelectOutputs(const InferRequest& request, std::vector<Tensor> outputs,
                                          std::string_view where);

}  // namespace vramd::runtime
