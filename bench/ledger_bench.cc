// Ledger bookkeeping cost: the hot path (RecordAllocation + RecordFree), owner churn, and the
// price of tracing. Target: <= 200 ns per pair without tracing (docs/benchmarks.md).
//
//   build-ledger/bench/ledger_bench --benchmark_min_time=1
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>
#include <utility>

#include "memory/backtrace.h"
#include "memory/ledger.h"

namespace vramd::memory {
namespace {

// 64k live allocations in the background, so the shards' maps are not empty toys.
Ledger* MakeLedger(bool trace) {
  auto* ledger = new Ledger(Ledger::Options{.trace = trace});
  for (uintptr_t i = 0; i < 65536; ++i) {
    ledger->RecordAllocation(reinterpret_cast<const void*>(0x7f0000000000 + i * 256), 4096,
                             Device::Cuda(0));
  }
  return ledger;
}

Ledger& SharedLedger(bool trace) {
  static Ledger* untraced = MakeLedger(false);
  static Ledger* traced = MakeLedger(true);
  return trace ? *traced : *untraced;
}

// Each thread charges its own request owner, as request threads do.
void BM_LedgerRecordPair(benchmark::State& state) {
  Ledger& ledger = SharedLedger(state.range(0) != 0);
  OwnerId owner = ledger.OpenOwner(kNoOwner, OwnerKind::kRequest,
                                   "bench_" + std::to_string(state.thread_index()));
  const uintptr_t base = (static_cast<uintptr_t>(state.thread_index()) + 1) << 36;
  uintptr_t i = 0;
  for (auto _ : state) {
    const void* p = reinterpret_cast<const void*>(base + (i++ & 1023) * 256);
    ledger.RecordAllocation(p, 4096, Device::Cuda(0), owner);
    benchmark::DoNotOptimize(ledger.RecordFree(p));
  }
  ledger.CloseOwner(owner);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_LedgerRecordPair)->ArgName("trace")->Arg(0)->Arg(1)->ThreadRange(1, 8);

// The allocator's two-step charge (Charge, then Commit) and the free, with the request under a
// version with a quota (quota:1: a CAS on its counter each way) or without (quota:0: the same
// path, one null check). Same run as BM_LedgerRecordPair: the quota's cost is the difference.
void BM_LedgerChargePair(benchmark::State& state) {
  Ledger& ledger = SharedLedger(false);
  MemoryQuota quota;
  if (state.range(0) != 0) quota.push_back({Device::Cuda(0), int64_t{1} << 40});
  OwnerId version = ledger.OpenOwner(kNoOwner, OwnerKind::kVersion,
                                     "bench_version_" + std::to_string(state.thread_index()),
                                     quota);
  OwnerId owner = ledger.OpenOwner(version, OwnerKind::kRequest, "bench");
  const uintptr_t base = (static_cast<uintptr_t>(state.thread_index()) + 1) << 36;
  uintptr_t i = 0;
  for (auto _ : state) {
    const void* p = reinterpret_cast<const void*>(base + (i++ & 1023) * 256);
    auto charge = ledger.Charge(Device::Cuda(0), 4096, owner);
    ledger.Commit(std::move(charge).value(), p);
    benchmark::DoNotOptimize(ledger.RecordFree(p));
  }
  ledger.CloseOwner(version);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_LedgerChargePair)->ArgName("quota")->Arg(0)->Arg(1)->ThreadRange(1, 2);

// A request owner opened and closed clean under one instance.
void BM_OwnerOpenClose(benchmark::State& state) {
  Ledger& ledger = SharedLedger(false);
  static const OwnerId instance =
      ledger.OpenOwner(kNoOwner, OwnerKind::kInstance, "bench_instance");
  for (auto _ : state) {
    OwnerId request = ledger.OpenOwner(instance, OwnerKind::kRequest, "1234567");
    benchmark::DoNotOptimize(ledger.CloseOwner(request));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_OwnerOpenClose)->ThreadRange(1, 8);

// The parts of tracing: the stack walk at allocation time, naming a frame at report time.
void BM_BacktraceCapture(benchmark::State& state) {
  size_t frames = 0;
  for (auto _ : state) {
    Backtrace trace = Backtrace::Capture(32);
    frames = trace.size();
    benchmark::DoNotOptimize(trace);
  }
  state.counters["frames"] = static_cast<double>(frames);
}
BENCHMARK(BM_BacktraceCapture);

// Names every frame of this stack (the bench binary, libbenchmark, libc) with no remembered
// names: the cost of the first report that shows a site.
void BM_SymbolizeTrace(benchmark::State& state) {
  Backtrace trace = Backtrace::Capture(32);
  for (auto _ : state) {
    FrameSymbolizer symbolizer;
    benchmark::DoNotOptimize(symbolizer.Symbolize(trace));
  }
  state.counters["frames"] = static_cast<double>(trace.size());
}
BENCHMARK(BM_SymbolizeTrace);

}  // namespace
}  // namespace vramd::memory

BENCHMARK_MAIN();
