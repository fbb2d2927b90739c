#include "memory/ledger.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace vramd::memory {
namespace {

// Fake addresses: the ledger never dereferences what it records.
const void* Addr(uintptr_t n) { return reinterpret_cast<const void*>(0x10000000 + n * 256); }

OwnerStats StatsOrDie(const Ledger& ledger, OwnerId owner) {
  auto stats = ledger.Stats(owner);
  EXPECT_TRUE(stats.ok()) << stats.status().ToString();
  return stats.ok() ? *stats : OwnerStats{};
}

const OwnerSnapshot* Find(const std::vector<OwnerSnapshot>& snapshot, OwnerId id) {
  for (const OwnerSnapshot& s : snapshot) {
    if (s.id == id) return &s;
  }
  return nullptr;
}

TEST(LedgerTest, TotalsForSelfAndSubtree) {
  Ledger ledger;
  OwnerId model = ledger.OpenOwner(kNoOwner, OwnerKind::kModel, "add_sub");
  OwnerId version = ledger.OpenOwner(model, OwnerKind::kVersion, "1");
  OwnerId instance = ledger.OpenOwner(version, OwnerKind::kInstance, "add_sub_0");
  ledger.RecordAllocation(Addr(1), 100, Device::Cpu(), model);
  ledger.RecordAllocation(Addr(2), 200, Device::Cuda(0), instance);
  ledger.RecordAllocation(Addr(3), 300, Device::Cuda(0), instance);
  ledger.RecordAllocation(Addr(4), 7, Device::Cpu());  // no owner, no scope: the root

  EXPECT_EQ(StatsOrDie(ledger, model).live_bytes, 100);
  EXPECT_EQ(StatsOrDie(ledger, version).live_bytes, 0);
  EXPECT_EQ(StatsOrDie(ledger, instance).live_bytes, 500);
  EXPECT_EQ(StatsOrDie(ledger, instance).live_count, 2);
  EXPECT_EQ(StatsOrDie(ledger, ledger.root()).live_bytes, 7);
  EXPECT_EQ(*ledger.SubtreeLiveBytes(model), 600);
  EXPECT_EQ(*ledger.SubtreeLiveBytes(version), 500);
  EXPECT_EQ(*ledger.SubtreeLiveBytes(ledger.root()), 607);

  auto snapshot = ledger.Snapshot();
  ASSERT_EQ(snapshot.size(), 4u);
  EXPECT_EQ(snapshot[0].id, ledger.root());  // parents before children
  EXPECT_EQ(snapshot[1].id, model);
  EXPECT_EQ(snapshot[2].id, version);
  EXPECT_EQ(snapshot[3].id, instance);
  EXPECT_EQ(snapshot[0].subtree_live_bytes, 607);
  EXPECT_EQ(snapshot[0].subtree_live_count, 4);
  EXPECT_EQ(snapshot[1].subtree_live_bytes, 600);
  EXPECT_EQ(snapshot[2].parent, model);
  EXPECT_EQ(snapshot[3].kind, OwnerKind::kInstance);
  EXPECT_EQ(snapshot[3].name, "add_sub_0");

  EXPECT_EQ(ledger.RecordFree(Addr(2)), instance);
  EXPECT_EQ(*ledger.SubtreeLiveBytes(model), 400);
}

TEST(LedgerTest, PeakIsTheHighestLiveBytes) {
  Ledger ledger;
  OwnerId owner = ledger.OpenOwner(kNoOwner, OwnerKind::kScope, "peak");
  ledger.RecordAllocation(Addr(1), 100, Device::Cpu(), owner);
  ledger.RecordAllocation(Addr(2), 50, Device::Cpu(), owner);
  ledger.RecordFree(Addr(1));
  ledger.RecordAllocation(Addr(3), 20, Device::Cpu(), owner);
  OwnerStats stats = StatsOrDie(ledger, owner);
  EXPECT_EQ(stats.live_bytes, 70);
  EXPECT_EQ(stats.peak_bytes, 150);
}

TEST(LedgerTest, CumulativeTotalsSurviveFrees) {
  Ledger ledger;
  OwnerId owner = ledger.OpenOwner(kNoOwner, OwnerKind::kScope, "totals");
  for (uintptr_t i = 0; i < 10; ++i) {
    ledger.RecordAllocation(Addr(i), 10, Device::Cpu(), owner);
    ledger.RecordFree(Addr(i));
  }
  OwnerStats stats = StatsOrDie(ledger, owner);
  EXPECT_EQ(stats.live_bytes, 0);
  EXPECT_EQ(stats.live_count, 0);
  EXPECT_EQ(stats.peak_bytes, 10);
  EXPECT_EQ(stats.total_allocated_bytes, 100);
  EXPECT_EQ(stats.total_allocations, 10);
}

TEST(LedgerTest, LiveBytesPerDevice) {
  Ledger ledger;
  OwnerId owner = ledger.OpenOwner(kNoOwner, OwnerKind::kInstance, "i");
  ledger.RecordAllocation(Addr(1), 10, Device::Cpu(), owner);
  ledger.RecordAllocation(Addr(2), 20, Device::Cuda(0), owner);
  ledger.RecordAllocation(Addr(3), 30, Device::Cuda(3), owner);
  ledger.RecordAllocation(Addr(4), 40, Device::Cuda(3), owner);
  ledger.RecordAllocation(Addr(5), 50, Device::Cuda(1), owner);
  ledger.RecordFree(Addr(5));  // back to zero: not listed

  auto snapshot = ledger.Snapshot();
  const OwnerSnapshot* s = Find(snapshot, owner);
  ASSERT_NE(s, nullptr);
  using Entry = std::pair<Device, int64_t>;
  std::vector<Entry> expected = {
      {Device::Cpu(), 10}, {Device::Cuda(0), 20}, {Device::Cuda(3), 70}};
  EXPECT_EQ(s->live_bytes_by_device, expected);
}

TEST(LedgerTest, OwnerPathNamesEveryLevel) {
  Ledger ledger;
  OwnerId model = ledger.OpenOwner(kNoOwner, OwnerKind::kModel, "add_sub");
  OwnerId version = ledger.OpenOwner(model, OwnerKind::kVersion, "1");
  OwnerId instance = ledger.OpenOwner(version, OwnerKind::kInstance, "add_sub_0");
  OwnerId request = ledger.OpenOwner(instance, OwnerKind::kRequest, "42");
  EXPECT_EQ(ledger.OwnerPath(ledger.root()), "server");
  EXPECT_EQ(ledger.OwnerPath(request),
            "server/model:add_sub/version:1/instance:add_sub_0/request:42");
  EXPECT_EQ(ledger.OwnerPath(987654321), "");
  EXPECT_EQ(OwnerKindName(OwnerKind::kScope), "scope");
}

TEST(LedgerTest, CleanCloseRemovesTheOwner) {
  Ledger ledger;
  int callbacks = 0;
  ledger.SetLeakCallback([&](const LeakReport&) { ++callbacks; });
  OwnerId request = ledger.OpenOwner(kNoOwner, OwnerKind::kRequest, "1");
  ledger.RecordAllocation(Addr(1), 64, Device::Cuda(0), request);
  ledger.RecordFree(Addr(1));
  EXPECT_TRUE(ledger.CloseOwner(request).empty());
  EXPECT_EQ(ledger.Stats(request).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ledger.OwnerPath(request), "");
  EXPECT_EQ(ledger.Snapshot().size(), 1u);  // the root alone
  EXPECT_EQ(ledger.leak_reports_total(), 0u);
  EXPECT_EQ(ledger.leaked_bytes_total(), 0u);
  EXPECT_TRUE(ledger.Leaks().empty());
  EXPECT_EQ(callbacks, 0);
  EXPECT_TRUE(ledger.CloseOwner(request).empty());  // unknown now: nothing happens
}

TEST(LedgerTest, ClosingTheRootOrAnUnknownOwnerDoesNothing) {
  Ledger ledger;
  ledger.RecordAllocation(Addr(1), 64, Device::Cpu());
  EXPECT_TRUE(ledger.CloseOwner(ledger.root()).empty());
  EXPECT_TRUE(ledger.CloseOwner(kNoOwner).empty());
  EXPECT_TRUE(ledger.CloseOwner(123456789).empty());
  EXPECT_EQ(StatsOrDie(ledger, ledger.root()).live_bytes, 64);
  EXPECT_EQ(ledger.leak_reports_total(), 0u);
}

TEST(LedgerTest, LeakIsReportedWithPathSizeAndCount) {
  Ledger ledger;
  std::vector<LeakReport> seen;
  ledger.SetLeakCallback([&](const LeakReport& r) { seen.push_back(r); });
  OwnerId model = ledger.OpenOwner(kNoOwner, OwnerKind::kModel, "add_sub");
  OwnerId request = ledger.OpenOwner(model, OwnerKind::kRequest, "42");
  size_t expected_bytes = 0;
  for (uintptr_t i = 1; i <= 20; ++i) {  // 20 leaked allocations of 100..2000 bytes
    ledger.RecordAllocation(Addr(i), i * 100, Device::Cuda(1), request);
    expected_bytes += i * 100;
  }
  ledger.RecordAllocation(Addr(99), 5, Device::Cpu(), request);
  ledger.RecordFree(Addr(99));

  std::vector<LeakReport> reports = ledger.CloseOwner(request);
  ASSERT_EQ(reports.size(), 1u);
  const LeakReport& r = reports[0];
  EXPECT_EQ(r.owner, request);
  EXPECT_EQ(r.kind, OwnerKind::kRequest);
  EXPECT_EQ(r.owner_path, "server/model:add_sub/request:42");
  EXPECT_EQ(r.bytes, expected_bytes);
  EXPECT_EQ(r.count, 20u);
  EXPECT_EQ(r.still_live_bytes, expected_bytes);
  ASSERT_EQ(r.allocations.size(), 16u);  // the largest 16, largest first
  for (size_t i = 0; i < 16; ++i) {
    EXPECT_EQ(r.allocations[i].size, (20 - i) * 100);
    EXPECT_EQ(r.allocations[i].address, reinterpret_cast<uintptr_t>(Addr(20 - i)));
    EXPECT_EQ(r.allocations[i].device, Device::Cuda(1));
    EXPECT_TRUE(r.allocations[i].backtrace.empty());  // untraced
    EXPECT_LE(r.allocations[i].time, r.closed_at + std::chrono::seconds(1));
  }
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].owner_path, r.owner_path);
  EXPECT_EQ(ledger.leak_reports_total(), 1u);
  EXPECT_EQ(ledger.leaked_bytes_total(), expected_bytes);
  ASSERT_EQ(ledger.Leaks().size(), 1u);

  // The leaked owner stays, closed, with its allocations; it is charged nothing new.
  auto snapshot = ledger.Snapshot();
  const OwnerSnapshot* s = Find(snapshot, request);
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(s->closed);
  EXPECT_EQ(s->self.live_count, 20);
  EXPECT_TRUE(ledger.CloseOwner(request).empty());  // already closed
}

