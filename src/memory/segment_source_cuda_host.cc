// The pinned host SegmentSource: cudaHostAlloc / cudaFreeHost. Pinned memory is what makes a
// host-to-device copy run at the DMA engine's rate: the driver copies pageable memory through
// a small pinned bounce buffer of its own, at a fraction of that rate, which a reload of a
// large model pays on every byte of its weights.
//
// Cost: cudaHostAlloc pins (and first touches) every page, which takes time in proportion to
// the size, and pinned memory cannot be swapped out; the pool keeps segments cached until Trim,
// and the server trims after each load so staging images do not stay pinned.
#include <string>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "memory/segment_source.h"

#if VRAMD_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace vramd::memory {

#if VRAMD_WITH_CUDA

namespace {

class CudaHostSegmentSource final : public SegmentSource {
 public:
  Device device() const override { return Device::CudaHost(); }

  Result<void*> Allocate(size_t size) override {
    void* ptr = nullptr;
    // Portable: pinned for every device's context, not only the current one, so any GPU's
    // copies from it run at the pinned rate.
    cudaError_t err = cudaHostAlloc(&ptr, size, cudaHostAllocPortable);
    if (err == cudaSuccess) return ptr;
    // Clear the thread's last error so later, unrelated checks do not see it.
    cudaGetLastError();
    if (err == cudaErrorMemoryAllocation) {
      return Status::ResourceExhausted(fmt::format(
          "cuda_host: out of pinned host memory: cudaHostAlloc of {} bytes ({:.1f} MiB) failed",
          size, static_cast<double>(size) / (1 << 20)));
    }
    return Status::Internal(fmt::format("cuda_host: cudaHostAlloc of {} bytes failed: {}", size,
                                        cudaGetErrorString(err)));
  }

  void Free(void* ptr, size_t size) override {
    cudaError_t err = cudaFreeHost(ptr);
    if (err != cudaSuccess) {
      cudaGetLastError();
      spdlog::error("cuda_host: cudaFreeHost of {} bytes at {} failed: {}", size, ptr,
                    cudaGetErrorString(err));
    }
  }
};

}  // namespace

Result<std::unique_ptr<SegmentSource>> MakeCudaHostSegmentSource() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return Status::Unavailable(fmt::format(
        "cuda_host (pinned host memory) is not available: no usable CUDA device ({})",
        cudaGetErrorString(err)));
  }
  if (count == 0) {
    return Status::Unavailable(
        "cuda_host (pinned host memory) is not available: this process sees no CUDA device");
  }
  return std::unique_ptr<SegmentSource>(std::make_unique<CudaHostSegmentSource>());
}

#else  // !VRAMD_WITH_CUDA

Result<std::unique_ptr<SegmentSource>> MakeCudaHostSegmentSource() {
  return Status::Unavailable(
      "cuda_host (pinned host memory) is not available: built without CUDA");
}

#endif

}  // namespace vramd::memory
