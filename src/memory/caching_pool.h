// CachingPool: a caching, stream-ordered allocator for one device, in the manner of PyTorch's
// CUDA caching allocator.
//
// Policy:
//  - A segment is one SegmentSource allocation. Requests round up to 512 bytes. Requests of
//    at most 1 MiB (after rounding) come from 2 MiB segments ("small" pool); larger ones from
//    segments of the request rounded up to 2 MiB ("large" pool). Blocks are sub-ranges of a
//    segment; the two pools never share a segment.
//  - Mid-size requests (large, under 8 MiB) on a stream that already holds a large segment get
//    a 12 MiB segment instead (or their own size when the source has no room for 12 MiB). A
//    stream that keeps one workspace pays for exactly that; a framework's forward pass, with
//    many differently sized activations and workspaces on one stream, gets them packed into
//    shared segments whose space the next pass reuses, instead of one segment rounded to each
//    size (replaying a LibTorch ResNet's H200 trace through bench/pool_replay: 36 -> 20 MiB
//    reserved per stream for a 12.4 MiB peak).
//  - Allocate takes the best-fitting free block of the same pool and stream (smallest size,
//    then lowest address) and splits it when the remainder is worth keeping (>= 512 bytes in the
//    small pool, > 1 MiB in the large pool); otherwise it asks the source for a new segment.
//    If the source is out of memory, the pool releases its fully free cached segments (after
//    Synchronize) and retries once before failing with ResourceExhausted and a report of what
//    the pool holds (reserved, allocated, cached free, largest free block) and a remedy.
//  - Free makes a block reusable at once by later allocations on the same stream (work on one
//    stream runs in order) and merges it with free neighbours in its segment. A block is never
//    handed to another stream; a segment belongs to the stream that caused it.
//  - Trim returns every fully free segment to the source (after Synchronize).
//  - The pool never calls the source while holding its lock; two threads that miss the cache at
//    once may each add a segment (at most one extra segment per concurrent caller).
//
// Statistics (PoolStats): see each field, and docs/memory.md "Pools and fragmentation".
// Fragmentation, defined for the report users read:
//   fragmentation = 1 - usable / cached_free_bytes   (0 when nothing is free), where usable is
//   largest_free_block_bytes, or for a source that can decommit the larger of that and
//   remappable_free_bytes (the free whole granules, which a decommit and a new mapping join
//   into one request).
// It says how much of the cached free memory cannot serve one request as large as all of it:
// 0 means all free cached memory is one block; near 1 means it is scattered in small pieces.
//
// With a source that can decommit (SegmentSource::decommit_granularity, the VMM pool), running
// out of memory, and Trim, also give back the whole units (SegmentSource::DecommitUnit: the
// granularity, larger in segments of 64 MiB and more) inside free blocks of segments still in
// use; their addresses stay with the segment as holes until it is fully free. So memory free in
// pieces serves a request as large as all of it, to within a unit per piece.
//
// Cost: Allocate and Free are O(log n) in the number of free blocks when served from the cache.
//
// Thread safety: all methods are safe from any thread (one mutex per pool).
#pragma once

#include <cstddef>
#include <string>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "memory/byte_size.h"
#include "memory/device.h"
#include "memory/segment_source.h"