TEST(LedgerTest, LaterFreesUpdateStillLiveBytesAndDropTheOwner) {
  Ledger ledger;
  OwnerId request = ledger.OpenOwner(kNoOwner, OwnerKind::kRequest, "7");
  ledger.RecordAllocation(Addr(1), 1000, Device::Cuda(0), request);
  ledger.RecordAllocation(Addr(2), 24, Device::Cuda(0), request);
  ASSERT_EQ(ledger.CloseOwner(request).size(), 1u);

  EXPECT_EQ(ledger.RecordFree(Addr(1)), request);
  auto leaks = ledger.Leaks();
  ASSERT_EQ(leaks.size(), 1u);
  EXPECT_EQ(leaks[0].bytes, 1024u);
  EXPECT_EQ(leaks[0].still_live_bytes, 24u);
  EXPECT_TRUE(ledger.Stats(request).ok());

  EXPECT_EQ(ledger.RecordFree(Addr(2)), request);
  EXPECT_EQ(ledger.Leaks()[0].still_live_bytes, 0u);
  EXPECT_EQ(ledger.Stats(request).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ledger.Snapshot().size(), 1u);
  EXPECT_EQ(ledger.leaked_bytes_total(), 1024u);  // cumulative: a later free does not undo it
}

TEST(LedgerTest, ClosingAParentClosesChildrenDeepestFirst) {
  Ledger ledger;
  OwnerId model = ledger.OpenOwner(kNoOwner, OwnerKind::kModel, "m");
  OwnerId version = ledger.OpenOwner(model, OwnerKind::kVersion, "1");
  OwnerId instance = ledger.OpenOwner(version, OwnerKind::kInstance, "m_0");
  OwnerId clean = ledger.OpenOwner(instance, OwnerKind::kRequest, "clean");
  OwnerId leaky = ledger.OpenOwner(instance, OwnerKind::kRequest, "leaky");
  ledger.RecordAllocation(Addr(1), 10, Device::Cpu(), leaky);
  ledger.RecordAllocation(Addr(2), 20, Device::Cpu(), instance);
  ledger.RecordAllocation(Addr(3), 30, Device::Cpu(), model);

  auto reports = ledger.CloseOwner(model);
  ASSERT_EQ(reports.size(), 3u);
  EXPECT_EQ(reports[0].owner_path, "server/model:m/version:1/instance:m_0/request:leaky");
  EXPECT_EQ(reports[1].owner, instance);
  EXPECT_EQ(reports[2].owner, model);
  EXPECT_EQ(ledger.leaked_bytes_total(), 60u);
  EXPECT_EQ(ledger.Stats(clean).status().code(), StatusCode::kNotFound);
  // The clean version stays while a descendant holds leaks; everything goes with the frees.
  EXPECT_TRUE(ledger.Stats(version).ok());
  ledger.RecordFree(Addr(3));
  ledger.RecordFree(Addr(2));
  EXPECT_TRUE(ledger.Stats(version).ok());
  ledger.RecordFree(Addr(1));
  EXPECT_EQ(ledger.Snapshot().size(), 1u);
}

