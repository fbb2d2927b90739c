// CachingPool's implementation. The policy is in caching_pool.h; this comment covers how it is
// kept.
//
// Structures (all guarded by Impl::mu_):
//  - Segment: one source allocation, in `segments_` keyed by address (Snapshot walks it in
//    order). It records its pool (small or large) and its stream.
//  - Block: a sub-range of a segment, doubly linked with its neighbours in address order. The
//    blocks of a segment cover it without gaps. Invariant: two neighbours are never both free
//    (Free merges them), so a segment is fully free exactly when its only block is free.
//  - Free blocks sit in one std::set per pool ordered by (stream, size, address): best fit is
//    one lower_bound on (stream, size, 0). Live blocks sit in an unordered_map by address.
//    Allocate and Free from the cache are therefore O(log n) plus O(1) expected.
//  - Block nodes are recycled through a small spare list, so split and merge rarely call new.
//  - Holes (a source that can decommit, docs/memory.md "The VMM pool"): a free block whose
//    memory went back to the source while its segment stayed. A hole is in no free set, never
//    merges and is never handed out; it goes with its segment, which is fully free when it has
//    no live block (Segment::live), holes or not.
//
// Note [Lock and the source]: no SegmentSource call (Allocate, Free, Synchronize, Decommit) runs
// under mu_. Allocate looks in the cache under the lock, drops it to ask the source for a segment and
// takes it again to insert the segment. Releasing segments (Trim, the out-of-memory retry, the
// destructor) detaches fully free segments under the lock, so nobody can be handed them again,
// then synchronizes and frees them outside it. Stats count a detached segment as gone at once.
// Decommitting carves holes under the lock the same way and decommits them outside it. Both run
// under release_mu_ (taken before mu_), so a segment whose holes are being decommitted cannot be
// freed, and its addresses handed to a new segment, until the decommit is done.
#include "memory/caching_pool.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/mutex.h"