namespace vramd::memory {

// A CUDA stream as an integer (cudaStream_t cast); 0 is the default stream, and the only one on
// the CPU.
using StreamId = uintptr_t;

// A copy of a pool's counters at one moment. Byte figures are current values unless named
// peak_ or described as cumulative.
struct PoolStats {
  Device device;
  size_t reserved_bytes = 0;      // held from the source: the sum of the segments' sizes
  size_t allocated_bytes = 0;     // handed out, rounded sizes: the sum of live blocks' sizes
                                  // (a block keeps a remainder too small to split off), less
                                  // what Evict gave back
  size_t requested_bytes = 0;     // handed out, as asked: the sum of Allocate's `size`s
  size_t peak_reserved_bytes = 0;   // highest reserved_bytes since construction
  size_t peak_allocated_bytes = 0;  // highest allocated_bytes since construction
  size_t segments = 0;            // segments held now
  size_t live_allocations = 0;    // blocks handed out and not yet freed
  size_t cached_free_bytes = 0;   // reserved - allocated: free blocks kept for reuse
  size_t largest_free_block_bytes = 0;  // the largest free block (any pool, any stream)
  double fragmentation = 0.0;     // see the file comment
  // A source that can decommit (the VMM pool, docs/memory.md): its granularity (0 for any
  // other), the address space the pool keeps whose memory went back (holes), the cached free
  // bytes in whole granules (what a request could have after a decommit), and the cumulative
  // number of holes made.
  size_t decommit_granularity = 0;
  size_t hole_bytes = 0;
  size_t remappable_free_bytes = 0;
  uint64_t decommits = 0;
  uint64_t total_allocations = 0;  // cumulative Allocate successes
  uint64_t segment_allocations = 0;  // cumulative SegmentSource::Allocate successes
  uint64_t segment_frees = 0;      // cumulative segments returned (Trim, out-of-memory retry)
  uint64_t oom_retries = 0;        // cumulative times the source ran out and the pool released
                                   // its free segments and retried
  uint64_t out_of_memory = 0;      // Allocate failures
  uint64_t unknown_frees = 0;      // Free of a pointer the pool did not hand out (a caller bug)
};

// One segment as it is now, for reports and tests.
struct SegmentInfo {
  uintptr_t address = 0;
  size_t size = 0;
  StreamId stream = 0;
  struct BlockInfo {
    uintptr_t address = 0;
    size_t size = 0;
    bool allocated = false;
    bool hole = false;  // free, its memory given back (a VMM pool)
  };
  std::vector<BlockInfo> blocks;  // in address order, covering the segment
};

class CachingPool {
 public:
  explicit CachingPool(std::unique_ptr<SegmentSource> source);
  ~CachingPool();  // returns every segment; allocations still live at this point are a bug
  CachingPool(const CachingPool&) = delete;
  CachingPool& operator=(const CachingPool&) = delete;

  Device device() const;
  // The source's decommit granularity (SegmentSource::decommit_granularity): non-zero for a VMM
  // pool, whose Evict and Restore work.
  size_t decommit_granularity() const;

  // A block of at least `size` bytes (size 0 gives a valid 512-byte block), usable on
  // `stream`. ResourceExhausted when the device is out of memory even after releasing cache;
  // another source error (Internal, Unavailable) is returned as the source gave it.
  Result<void*> Allocate(size_t size, StreamId stream = 0);

  // REQUIRES: `ptr` came from Allocate of this pool and is not yet freed. Unknown pointers are
  // ignored and counted (they indicate a bug in the caller), never crash. nullptr is a no-op.
  void Free(void* ptr);

  // The size Allocate recorded for `ptr` as requested; 0 if unknown.
  size_t RequestedSize(void* ptr) const;

  // Returns fully free segments to the source (and with a source that can decommit, the whole
  // granules of free blocks); the bytes returned. Calls the source's Synchronize once before
  // the first Free or Decommit, and not at all when there is nothing to return.
  size_t Trim();

  // A pool whose source can decommit (the VMM pool): gives back the memory under the whole
  // granules of live allocation `ptr`, keeping its addresses (a sleeping model's weights, whose
  // pointers its backend keeps: docs/memory.md, "Sleeping in place"). Its contents there are
  // lost; the caller copies them out first and must not touch them until Restore. Returns the
  // bytes given back (at most a granule less at each end than the allocation, whose edges may
  // share a granule with a neighbour); 0 when it was evicted already. Unsupported for any other
  // pool; InvalidArgument for a pointer that is not live. Freeing an evicted allocation is fine.
  Result<size_t> Evict(void* ptr);
  // Maps memory under an evicted allocation again (contents undefined): ResourceExhausted when
  // the device has none, the allocation staying evicted. Ok for one not evicted.
  Status Restore(void* ptr);

  PoolStats Stats() const;
  // Segments in address order.
  std::vector<SegmentInfo> Snapshot() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace vramd::memory