TEST(LedgerTest, ClosedOwnerChargesGoToNearestOpenAncestor) {
  Ledger ledger;
  OwnerId instance = ledger.OpenOwner(kNoOwner, OwnerKind::kInstance, "i");
  OwnerId request = ledger.OpenOwner(instance, OwnerKind::kRequest, "r");
  OwnerId scope = ledger.OpenOwner(request, OwnerKind::kScope, "s");
  ledger.RecordAllocation(Addr(1), 10, Device::Cpu(), scope);  // keeps scope and request alive
  ledger.CloseOwner(request);

  ledger.RecordAllocation(Addr(2), 500, Device::Cpu(), scope);
  EXPECT_EQ(StatsOrDie(ledger, instance).live_bytes, 500);
  EXPECT_EQ(StatsOrDie(ledger, scope).live_bytes, 10);
  // A new owner under a closed parent opens under the open ancestor too.
  OwnerId late = ledger.OpenOwner(scope, OwnerKind::kRequest, "late");
  EXPECT_EQ(ledger.OwnerPath(late), "server/instance:i/request:late");
  // An owner that is gone altogether charges the root.
  ledger.RecordFree(Addr(1));
  ledger.RecordAllocation(Addr(3), 3, Device::Cpu(), scope);
  EXPECT_EQ(StatsOrDie(ledger, ledger.root()).live_bytes, 3);
}

TEST(LedgerTest, OwnerScopeNestsAndIsPerThread) {
  Ledger ledger;
  OwnerId a = ledger.OpenOwner(kNoOwner, OwnerKind::kScope, "a");
  OwnerId b = ledger.OpenOwner(kNoOwner, OwnerKind::kScope, "b");
  EXPECT_EQ(OwnerScope::Current(), kNoOwner);
  {
    OwnerScope outer(a);
    EXPECT_EQ(OwnerScope::Current(), a);
    ledger.RecordAllocation(Addr(1), 1, Device::Cpu());
    {
      OwnerScope inner(b);
      EXPECT_EQ(OwnerScope::Current(), b);
      ledger.RecordAllocation(Addr(2), 2, Device::Cpu());
      ledger.RecordAllocation(Addr(3), 4, Device::Cpu(), a);  // an explicit owner wins
      std::thread other([&] {
        EXPECT_EQ(OwnerScope::Current(), kNoOwner);
        ledger.RecordAllocation(Addr(4), 8, Device::Cpu());
        OwnerScope there(a);
        ledger.RecordAllocation(Addr(5), 16, Device::Cpu());
      });
      other.join();
      EXPECT_EQ(OwnerScope::Current(), b);
    }
    EXPECT_EQ(OwnerScope::Current(), a);
  }
  EXPECT_EQ(OwnerScope::Current(), kNoOwner);
  EXPECT_EQ(StatsOrDie(ledger, a).live_bytes, 1 + 4 + 16);
  EXPECT_EQ(StatsOrDie(ledger, b).live_bytes, 2);
  EXPECT_EQ(StatsOrDie(ledger, ledger.root()).live_bytes, 8);
}

TEST(LedgerTest, ScopedOwnerClosesOnceAndMoves) {
  Ledger ledger;
  OwnerId id;
  {
    ScopedOwner first(&ledger, kNoOwner, OwnerKind::kRequest, "r");
    id = first.id();
    ledger.RecordAllocation(Addr(1), 10, Device::Cpu(), id);
    ScopedOwner second(std::move(first));
    EXPECT_EQ(first.id(), kNoOwner);
    EXPECT_EQ(second.id(), id);
    EXPECT_TRUE(first.Close().empty());  // moved from: owns nothing
    ScopedOwner third(&ledger, kNoOwner, OwnerKind::kRequest, "other");
    OwnerId other = third.id();
    third = std::move(second);  // closes "other" (clean), takes over "r"
    EXPECT_EQ(ledger.Stats(other).status().code(), StatusCode::kNotFound);
    EXPECT_EQ(third.id(), id);
    EXPECT_EQ(third.Close().size(), 1u);
    EXPECT_TRUE(third.Close().empty());  // idempotent
  }
  EXPECT_EQ(ledger.leak_reports_total(), 1u);
  {
    ScopedOwner clean(&ledger, kNoOwner, OwnerKind::kRequest, "clean");
    id = clean.id();
  }
  EXPECT_EQ(ledger.Stats(id).status().code(), StatusCode::kNotFound);
}

TEST(LedgerTest, LazyOwnerOpensOnlyWhenSomethingIsCharged) {
  Ledger ledger;
  OwnerId instance = ledger.OpenOwner(kNoOwner, OwnerKind::kInstance, "i");
  const size_t owners = ledger.Snapshot().size();
  {
    LazyOwner lazy(&ledger, instance, OwnerKind::kRequest, "quiet");
    OwnerScope scope(&lazy);
    EXPECT_FALSE(lazy.opened());
    EXPECT_EQ(ledger.Snapshot().size(), owners);  // nothing charged: nothing in the tree
  }
  {
    LazyOwner lazy(&ledger, instance, OwnerKind::kRequest, "busy");
    {
      OwnerScope scope(&lazy);
      ledger.RecordAllocation(Addr(1), 100, Device::Cpu());  // charged to the scope: opens it
      EXPECT_TRUE(lazy.opened());
      ledger.RecordAllocation(Addr(2), 50, Device::Cpu());
      {
        OwnerScope inner(instance);  // an explicit scope inside takes precedence
        ledger.RecordAllocation(Addr(3), 7, Device::Cpu());
      }
    }
    OwnerId id = lazy.Open();
    EXPECT_EQ(ledger.OwnerPath(id), "server/instance:i/request:busy");
    EXPECT_EQ(StatsOrDie(ledger, id).live_bytes, 150);
    EXPECT_EQ(StatsOrDie(ledger, instance).live_bytes, 7);
    ledger.RecordFree(Addr(2));
    auto leaks = lazy.Close();
    ASSERT_EQ(leaks.size(), 1u);
    EXPECT_EQ(leaks[0].owner_path, "server/instance:i/request:busy");
    EXPECT_EQ(leaks[0].bytes, 100u);
    EXPECT_TRUE(lazy.Close().empty());
  }
  EXPECT_EQ(OwnerScope::Current(), kNoOwner);
}

}  // namespace