namespace vramd::memory {
namespace {

constexpr size_t kKiB = size_t{1} << 10;
constexpr size_t kMiB = size_t{1} << 20;

constexpr size_t kMinBlockSize = 512;             // bytes; every block size is a multiple
constexpr size_t kSmallRequestLimit = 1 * kMiB;   // bytes; rounded requests up to this: small
constexpr size_t kSmallSegmentSize = 2 * kMiB;    // bytes; every small-pool segment
constexpr size_t kLargeSegmentRounding = 2 * kMiB;  // bytes; large segments are multiples
constexpr size_t kLargeMinRemainder = 1 * kMiB;   // bytes; large blocks split when rest > this
// Mid-size requests (large, rounded below kMidRequestLimit) after a stream's first large
// segment get segments of kMidSegmentSize (see caching_pool.h).
constexpr size_t kMidRequestLimit = 8 * kMiB;
constexpr size_t kMidSegmentSize = 12 * kMiB;
// Larger requests fail at once: no device has this much, and rounding must not overflow.
constexpr size_t kMaxRequest = SIZE_MAX / 4;
constexpr size_t kMaxSpareBlocks = 1024;          // recycled Block nodes kept

size_t RoundUp(size_t size, size_t multiple) { return (size + multiple - 1) / multiple * multiple; }

// caching_pool.h: the part of the cached free memory that one request cannot have.
double Fragmentation(size_t cached_free, size_t largest_free_block, size_t remappable_free) {
  if (cached_free == 0) return 0.0;
  const size_t usable = std::max(largest_free_block, remappable_free);
  return 1.0 - static_cast<double>(std::min(usable, cached_free)) / cached_free;
}

struct Segment;

struct Block {
  uintptr_t address = 0;
  size_t size = 0;
  size_t requested = 0;  // the caller's size while allocated
  StreamId stream = 0;   // the segment's stream, copied here for the free-set order
  Segment* segment = nullptr;
  Block* prev = nullptr;  // neighbours in the segment, in address order
  Block* next = nullptr;
  bool allocated = false;
  bool hole = false;  // free, and its memory given back to the source (see the top comment)
  bool evicted = false;  // allocated, and its whole granules given back (Evict)
};

struct Segment {
  uintptr_t address = 0;
  size_t size = 0;
  StreamId stream = 0;
  bool small = false;
  Block* first = nullptr;  // the lowest block; never changes (merges keep the lower block)
  size_t live = 0;         // allocated blocks
  size_t holes = 0;        // bytes in holes
  size_t unit = 0;         // the source's DecommitUnit(size); 0: it cannot decommit
};

// Free-set order, (stream, size, address), with heterogeneous lookup by key.
struct FreeKey {
  StreamId stream;
  size_t size;
  uintptr_t address;
};
struct FreeOrder {
  using is_transparent = void;
  static FreeKey Key(const Block* b) { return {b->stream, b->size, b->address}; }
  static FreeKey Key(const FreeKey& k) { return k; }
  template <typename A, typename B>
  bool operator()(const A& a, const B& b) const {
    FreeKey x = Key(a), y = Key(b);
    return std::tie(x.stream, x.size, x.address) < std::tie(y.stream, y.size, y.address);
  }
};
using FreeSet = std::set<Block*, FreeOrder>;

// The largest block in `set`: the last block of each stream's run, found by one upper_bound
// per stream.
size_t LargestFree(const FreeSet& set) {
  size_t largest = 0;
  for (auto it = set.begin(); it != set.end();) {
    auto end = set.upper_bound(FreeKey{(*it)->stream, SIZE_MAX, UINTPTR_MAX});
    largest = std::max(largest, (*std::prev(end))->size);
    it = end;
  }
  return largest;
}

struct DetachedSegment {
  void* ptr;
  size_t size;
  size_t backed;  // size less its holes: what freeing it gives back
};

struct Range {
  uintptr_t address;
  size_t size;
};

}  // namespace

class CachingPool::Impl {
 public:
  explicit Impl(std::unique_ptr<SegmentSource> source)
      : source_(std::move(source)),
        device_(source_->device()),
        granularity_(source_->decommit_granularity()) {}
  ~Impl();

  Device device() const { return device_; }
  size_t decommit_granularity() const { return granularity_; }
  Result<void*> Allocate(size_t size, StreamId stream) EXCLUDES(mu_);
  void Free(void* ptr) EXCLUDES(mu_);
  size_t RequestedSize(void* ptr) const EXCLUDES(mu_);
  size_t Trim() EXCLUDES(mu_);
  Result<size_t> Evict(void* ptr) EXCLUDES(mu_, release_mu_);
  Status Restore(void* ptr) EXCLUDES(mu_, release_mu_);
  PoolStats Stats() const EXCLUDES(mu_);
  std::vector<SegmentInfo> Snapshot() const EXCLUDES(mu_);

 private:
  struct Counters {
    size_t reserved = 0, allocated = 0, requested = 0;
    size_t peak_reserved = 0, peak_allocated = 0;
    uint64_t total_allocations = 0, segment_allocations = 0, segment_frees = 0;
    uint64_t oom_retries = 0, out_of_memory = 0, unknown_frees = 0;
    size_t holes = 0;
    uint64_t decommitted = 0;
  };

