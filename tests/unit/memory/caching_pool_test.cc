// CachingPool policy tests. Most use FakeSource, which hands out fake, never-touched addresses,
// logs every call and can run out of memory on demand; the concurrency test uses real host
// memory and writes to it to catch overlapping blocks.
#include "memory/caching_pool.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "memory/cuda_devices.h"
#include "memory/segment_source.h"

namespace vramd::memory {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr size_t KiB = size_t{1} << 10;
constexpr size_t MiB = size_t{1} << 20;

// What FakeSource did and how it should behave; shared with the test, which keeps it after the
// pool (and its source) are gone.
struct FakeLog {
  std::mutex mu;
  std::vector<std::string> calls;      // "alloc <size>", "free <size>", "sync", in order
  std::map<uintptr_t, size_t> held;    // segments handed out and not yet freed
  size_t held_bytes = 0;
  size_t capacity = SIZE_MAX;          // Allocate fails beyond this many held bytes
  int allocate_calls = 0;
  int fail_at = 0;                     // this Allocate call (1-based) fails once; 0: never
  bool fail_as_internal = false;       // fail with Internal instead of ResourceExhausted

  std::vector<std::string> Calls() {
    std::lock_guard lock(mu);
    return calls;
  }
};

class FakeSource final : public SegmentSource {
 public:
  explicit FakeSource(std::shared_ptr<FakeLog> log) : log_(std::move(log)) {}

  Device device() const override { return Device::Cuda(3); }

  Result<void*> Allocate(size_t size) override {
    std::lock_guard lock(log_->mu);
    log_->calls.push_back("alloc " + std::to_string(size));
    ++log_->allocate_calls;
    if (log_->allocate_calls == log_->fail_at || log_->held_bytes + size > log_->capacity) {
      if (log_->fail_as_internal) return Status::Internal("fake: device lost");
      return Status::ResourceExhausted("fake: out of memory");
    }
    uintptr_t address = next_;
    // 2 MiB aligned, with a gap so that segments are never adjacent.
    next_ = (next_ + size + 4 * MiB) & ~(2 * MiB - 1);
    log_->held[address] = size;
    log_->held_bytes += size;
    return reinterpret_cast<void*>(address);
  }

  void Free(void* ptr, size_t size) override {
    std::lock_guard lock(log_->mu);
    log_->calls.push_back("free " + std::to_string(size));
    auto it = log_->held.find(reinterpret_cast<uintptr_t>(ptr));
    ASSERT_NE(it, log_->held.end()) << "freed a segment the source did not give";
    ASSERT_EQ(it->second, size) << "freed with another size than allocated";
    log_->held_bytes -= size;
    log_->held.erase(it);
  }

  void Synchronize() override {
    std::lock_guard lock(log_->mu);
    log_->calls.push_back("sync");
  }

 private:
  std::shared_ptr<FakeLog> log_;
  uintptr_t next_ = uintptr_t{1} << 40;
};

class CachingPoolTest : public ::testing::Test {
 protected:
  CachingPoolTest() : log_(std::make_shared<FakeLog>()) {
    pool_ = std::make_unique<CachingPool>(std::make_unique<FakeSource>(log_));
    // Tests leave blocks live and free unknown pointers on purpose; the pool would log both.
    saved_level_ = spdlog::get_level();
    spdlog::set_level(spdlog::level::off);
  }
  ~CachingPoolTest() override {
    pool_.reset();
    spdlog::set_level(saved_level_);
  }

  uintptr_t Alloc(size_t size, StreamId stream = 0) {
    Result<void*> r = pool_->Allocate(size, stream);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? reinterpret_cast<uintptr_t>(*r) : 0;
  }
  void FreeAt(uintptr_t address) { pool_->Free(reinterpret_cast<void*>(address)); }