// Outside the anonymous namespace: dladdr names only symbols with external linkage.
namespace ledger_trace_test {

// Not inlined and not a tail call, so that it is a frame of its own in the trace.
__attribute__((noinline)) void AllocateFromNamedHelperForTrace(Ledger& ledger, OwnerId owner) {
  ledger.RecordAllocation(reinterpret_cast<const void*>(0x1000), 4096, Device::Cuda(0), owner);
  asm volatile("" ::: "memory");
}

TEST(LedgerTest, BacktraceNamesTheAllocationSiteWhenTracing) {
  Ledger ledger(Ledger::Options{.trace = true, .max_frames = 16});
  EXPECT_TRUE(ledger.trace());
  OwnerId owner = ledger.OpenOwner(kNoOwner, OwnerKind::kRequest, "traced");
  AllocateFromNamedHelperForTrace(ledger, owner);
  ledger.set_trace(false);
  ledger.RecordAllocation(Addr(2), 1, Device::Cpu(), owner);

  auto reports = ledger.CloseOwner(owner);
  ASSERT_EQ(reports.size(), 1u);
  ASSERT_EQ(reports[0].allocations.size(), 2u);
  const std::vector<std::string>& frames = reports[0].allocations[0].backtrace;
  ASSERT_FALSE(frames.empty());
  EXPECT_LE(frames.size(), 16u);
  // The trace starts at the caller of RecordAllocation, not inside the ledger. The test binary
  // is linked with -rdynamic (tests/CMakeLists.txt), so dladdr can name it.
  EXPECT_NE(frames[0].find("AllocateFromNamedHelperForTrace"), std::string::npos) << frames[0];
  bool names_test = std::any_of(frames.begin(), frames.end(), [](const std::string& f) {
    return f.find("BacktraceNamesTheAllocationSiteWhenTracing") != std::string::npos;
  });
  EXPECT_TRUE(names_test) << frames[0] << "\n" << (frames.size() > 1 ? frames[1] : "");
  for (const std::string& f : frames) EXPECT_EQ(f.find("Ledger::"), std::string::npos) << f;
  EXPECT_NE(frames[0].find(") [0x"), std::string::npos) << frames[0];
  EXPECT_TRUE(reports[0].allocations[1].backtrace.empty());  // recorded with tracing off
  // Leaks() names the frames again from the stored addresses.
  EXPECT_EQ(ledger.Leaks()[0].allocations[0].backtrace, frames);
}

}  // namespace ledger_trace_test

