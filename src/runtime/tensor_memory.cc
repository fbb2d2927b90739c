#include "runtime/tensor_memory.h"

#include <fmt/format.h>

#include <algorithm>

#include "memory/cuda_devices.h"
#include "memory/device.h"

namespace vramd::runtime {

namespace {

bool Moves(const Tensor& t, bool bytes_only) {
  return t.on_gpu() && (!bytes_only || t.datatype == DataType::kBytes);
}

}  // namespace

bool NeedsMoveToHost(const std::vector<Tensor>& tensors, bool bytes_only) {
  return std::any_of(tensors.begin(), tensors.end(),
                     [bytes_only](const Tensor& t) { return Moves(t, bytes_only); });
}

Status MoveToHost(Tensor* tensor) {
  if (!tensor->on_gpu()) return Status::Ok();
  SharedBuffer host = SharedBuffer::Allocate(tensor->data.size());
  if (!host.empty()) {
    Status copied =
        memory::CopyBytes(memory::Device::Cpu(), host.mutable_data(),
                          memory::Device::Cuda(tensor->gpu), tensor->data.data(), host.size(),
                          /*stream=*/nullptr);
    if (!copied.ok()) {
      return copied.WithContext(
          fmt::format("tensor '{}' on cuda:{} to host memory", tensor->name, tensor->gpu));
    }
  }
  tensor->data = std::move(host);
  tensor->gpu = kOnHost;
  return Status::Ok();
}

Status MoveToHost(std::vector<Tensor>* tensors, bool bytes_only) {
  for (Tensor& t : *tensors) {
    if (Moves(t, bytes_only)) VRAMD_RETURN_IF_ERROR(MoveToHost(&t));
  }
  return Status::Ok();
}

}  // namespace vramd::runtime