  FreeSet& FreeSetOf(const Segment* s) REQUIRES(mu_) {
    return s->small ? small_free_ : large_free_;
  }
  Block* NewBlock() REQUIRES(mu_);
  void DeleteBlock(Block* b) REQUIRES(mu_);
  // The best free block for a rounded size on `stream`, taken out of its free set; or nullptr.
  Block* TakeBestFit(bool small, size_t rounded, StreamId stream) REQUIRES(mu_);
  // Whether `stream` holds a large-pool segment (the mid-size segment rule). Walks the segments:
  // called only on a cache miss, which is about to ask the source for memory anyway.
  bool HoldsLargeSegment(StreamId stream) const REQUIRES(mu_) {
    return std::any_of(segments_.begin(), segments_.end(), [&](const auto& entry) {
      return !entry.second->small && entry.second->stream == stream;
    });
  }
  // Registers a new segment and returns its single block (not in any free set).
  Block* AddSegment(void* ptr, size_t size, StreamId stream, bool small) REQUIRES(mu_);
  // Splits off what `b` does not need, marks it allocated and returns its address.
  void* HandOut(Block* b, size_t rounded, size_t requested) REQUIRES(mu_);
  // Removes every fully free segment from the pool and returns them, for ReleaseSegments.
  std::vector<DetachedSegment> DetachFreeSegments() REQUIRES(mu_);
  // Turns the whole granules inside every free block of a segment that is in use into holes and
  // returns them, for Decommit. Nothing when the source cannot decommit.
  std::vector<Range> CarveHoles() REQUIRES(mu_);
  // Merges free block `b` (in no free set) with its free neighbours and inserts the result.
  void InsertFree(Block* b) REQUIRES(mu_);
  // Splits free block `b` (in no free set) into [head][hole][tail], `hole` being inside it:
  // b becomes the hole; head and tail are inserted as free blocks. Counters are the caller's.
  void SplitOutHole(Block* b, Range hole) REQUIRES(mu_);
  // Counts `bytes` of `segment` as given back to the source (a hole, or an evicted interior).
  void CountHole(Segment* segment, size_t bytes) REQUIRES(mu_) {
    if (bytes == 0) return;
    segment->holes += bytes;
    c_.holes += bytes;
    c_.reserved -= bytes;
    ++c_.decommitted;
  }
  // The bytes CarveHoles would turn into holes now.
  size_t CarvableBytes() const REQUIRES(mu_);
  // The part of block `b` made of whole units of its segment (SegmentSource::DecommitUnit;
  // units start at the segment's base, and the last one ends at its end).
  static Range Interior(const Block* b) {
    const Segment* s = b->segment;
    if (s->unit == 0) return {b->address, 0};
    const uintptr_t end = b->address + b->size, segment_end = s->address + s->size;
    const uintptr_t lo = s->address + (b->address - s->address + s->unit - 1) / s->unit * s->unit;
    const uintptr_t hi =
        end == segment_end ? end : s->address + (end - s->address) / s->unit * s->unit;
    return hi > lo ? Range{lo, hi - lo} : Range{lo, 0};
  }
  // Returns the memory of what the pool holds but does not use: fully free segments and (for a
  // source that can decommit) the whole granules of free blocks. The bytes given back.
  size_t GiveBack() EXCLUDES(mu_, release_mu_);
  std::string OutOfMemoryMessage(size_t size, size_t segment_size, StreamId stream,
                                 const Status& source_status, size_t released) const
      REQUIRES(mu_);

  // Synchronize, then Free each segment (Note [Lock and the source]). Returns the bytes freed.
  size_t ReleaseSegments(const std::vector<DetachedSegment>& segments) EXCLUDES(mu_);

  // Constant after construction.
  const std::unique_ptr<SegmentSource> source_;
  const Device device_;
  const size_t granularity_;  // the source's decommit granularity; 0: it cannot

  // Held while segments are detached and freed or holes carved and decommitted (Note [Lock and
  // the source]).
  Mutex release_mu_ ACQUIRED_BEFORE(mu_);