namespace {

TEST(LedgerTest, UnknownFreesAreCountedNotFatal) {
  Ledger ledger;
  EXPECT_EQ(ledger.RecordFree(Addr(1)), kNoOwner);
  ledger.RecordAllocation(Addr(2), 8, Device::Cpu());
  EXPECT_EQ(ledger.RecordFree(Addr(2)), ledger.root());
  EXPECT_EQ(ledger.RecordFree(Addr(2)), kNoOwner);  // double free
  EXPECT_EQ(ledger.RecordFree(nullptr), kNoOwner);  // ignored, like free(nullptr)
  EXPECT_EQ(ledger.unknown_frees(), 2u);
}

TEST(LedgerTest, RecordingAnAddressTwiceReplacesTheOldRecord) {
  Ledger ledger;
  OwnerId a = ledger.OpenOwner(kNoOwner, OwnerKind::kScope, "a");
  OwnerId b = ledger.OpenOwner(kNoOwner, OwnerKind::kScope, "b");
  ledger.RecordAllocation(Addr(1), 10, Device::Cpu(), a);
  ledger.RecordAllocation(Addr(1), 20, Device::Cpu(), b);
  EXPECT_EQ(StatsOrDie(ledger, a).live_bytes, 0);
  EXPECT_EQ(StatsOrDie(ledger, b).live_bytes, 20);
  EXPECT_EQ(ledger.RecordFree(Addr(1)), b);
}

TEST(LedgerTest, LeakHistoryKeepsTheLatestThousand) {
  Ledger ledger;
  for (uintptr_t i = 0; i < 1005; ++i) {
    OwnerId r = ledger.OpenOwner(kNoOwner, OwnerKind::kRequest, std::to_string(i));
    ledger.RecordAllocation(Addr(i), 1, Device::Cpu(), r);
    ledger.CloseOwner(r);
  }
  auto leaks = ledger.Leaks();
  ASSERT_EQ(leaks.size(), 1000u);
  EXPECT_EQ(leaks.front().owner_path, "server/request:5");
  EXPECT_EQ(leaks.back().owner_path, "server/request:1004");
  EXPECT_EQ(ledger.leak_reports_total(), 1005u);
  EXPECT_EQ(ledger.leaked_bytes_total(), 1005u);
}

TEST(LedgerTest, LeakCallbackMayCallTheLedger) {
  Ledger ledger;
  std::string path;
  ledger.SetLeakCallback([&](const LeakReport& r) {
    path = ledger.OwnerPath(r.owner);  // would deadlock if called under the ledger's locks
    ledger.RecordFree(Addr(1));
  });
  OwnerId r = ledger.OpenOwner(kNoOwner, OwnerKind::kRequest, "cb");
  ledger.RecordAllocation(Addr(1), 1, Device::Cpu(), r);
  ASSERT_EQ(ledger.CloseOwner(r).size(), 1u);
  EXPECT_EQ(path, "server/request:cb");
  EXPECT_EQ(ledger.Snapshot().size(), 1u);
}

TEST(LedgerTest, RechargeMovesLiveBytesButNotTotals) {
  Ledger ledger;
  OwnerId version = ledger.OpenOwner(kNoOwner, OwnerKind::kVersion, "1");
  OwnerId instance = ledger.OpenOwner(version, OwnerKind::kInstance, "m_0");
  ledger.RecordAllocation(Addr(1), 300, Device::Cuda(0), instance);
  ledger.RecordAllocation(Addr(2), 50, Device::Cuda(0), instance);
  ledger.RecordFree(Addr(2));

  ASSERT_TRUE(ledger.Recharge(Addr(1), version).ok());
  OwnerStats moved_from = StatsOrDie(ledger, instance);
  EXPECT_EQ(moved_from.live_bytes, 0);
  EXPECT_EQ(moved_from.live_count, 0);
  EXPECT_EQ(moved_from.total_allocated_bytes, 350);  // what it made stays its history
  OwnerStats moved_to = StatsOrDie(ledger, version);
  EXPECT_EQ(moved_to.live_bytes, 300);
  EXPECT_EQ(moved_to.live_count, 1);
  EXPECT_EQ(moved_to.peak_bytes, 300);
  EXPECT_EQ(moved_to.total_allocations, 0);

  // The instance can go without a leak; the free reaches the new owner.
  EXPECT_TRUE(ledger.CloseOwner(instance).empty());
  EXPECT_EQ(ledger.RecordFree(Addr(1)), version);
  EXPECT_EQ(StatsOrDie(ledger, version).live_bytes, 0);
  EXPECT_TRUE(ledger.CloseOwner(version).empty());
  EXPECT_EQ(ledger.leaked_bytes_total(), 0u);
}

TEST(LedgerTest, RechargeOfAPointerThatIsNotLiveIsNotFoundAndChargesNothing) {
  Ledger ledger;
  OwnerId owner = ledger.OpenOwner(kNoOwner, OwnerKind::kModel, "m");
  EXPECT_EQ(ledger.Recharge(Addr(7), owner).code(), StatusCode::kNotFound);
  ledger.RecordAllocation(Addr(8), 10, Device::Cpu(), owner);
  ledger.RecordFree(Addr(8));
  EXPECT_EQ(ledger.Recharge(Addr(8), owner).code(), StatusCode::kNotFound);
  EXPECT_EQ(ledger.Recharge(nullptr, owner).code(), StatusCode::kNotFound);
  EXPECT_EQ(StatsOrDie(ledger, owner).live_bytes, 0);
  EXPECT_TRUE(ledger.CloseOwner(owner).empty());
}

TEST(LedgerTest, KnowsOnlyTheStartOfALiveAllocation) {
  Ledger ledger;
  OwnerId owner = ledger.OpenOwner(kNoOwner, OwnerKind::kModel, "m");
  EXPECT_FALSE(ledger.Knows(Addr(9)));
  EXPECT_FALSE(ledger.Knows(nullptr));
  ledger.RecordAllocation(Addr(9), 64, Device::Cpu(), owner);
  EXPECT_TRUE(ledger.Knows(Addr(9)));
  EXPECT_FALSE(ledger.Knows(static_cast<const char*>(Addr(9)) + 8));  // inside, not its start
  ledger.RecordFree(Addr(9));
  EXPECT_FALSE(ledger.Knows(Addr(9)));
  EXPECT_TRUE(ledger.CloseOwner(owner).empty());
}

TEST(LedgerTest, RechargeResolvesItsNewOwnerAsAnAllocationDoes) {
  Ledger ledger;
  OwnerId model = ledger.OpenOwner(kNoOwner, OwnerKind::kModel, "m");
  OwnerId version = ledger.OpenOwner(model, OwnerKind::kVersion, "1");
  OwnerId request = ledger.OpenOwner(model, OwnerKind::kRequest, "r");
  ledger.RecordAllocation(Addr(3), 64, Device::Cpu(), request);
  // A version closed clean has left the tree: like an allocation, the root is charged.
  ASSERT_TRUE(ledger.CloseOwner(version).empty());
  ASSERT_TRUE(ledger.Recharge(Addr(3), version).ok());
  EXPECT_EQ(StatsOrDie(ledger, request).live_bytes, 0);
  EXPECT_EQ(StatsOrDie(ledger, ledger.root()).live_bytes, 64);
  EXPECT_TRUE(ledger.CloseOwner(request).empty());
  EXPECT_EQ(ledger.RecordFree(Addr(3)), ledger.root());
  EXPECT_EQ(StatsOrDie(ledger, ledger.root()).live_bytes, 0);
  EXPECT_TRUE(ledger.CloseOwner(model).empty());
}

TEST(LedgerStressTest, RechargesRacingWithFreesLeaveEveryOwnerAtZero) {
  Ledger ledger;
  OwnerId from = ledger.OpenOwner(kNoOwner, OwnerKind::kInstance, "from");
  OwnerId to = ledger.OpenOwner(kNoOwner, OwnerKind::kVersion, "to");
  constexpr uintptr_t kCount = 20000;
  for (uintptr_t i = 0; i < kCount; ++i) {
    ledger.RecordAllocation(Addr(i), 16 + i % 7, Device::Cuda(0), from);
  }
  std::atomic<int64_t> moved{0};
  std::thread recharger([&] {
    for (uintptr_t i = 0; i < kCount; ++i) {
      if (ledger.Recharge(Addr(i), to).ok()) moved.fetch_add(1);
    }
  });
  std::thread freer([&] {
    for (uintptr_t i = kCount; i-- > 0;) ledger.RecordFree(Addr(i));
  });
  recharger.join();
  freer.join();
  EXPECT_LE(moved.load(), static_cast<int64_t>(kCount));
  EXPECT_EQ(StatsOrDie(ledger, from).live_bytes, 0);
  EXPECT_EQ(StatsOrDie(ledger, to).live_bytes, 0);
  EXPECT_EQ(StatsOrDie(ledger, to).live_count, 0);
  EXPECT_EQ(ledger.unknown_frees(), 0u);
  EXPECT_TRUE(ledger.CloseOwner(from).empty());
  EXPECT_TRUE(ledger.CloseOwner(to).empty());
}

TEST(LedgerStressTest, ExactTotalsPerOwnerUnderConcurrency) {
  constexpr int kThreads = 8;
  Ledger ledger;
  OwnerId instance = ledger.OpenOwner(kNoOwner, OwnerKind::kInstance, "stress");
  struct Expected {
    OwnerId owner = kNoOwner;
    int64_t live_bytes = 0, live_count = 0, total_bytes = 0, peak = 0;
  };
  std::vector<Expected> expected(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Expected& e = expected[t];
      e.owner = ledger.OpenOwner(instance, OwnerKind::kRequest, "t" + std::to_string(t));
      std::mt19937_64 rng(t);
      std::vector<std::pair<const void*, size_t>> live;
      const uintptr_t base = (static_cast<uintptr_t>(t) + 1) << 32;
      for (int i = 0; i < 100'000; ++i) {
        if (live.empty() || rng() % 2 == 0) {
          auto p = reinterpret_cast<const void*>(base + uintptr_t(i) * 64);
          size_t size = 1 + rng() % 100'000;
          Device device = rng() % 3 == 0 ? Device::Cpu() : Device::Cuda(rng() % 4);
          ledger.RecordAllocation(p, size, device, e.owner);
          live.emplace_back(p, size);
          e.live_bytes += size;
          e.total_bytes += size;
          e.peak = std::max(e.peak, e.live_bytes);
        } else {
          size_t k = rng() % live.size();
          std::swap(live[k], live.back());
          EXPECT_EQ(ledger.RecordFree(live.back().first), e.owner);
          e.live_bytes -= live.back().second;
          live.pop_back();
        }
      }
      e.live_count = static_cast<int64_t>(live.size());  // left live on purpose
    });
  }
  for (auto& t : threads) t.join();

  int64_t sum = 0;
  for (const Expected& e : expected) {
    OwnerStats s = StatsOrDie(ledger, e.owner);
    EXPECT_EQ(s.live_bytes, e.live_bytes);
    EXPECT_EQ(s.live_count, e.live_count);
    EXPECT_EQ(s.total_allocated_bytes, e.total_bytes);
    EXPECT_EQ(s.peak_bytes, e.peak);
    sum += e.live_bytes;
  }
  EXPECT_EQ(*ledger.SubtreeLiveBytes(instance), sum);
  EXPECT_EQ(*ledger.SubtreeLiveBytes(ledger.root()), sum);
  EXPECT_EQ(ledger.unknown_frees(), 0u);
  EXPECT_EQ(ledger.Snapshot()[0].subtree_live_bytes, sum);
}

