// The host SegmentSource with CUDA VMM's shape (segment_source.h): a segment is a range reserved
// with mmap and no access; its units (VmmDecommitUnit) are backed by making them readable and
// writable, and given back with madvise(MADV_DONTNEED), which drops their frames, before access
// is removed again. Touching a decommitted page faults, as touching an unmapped device
// address does, so a pool that hands out a hole is caught by its tests.
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/mutex.h"
#include "memory/byte_size.h"
#include "memory/segment_source.h"

namespace vramd::memory {
namespace {

class HostVmmSegmentSource final : public SegmentSource {
 public:
  HostVmmSegmentSource(size_t capacity, size_t granularity)
      : capacity_(capacity), granularity_(granularity) {}

  ~HostVmmSegmentSource() override {
    MutexLock lock(mu_);
    for (const auto& [base, segment] : segments_) munmap(reinterpret_cast<void*>(base), segment.size);
  }

  Device device() const override { return Device::Cpu(); }
  size_t decommit_granularity() const override { return granularity_; }
  size_t DecommitUnit(size_t segment_size) const override {
    return VmmDecommitUnit(segment_size, granularity_);
  }

  Result<void*> Allocate(size_t size) override {
    const size_t rounded = RoundUp(size == 0 ? 1 : size);
    const size_t unit = DecommitUnit(rounded);
    {
      MutexLock lock(mu_);
      if (committed_ + rounded > capacity_) return OutOfMemory(rounded);
      committed_ += rounded;
    }
    // Reserve one granule more, then cut the range down to an aligned one.
    void* raw = mmap(nullptr, rounded + granularity_, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED) {
      MutexLock lock(mu_);
      committed_ -= rounded;
      return OutOfMemory(rounded);
    }
    const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
    const uintptr_t base = (start + granularity_ - 1) / granularity_ * granularity_;
    if (base > start) munmap(raw, base - start);
    const uintptr_t end = start + rounded + granularity_;
    if (end > base + rounded) munmap(reinterpret_cast<void*>(base + rounded), end - base - rounded);
    if (mprotect(reinterpret_cast<void*>(base), rounded, PROT_READ | PROT_WRITE) != 0) {
      munmap(reinterpret_cast<void*>(base), rounded);
      MutexLock lock(mu_);
      committed_ -= rounded;
      return OutOfMemory(rounded);
    }
    MutexLock lock(mu_);
    segments_[base] = Segment{rounded, unit, std::vector<bool>((rounded + unit - 1) / unit, true)};
    return reinterpret_cast<void*>(base);
  }

  void Free(void* ptr, size_t /*size*/) override {
    MutexLock lock(mu_);
    auto it = segments_.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == segments_.end()) {
      spdlog::error("host VMM source: Free of unknown segment {}", ptr);
      return;
    }
    const Segment& segment = it->second;
    for (size_t i = 0; i < segment.backed.size(); ++i) {
      if (segment.backed[i]) committed_ -= segment.UnitSize(i);
    }
    munmap(ptr, it->second.size);
    segments_.erase(it);
  }

  void Decommit(void* ptr, size_t size) override {
    MutexLock lock(mu_);
    auto [segment, first, last] = Locate(ptr, size);
    if (segment == nullptr) return;
    madvise(ptr, size, MADV_DONTNEED);
    mprotect(ptr, size, PROT_NONE);
    for (size_t i = first; i < last; ++i) {
      if (segment->backed[i]) committed_ -= segment->UnitSize(i);
      segment->backed[i] = false;
    }
  }

  Status Recommit(void* ptr, size_t size) override {
    MutexLock lock(mu_);
    auto [segment, first, last] = Locate(ptr, size);
    if (segment == nullptr) {
      return Status::InvalidArgument(fmt::format("host VMM source: {} is in no segment", ptr));
    }
    size_t needed = 0;
    for (size_t i = first; i < last; ++i) {
      if (!segment->backed[i]) needed += segment->UnitSize(i);
    }
    if (committed_ + needed > capacity_) return OutOfMemory(needed);
    if (mprotect(ptr, size, PROT_READ | PROT_WRITE) != 0) return OutOfMemory(needed);
    for (size_t i = first; i < last; ++i) segment->backed[i] = true;
    committed_ += needed;
    return Status::Ok();
  }

 private:
  struct Segment {
    size_t size;
    size_t unit;
    std::vector<bool> backed;  // per unit
    size_t UnitSize(size_t i) const { return std::min(unit, size - i * unit); }
  };
  struct Located {
    Segment* segment;
    size_t first, last;  // units [first, last)
  };

  size_t RoundUp(size_t size) const {
    return (size + granularity_ - 1) / granularity_ * granularity_;
  }

  // The segment holding [ptr, ptr + size) as whole units, and those units; {nullptr} (logged)
  // for a range that is not.
  Located Locate(void* ptr, size_t size) REQUIRES(mu_) {
    const uintptr_t address = reinterpret_cast<uintptr_t>(ptr);
    auto it = segments_.upper_bound(address);
    if (it != segments_.begin()) {
      --it;
      Segment& s = it->second;
      const size_t offset = address - it->first, end = offset + size;
      if (address >= it->first && end <= s.size && offset % s.unit == 0 &&
          (end % s.unit == 0 || end == s.size)) {
        return {&s, offset / s.unit, (end + s.unit - 1) / s.unit};
      }
    }
    spdlog::error("host VMM source: range {} + {} bytes is not whole units of one segment", ptr,
                  size);
    return {nullptr, 0, 0};
  }

  Status OutOfMemory(size_t size) const REQUIRES(mu_) {
    return Status::ResourceExhausted(fmt::format(
        "cpu (VMM test source): out of memory: {} more would pass the capacity of {} ({} in use)",
        FormatBytes(size), FormatBytes(capacity_), FormatBytes(committed_)));
  }

  const size_t capacity_;
  const size_t granularity_;
  Mutex mu_;
  size_t committed_ GUARDED_BY(mu_) = 0;
  std::map<uintptr_t, Segment> segments_ GUARDED_BY(mu_);
};

}  // namespace

size_t VmmDecommitUnit(size_t segment_size, size_t granularity) {
  constexpr size_t kLargeSegment = size_t{64} << 20;
  constexpr size_t kLargestUnit = size_t{32} << 20;
  if (granularity == 0 || segment_size < kLargeSegment) return granularity;
  size_t unit = granularity;
  while (unit * 2 <= segment_size / 8 && unit * 2 <= kLargestUnit) unit *= 2;
  return unit;
}

std::unique_ptr<SegmentSource> MakeHostVmmSegmentSource(size_t capacity, size_t granularity) {
  return std::make_unique<HostVmmSegmentSource>(capacity, granularity);
}

}  // namespace vramd::memory
