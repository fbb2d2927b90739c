// The CUDA SegmentSource: cudaMalloc / cudaFree on one device, made current for each call and
// restored afterwards so callers' current device never changes under them.
#include <string>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "memory/segment_source.h"

#if VRAMD_WITH_CUDA
#include <cuda_runtime_api.h>

#include "memory/cuda_devices.h"
#include "memory/scoped_device.h"
#endif

namespace vramd::memory {

#if VRAMD_WITH_CUDA

namespace {

class CudaSegmentSource final : public SegmentSource {
 public:
  explicit CudaSegmentSource(int ordinal) : ordinal_(ordinal) {}

  Device device() const override { return Device::Cuda(ordinal_); }

  Result<void*> Allocate(size_t size) override {
    ScopedDevice scoped(ordinal_);
    if (scoped.status() != cudaSuccess) {
      return Status::Unavailable(fmt::format("cuda:{}: cannot make the device current: {}",
                                             ordinal_, cudaGetErrorString(scoped.status())));
    }
    void* ptr = nullptr;
    cudaError_t err = cudaMalloc(&ptr, size);
    if (err == cudaSuccess) return ptr;
    // cudaMalloc leaves its error as the thread's last error; clear it so later, unrelated
    // checks of cudaGetLastError do not see a stale out-of-memory.
    cudaGetLastError();
    if (err == cudaErrorMemoryAllocation) {
      return Status::ResourceExhausted(
          fmt::format("cuda:{}: out of memory: cudaMalloc of {} bytes ({:.1f} MiB) failed",
                      ordinal_, size, static_cast<double>(size) / (1 << 20)));
    }
    return Status::Internal(fmt::format("cuda:{}: cudaMalloc of {} bytes failed: {}", ordinal_,
                                        size, cudaGetErrorString(err)));
  }

  void Free(void* ptr, size_t size) override {
    ScopedDevice scoped(ordinal_);
    cudaError_t err = cudaFree(ptr);
    if (err != cudaSuccess) {
      cudaGetLastError();
      spdlog::error("cuda:{}: cudaFree of {} bytes at {} failed: {}", ordinal_, size, ptr,
                    cudaGetErrorString(err));
    }
  }

  void Synchronize() override {
    ScopedDevice scoped(ordinal_);
    cudaError_t err = cudaDeviceSynchronize();
    if (err != cudaSuccess) {
      cudaGetLastError();
      spdlog::error("cuda:{}: cudaDeviceSynchronize failed: {}", ordinal_,
                    cudaGetErrorString(err));
    }
  }

 private:
  const int ordinal_;
};

}  // namespace

Result<std::unique_ptr<SegmentSource>> MakeCudaSegmentSource(int ordinal) {
  VRAMD_RETURN_IF_ERROR(CudaDeviceUsable(ordinal));
  return std::unique_ptr<SegmentSource>(std::make_unique<CudaSegmentSource>(ordinal));
}

#else  // !VRAMD_WITH_CUDA

Result<std::unique_ptr<SegmentSource>> MakeCudaSegmentSource(int ordinal) {
  return Status::Unavailable(fmt::format("cuda:{} is not available: built without CUDA", ordinal));
}

#endif

}  // namespace vramd::memory