// Owners open and close while other threads charge and free them: the races CloseOwner must
// survive (run under ThreadSanitizer by ledger_tsan_test).
TEST(LedgerStressTest, CloseRacesWithAllocationsAndFrees) {
  constexpr int kThreads = 4;
  constexpr int kRounds = 2'000;
  Ledger ledger;
  std::atomic<uint64_t> reported_bytes{0};
  ledger.SetLeakCallback([&](const LeakReport& r) { reported_bytes += r.bytes; });
  OwnerId instance = ledger.OpenOwner(kNoOwner, OwnerKind::kInstance, "race");
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const uintptr_t base = (static_cast<uintptr_t>(t) + 1) << 32;
      for (int round = 0; round < kRounds; ++round) {
        ScopedOwner request(&ledger, instance, OwnerKind::kRequest, std::to_string(round));
        OwnerScope scope(request.id());
        auto p = reinterpret_cast<const void*>(base + uintptr_t(round) * 64);
        auto q = reinterpret_cast<const void*>(base + uintptr_t(round) * 64 + 32);
        ledger.RecordAllocation(p, 100, Device::Cuda(0));
        ledger.RecordAllocation(q, 1, Device::Cpu());
        ledger.RecordFree(q);
        if (round % 2 == 0) ledger.RecordFree(p);  // odd rounds leak p...
        request.Close();
        if (round % 4 == 1) ledger.RecordFree(p);  // ...and half of those are freed later
        ledger.RecordAllocation(q, 1, Device::Cpu());  // charged to the ancestor
        ledger.RecordFree(q);
        if (round % 64 == 0) (void)ledger.Snapshot().size();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(reported_bytes.load(), uint64_t{kThreads} * (kRounds / 2) * 100);
  EXPECT_EQ(ledger.leaked_bytes_total(), reported_bytes.load());
  EXPECT_EQ(*ledger.SubtreeLiveBytes(ledger.root()), int64_t{kThreads} * (kRounds / 4) * 100);
  EXPECT_EQ(StatsOrDie(ledger, instance).live_bytes, 0);
  // Owners that were freed after their leak are gone; the others stay.
  EXPECT_EQ(ledger.Snapshot().size(), 2u + kThreads * (kRounds / 4));
}

// ---- Quotas (memory/quota.h) ----

const QuotaUse* UseOn(const OwnerSnapshot& owner, Device device) {
  for (const QuotaUse& use : owner.quota) {
    if (use.device == device) return &use;
  }
  return nullptr;
}

TEST(LedgerQuotaTest, ARefusedChargeLeavesNoTraceAndNamesWhoAsked) {
  Ledger ledger;
  OwnerId version = ledger.OpenOwner(kNoOwner, OwnerKind::kVersion, "1", {{Device::Cpu(), 1000}});
  OwnerId request = ledger.OpenOwner(version, OwnerKind::kRequest, "r7");
  {
    auto first = ledger.Charge(Device::Cpu(), 600, request);
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    ledger.Commit(std::move(first).value(), Addr(1));
  }
  auto refused = ledger.Charge(Device::Cpu(), 500, request);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.status().message(),
            "memory quota of server/version:1 refuses 500 B on cpu for server/version:1/request:r7:"
            " it holds 600 B of its 1000 B there");
  // Not even the peak saw the refused bytes.
  OwnerStats stats = StatsOrDie(ledger, request);
  EXPECT_EQ(stats.live_bytes, 600);
  EXPECT_EQ(stats.peak_bytes, 600);
  EXPECT_EQ(stats.total_allocations, 1);
  EXPECT_EQ(ledger.quota_refusals_total(), 1u);
  // What fits still fits, to the byte.
  auto exact = ledger.Charge(Device::Cpu(), 400, request);
  ASSERT_TRUE(exact.ok()) << exact.status().ToString();
  ledger.Commit(std::move(exact).value(), Addr(2));
  auto snapshot = ledger.Snapshot();
  const QuotaUse* use = UseOn(*Find(snapshot, version), Device::Cpu());
  ASSERT_NE(use, nullptr);
  EXPECT_EQ(use->limit_bytes, 1000);
  EXPECT_EQ(use->used_bytes, 1000);
  EXPECT_EQ(use->refusals, 1u);
  EXPECT_TRUE(Find(snapshot, request)->quota.empty());  // the owner that set it shows it
}

TEST(LedgerQuotaTest, FreesAndUncommittedChargesGiveTheRoomBack) {
  Ledger ledger;
  OwnerId version = ledger.OpenOwner(kNoOwner, OwnerKind::kVersion, "1", {{Device::Cpu(), 1000}});
  {
    auto pending = ledger.Charge(Device::Cpu(), 1000, version);
    ASSERT_TRUE(pending.ok());
    // Dropped uncommitted: the memory could not be made.
  }
  EXPECT_EQ(StatsOrDie(ledger, version).live_bytes, 0);
  EXPECT_EQ(StatsOrDie(ledger, version).total_allocations, 0);
  auto full = ledger.Charge(Device::Cpu(), 1000, version);
  ASSERT_TRUE(full.ok());
  ledger.Commit(std::move(full).value(), Addr(1));
  EXPECT_FALSE(ledger.Charge(Device::Cpu(), 1, version).ok());
  ledger.RecordFree(Addr(1));
  EXPECT_TRUE(ledger.Charge(Device::Cpu(), 1000, version).ok());
}

TEST(LedgerQuotaTest, EachDeviceIsBoundedAloneAndOthersAreFree) {
  Ledger ledger;
  auto quota = ParseMemoryQuota("1000B, cuda:1=300B");
  ASSERT_TRUE(quota.ok());
  OwnerId version = ledger.OpenOwner(kNoOwner, OwnerKind::kVersion, "1", *quota);
  OwnerId other = ledger.OpenOwner(kNoOwner, OwnerKind::kVersion, "other");
  uintptr_t n = 0;
  auto charge = [&](Device device, size_t size, OwnerId owner) {
    auto c = ledger.Charge(device, size, owner);
    if (!c.ok()) return false;
    ledger.Commit(std::move(c).value(), Addr(++n));
    return true;
  };
  EXPECT_TRUE(charge(Device::Cuda(0), 1000, version));
  EXPECT_FALSE(charge(Device::Cuda(0), 1, version));
  EXPECT_TRUE(charge(Device::Cuda(2), 1000, version));  // each GPU has its own 1000
  EXPECT_TRUE(charge(Device::Cuda(1), 300, version));
  EXPECT_FALSE(charge(Device::Cuda(1), 1, version));
  EXPECT_TRUE(charge(Device::Cpu(), 1 << 20, version));  // no limit on host memory
  EXPECT_TRUE(charge(Device::Cuda(0), 1 << 20, other));   // another owner is untouched
  auto snapshot = ledger.Snapshot();
  const OwnerSnapshot& v = *Find(snapshot, version);
  ASSERT_NE(UseOn(v, Device::Cuda(0)), nullptr);
  EXPECT_EQ(UseOn(v, Device::Cuda(0))->used_bytes, 1000);
  EXPECT_EQ(UseOn(v, Device::Cuda(0))->refusals, 1u);
  EXPECT_EQ(UseOn(v, Device::Cuda(2))->used_bytes, 1000);
  EXPECT_EQ(UseOn(v, Device::Cuda(1))->used_bytes, 300);
  EXPECT_EQ(UseOn(v, Device::Cuda(1))->limit_bytes, 300);
  EXPECT_EQ(UseOn(v, Device::Cuda(3)), nullptr);  // unused GPUs are not listed one by one
  EXPECT_EQ(UseOn(v, Device::Cpu()), nullptr);
  EXPECT_TRUE(Find(snapshot, other)->quota.empty());
}