  // Also guards the Segment and Block structures these reach (not checked: they are not
  // members).
  mutable Mutex mu_;
  FreeSet small_free_ GUARDED_BY(mu_);
  FreeSet large_free_ GUARDED_BY(mu_);
  std::unordered_map<uintptr_t, Block*> live_ GUARDED_BY(mu_);
  std::map<uintptr_t, std::unique_ptr<Segment>> segments_ GUARDED_BY(mu_);
  std::vector<Block*> spare_blocks_ GUARDED_BY(mu_);
  Counters c_ GUARDED_BY(mu_);
};

CachingPool::Impl::~Impl() {
  std::vector<DetachedSegment> all;
  {
    MutexLock lock(mu_);
    if (!live_.empty()) {
      spdlog::error("{}: CachingPool destroyed with {} live allocation(s) holding {}; their "
                    "memory is returned to the system now",
                    device_.ToString(), live_.size(), FormatBytes(c_.allocated));
    }
    for (auto& [address, segment] : segments_) {
      all.push_back({reinterpret_cast<void*>(segment->address), segment->size,
                     segment->size - segment->holes});
      for (Block* b = segment->first; b != nullptr;) {
        Block* next = b->next;
        delete b;
        b = next;
      }
    }
    segments_.clear();
    small_free_.clear();
    large_free_.clear();
    live_.clear();
    for (Block* b : spare_blocks_) delete b;
    spare_blocks_.clear();
  }
  ReleaseSegments(all);
}

Block* CachingPool::Impl::NewBlock() {
  if (spare_blocks_.empty()) return new Block;
  Block* b = spare_blocks_.back();
  spare_blocks_.pop_back();
  *b = Block{};
  return b;
}

void CachingPool::Impl::DeleteBlock(Block* b) {
  if (spare_blocks_.size() < kMaxSpareBlocks) {
    spare_blocks_.push_back(b);
  } else {
    delete b;
  }
}

Block* CachingPool::Impl::TakeBestFit(bool small, size_t rounded, StreamId stream) {
  FreeSet& set = small ? small_free_ : large_free_;
  auto it = set.lower_bound(FreeKey{stream, rounded, 0});
  if (it == set.end() || (*it)->stream != stream) return nullptr;
  Block* b = *it;
  set.erase(it);
  return b;
}

Block* CachingPool::Impl::AddSegment(void* ptr, size_t size, StreamId stream, bool small) {
  auto segment = std::make_unique<Segment>();
  segment->address = reinterpret_cast<uintptr_t>(ptr);
  segment->size = size;
  segment->stream = stream;
  segment->small = small;
  segment->unit = granularity_ > 0 ? source_->DecommitUnit(size) : 0;
  Block* b = NewBlock();
  b->address = segment->address;
  b->size = size;
  b->stream = stream;
  b->segment = segment.get();
  segment->first = b;
  segments_.emplace(segment->address, std::move(segment));
  c_.reserved += size;
  c_.peak_reserved = std::max(c_.peak_reserved, c_.reserved);
  ++c_.segment_allocations;
  return b;
}

void* CachingPool::Impl::HandOut(Block* b, size_t rounded, size_t requested) {
  size_t rest = b->size - rounded;
  bool split = b->segment->small ? rest >= kMinBlockSize : rest > kLargeMinRemainder;
  if (split) {
    Block* r = NewBlock();
    r->address = b->address + rounded;
    r->size = rest;
    r->stream = b->stream;
    r->segment = b->segment;
    r->prev = b;
    r->next = b->next;
    if (b->next != nullptr) b->next->prev = r;
    b->next = r;
    b->size = rounded;
    // b was free, so b->next was not: the remainder needs no merge.
    FreeSetOf(b->segment).insert(r);
  }
  b->allocated = true;
  b->requested = requested;
  ++b->segment->live;
  live_.emplace(b->address, b);
  c_.allocated += b->size;
  c_.requested += requested;
  c_.peak_allocated = std::max(c_.peak_allocated, c_.allocated);
  ++c_.total_allocations;
  return reinterpret_cast<void*>(b->address);
}

Result<void*> CachingPool::Impl::Allocate(size_t size, StreamId stream) {
  if (size > kMaxRequest) {
    MutexLock lock(mu_);
    ++c_.out_of_memory;
    return Status::ResourceExhausted(fmt::format(
        "{}: cannot allocate {} bytes: larger than any device", device_.ToString(), size));
  }
  const size_t rounded = RoundUp(std::max(size, size_t{1}), kMinBlockSize);
  const bool small = rounded <= kSmallRequestLimit;
  // A source that decommits backs whole granules: a segment is a multiple of its granularity.
  const size_t rounding = std::max(kLargeSegmentRounding, granularity_);
  const size_t segment_size = RoundUp(small ? kSmallSegmentSize : rounded, rounding);
  size_t wanted_size = segment_size;  // segment_size, or a shared mid-size segment
  {
    MutexLock lock(mu_);
    if (Block* b = TakeBestFit(small, rounded, stream)) return HandOut(b, rounded, size);
    if (!small && rounded < kMidRequestLimit && HoldsLargeSegment(stream)) {
      wanted_size = std::max(segment_size, RoundUp(kMidSegmentSize, rounding));
    }
  }

  // A cache miss: a new segment, asked for without the lock (Note [Lock and the source]).
  Result<void*> memory = source_->Allocate(wanted_size);
  if (!memory.ok() && wanted_size != segment_size &&
      memory.status().code() == StatusCode::kResourceExhausted) {
    // No room for a shared mid-size segment: one of the request's own size, as for any other.
    wanted_size = segment_size;
    memory = source_->Allocate(segment_size);
  }
  size_t released = 0;
  if (!memory.ok() && memory.status().code() == StatusCode::kResourceExhausted) {
    {
      MutexLock lock(mu_);
      // Another thread may have freed a fitting block meanwhile.
      if (Block* b = TakeBestFit(small, rounded, stream)) return HandOut(b, rounded, size);
      ++c_.oom_retries;
    }
    released = GiveBack();
    memory = source_->Allocate(segment_size);
  }

  MutexLock lock(mu_);
  if (!memory.ok()) {
    if (memory.status().code() != StatusCode::kResourceExhausted) return memory.status();
    ++c_.out_of_memory;
    return Status::ResourceExhausted(
        OutOfMemoryMessage(size, segment_size, stream, memory.status(), released));
  }
  Block* b = AddSegment(*memory, wanted_size, stream, small);
  return HandOut(b, rounded, size);
}

void CachingPool::Impl::Free(void* ptr) {
  if (ptr == nullptr) return;
  {
    MutexLock lock(mu_);
    auto it = live_.find(reinterpret_cast<uintptr_t>(ptr));
    if (it != live_.end()) {
      Block* b = it->second;
      live_.erase(it);
      c_.requested -= b->requested;
      b->allocated = false;
      b->requested = 0;
      --b->segment->live;
      if (b->evicted) {
        // Its interior is already given back and counted as a hole: that part stays one.
        const Range hole = Interior(b);
        c_.allocated -= b->size - hole.size;
        b->evicted = false;
        SplitOutHole(b, hole);
        return;
      }
      c_.allocated -= b->size;
      InsertFree(b);
      return;
    }
    ++c_.unknown_frees;
  }
  spdlog::warn("{}: CachingPool::Free of unknown pointer {} ignored (not from this pool, or "
               "already freed)",
               device_.ToString(), ptr);
}

size_t CachingPool::Impl::RequestedSize(void* ptr) const {
  MutexLock lock(mu_);
  auto it = live_.find(reinterpret_cast<uintptr_t>(ptr));
  return it == live_.end() ? 0 : it->second->requested;
}

std::vector<DetachedSegment> CachingPool::Impl::DetachFreeSegments() {
  std::vector<DetachedSegment> detached;
  for (auto it = segments_.begin(); it != segments_.end();) {
    Segment* segment = it->second.get();
    if (segment->live > 0) {
      ++it;
      continue;
    }
    FreeSet& set = FreeSetOf(segment);
    for (Block* b = segment->first; b != nullptr;) {
      Block* next = b->next;
      if (!b->hole) set.erase(b);
      DeleteBlock(b);
      b = next;
    }
    const size_t backed = segment->size - segment->holes;
    detached.push_back({reinterpret_cast<void*>(segment->address), segment->size, backed});
    c_.reserved -= backed;
    c_.holes -= segment->holes;
    ++c_.segment_frees;
    it = segments_.erase(it);
  }
  return detached;
}

void CachingPool::Impl::InsertFree(Block* b) {
  FreeSet& set = FreeSetOf(b->segment);
  if (Block* prev = b->prev; prev != nullptr && !prev->allocated && !prev->hole) {
    set.erase(prev);
    prev->size += b->size;
    prev->next = b->next;
    if (b->next != nullptr) b->next->prev = prev;
    DeleteBlock(b);
    b = prev;
  }
  if (Block* next = b->next; next != nullptr && !next->allocated && !next->hole) {
    set.erase(next);
    b->size += next->size;
    b->next = next->next;
    if (next->next != nullptr) next->next->prev = b;
    DeleteBlock(next);
  }
  set.insert(b);
}

void CachingPool::Impl::SplitOutHole(Block* b, Range hole) {
  // b is marked first, so that neither head nor tail merges back into it.
  b->hole = true;
  Block* head = nullptr;
  if (hole.address > b->address) {
    head = NewBlock();
    *head = *b;
    head->hole = false;
    head->size = hole.address - b->address;
    head->next = b;
    if (head->prev != nullptr) head->prev->next = head;
    if (b->segment->first == b) b->segment->first = head;
    b->prev = head;
    b->address = hole.address;
    b->size -= head->size;
  }
  Block* tail = nullptr;
  if (b->size > hole.size) {
    tail = NewBlock();
    *tail = *b;
    tail->hole = false;
    tail->address = hole.address + hole.size;
    tail->size = b->size - hole.size;
    tail->prev = b;
    if (tail->next != nullptr) tail->next->prev = tail;
    b->next = tail;
    b->size = hole.size;
  }
  if (head != nullptr) InsertFree(head);
  if (tail != nullptr) InsertFree(tail);
}

std::vector<Range> CachingPool::Impl::CarveHoles() {
  std::vector<Range> holes;
  if (granularity_ == 0) return holes;
  for (FreeSet* set : {&small_free_, &large_free_}) {
    std::vector<Block*> carvable;
    for (Block* b : *set) {
      if (Interior(b).size > 0) carvable.push_back(b);
    }
    for (Block* b : carvable) {
      const Range hole = Interior(b);
      set->erase(b);
      SplitOutHole(b, hole);
      CountHole(b->segment, hole.size);
      holes.push_back(hole);
    }
  }
  return holes;
}

Result<size_t> CachingPool::Impl::Evict(void* ptr) {
  if (granularity_ == 0) {
    return Status::Unsupported(fmt::format(
        "{}: this pool cannot give back memory under a live allocation (the VMM pool can: "
        "--device-pool=vmm)",
        device_.ToString()));
  }
  MutexLock release(release_mu_);
  Range hole;
  {
    MutexLock lock(mu_);
    auto it = live_.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == live_.end()) {
      return Status::InvalidArgument(
          fmt::format("{}: {} is not a live allocation of this pool", device_.ToString(), ptr));
    }
    Block* b = it->second;
    if (b->evicted) return size_t{0};
    hole = Interior(b);
    b->evicted = true;
    CountHole(b->segment, hole.size);
    c_.allocated -= hole.size;
  }
  if (hole.size > 0) {
    source_->Synchronize();
    source_->Decommit(reinterpret_cast<void*>(hole.address), hole.size);
  }
  return hole.size;
}

