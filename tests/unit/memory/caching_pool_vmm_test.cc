// The VMM pool's policy (caching_pool.h, docs/memory.md "The VMM pool") on the host VMM source:
// real reserved ranges whose decommitted pages fault when touched, so a hole handed out, or a
// live block decommitted, crashes the test instead of passing it. Every pool here writes over
// each block it gets and checks the pattern later.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "memory/caching_pool.h"
#include "memory/segment_source.h"

namespace vramd::memory {
namespace {

constexpr size_t kVmmMiB = size_t{1} << 20;
constexpr size_t kVmmGranule = 2 * kVmmMiB;

// The host VMM source with decommit hidden: the caching pool's behaviour on the same capacity.
class VmmTestNoDecommit final : public SegmentSource {
 public:
  explicit VmmTestNoDecommit(std::unique_ptr<SegmentSource> inner) : inner_(std::move(inner)) {}
  Device device() const override { return inner_->device(); }
  Result<void*> Allocate(size_t size) override { return inner_->Allocate(size); }
  void Free(void* ptr, size_t size) override { inner_->Free(ptr, size); }
  size_t decommit_granularity() const override { return 0; }

 private:
  std::unique_ptr<SegmentSource> inner_;
};

std::unique_ptr<CachingPool> MakeVmmTestPool(size_t capacity) {
  return std::make_unique<CachingPool>(MakeHostVmmSegmentSource(capacity, kVmmGranule));
}
std::unique_ptr<CachingPool> MakePlainTestPool(size_t capacity) {
  return std::make_unique<CachingPool>(
      std::make_unique<VmmTestNoDecommit>(MakeHostVmmSegmentSource(capacity, kVmmGranule)));
}

struct VmmTestLive {
  void* ptr;
  size_t size;
  uint8_t tag;
};

void VmmTestFill(const VmmTestLive& b) { std::memset(b.ptr, b.tag, b.size); }
bool VmmTestIntact(const VmmTestLive& b) {
  const auto* p = static_cast<const uint8_t*>(b.ptr);
  return std::all_of(p, p + b.size, [&](uint8_t v) { return v == b.tag; });
}

TEST(HostVmmSourceTest, CapacityCountsWhatIsBackedAndDecommitGivesItBack) {
  auto source = MakeHostVmmSegmentSource(8 * kVmmMiB, kVmmGranule);
  EXPECT_EQ(source->decommit_granularity(), kVmmGranule);
  Result<void*> a = source->Allocate(6 * kVmmMiB);
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*a) % kVmmGranule, 0u);
  std::memset(*a, 7, 6 * kVmmMiB);
  Result<void*> b = source->Allocate(4 * kVmmMiB);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kResourceExhausted);

  auto* middle = static_cast<uint8_t*>(*a) + kVmmGranule;
  source->Decommit(middle, kVmmGranule);
  b = source->Allocate(4 * kVmmMiB);
  ASSERT_TRUE(b.ok()) << b.status().message();
  // The first and last granules kept their contents; the middle one cannot come back while the
  // capacity is used by b.
  EXPECT_EQ(static_cast<uint8_t*>(*a)[0], 7);
  EXPECT_EQ(static_cast<uint8_t*>(*a)[5 * kVmmMiB], 7);
  Status full = source->Recommit(middle, kVmmGranule);
  EXPECT_EQ(full.code(), StatusCode::kResourceExhausted);
  source->Free(*b, 4 * kVmmMiB);
  ASSERT_TRUE(source->Recommit(middle, kVmmGranule).ok());
  middle[0] = 1;  // backed again: writable
  EXPECT_EQ(middle[1], 0);  // and its old contents are gone
  source->Free(*a, 6 * kVmmMiB);
  // Everything came back: the whole capacity is one allocation again.
  Result<void*> all = source->Allocate(8 * kVmmMiB);
  ASSERT_TRUE(all.ok()) << all.status().message();
  source->Free(*all, 8 * kVmmMiB);
}