TEST(LedgerQuotaTest, AnUnusedEachGpuLimitShowsOnce) {
  Ledger ledger;
  OwnerId version = ledger.OpenOwner(kNoOwner, OwnerKind::kVersion, "1", *ParseMemoryQuota("1GiB"));
  auto snapshot = ledger.Snapshot();
  const OwnerSnapshot& v = *Find(snapshot, version);
  ASSERT_EQ(v.quota.size(), 1u);
  EXPECT_EQ(QuotaDeviceName(v.quota[0].device), "cuda:*");
  EXPECT_EQ(v.quota[0].limit_bytes, int64_t{1} << 30);
  EXPECT_EQ(v.quota[0].used_bytes, 0);
}

TEST(LedgerQuotaTest, DescendantsShareTheQuotaAndNestedQuotasEachApply) {
  Ledger ledger;
  OwnerId version = ledger.OpenOwner(kNoOwner, OwnerKind::kVersion, "1", {{Device::Cpu(), 1000}});
  OwnerId a = ledger.OpenOwner(version, OwnerKind::kInstance, "a");
  OwnerId b = ledger.OpenOwner(version, OwnerKind::kInstance, "b");
  OwnerId b_request = ledger.OpenOwner(b, OwnerKind::kRequest, "r");
  OwnerId own = ledger.OpenOwner(a, OwnerKind::kScope, "own", {{Device::Cpu(), 500}});
  auto c1 = ledger.Charge(Device::Cpu(), 600, a);
  ASSERT_TRUE(c1.ok());
  ledger.Commit(std::move(c1).value(), Addr(1));
  EXPECT_FALSE(ledger.Charge(Device::Cpu(), 500, b_request).ok());  // 600 + 500 > 1000
  EXPECT_TRUE(ledger.Charge(Device::Cpu(), 400, b_request).ok());
  // Its own 500 first, then the version's room: 450 fits the one, not the other.
  auto inner = ledger.Charge(Device::Cpu(), 501, own);
  ASSERT_FALSE(inner.ok());
  EXPECT_NE(inner.status().message().find("memory quota of server/version:1/instance:a/scope:own"),
            std::string::npos)
      << inner.status().message();
  auto outer = ledger.Charge(Device::Cpu(), 450, own);
  ASSERT_FALSE(outer.ok());
  EXPECT_NE(outer.status().message().find("memory quota of server/version:1 refuses"),
            std::string::npos)
      << outer.status().message();
  // The inner quota passed, then the outer refused: the inner one's share was given back.
  auto snapshot = ledger.Snapshot();
  EXPECT_EQ(UseOn(*Find(snapshot, own), Device::Cpu())->used_bytes, 0);
  EXPECT_EQ(UseOn(*Find(snapshot, own), Device::Cpu())->refusals, 1u);
  EXPECT_EQ(UseOn(*Find(snapshot, version), Device::Cpu())->used_bytes, 600);
  auto fits = ledger.Charge(Device::Cpu(), 400, own);
  ASSERT_TRUE(fits.ok());
  ledger.Commit(std::move(fits).value(), Addr(2));
  snapshot = ledger.Snapshot();
  EXPECT_EQ(UseOn(*Find(snapshot, own), Device::Cpu())->used_bytes, 400);
  EXPECT_EQ(UseOn(*Find(snapshot, version), Device::Cpu())->used_bytes, 1000);
  ledger.RecordFree(Addr(2));
  snapshot = ledger.Snapshot();
  EXPECT_EQ(UseOn(*Find(snapshot, own), Device::Cpu())->used_bytes, 0);
  EXPECT_EQ(UseOn(*Find(snapshot, version), Device::Cpu())->used_bytes, 600);
}

TEST(LedgerQuotaTest, TheServersBudgetBoundsEveryOwnerTogether) {
  Ledger::Options options;
  options.budget = {{Device::Cpu(), 1000}};
  Ledger ledger(options);
  OwnerId a = ledger.OpenOwner(kNoOwner, OwnerKind::kVersion, "a");
  OwnerId b = ledger.OpenOwner(kNoOwner, OwnerKind::kVersion, "b", {{Device::Cpu(), 800}});
  auto first = ledger.Charge(Device::Cpu(), 700, a);
  ASSERT_TRUE(first.ok());
  ledger.Commit(std::move(first).value(), Addr(1));
  auto refused = ledger.Charge(Device::Cpu(), 400, b);  // b's own 800 has room; the server not
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(),
            "the server's memory budget (--memory-budget) refuses 400 B on cpu for "
            "server/version:b: the server holds 700 B of its 1000 B there");
  EXPECT_TRUE(ledger.Charge(Device::Cpu(), 300, b).ok());
  EXPECT_TRUE(ledger.Charge(Device::Cuda(0), 1 << 20, b).ok());  // no budget on cuda:0
  // Memory charged to the root itself counts too.
  ledger.RecordAllocation(Addr(2), 300, Device::Cpu());
  EXPECT_FALSE(ledger.Charge(Device::Cpu(), 1, a).ok());
  auto snapshot = ledger.Snapshot();
  const QuotaUse* budget = UseOn(snapshot[0], Device::Cpu());  // the root comes first
  ASSERT_NE(budget, nullptr);
  EXPECT_EQ(budget->limit_bytes, 1000);
  EXPECT_EQ(budget->used_bytes, 1000);
  EXPECT_EQ(budget->refusals, 2u);
}