  std::shared_ptr<FakeLog> log_;
  std::unique_ptr<CachingPool> pool_;
  spdlog::level::level_enum saved_level_;
};

TEST_F(CachingPoolTest, RoundsRequestsUpTo512Bytes) {
  uintptr_t a = Alloc(1);
  uintptr_t b = Alloc(0);
  uintptr_t c = Alloc(513);
  uintptr_t d = Alloc(1024);
  EXPECT_EQ(b - a, 512u);
  EXPECT_EQ(c - b, 512u);
  EXPECT_EQ(d - c, 1024u);
  EXPECT_EQ(pool_->RequestedSize(reinterpret_cast<void*>(a)), 1u);
  EXPECT_EQ(pool_->RequestedSize(reinterpret_cast<void*>(b)), 0u);
  EXPECT_EQ(pool_->RequestedSize(reinterpret_cast<void*>(c)), 513u);
  PoolStats s = pool_->Stats();
  EXPECT_EQ(s.allocated_bytes, 512u + 512u + 1024u + 1024u);
  EXPECT_EQ(s.requested_bytes, 1u + 0u + 513u + 1024u);
  EXPECT_EQ(s.live_allocations, 4u);
  EXPECT_EQ(pool_->RequestedSize(reinterpret_cast<void*>(a + 8)), 0u);
}

TEST_F(CachingPoolTest, SmallAndLargeRequestsUseSeparatePoolsAndSegmentSizes) {
  uintptr_t small = Alloc(1 * MiB);          // largest small request
  uintptr_t large = Alloc(1 * MiB + 1);      // smallest large request: 1 MiB + 512 rounded
  // Large segments are rounded up to 2 MiB; this one goes to another stream, which holds no
  // large segment yet (see MidSizeRequestsShareSegmentsOnAStreamThatHasOne).
  uintptr_t larger = Alloc(5 * MiB + 3, 7);
  EXPECT_THAT(log_->Calls(),
              ElementsAre("alloc 2097152", "alloc 2097152", "alloc 6291456"));
  std::vector<SegmentInfo> segments = pool_->Snapshot();
  ASSERT_EQ(segments.size(), 3u);
  EXPECT_EQ(segments[0].address, small);
  EXPECT_EQ(segments[1].address, large);
  EXPECT_EQ(segments[2].address, larger);
  // The 1 MiB tail of the small segment serves another small request: no new segment, and the
  // large segment's free space (less than 1 MiB after rounding) is never used for it.
  uintptr_t small2 = Alloc(512 * KiB);
  EXPECT_EQ(small2, small + 1 * MiB);
  EXPECT_EQ(log_->Calls().size(), 3u);
  // The large block was not split: its remainder (1 MiB - 512) is not above 1 MiB.
  EXPECT_EQ(pool_->Snapshot()[1].blocks.size(), 1u);
  EXPECT_EQ(pool_->Stats().allocated_bytes, 1 * MiB + 2 * MiB + 6 * MiB + 512 * KiB);
}

TEST_F(CachingPoolTest, MidSizeRequestsShareSegmentsOnAStreamThatHasOne) {
  const uintptr_t first = Alloc(3 * MiB, 1);     // the stream's first large segment: 4 MiB
  const uintptr_t second = Alloc(2 * MiB, 1);    // now a shared 12 MiB mid-size segment
  const uintptr_t third = Alloc(5 * MiB, 1);     // fits in what the 12 MiB segment has left
  Alloc(9 * MiB, 1);                             // 8 MiB and up: its own size, 10 MiB
  Alloc(3 * MiB, 2);                             // another stream's first: 4 MiB
  EXPECT_THAT(log_->Calls(), ElementsAre("alloc 4194304", "alloc 12582912", "alloc 10485760",
                                         "alloc 4194304"));
  EXPECT_EQ(third, second + 2 * MiB);
  EXPECT_EQ(pool_->Stats().reserved_bytes, (4 + 12 + 10 + 4) * MiB);

  // Space freed in the shared segment serves the next pass's requests of other sizes.
  FreeAt(second);
  FreeAt(third);
  log_->calls.clear();
  EXPECT_EQ(Alloc(6 * MiB, 1), second);
  EXPECT_EQ(Alloc(4 * MiB, 1), second + 6 * MiB);
  EXPECT_TRUE(log_->Calls().empty());

  // A stream that gave back all its large segments starts again with one of exact size.
  FreeAt(first);
  log_->calls.clear();
  pool_->Trim();
  EXPECT_THAT(log_->Calls(), ElementsAre("sync", "free 4194304"));
  Result<void*> again = pool_->Allocate(3 * MiB, 3);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(log_->Calls().back(), "alloc 4194304");
}

TEST_F(CachingPoolTest, SmallAllocationsSplitOneSegmentIntoAdjacentBlocks) {
  uintptr_t a = Alloc(1000);
  uintptr_t b = Alloc(3000);
  uintptr_t c = Alloc(512);
  EXPECT_EQ(b, a + 1024);
  EXPECT_EQ(c, b + 3072);
  EXPECT_EQ(log_->Calls().size(), 1u);
  std::vector<SegmentInfo> segments = pool_->Snapshot();
  ASSERT_EQ(segments.size(), 1u);
  const auto& blocks = segments[0].blocks;
  ASSERT_EQ(blocks.size(), 4u);
  EXPECT_EQ(blocks[0].address, a);
  EXPECT_EQ(blocks[3].address, c + 512);
  EXPECT_EQ(blocks[3].size, 2 * MiB - 1024 - 3072 - 512);
  EXPECT_FALSE(blocks[3].allocated);
  EXPECT_TRUE(blocks[0].allocated && blocks[1].allocated && blocks[2].allocated);
}

TEST_F(CachingPoolTest, FreeingMiddleThenNeighboursCoalescesIntoOneBlock) {
  uintptr_t a = Alloc(4096);
  uintptr_t b = Alloc(4096);
  uintptr_t c = Alloc(4096);
  uintptr_t d = Alloc(4096);  // keeps c's right neighbour allocated until the end
  FreeAt(b);
  auto blocks = pool_->Snapshot()[0].blocks;
  ASSERT_EQ(blocks.size(), 5u);  // a, (b), c, d, tail
  EXPECT_FALSE(blocks[1].allocated);
  FreeAt(a);  // merges with b
  blocks = pool_->Snapshot()[0].blocks;
  ASSERT_EQ(blocks.size(), 4u);
  EXPECT_EQ(blocks[0].address, a);
  EXPECT_EQ(blocks[0].size, 8192u);
  EXPECT_FALSE(blocks[0].allocated);
  FreeAt(c);  // merges with a+b on the left; d still allocated on the right
  blocks = pool_->Snapshot()[0].blocks;
  ASSERT_EQ(blocks.size(), 3u);
  EXPECT_EQ(blocks[0].size, 12288u);
  FreeAt(d);  // merges both sides: one free block spanning the segment
  std::vector<SegmentInfo> segments = pool_->Snapshot();
  ASSERT_EQ(segments.size(), 1u);
  ASSERT_EQ(segments[0].blocks.size(), 1u);
  EXPECT_EQ(segments[0].blocks[0].address, segments[0].address);
  EXPECT_EQ(segments[0].blocks[0].size, 2 * MiB);
  EXPECT_FALSE(segments[0].blocks[0].allocated);
  PoolStats s = pool_->Stats();
  EXPECT_EQ(s.largest_free_block_bytes, 2 * MiB);
  EXPECT_EQ(s.fragmentation, 0.0);
}

TEST_F(CachingPoolTest, BestFitTakesTheSmallestFittingBlockThenTheLowestAddress) {
  // Holes of 2 KiB, 1 KiB, 2 KiB (in address order) between allocated separators.
  uintptr_t h1 = Alloc(2 * KiB);
  Alloc(512);
  uintptr_t h2 = Alloc(1 * KiB);
  Alloc(512);
  uintptr_t h3 = Alloc(2 * KiB);
  Alloc(512);  // the segment's large free tail follows
  FreeAt(h1);
  FreeAt(h2);
  FreeAt(h3);
  EXPECT_EQ(Alloc(1 * KiB), h2);       // exact fit, though h1 comes first
  EXPECT_EQ(Alloc(1536), h1);          // both 2 KiB holes fit: the lower address wins
  EXPECT_EQ(Alloc(2 * KiB), h3);       // the remaining 2 KiB hole, not the tail
  EXPECT_EQ(log_->Calls().size(), 1u);
}

TEST_F(CachingPoolTest, BestFitAcrossLargeSegmentsKeepsRemaindersOfAtMostOneMiB) {
  uintptr_t four = Alloc(4 * MiB);
  uintptr_t eight = Alloc(8 * MiB);
  FreeAt(four);
  FreeAt(eight);
  // 3 MiB fits both; the 4 MiB segment is the best fit, and its 1 MiB rest stays in the block.
  EXPECT_EQ(Alloc(3 * MiB), four);
  EXPECT_EQ(pool_->Stats().allocated_bytes, 4 * MiB);
  // 5 MiB from the 8 MiB segment leaves 3 MiB, which is split off.
  EXPECT_EQ(Alloc(5 * MiB), eight);
  EXPECT_EQ(pool_->Stats().allocated_bytes, 9 * MiB);
  EXPECT_EQ(Alloc(3 * MiB), eight + 5 * MiB);
  EXPECT_EQ(log_->Calls().size(), 2u);
}

TEST_F(CachingPoolTest, StreamsNeverShareBlocksOrSegments) {
  uintptr_t on1 = Alloc(4096, /*stream=*/1);
  FreeAt(on1);
  uintptr_t on2 = Alloc(4096, /*stream=*/2);
  std::vector<SegmentInfo> segments = pool_->Snapshot();
  ASSERT_EQ(segments.size(), 2u);
  EXPECT_EQ(segments[0].stream, 1u);
  EXPECT_EQ(segments[1].stream, 2u);
  EXPECT_EQ(on2, segments[1].address);
  // Stream 2's segment has room, but stream 1 gets its own free block back.
  EXPECT_EQ(Alloc(4096, 1), on1);
  // A large free block of stream 1 is not used for stream 2 either.
  uintptr_t big1 = Alloc(8 * MiB, 1);
  FreeAt(big1);
  uintptr_t big2 = Alloc(8 * MiB, 2);
  EXPECT_NE(big2, big1);
  EXPECT_EQ(pool_->Stats().segments, 4u);
}

TEST_F(CachingPoolTest, TrimSynchronizesThenReturnsExactlyTheFullyFreeSegments) {
  uintptr_t kept_small = Alloc(4096);             // segment 1 (small), stays in use
  uintptr_t freed_small = Alloc(4096, 7);         // segment 2 (small, stream 7), freed
  uintptr_t freed_large = Alloc(6 * MiB);         // segment 3 (large), freed
  uintptr_t large_part = Alloc(10 * MiB);         // segment 4 (large), split; part in use
  FreeAt(freed_small);
  FreeAt(freed_large);
  FreeAt(large_part);
  uintptr_t in_use = Alloc(3 * MiB);              // best fit: the 6 MiB segment
  EXPECT_EQ(in_use, freed_large);
  FreeAt(in_use);
  uintptr_t part = Alloc(7 * MiB);                // from the 10 MiB segment; 3 MiB split off
  EXPECT_EQ(part, large_part);
  log_->calls.clear();

  EXPECT_EQ(pool_->Trim(), 2 * MiB + 6 * MiB);
  EXPECT_THAT(log_->Calls(), ElementsAre("sync", "free 2097152", "free 6291456"));
  std::vector<SegmentInfo> segments = pool_->Snapshot();
  ASSERT_EQ(segments.size(), 2u);
  EXPECT_EQ(segments[0].address, kept_small);
  EXPECT_EQ(segments[1].address, large_part);
  PoolStats s = pool_->Stats();
  EXPECT_EQ(s.reserved_bytes, 2 * MiB + 10 * MiB);
  EXPECT_EQ(log_->held_bytes, s.reserved_bytes);
  EXPECT_EQ(s.segments, 2u);
  EXPECT_EQ(s.segment_frees, 2u);
  EXPECT_EQ(s.peak_reserved_bytes, 2 * MiB + 2 * MiB + 6 * MiB + 10 * MiB);
}

TEST_F(CachingPoolTest, TrimWithNothingFullyFreeNeitherSynchronizesNorFrees) {
  Alloc(4096);
  Alloc(3 * MiB);
  log_->calls.clear();
  EXPECT_EQ(pool_->Trim(), 0u);
  EXPECT_TRUE(log_->Calls().empty());
}

TEST_F(CachingPoolTest, OutOfMemoryReleasesCachedSegmentsAndRetries) {
  log_->capacity = 8 * MiB;
  FreeAt(Alloc(4 * MiB));  // cached, fully free
  uintptr_t kept = Alloc(512);  // 2 MiB small segment, in use: 6 MiB held
  log_->calls.clear();
  uintptr_t six = Alloc(6 * MiB);
  EXPECT_NE(six, 0u);
  // The stream holds a large segment, so a 12 MiB mid-size segment is tried first, then the
  // request's own 6 MiB, then the cached segment is released and 6 MiB tried again.
  EXPECT_THAT(log_->Calls(), ElementsAre("alloc 12582912", "alloc 6291456", "sync",
                                         "free 4194304", "alloc 6291456"));
  PoolStats s = pool_->Stats();
  EXPECT_EQ(s.reserved_bytes, 8 * MiB);
  EXPECT_EQ(s.oom_retries, 1u);
  EXPECT_EQ(s.out_of_memory, 0u);
  EXPECT_EQ(s.segment_frees, 1u);
  EXPECT_EQ(pool_->RequestedSize(reinterpret_cast<void*>(kept)), 512u);
}

TEST_F(CachingPoolTest, OutOfMemoryAfterTheRetryFailsWithAReport) {
  log_->capacity = 8 * MiB;
  Alloc(6 * MiB);
  uintptr_t small = Alloc(100 * KiB);
  ASSERT_NE(small, 0u);
  log_->calls.clear();
  Result<void*> r = pool_->Allocate(4 * MiB);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  // A 12 MiB mid-size segment, then the request's own size; nothing was fully free, so the
  // retry came without a sync or a free.
  EXPECT_THAT(log_->Calls(), ElementsAre("alloc 12582912", "alloc 4194304", "alloc 4194304"));
  const std::string& m = r.status().message();
  EXPECT_THAT(m, HasSubstr("cuda:3: out of memory"));
  EXPECT_THAT(m, HasSubstr("cannot allocate 4.0 MiB (4194304 bytes)"));
  EXPECT_THAT(m, HasSubstr("8.0 MiB reserved in 2 segment(s)"));
  EXPECT_THAT(m, HasSubstr("6.1 MiB allocated to 2 live allocation(s)"));
  EXPECT_THAT(m, HasSubstr("1.9 MiB cached free"));
  EXPECT_THAT(m, HasSubstr("largest free block 1.9 MiB"));
  EXPECT_THAT(m, HasSubstr("fake: out of memory"));
  EXPECT_THAT(m, HasSubstr("Remedy: free memory on cuda:3"));
  PoolStats s = pool_->Stats();
  EXPECT_EQ(s.out_of_memory, 1u);
  EXPECT_EQ(s.oom_retries, 1u);
  EXPECT_EQ(s.live_allocations, 2u);

  // When the cached free memory would cover the request, the remedy says it is fragmented.
  Result<void*> r2 = pool_->Allocate(1536 * KiB, /*stream=*/5);
  ASSERT_FALSE(r2.ok());
  EXPECT_THAT(r2.status().message(), HasSubstr("split into smaller blocks or belongs to other"));
}

TEST_F(CachingPoolTest, FailureAtTheKthSegmentIsRetriedOnce) {
  log_->fail_at = 2;
  Alloc(4 * MiB);
  FreeAt(Alloc(1 * KiB));       // second source call fails once, the retry succeeds
  EXPECT_THAT(log_->Calls(),
              ElementsAre("alloc 4194304", "alloc 2097152", "alloc 2097152"));
  PoolStats s = pool_->Stats();
  EXPECT_EQ(s.oom_retries, 1u);
  EXPECT_EQ(s.segments, 2u);
  EXPECT_EQ(s.segment_allocations, 2u);
}

TEST_F(CachingPoolTest, SourceErrorsOtherThanOutOfMemoryAreReturnedWithoutRetry) {
  log_->fail_at = 1;
  log_->fail_as_internal = true;
  Result<void*> r = pool_->Allocate(1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
  EXPECT_EQ(log_->Calls().size(), 1u);
  EXPECT_EQ(pool_->Stats().out_of_memory, 0u);
}

TEST_F(CachingPoolTest, StatsOnAConstructedLayout) {
  // One small segment: four 256 KiB blocks, then a 1 MiB tail. Free the 1st and 3rd.
  const size_t ask = 256 * KiB - 100;
  uintptr_t a = Alloc(ask);
  Alloc(ask);
  uintptr_t c = Alloc(ask);
  Alloc(ask);
  FreeAt(a);
  FreeAt(c);
  PoolStats s = pool_->Stats();
  EXPECT_EQ(s.device, Device::Cuda(3));
  EXPECT_EQ(s.reserved_bytes, 2 * MiB);
  EXPECT_EQ(s.allocated_bytes, 512 * KiB);
  EXPECT_EQ(s.requested_bytes, 2 * ask);
  EXPECT_EQ(s.peak_reserved_bytes, 2 * MiB);
  EXPECT_EQ(s.peak_allocated_bytes, 1 * MiB);
  EXPECT_EQ(s.segments, 1u);
  EXPECT_EQ(s.live_allocations, 2u);
  EXPECT_EQ(s.cached_free_bytes, 1536 * KiB);
  EXPECT_EQ(s.largest_free_block_bytes, 1 * MiB);
  // 1 - 1 MiB / 1.5 MiB
  EXPECT_DOUBLE_EQ(s.fragmentation, 1.0 / 3.0);
  EXPECT_EQ(s.total_allocations, 4u);
  EXPECT_EQ(s.segment_allocations, 1u);
  EXPECT_EQ(s.segment_frees, 0u);
  EXPECT_EQ(s.out_of_memory, 0u);
  EXPECT_EQ(s.unknown_frees, 0u);
  // A second stream's free block counts too: the largest is now 8 MiB of 9.5 MiB free.
  FreeAt(Alloc(8 * MiB, 9));
  s = pool_->Stats();
  EXPECT_EQ(s.largest_free_block_bytes, 8 * MiB);
  EXPECT_DOUBLE_EQ(s.fragmentation, 1.0 - 8.0 / 9.5);
  EXPECT_EQ(s.peak_allocated_bytes, 512 * KiB + 8 * MiB);
}

TEST_F(CachingPoolTest, EmptyPoolHasZeroFragmentation) {
  PoolStats s = pool_->Stats();
  EXPECT_EQ(s.reserved_bytes, 0u);
  EXPECT_EQ(s.fragmentation, 0.0);
  EXPECT_EQ(pool_->device(), Device::Cuda(3));
}

TEST_F(CachingPoolTest, FreeOfAnUnknownPointerIsCountedAndIgnored) {
  uintptr_t a = Alloc(4096);
  PoolStats before = pool_->Stats();
  FreeAt(a + 512);                   // inside a block, not its start
  FreeAt(0xdead000);                 // never handed out
  pool_->Free(nullptr);              // a no-op, not counted
  FreeAt(a);
  FreeAt(a);                         // double free
  PoolStats s = pool_->Stats();
  EXPECT_EQ(s.unknown_frees, 3u);
  EXPECT_EQ(before.allocated_bytes, 4096u);
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_EQ(s.live_allocations, 0u);
}

TEST_F(CachingPoolTest, DestructionReturnsEverySegment) {
  Alloc(100);
  FreeAt(Alloc(3 * MiB));
  Alloc(50 * MiB, 4);
  pool_.reset();
  EXPECT_EQ(log_->held_bytes, 0u);
  EXPECT_TRUE(log_->held.empty());
  EXPECT_EQ(log_->Calls()[3], "sync");
}

TEST(HostSegmentSourceTest, AllocatesAlignedMemory) {
  std::unique_ptr<SegmentSource> source = MakeHostSegmentSource();
  EXPECT_EQ(source->device(), Device::Cpu());
  for (size_t size : {size_t{1}, size_t{300}, 2 * MiB, 3 * MiB + 7}) {
    Result<void*> r = source->Allocate(size);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(*r) % 256, 0u) << size;
    std::memset(*r, 0xab, size);
    source->Free(*r, size);
  }
  source->Synchronize();
}

TEST(HostSegmentSourceTest, ImpossibleSizeIsResourceExhausted) {
  std::unique_ptr<SegmentSource> source = MakeHostSegmentSource();
  Result<void*> r = source->Allocate(SIZE_MAX / 2);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(r.status().message(), HasSubstr("cpu"));
  EXPECT_THAT(r.status().message(), HasSubstr(std::to_string(SIZE_MAX / 2)));
}

TEST(CachingPoolHostTest, AnImpossibleRequestFailsWithoutCrashing) {
  CachingPool pool(MakeHostSegmentSource());
  Result<void*> r = pool.Allocate(SIZE_MAX - 5);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(pool.Stats().out_of_memory, 1u);
}

TEST(CachingPoolHostTest, ManyThreadsAllocatingAndFreeingEndWithNothingAllocated) {
  CachingPool pool(MakeHostSegmentSource());
  constexpr int kThreads = 4;
  constexpr int kIterations = 20000;
  const size_t kSizes[] = {1, 700, 4096, 100 * KiB, 1 * MiB, 1536 * KiB, 3 * MiB};
  std::atomic<int> corrupted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      const StreamId stream = t % 2;
      const unsigned char tag = static_cast<unsigned char>(t + 1);
      std::vector<std::pair<unsigned char*, size_t>> live;
      for (int i = 0; i < kIterations; ++i) {
        if (live.size() < 8 && (live.empty() || rng() % 2 == 0)) {
          size_t size = kSizes[rng() % std::size(kSizes)];
          Result<void*> r = pool.Allocate(size, stream);
          if (!r.ok()) {
            ++corrupted;
            continue;
          }
          auto* p = static_cast<unsigned char*>(*r);
          p[0] = tag;
          p[size - 1] = tag;
          live.emplace_back(p, size);
        } else {
          size_t k = rng() % live.size();
          auto [p, size] = live[k];
          if (p[0] != tag || p[size - 1] != tag) ++corrupted;
          pool.Free(p);
          live[k] = live.back();
          live.pop_back();
        }
      }
      for (auto [p, size] : live) {
        if (p[0] != tag || p[size - 1] != tag) ++corrupted;
        pool.Free(p);
      }
    });
  }
  for (std::thread& t : threads) t.join();

  EXPECT_EQ(corrupted.load(), 0);
  PoolStats s = pool.Stats();
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_EQ(s.requested_bytes, 0u);
  EXPECT_EQ(s.live_allocations, 0u);
  EXPECT_EQ(s.cached_free_bytes, s.reserved_bytes);
  EXPECT_EQ(s.unknown_frees, 0u);
  EXPECT_GT(s.peak_allocated_bytes, 0u);
  EXPECT_LE(s.peak_allocated_bytes, s.peak_reserved_bytes);
  EXPECT_EQ(s.segment_allocations - s.segment_frees, s.segments);
  // Everything merged back: each segment is one free block.
  std::vector<SegmentInfo> segments = pool.Snapshot();
  ASSERT_EQ(segments.size(), s.segments);
  size_t total = 0;
  for (const SegmentInfo& seg : segments) {
    ASSERT_EQ(seg.blocks.size(), 1u);
    EXPECT_FALSE(seg.blocks[0].allocated);
    EXPECT_EQ(seg.blocks[0].size, seg.size);
    total += seg.size;
  }
  EXPECT_EQ(total, s.reserved_bytes);
  EXPECT_EQ(pool.Trim(), s.reserved_bytes);
  EXPECT_EQ(pool.Stats().reserved_bytes, 0u);
  EXPECT_EQ(pool.Stats().segments, 0u);
}