Status CachingPool::Impl::Restore(void* ptr) {
  MutexLock release(release_mu_);
  Range hole;
  {
    MutexLock lock(mu_);
    auto it = live_.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == live_.end()) {
      return Status::InvalidArgument(
          fmt::format("{}: {} is not a live allocation of this pool", device_.ToString(), ptr));
    }
    if (!it->second->evicted) return Status::Ok();
    hole = Interior(it->second);
  }
  // The block cannot be freed meanwhile by a correct caller (it is the caller's), and release_mu_
  // keeps a trim from touching its segment.
  if (hole.size > 0) {
    Status s = source_->Recommit(reinterpret_cast<void*>(hole.address), hole.size);
    if (!s.ok()) {
      MutexLock lock(mu_);
      ++c_.out_of_memory;
      return s;
    }
  }
  MutexLock lock(mu_);
  auto it = live_.find(reinterpret_cast<uintptr_t>(ptr));
  Block* b = it->second;
  b->evicted = false;
  b->segment->holes -= hole.size;
  c_.holes -= hole.size;
  c_.reserved += hole.size;
  c_.allocated += hole.size;
  c_.peak_reserved = std::max(c_.peak_reserved, c_.reserved);
  c_.peak_allocated = std::max(c_.peak_allocated, c_.allocated);
  return Status::Ok();
}