// 24 blocks of 3 kVmmMiB on one stream share 12 kVmmMiB segments; freeing every other one leaves half the
// capacity free in 3 kVmmMiB pieces, none of them in a fully free segment.
std::vector<VmmTestLive> VmmTestCheckerboard(CachingPool* pool) {
  std::vector<VmmTestLive> live;
  for (int i = 0; i < 24; ++i) {
    Result<void*> p = pool->Allocate(3 * kVmmMiB);
    if (!p.ok()) break;
    live.push_back({*p, 3 * kVmmMiB, static_cast<uint8_t>(i + 1)});
    VmmTestFill(live.back());
  }
  std::vector<VmmTestLive> kept;
  for (size_t i = 0; i < live.size(); ++i) {
    if (i % 2 == 0) {
      pool->Free(live[i].ptr);
    } else {
      kept.push_back(live[i]);
    }
  }
  return kept;
}

TEST(VmmPoolTest, MemoryFreeInPiecesServesOneLargeRequest) {
  constexpr size_t kCapacity = 96 * kVmmMiB;
  auto plain = MakePlainTestPool(kCapacity);
  auto vmm = MakeVmmTestPool(kCapacity);
  std::vector<VmmTestLive> plain_live = VmmTestCheckerboard(plain.get());
  std::vector<VmmTestLive> vmm_live = VmmTestCheckerboard(vmm.get());
  ASSERT_EQ(plain_live.size(), vmm_live.size());
  const PoolStats before = vmm->Stats();
  ASSERT_GE(before.cached_free_bytes, 30 * kVmmMiB);
  EXPECT_LE(before.largest_free_block_bytes, 4 * kVmmMiB);
  // Free: what the source has left plus what the pool caches.
  const size_t free_bytes = kCapacity - before.reserved_bytes + before.cached_free_bytes;
  const size_t wanted = free_bytes / 2;

  Result<void*> on_plain = plain->Allocate(wanted);
  EXPECT_FALSE(on_plain.ok());
  EXPECT_EQ(on_plain.status().code(), StatusCode::kResourceExhausted);

  Result<void*> on_vmm = vmm->Allocate(wanted);
  ASSERT_TRUE(on_vmm.ok()) << on_vmm.status().message();
  VmmTestLive big{*on_vmm, wanted, 0xEE};
  VmmTestFill(big);
  for (const VmmTestLive& b : vmm_live) EXPECT_TRUE(VmmTestIntact(b)) << "a live block changed";
  const PoolStats after = vmm->Stats();
  EXPECT_GT(after.hole_bytes, 0u);
  EXPECT_GT(after.decommits, 0u);
  EXPECT_EQ(after.oom_retries, 1u);

  vmm->Free(big.ptr);
  for (const VmmTestLive& b : vmm_live) vmm->Free(b.ptr);
  for (const VmmTestLive& b : plain_live) plain->Free(b.ptr);
  vmm->Trim();
  EXPECT_EQ(vmm->Stats().reserved_bytes, 0u);
  EXPECT_EQ(vmm->Stats().hole_bytes, 0u);
  EXPECT_EQ(vmm->Stats().segments, 0u);
}

