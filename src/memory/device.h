// Device: where memory lives, "cpu", "cuda:N" or "cuda_host".
//
// "cuda_host" is page-locked (pinned) host memory from cudaHostAlloc: host memory that every
// CUDA device can copy to and from at the full DMA rate, where ordinary ("cpu", pageable) memory
// goes through the driver's bounce buffers at a fraction of it. It is not device memory: it is
// counted in the ledger and has its own pool, but no GPU's figures include it. There is one
// such device whatever the GPU count (the memory is allocated portable, for all of them), so its
// index is always 0. It exists only with CUDA and a GPU; without, asking for it is Unavailable.
//
// Thread safety: a Device is a value; every method is safe from any thread.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace vramd::memory {

enum class DeviceType { kCpu, kCuda, kCudaHost };

struct Device {
  DeviceType type = DeviceType::kCpu;
  int index = 0;  // CUDA ordinal; 0 for the CPU and for cuda_host

  static Device Cpu() { return {DeviceType::kCpu, 0}; }
  static Device Cuda(int ordinal) { return {DeviceType::kCuda, ordinal}; }
  static Device CudaHost() { return {DeviceType::kCudaHost, 0}; }
  // Where a tensor's bytes are from its `gpu` field (core/tensor.h): that CUDA ordinal, or the
  // CPU for a negative one (kOnHost).
  static Device OfTensorGpu(int gpu) { return gpu < 0 ? Cpu() : Cuda(gpu); }

  // "cpu", "cuda:N" or "cuda_host".
  std::string ToString() const;
  // Parses ToString's forms ("cuda" alone means cuda:0). Exact and case-sensitive: N is decimal
  // digits that fit an int, with no sign or spaces. InvalidArgument otherwise, quoting `text`.
  // Whether device N exists is not checked here.
  static Result<Device> Parse(std::string_view text);

  // Device memory of a GPU. False for cuda_host: pinned memory is host memory.
  bool is_cuda() const { return type == DeviceType::kCuda; }
  friend bool operator==(const Device&, const Device&) = default;
};

}  // namespace vramd::memory