size_t CachingPool::Impl::CarvableBytes() const {
  if (granularity_ == 0) return 0;
  size_t bytes = 0;
  for (const FreeSet* set : {&small_free_, &large_free_}) {
    for (const Block* b : *set) bytes += Interior(b).size;
  }
  return bytes;
}

size_t CachingPool::Impl::ReleaseSegments(const std::vector<DetachedSegment>& segments) {
  if (segments.empty()) return 0;
  // Work queued on any stream before the blocks were freed may still use them.
  source_->Synchronize();
  size_t bytes = 0;
  for (const DetachedSegment& s : segments) {
    source_->Free(s.ptr, s.size);
    bytes += s.backed;
  }
  return bytes;
}

size_t CachingPool::Impl::GiveBack() {
  MutexLock release(release_mu_);
  std::vector<DetachedSegment> detached;
  std::vector<Range> holes;
  {
    MutexLock lock(mu_);
    detached = DetachFreeSegments();
    holes = CarveHoles();
  }
  size_t bytes = ReleaseSegments(detached);
  if (!holes.empty()) {
    if (detached.empty()) source_->Synchronize();  // else ReleaseSegments did
    for (const Range& hole : holes) {
      source_->Decommit(reinterpret_cast<void*>(hole.address), hole.size);
      bytes += hole.size;
    }
  }
  return bytes;
}

