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
  // Returns a segment from Allocate (what of it is still backed, and its addresses). The caller
  // has made sure no queued work still uses it.
  virtual void Free(void* ptr, size_t size) = 0;
  // Waits for all work queued on the device (a no-op for the CPU and for cuda_host). Called
  // before segments go back to the driver, so a stream-ordered free is complete.
  virtual void Synchronize() {}

  // Sources that map physical memory into reserved addresses (CUDA's virtual memory management)
  // can give back the memory under part of a segment and keep the segment's addresses: the
  // pool's way past fragmentation (docs/memory.md, "The VMM pool"). The granularity in bytes
  // at which they can, or 0 for a source that cannot (then neither call below is made).
  // Segments from such a source start at a multiple of the granularity.
  virtual size_t decommit_granularity() const { return 0; }
  // The unit a segment of `segment_size` bytes is backed in, and so decommitted in: a multiple
  // of the granularity (0 for a source that cannot decommit). Units start at the segment's first
  // byte; the last one ends at the segment's end and may be shorter. A driver call per unit is
  // what mapping costs, so large segments get large units.
  virtual size_t DecommitUnit(size_t segment_size) const {
    (void)segment_size;
    return decommit_granularity();
  }
  // Returns the physical memory under [ptr, ptr + size) to the system; the addresses stay
  // reserved and must not be touched until Recommit. REQUIRES: the range is whole units of one
  // segment from Allocate; no queued work uses it.
  virtual void Decommit(void* ptr, size_t size) { (void)ptr, (void)size; }
  // Backs a decommitted range with physical memory again (its old contents are gone);
  // ResourceExhausted when the system has none.
  virtual Status Recommit(void* ptr, size_t size) {
    (void)ptr, (void)size;
    return Status::Unsupported("this memory source cannot decommit");
  }
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

// The VMM sources' unit (SegmentSource::DecommitUnit): the granularity for segments under
// 64 MiB; for larger ones an eighth of the segment, rounded down to a power-of-two multiple of
// the granularity, at most 32 MiB. A 64 MiB tensor maps in 8 calls, not 32; a weight of 8 GiB
// in 256, not 4,096; a segment's free space is then given back in pieces of that unit.
size_t VmmDecommitUnit(size_t segment_size, size_t granularity);

// A source for CUDA device `ordinal` built on CUDA's virtual memory management: each segment is
// one reserved address range backed by physical allocations of its unit (VmmDecommitUnit; the
// device's allocation granularity, 2 MiB on H100 and H200, for segments under 64 MiB), each of
// which can be decommitted and recommitted alone. Unavailable
// when built without CUDA, when the device does not exist or does not support it.
Result<std::unique_ptr<SegmentSource>> MakeCudaVmmSegmentSource(int ordinal);

// The same policy in host memory, for tests and benchmarks on machines without a GPU: ranges
// reserved with mmap, pages of `granularity` bytes committed and decommitted with mprotect and
// madvise, and a `capacity` in committed bytes past which Allocate and Recommit answer
// ResourceExhausted as a full device would. `granularity` is a multiple of the page size.
std::unique_ptr<SegmentSource> MakeHostVmmSegmentSource(size_t capacity, size_t granularity);

}  // namespace vramd::memory