TEST(CudaSegmentSourceTest, UnavailableForAMissingDevice) {
  Result<std::unique_ptr<SegmentSource>> r = MakeCudaSegmentSource(-1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(r.status().message(), HasSubstr("cuda:-1"));
  const int count = CudaDeviceCount();
  Result<std::unique_ptr<SegmentSource>> past = MakeCudaSegmentSource(count);
  ASSERT_FALSE(past.ok());
  EXPECT_EQ(past.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(past.status().message(), HasSubstr("cuda:" + std::to_string(count)));
#if !VRAMD_WITH_CUDA
  EXPECT_THAT(past.status().message(), HasSubstr("built without CUDA"));
#endif
}

TEST(CudaSegmentSourceTest, PoolOnTheFirstGpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  Result<std::unique_ptr<SegmentSource>> source = MakeCudaSegmentSource(0);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  CachingPool pool(std::move(*source));
  EXPECT_EQ(pool.device(), Device::Cuda(0));
  Result<void*> a = pool.Allocate(64 * MiB);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*a) % 256, 0u);
  pool.Free(*a);
  Result<void*> b = pool.Allocate(64 * MiB);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, *a);  // served from the cache
  pool.Free(*b);
  EXPECT_EQ(pool.Stats().segment_allocations, 1u);
  EXPECT_EQ(pool.Trim(), 64 * MiB);
  // Far more than any GPU has: fails cleanly, with a report.
  Result<void*> huge = pool.Allocate(size_t{1} << 50);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(huge.status().message(), HasSubstr("cuda:0: out of memory"));
}

}  // namespace
}  // namespace vramd::memory
