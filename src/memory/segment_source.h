// SegmentSource: where a CachingPool gets memory from and returns it to: the system
// allocator for the CPU, cudaMalloc/cudaFree for a CUDA device, cudaHostAlloc/cudaFreeHost for
// pinned host memory (cuda_host). It is the only code that calls those functions for pooled
// memory. The CPU source exists so the pool's logic is tested on machines without a GPU.
//
// Thread safety: implementations are safe to call from any thread.
#pragma once

#include <cstddef>
#include <memory>

#include "core/status.h"
#include "memory/device.h"

namespace vramd::memory {

class SegmentSource {
 public:
  virtual ~SegmentSource() = default;
  virtual Device device() const = 0;
  // `size` bytes from the system, aligned to at least 256 bytes. ResourceExhausted, naming the
  // device and size, when the system has no memory for it.
  virtual Result<void*> Allocate(size_t size) = 0;
  // Returns a segment from Allocate. The caller has made sure no queued work still uses it.
  virtual void Free(void* ptr, size_t size) = 0;
  // Waits for all work queued on the device (a no-op for the CPU and for cuda_host). Called
  // before segments go back to the driver, so a stream-ordered free is complete.
  virtual void Synchronize() {}
};

std::unique_ptr<SegmentSource> MakeHostSegmentSource();

// A source for CUDA device `ordinal` (the calls run with that device current). Unavailable when
// built without CUDA or when the device does not exist.
Result<std::unique_ptr<SegmentSource>> MakeCudaSegmentSource(int ordinal);

// A source of page-locked host memory (Device::CudaHost()), pinned for every CUDA device.
// Unavailable when built without CUDA or when the process sees no CUDA device.
//
// Its Synchronize does nothing: any device's copies may read pinned memory, and the source
// cannot tell which, so it cannot wait for them. Whoever frees a pinned block must first make
// sure the copies reading it are complete (a synchronous cudaMemcpy, or a stream synchronized),
// as it must for ordinary host memory, which the CPU may reuse at once.
Result<std::unique_ptr<SegmentSource>> MakeCudaHostSegmentSource();

}  // namespace vramd::memory