TEST(VmmPoolTest, TrimGivesBackFreeGranulesOfSegmentsInUseAndHolesAreNeverHandedOut) {
  auto pool = MakeVmmTestPool(256 * kVmmMiB);
  std::vector<VmmTestLive> live = VmmTestCheckerboard(pool.get());
  const PoolStats before = pool->Stats();
  EXPECT_EQ(before.decommit_granularity, kVmmGranule);
  EXPECT_GT(before.remappable_free_bytes, 0u);
  // The 3 kVmmMiB free pieces are split across granules: some hold a whole one, some none.
  EXPECT_LT(before.fragmentation, 1.0 - static_cast<double>(before.largest_free_block_bytes) /
                                            before.cached_free_bytes);

  const size_t returned = pool->Trim();
  const PoolStats trimmed = pool->Stats();
  // The first block's segment was its own (4 kVmmMiB) and is now fully free: it goes whole; the
  // rest of what is returned stays as holes in the 12 kVmmMiB segments.
  EXPECT_EQ(returned, before.remappable_free_bytes);
  EXPECT_EQ(trimmed.segments, before.segments - 1);
  EXPECT_EQ(trimmed.hole_bytes, returned - 4 * kVmmMiB);
  EXPECT_EQ(trimmed.reserved_bytes, before.reserved_bytes - returned);
  EXPECT_EQ(trimmed.remappable_free_bytes, 0u);
  EXPECT_EQ(trimmed.allocated_bytes, before.allocated_bytes);

  // What is left of the free pieces still serves small requests, and never from a hole (the
  // writes would fault).
  std::vector<VmmTestLive> small;
  for (int i = 0; i < 64; ++i) {
    Result<void*> p = pool->Allocate(256 * 1024);
    ASSERT_TRUE(p.ok()) << p.status().message();
    small.push_back({*p, 256 * 1024, static_cast<uint8_t>(100 + i % 50)});
    VmmTestFill(small.back());
  }
  for (int i = 0; i < 8; ++i) {
    Result<void*> p = pool->Allocate(3 * kVmmMiB);
    ASSERT_TRUE(p.ok()) << p.status().message();
    small.push_back({*p, 3 * kVmmMiB, static_cast<uint8_t>(200 + i)});
    VmmTestFill(small.back());
  }
  // Freeing a neighbour of a hole leaves the hole alone.
  for (const VmmTestLive& b : live) pool->Free(b.ptr);
  for (const VmmTestLive& b : small) EXPECT_TRUE(VmmTestIntact(b));
  for (const VmmTestLive& b : small) pool->Free(b.ptr);
  EXPECT_EQ(pool->Stats().allocated_bytes, 0u);
  pool->Trim();
  const PoolStats empty = pool->Stats();
  EXPECT_EQ(empty.reserved_bytes, 0u);
  EXPECT_EQ(empty.hole_bytes, 0u);
  EXPECT_EQ(empty.segments, 0u);
}

// A fragmenting trace (sizes from 4 KiB to 24 kVmmMiB, frees in random order) on both pools, seeded:
// at the end the VMM pool serves half of what is free as one request, the caching pool does not.
TEST(VmmPoolTest, AfterAFragmentingTraceHalfTheFreeMemoryIsOneAllocation) {
  constexpr size_t kCapacity = 512 * kVmmMiB;
  for (bool vmm : {false, true}) {
    SCOPED_TRACE(vmm ? "vmm pool" : "caching pool");
    auto pool = vmm ? MakeVmmTestPool(kCapacity) : MakePlainTestPool(kCapacity);
    std::mt19937_64 rng(17);
    std::uniform_real_distribution<double> log_size(12.0, 24.6);  // 4 KiB .. 24 kVmmMiB
    std::vector<VmmTestLive> live;
    for (int step = 0; step < 4000; ++step) {
      const bool allocate = live.empty() || (rng() % 100) < 60;
      if (allocate) {
        const size_t size = static_cast<size_t>(std::exp2(log_size(rng)));
        Result<void*> p = pool->Allocate(size);
        if (!p.ok()) continue;  // full: the trace goes on freeing
        live.push_back({*p, size, static_cast<uint8_t>(1 + step % 250)});
        std::memset(p.value(), live.back().tag, std::min<size_t>(size, 4096));
      } else {
        const size_t i = rng() % live.size();
        pool->Free(live[i].ptr);
        live[i] = live.back();
        live.pop_back();
      }
    }
    // Free half of what is left, in random order.
    std::shuffle(live.begin(), live.end(), rng);
    for (size_t i = live.size() / 2; i < live.size(); ++i) {
      pool->Free(live[i].ptr);
    }
    live.resize(live.size() / 2);
    const PoolStats s = pool->Stats();
    const size_t free_bytes = kCapacity - s.reserved_bytes + s.cached_free_bytes;
    ASSERT_GT(free_bytes, kCapacity / 4);
    Result<void*> big = pool->Allocate(free_bytes / 2);
    EXPECT_EQ(big.ok(), vmm) << (big.ok() ? "" : big.status().message());
    if (big.ok()) {
      std::memset(*big, 0xAB, free_bytes / 2);
      pool->Free(*big);
    }
    for (const VmmTestLive& b : live) {
      const auto* p = static_cast<const uint8_t*>(b.ptr);
      EXPECT_EQ(p[0], b.tag);
      pool->Free(b.ptr);
    }
    pool->Trim();
    EXPECT_EQ(pool->Stats().reserved_bytes, 0u);
  }
}