size_t CachingPool::Impl::Trim() { return GiveBack(); }

PoolStats CachingPool::Impl::Stats() const {
  MutexLock lock(mu_);
  PoolStats s;
  s.device = device_;
  s.reserved_bytes = c_.reserved;
  s.allocated_bytes = c_.allocated;
  s.requested_bytes = c_.requested;
  s.peak_reserved_bytes = c_.peak_reserved;
  s.peak_allocated_bytes = c_.peak_allocated;
  s.segments = segments_.size();
  s.live_allocations = live_.size();
  s.cached_free_bytes = c_.reserved - c_.allocated;
  s.largest_free_block_bytes = std::max(LargestFree(small_free_), LargestFree(large_free_));
  s.decommit_granularity = granularity_;
  s.hole_bytes = c_.holes;
  s.remappable_free_bytes = CarvableBytes();
  s.fragmentation = Fragmentation(s.cached_free_bytes, s.largest_free_block_bytes,
                                  s.remappable_free_bytes);
  s.decommits = c_.decommitted;
  s.total_allocations = c_.total_allocations;
  s.segment_allocations = c_.segment_allocations;
  s.segment_frees = c_.segment_frees;
  s.oom_retries = c_.oom_retries;
  s.out_of_memory = c_.out_of_memory;
  s.unknown_frees = c_.unknown_frees;
  return s;
}

