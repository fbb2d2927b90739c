// Moving tensors off a GPU for code that reads host bytes: the front ends (they encode what they
// read), backends that take only host inputs (Backend::TakesGpuInputs() false), joined batches
// (assembled with memcpy) and BYTES tensors (validated and split by the host). A GPU tensor
// reaches those places only through the request path's two crossings, where the runtime calls
// these: a request admitted by a version (LoadedModel::Admit) and a response a backend sends
// (RequestResponder), so no front end or host-only backend has to know GPU tensors exist.
//
// A move is a synchronous device-to-host copy into a new host buffer; the device buffer goes
// when the tensor's last reference does.
#pragma once

#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace vramd::runtime {

// Moves `tensor` to host memory; a host tensor is left as it is. The error names the tensor and
// its device (Unavailable in a build without CUDA).
Status MoveToHost(Tensor* tensor);

// Whether MoveToHost(tensors, bytes_only) would move anything: a GPU tensor (with
// `bytes_only`, a GPU BYTES tensor) among them.
bool NeedsMoveToHost(const std::vector<Tensor>& tensors, bool bytes_only = false);

// MoveToHost on each tensor, stopping at the first failure; with `bytes_only`, only BYTES ones.
Status MoveToHost(std::vector<Tensor>* tensors, bool bytes_only = false);

}  // namespace vramd::runtime