TEST(VmmPoolTest, EvictGivesBackALiveAllocationsMemoryAndRestoreMapsItAtTheSameAddress) {
  auto pool = MakeVmmTestPool(24 * kVmmMiB);
  Result<void*> weights = pool->Allocate(10 * kVmmMiB);
  ASSERT_TRUE(weights.ok());
  std::memset(*weights, 0x5A, 10 * kVmmMiB);
  Result<size_t> given = pool->Evict(*weights);
  ASSERT_TRUE(given.ok()) << given.status().message();
  EXPECT_EQ(*given, 10 * kVmmMiB);  // its own segment: every granule
  EXPECT_EQ(*pool->Evict(*weights), 0u);  // already evicted
  PoolStats s = pool->Stats();
  EXPECT_EQ(s.reserved_bytes, 0u);
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_EQ(s.hole_bytes, 10 * kVmmMiB);

  // The device can use the memory meanwhile; the wake then waits for room.
  Result<void*> other = pool->Allocate(20 * kVmmMiB);
  ASSERT_TRUE(other.ok()) << other.status().message();
  Status full = pool->Restore(*weights);
  EXPECT_EQ(full.code(), StatusCode::kResourceExhausted);
  pool->Free(*other);
  pool->Trim();
  ASSERT_TRUE(pool->Restore(*weights).ok());
  std::memset(*weights, 0x6B, 10 * kVmmMiB);  // writable again, at the same address
  s = pool->Stats();
  EXPECT_EQ(s.allocated_bytes, 10 * kVmmMiB);
  EXPECT_EQ(s.reserved_bytes, 10 * kVmmMiB);
  EXPECT_EQ(s.hole_bytes, 0u);
  pool->Free(*weights);
  pool->Trim();
  EXPECT_EQ(pool->Stats().reserved_bytes, 0u);
}

TEST(VmmPoolTest, EvictKeepsGranulesSharedWithNeighboursAndAnEvictedBlockCanBeFreed) {
  auto pool = MakeVmmTestPool(64 * kVmmMiB);
  // A 4 kVmmMiB segment for the first, then one 12 kVmmMiB segment for three 3 kVmmMiB blocks: the middle
  // one, at [3, 6) kVmmMiB, holds one whole granule, [4, 6).
  std::vector<VmmTestLive> blocks;
  for (int i = 0; i < 4; ++i) {
    Result<void*> p = pool->Allocate(3 * kVmmMiB);
    ASSERT_TRUE(p.ok());
    blocks.push_back({*p, 3 * kVmmMiB, static_cast<uint8_t>(i + 1)});
    VmmTestFill(blocks.back());
  }
  Result<size_t> given = pool->Evict(blocks[2].ptr);
  ASSERT_TRUE(given.ok());
  EXPECT_EQ(*given, 2 * kVmmMiB);
  EXPECT_TRUE(VmmTestIntact(blocks[1]));
  EXPECT_TRUE(VmmTestIntact(blocks[3]));
  // Freed while evicted: the granule stays a hole, the rest is free again, and nothing handed
  // out later lands in the hole (the writes would fault).
  pool->Free(blocks[2].ptr);
  const PoolStats s = pool->Stats();
  EXPECT_EQ(s.hole_bytes, 2 * kVmmMiB);
  EXPECT_EQ(s.allocated_bytes, (4 + 3 + 3) * kVmmMiB);  // the first block keeps its segment's 1 kVmmMiB rest
  std::vector<VmmTestLive> more;
  for (int i = 0; i < 6; ++i) {
    Result<void*> p = pool->Allocate(1536 * 1024);
    ASSERT_TRUE(p.ok());
    more.push_back({*p, 1536 * 1024, static_cast<uint8_t>(50 + i)});
    VmmTestFill(more.back());
  }
  for (const VmmTestLive& b : more) EXPECT_TRUE(VmmTestIntact(b));
  for (const VmmTestLive& b : more) pool->Free(b.ptr);
  for (int i : {0, 1, 3}) pool->Free(blocks[i].ptr);
  pool->Trim();
  EXPECT_EQ(pool->Stats().reserved_bytes, 0u);
  EXPECT_EQ(pool->Stats().hole_bytes, 0u);
}

