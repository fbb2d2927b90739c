// Host-to-device copy rate from pinned memory against pageable memory, in one run: what a
// model's weights upload gains from being staged in cuda_host memory.
//
//   BM_H2D/source:<0|1>/mib:<n>   one synchronous cudaMemcpy of n MiB to cuda:0 per iteration
//                                 (cudaMemcpy, then cudaStreamSynchronize on the default stream,
//                                 both timed: from pageable memory cudaMemcpy may return with
//                                 its last chunk still in flight). source:1 copies from a
//                                 pinned buffer of the memory:: cuda_host pool (cudaHostAlloc),
//                                 source:0 from malloc'd pageable memory. Sizes 256 MiB and
//                                 1 GiB, 5 repetitions each; wall time (UseRealTime).
// Every buffer is written once before timing, so no page fault is timed.
//
// After the table it prints, per size, the median rates in GB/s (10^9 bytes/s; Google
// Benchmark's own bytes_per_second column counts 2^30) and pageable/pinned, then one
// machine-readable line for the record:
//   h2d_pinned_gbps=<x> h2d_pageable_gbps=<y> h2d_pageable_over_pinned=<r> h2d_mib=1024
// Without a CUDA device it prints "h2d_bench: SKIP: ..." and exits 0.
//
// Run: build/bench/h2d_bench   (scripts/device/run.sh runs it on the GPU machine)
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "memory/allocator.h"
#include "memory/cuda_devices.h"
#include "memory/ledger.h"

namespace vramd::memory {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kSizesMiB[] = {256, 1024};
constexpr int kRepetitions = 5;

// The buffers of the largest size, made once and shared by every run (a 1 GiB cudaHostAlloc
// costs far more than the copies it serves).
struct Buffers {
  Ledger ledger;
  Allocator allocator{&ledger};
  Buffer pinned;
  Buffer device;
  std::unique_ptr<void, decltype(&std::free)> pageable{nullptr, &std::free};
  std::string error;  // why there are no buffers
};

Buffers* g_buffers = nullptr;

Buffers* MakeBuffers(size_t bytes) {
  auto* b = new Buffers;
  auto pinned = b->allocator.Allocate(Device::CudaHost(), bytes);
  auto device = b->allocator.Allocate(Device::Cuda(0), bytes);
  b->pageable.reset(std::malloc(bytes));
  if (!pinned.ok()) {
    b->error = pinned.status().ToString();
  } else if (!device.ok()) {
    b->error = device.status().ToString();
  } else if (b->pageable == nullptr) {
    b->error = "malloc of the pageable buffer failed";
  } else {
    b->pinned = std::move(pinned).value();
    b->device = std::move(device).value();
    std::memset(b->pinned.data(), 1, bytes);
    std::memset(b->pageable.get(), 1, bytes);
  }
  return b;
}

void BM_H2D(benchmark::State& state) {
  if (!g_buffers->error.empty()) {
    state.SkipWithError(g_buffers->error.c_str());
    return;
  }
  const bool pinned = state.range(0) != 0;
  const size_t bytes = static_cast<size_t>(state.range(1) * kMiB);
  const void* src = pinned ? g_buffers->pinned.data() : g_buffers->pageable.get();
  for (auto _ : state) {
    cudaError_t err = cudaMemcpy(g_buffers->device.data(), src, bytes, cudaMemcpyHostToDevice);
    if (err == cudaSuccess) err = cudaStreamSynchronize(nullptr);
    if (err != cudaSuccess) {
      cudaGetLastError();
      state.SkipWithError((std::string("cudaMemcpy: ") + cudaGetErrorString(err)).c_str());
      break;
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
}

// Shows what the console reporter shows (without colour: the output goes to logs) and keeps
// each benchmark's median rate, by its arguments.
class MedianCollector final : public benchmark::ConsoleReporter {
 public:
  MedianCollector() : ConsoleReporter(OO_None) {}

  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.run_type != Run::RT_Aggregate || run.aggregate_name != "median") continue;
      if (run.error_occurred) continue;
      auto it = run.counters.find("bytes_per_second");
      if (it != run.counters.end()) medians_[run.run_name.args] = it->second.value / 1e9;
    }
    ConsoleReporter::ReportRuns(runs);
  }
  // The median GB/s of BM_H2D with `pinned` and `mib`; 0 when it did not run.
  double Gbps(bool pinned, int64_t mib) const {
    auto it = medians_.find("source:" + std::to_string(pinned ? 1 : 0) +
                            "/mib:" + std::to_string(mib));
    return it == medians_.end() ? 0.0 : it->second;
  }

 private:
  std::map<std::string, double> medians_;
};

int Main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (CudaDeviceCount() == 0) {
    std::printf("h2d_bench: SKIP: no CUDA device (%s)\n", CudaDescription().c_str());
    return 0;
  }
  if (cudaSetDevice(0) != cudaSuccess) {
    std::printf("h2d_bench: SKIP: cannot use cuda:0 (%s)\n",
                cudaGetErrorString(cudaGetLastError()));
    return 0;
  }
  g_buffers = MakeBuffers(static_cast<size_t>(kSizesMiB[1] * kMiB));
  auto* bench = benchmark::RegisterBenchmark("BM_H2D", BM_H2D);
  bench->ArgNames({"source", "mib"});
  for (int64_t mib : kSizesMiB) {
    for (int64_t pinned : {1, 0}) bench->Args({pinned, mib});
  }
  bench->Repetitions(kRepetitions)->DisplayAggregatesOnly(true)->UseRealTime();

  MedianCollector reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();

  std::printf("\nH2D copy rate to cuda:0, median of %d repetitions (GB/s = 10^9 bytes/s):\n",
              kRepetitions);
  for (int64_t mib : kSizesMiB) {
    const double pinned = reporter.Gbps(true, mib), pageable = reporter.Gbps(false, mib);
    std::printf("  %5lld MiB: pinned (cuda_host) %7.2f GB/s, pageable %7.2f GB/s, "
                "pageable/pinned %.3f\n",
                static_cast<long long>(mib), pinned, pageable,
                pinned > 0 ? pageable / pinned : 0.0);
  }
  const int64_t mib = kSizesMiB[1];
  const double pinned = reporter.Gbps(true, mib), pageable = reporter.Gbps(false, mib);
  std::printf("h2d_pinned_gbps=%.3f h2d_pageable_gbps=%.3f h2d_pageable_over_pinned=%.4f "
              "h2d_mib=%lld\n",
              pinned, pageable, pinned > 0 ? pageable / pinned : 0.0,
              static_cast<long long>(mib));
  std::fflush(stdout);
  const bool failed = !g_buffers->error.empty();
  if (failed) std::printf("h2d_bench: FAILED: %s\n", g_buffers->error.c_str());
  delete g_buffers;  // buffers before their pools (member order)
  g_buffers = nullptr;
  return failed ? 1 : 0;
}

}  // namespace
}  // namespace vramd::memory

int main(int argc, char** argv) { return vramd::memory::Main(argc, argv); }