TEST(LedgerQuotaTest, RecordedMemoryAndRechargesAreCountedNeverRefused) {
  Ledger ledger;
  OwnerId version = ledger.OpenOwner(kNoOwner, OwnerKind::kVersion, "1", {{Device::Cpu(), 1000}});
  OwnerId free_owner = ledger.OpenOwner(kNoOwner, OwnerKind::kVersion, "free");
  // Memory that exists already (an import, a framework's own) cannot be refused: it is counted,
  // and what is left for allocations shrinks.
  ledger.RecordAllocation(Addr(1), 1500, Device::Cpu(), version);
  EXPECT_FALSE(ledger.Charge(Device::Cpu(), 1, version).ok());
  // Moved out of the quota's subtree, it no longer counts there; moved back, it does again.
  ASSERT_TRUE(ledger.Recharge(Addr(1), free_owner).ok());
  EXPECT_TRUE(ledger.Charge(Device::Cpu(), 1000, version).ok());
  ASSERT_TRUE(ledger.Recharge(Addr(1), version).ok());
  auto snapshot = ledger.Snapshot();
  EXPECT_EQ(UseOn(*Find(snapshot, version), Device::Cpu())->used_bytes, 1500);
  ledger.RecordFree(Addr(1));
  snapshot = ledger.Snapshot();
  EXPECT_EQ(UseOn(*Find(snapshot, version), Device::Cpu())->used_bytes, 0);
}

TEST(LedgerQuotaTest, AClosedOwnersLeakStaysCountedUntilFreed) {
  Ledger ledger;
  OwnerId version = ledger.OpenOwner(kNoOwner, OwnerKind::kVersion, "1", {{Device::Cpu(), 1000}});
  OwnerId request = ledger.OpenOwner(version, OwnerKind::kRequest, "leaky");
  auto c = ledger.Charge(Device::Cpu(), 800, request);
  ASSERT_TRUE(c.ok());
  ledger.Commit(std::move(c).value(), Addr(1));
  EXPECT_EQ(ledger.CloseOwner(request).size(), 1u);  // a leak report
  EXPECT_FALSE(ledger.Charge(Device::Cpu(), 300, version).ok());
  // Charges of the closed request go to the version, within the same quota.
  EXPECT_FALSE(ledger.Charge(Device::Cpu(), 300, request).ok());
  ledger.RecordFree(Addr(1));
  EXPECT_TRUE(ledger.Charge(Device::Cpu(), 1000, version).ok());
}

TEST(LedgerQuotaTest, AnExecutionsPeakIsLearnedByBatchSize) {
  Ledger ledger;
  OwnerId version = ledger.OpenOwner(kNoOwner, OwnerKind::kVersion, "1", MeasurePeaks());
  OwnerId instance = ledger.OpenOwner(version, OwnerKind::kInstance, "i", MeasurePeaks());
  ledger.RecordAllocation(Addr(1), 1000, Device::Cuda(0), instance);  // weights: not a rise
  uintptr_t n = 1;
  auto execute = [&](int64_t batch, std::vector<std::pair<Device, size_t>> made) {
    ledger.MarkPeaks(instance);
    OwnerId request = ledger.OpenOwner(instance, OwnerKind::kRequest, "r");
    std::vector<uintptr_t> live;
    for (const auto& [device, size] : made) {
      auto charge = ledger.Charge(device, size, request);
      ASSERT_TRUE(charge.ok());
      ledger.Commit(std::move(charge).value(), Addr(++n));
      live.push_back(n);
      if (live.size() == 2) {  // the first block is freed once the second is made
        ledger.RecordFree(Addr(live.front()));
        live.erase(live.begin());
      }
    }
    for (uintptr_t address : live) ledger.RecordFree(Addr(address));
    ledger.CloseOwner(request);
    ledger.LearnExecutionPeaks(instance, version, batch, Device::Cuda(0));
  };
  execute(4, {{Device::Cuda(0), 300}, {Device::Cuda(0), 200}, {Device::Cpu(), 100}});
  execute(4, {{Device::Cuda(0), 50}});  // smaller: the largest is kept
  execute(8, {{Device::Cuda(0), 900}});
  execute(1, {});  // made nothing: a known 0 on its own device, nothing elsewhere
  auto snapshot = ledger.Snapshot();
  const OwnerSnapshot& v = *Find(snapshot, version);
  ASSERT_EQ(v.execution_peaks.size(), 4u);
  EXPECT_EQ(v.execution_peaks[0].device, Device::Cpu());
  EXPECT_EQ(v.execution_peaks[0].batch_size, 4);
  EXPECT_EQ(v.execution_peaks[0].bytes, 100);
  EXPECT_EQ(v.execution_peaks[1].device, Device::Cuda(0));
  EXPECT_EQ(v.execution_peaks[1].batch_size, 1);
  EXPECT_EQ(v.execution_peaks[1].bytes, 0);
  EXPECT_EQ(v.execution_peaks[2].device, Device::Cuda(0));
  EXPECT_EQ(v.execution_peaks[2].batch_size, 4);
  EXPECT_EQ(v.execution_peaks[2].bytes, 500);  // 300 and 200 live together
  EXPECT_EQ(v.execution_peaks[3].batch_size, 8);
  EXPECT_EQ(v.execution_peaks[3].bytes, 900);
  // Measured, not bounded: no quota to show.
  EXPECT_TRUE(v.quota.empty());
  EXPECT_TRUE(Find(snapshot, instance)->execution_peaks.empty());
}

TEST(LedgerQuotaTest, ConcurrentChargesNeverPassTheLimit) {
  Ledger ledger;
  constexpr int64_t kLimit = 40 * 1000;  // one thread alone holds up to 50 blocks
  OwnerId version =
      ledger.OpenOwner(kNoOwner, OwnerKind::kVersion, "1", {{Device::Cpu(), kLimit}});
  std::atomic<int64_t> held{0};
  std::atomic<int64_t> worst{0};
  std::atomic<int> refusals{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      OwnerId mine = ledger.OpenOwner(version, OwnerKind::kInstance, std::to_string(t));
      std::vector<uintptr_t> live;
      for (int i = 0; i < 2000; ++i) {
        const uintptr_t address =
            1 + static_cast<uintptr_t>(t) * 100000 + static_cast<uintptr_t>(i);
        // `held` rises after a charge and falls before a free, so it never exceeds what the
        // quota counts.
        if (live.size() >= 50 || (i % 3 == 2 && !live.empty())) {
          held.fetch_sub(1000);
          ledger.RecordFree(Addr(live.back()));
          live.pop_back();
          continue;
        }
        auto c = ledger.Charge(Device::Cpu(), 1000, mine);
        if (!c.ok()) {
          refusals.fetch_add(1);
          continue;
        }
        const int64_t now = held.fetch_add(1000) + 1000;
        int64_t w = worst.load();
        while (now > w && !worst.compare_exchange_weak(w, now)) {
        }
        ledger.Commit(std::move(c).value(), Addr(address));
        live.push_back(address);
      }
      for (uintptr_t address : live) {
        held.fetch_sub(1000);
        ledger.RecordFree(Addr(address));
      }
      ledger.CloseOwner(mine);
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_LE(worst.load(), kLimit);
  EXPECT_GT(refusals.load(), 0);
  auto snapshot = ledger.Snapshot();
  EXPECT_EQ(UseOn(*Find(snapshot, version), Device::Cpu())->used_bytes, 0);
}

}  // namespace
}  // namespace vramd::memory