TEST(VmmPoolTest, EvictNeedsAPoolThatCanDecommit) {
  auto plain = MakePlainTestPool(16 * kVmmMiB);
  Result<void*> p = plain->Allocate(4 * kVmmMiB);
  ASSERT_TRUE(p.ok());
  Result<size_t> given = plain->Evict(*p);
  EXPECT_EQ(given.status().code(), StatusCode::kUnsupported);
  auto vmm = MakeVmmTestPool(16 * kVmmMiB);
  int not_ours = 0;
  EXPECT_EQ(vmm->Evict(&not_ours).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(vmm->Restore(&not_ours).code(), StatusCode::kInvalidArgument);
  plain->Free(*p);
}

TEST(VmmPoolTest, LargeSegmentsAreBackedAndGivenBackInLargerUnits) {
  EXPECT_EQ(VmmDecommitUnit(2 * kVmmMiB, kVmmGranule), kVmmGranule);
  EXPECT_EQ(VmmDecommitUnit(62 * kVmmMiB, kVmmGranule), kVmmGranule);
  EXPECT_EQ(VmmDecommitUnit(64 * kVmmMiB, kVmmGranule), 8 * kVmmMiB);
  EXPECT_EQ(VmmDecommitUnit(100 * kVmmMiB, kVmmGranule), 8 * kVmmMiB);
  EXPECT_EQ(VmmDecommitUnit(1024 * kVmmMiB, kVmmGranule), 32 * kVmmMiB);
  EXPECT_EQ(VmmDecommitUnit(8192 * kVmmMiB, kVmmGranule), 32 * kVmmMiB);

  auto pool = MakeVmmTestPool(256 * kVmmMiB);
  Result<void*> first = pool->Allocate(100 * kVmmMiB);  // a segment of 100 kVmmMiB: units of 8 kVmmMiB
  ASSERT_TRUE(first.ok());
  pool->Free(*first);
  Result<void*> kept = pool->Allocate(20 * kVmmMiB);  // [0, 20) of that segment
  ASSERT_TRUE(kept.ok());
  ASSERT_EQ(*kept, *first);
  VmmTestLive live{*kept, 20 * kVmmMiB, 0x3C};
  VmmTestFill(live);
  // Free: [20, 100). Whole units: [24, 96), and the short last one, [96, 100).
  EXPECT_EQ(pool->Stats().remappable_free_bytes, 76 * kVmmMiB);
  EXPECT_EQ(pool->Trim(), 76 * kVmmMiB);
  EXPECT_EQ(pool->Stats().reserved_bytes, 24 * kVmmMiB);
  EXPECT_TRUE(VmmTestIntact(live));  // [20, 24) shares its unit with the live block: kept
  // The source agrees: the 232 kVmmMiB it has left can be had in one piece.
  Result<void*> rest = pool->Allocate(232 * kVmmMiB);
  ASSERT_TRUE(rest.ok()) << rest.status().message();
  pool->Free(*rest);
  Result<size_t> evicted = pool->Evict(*kept);
  ASSERT_TRUE(evicted.ok());
  EXPECT_EQ(*evicted, 16 * kVmmMiB);  // units 0 and 1; unit 2 holds [16, 24)
  ASSERT_TRUE(pool->Restore(*kept).ok());
  VmmTestFill(live);
  pool->Free(*kept);
  pool->Trim();
  EXPECT_EQ(pool->Stats().reserved_bytes, 0u);
}

TEST(VmmPoolTest, TheOutOfMemoryReportSaysWhatWasDecommitted) {
  auto pool = MakeVmmTestPool(32 * kVmmMiB);
  Result<void*> a = pool->Allocate(20 * kVmmMiB);
  ASSERT_TRUE(a.ok());
  Result<void*> b = pool->Allocate(20 * kVmmMiB);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("whole granules of free blocks, decommitted"),
            std::string::npos)
      << b.status().message();
  pool->Free(*a);
}

}  // namespace
}  // namespace vramd::memory