std::vector<SegmentInfo> CachingPool::Impl::Snapshot() const {
  MutexLock lock(mu_);
  std::vector<SegmentInfo> out;
  out.reserve(segments_.size());
  for (const auto& [address, segment] : segments_) {
    SegmentInfo info;
    info.address = segment->address;
    info.size = segment->size;
    info.stream = segment->stream;
    for (const Block* b = segment->first; b != nullptr; b = b->next) {
      info.blocks.push_back({b->address, b->size, b->allocated, b->hole});
    }
    out.push_back(std::move(info));
  }
  return out;
}

std::string CachingPool::Impl::OutOfMemoryMessage(size_t size, size_t segment_size,
                                                  StreamId stream, const Status& source_status,
                                                  size_t released) const {
  const size_t cached_free = c_.reserved - c_.allocated;
  const size_t largest = std::max(LargestFree(small_free_), LargestFree(large_free_));
  const double fragmentation = Fragmentation(cached_free, largest, CarvableBytes());
  std::string m = fmt::format(
      "{dev}: out of memory: cannot allocate {req} ({size} bytes) on stream {stream:#x}; "
      "it needed a new {seg} segment. The pool holds {reserved} reserved in {segments} "
      "segment(s): {allocated} allocated to {live} live allocation(s), {free} cached free, "
      "largest free block {largest} (fragmentation {frag:.0f}%). Before failing it returned "
      "{released} of cached memory ({what}) and retried. Source: {source}. ",
      fmt::arg("dev", device_.ToString()), fmt::arg("req", FormatBytes(size)),
      fmt::arg("size", size), fmt::arg("stream", stream), fmt::arg("seg", FormatBytes(segment_size)),
      fmt::arg("reserved", FormatBytes(c_.reserved)), fmt::arg("segments", segments_.size()),
      fmt::arg("allocated", FormatBytes(c_.allocated)), fmt::arg("live", live_.size()),
      fmt::arg("free", FormatBytes(cached_free)), fmt::arg("largest", FormatBytes(largest)),
      fmt::arg("frag", fragmentation * 100), fmt::arg("released", FormatBytes(released)),
      fmt::arg("what", granularity_ > 0 ? "fully free segments, and the whole granules of free "
                                          "blocks, decommitted"
                                        : "fully free segments"),
      fmt::arg("source", source_status.message()));
  if (cached_free >= size) {
    m += "Remedy: the pool's cached free memory would fit this request but is split into "
         "smaller blocks or belongs to other streams; allocate the largest buffers first (at "
         "model load), use fewer streams, or free what holds this device's memory.";
  } else {
    m += fmt::format(
        "Remedy: free memory on {}: unload a model, lower max_batch_size or the instance "
        "count, or stop other processes using the device.",
        device_.ToString());
  }
  return m;
}

CachingPool::CachingPool(std::unique_ptr<SegmentSource> source)
    : impl_(std::make_unique<Impl>(std::move(source))) {}
CachingPool::~CachingPool() = default;

Device CachingPool::device() const { return impl_->device(); }
size_t CachingPool::decommit_granularity() const { return impl_->decommit_granularity(); }
Result<void*> CachingPool::Allocate(size_t size, StreamId stream) {
  return impl_->Allocate(size, stream);
}
void CachingPool::Free(void* ptr) { impl_->Free(ptr); }
size_t CachingPool::RequestedSize(void* ptr) const { return impl_->RequestedSize(ptr); }
size_t CachingPool::Trim() { return impl_->Trim(); }
Result<size_t> CachingPool::Evict(void* ptr) { return impl_->Evict(ptr); }
Status CachingPool::Restore(void* ptr) { return impl_->Restore(ptr); }
PoolStats CachingPool::Stats() const { return impl_->Stats(); }
std::vector<SegmentInfo> CachingPool::Snapshot() const { return impl_->Snapshot(); }

}  // namespace vramd::memory
