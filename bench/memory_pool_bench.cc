// What a pooled Allocate+Free pair costs, against the system allocator it replaces.
//
//   BM_HostPoolAllocFree/<bytes>     CachingPool on the host source: one Allocate + one Free,
//                                    always served from the cache (the segment is made before
//                                    timing starts).
//   BM_MallocFree/<bytes>            baseline: malloc + free of the same size (glibc serves
//                                    blocks above its mmap threshold, at most 32 MiB, with
//                                    mmap/munmap, so 64 MiB pays two syscalls a pair).
// Built with CUDA (they skip with "no CUDA device" on machines without a GPU):
//   BM_CudaPoolAllocFree/<bytes>     CachingPool on cuda:0, stream 0, served from the cache.
//   BM_CudaMallocFree/<bytes>        baseline: cudaMalloc + cudaFree.
//   BM_CudaMallocAsyncFree/bytes:<n>/sync:<0|1>
//                                    baseline: cudaMallocAsync + cudaFreeAsync on one stream
//                                    (the device's default memory pool). sync:0 never waits in
//                                    the timed loop (one cudaStreamSynchronize after it, not
//                                    timed): the cost of stream-ordered reuse. sync:1 adds
//                                    cudaStreamSynchronize to every iteration, inside the
//                                    timing; with the default release threshold (0) the pool
//                                    may then hand memory back to the driver at each sync.
// The CUDA benchmarks report wall time (UseRealTime): driver calls can block without using CPU.
//
// Run: build/bench/memory_pool_bench --benchmark_filter='Pool|Malloc'  (see docs/benchmarks.md)
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "memory/caching_pool.h"
#include "memory/cuda_devices.h"
#include "memory/segment_source.h"

#if VRAMD_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace vramd::memory {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

void PoolSizes(benchmark::internal::Benchmark* b) {
  for (int64_t size : {int64_t{512}, int64_t{64} << 10, kMiB, 64 * kMiB}) b->Arg(size);
}

// One Allocate+Free pair per iteration; the first pair (before timing) creates the segment.
void RunPoolPairs(benchmark::State& state, CachingPool& pool) {
  const size_t size = static_cast<size_t>(state.range(0));
  Result<void*> warm = pool.Allocate(size);
  if (!warm.ok()) {
    state.SkipWithError(warm.status().ToString().c_str());
    return;
  }
  pool.Free(*warm);
  for (auto _ : state) {
    Result<void*> p = pool.Allocate(size);
    if (!p.ok()) {
      state.SkipWithError(p.status().ToString().c_str());
      break;
    }
    benchmark::DoNotOptimize(*p);
    pool.Free(*p);
  }
  if (pool.Stats().segment_allocations != 1) state.SkipWithError("the pool missed its cache");
}

void BM_HostPoolAllocFree(benchmark::State& state) {
  CachingPool pool(MakeHostSegmentSource());
  RunPoolPairs(state, pool);
}
BENCHMARK(BM_HostPoolAllocFree)->Apply(PoolSizes);

void BM_MallocFree(benchmark::State& state) {
  const size_t size = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    void* p = std::malloc(size);
    benchmark::DoNotOptimize(p);
    std::free(p);
  }
}
BENCHMARK(BM_MallocFree)->Apply(PoolSizes);

#if VRAMD_WITH_CUDA

bool HaveGpu(benchmark::State& state) {
  if (CudaDeviceCount() > 0 && cudaSetDevice(0) == cudaSuccess) return true;
  cudaGetLastError();
  state.SkipWithError("no CUDA device");
  return false;
}

void SkipWithCudaError(benchmark::State& state, const char* what, cudaError_t err) {
  cudaGetLastError();
  state.SkipWithError((std::string(what) + ": " + cudaGetErrorString(err)).c_str());
}

void BM_CudaPoolAllocFree(benchmark::State& state) {
  if (!HaveGpu(state)) return;
  Result<std::unique_ptr<SegmentSource>> source = MakeCudaSegmentSource(0);
  if (!source.ok()) {
    state.SkipWithError(source.status().ToString().c_str());
    return;
  }
  CachingPool pool(std::move(*source));
  RunPoolPairs(state, pool);
}
BENCHMARK(BM_CudaPoolAllocFree)->Apply(PoolSizes)->UseRealTime();

void BM_CudaMallocFree(benchmark::State& state) {
  if (!HaveGpu(state)) return;
  const size_t size = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    void* p = nullptr;
    if (cudaError_t err = cudaMalloc(&p, size); err != cudaSuccess) {
      SkipWithCudaError(state, "cudaMalloc", err);
      break;
    }
    benchmark::DoNotOptimize(p);
    if (cudaError_t err = cudaFree(p); err != cudaSuccess) {
      SkipWithCudaError(state, "cudaFree", err);
      break;
    }
  }
}
BENCHMARK(BM_CudaMallocFree)->Arg(512)->Arg(64 * kMiB)->UseRealTime();

void BM_CudaMallocAsyncFree(benchmark::State& state) {
  if (!HaveGpu(state)) return;
  const size_t size = static_cast<size_t>(state.range(0));
  const bool sync_each = state.range(1) != 0;
  cudaStream_t stream = nullptr;
  if (cudaError_t err = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
      err != cudaSuccess) {
    SkipWithCudaError(state, "cudaStreamCreate", err);
    return;
  }
  // One untimed pair so the default pool has grown once.
  void* p = nullptr;
  cudaError_t err = cudaMallocAsync(&p, size, stream);
  if (err == cudaSuccess) err = cudaFreeAsync(p, stream);
  if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
  if (err != cudaSuccess) {
    SkipWithCudaError(state, "cudaMallocAsync warm-up", err);
    cudaStreamDestroy(stream);
    return;
  }
  for (auto _ : state) {
    err = cudaMallocAsync(&p, size, stream);
    if (err == cudaSuccess) {
      benchmark::DoNotOptimize(p);
      err = cudaFreeAsync(p, stream);
    }
    if (err == cudaSuccess && sync_each) err = cudaStreamSynchronize(stream);
    if (err != cudaSuccess) {
      SkipWithCudaError(state, "cudaMallocAsync/cudaFreeAsync", err);
      break;
    }
  }
  cudaStreamSynchronize(stream);  // outside the timing
  cudaStreamDestroy(stream);
}
BENCHMARK(BM_CudaMallocAsyncFree)
    ->ArgNames({"bytes", "sync"})
    ->Args({64 * kMiB, 0})
    ->Args({64 * kMiB, 1})
    ->UseRealTime();

#endif  // VRAMD_WITH_CUDA

}  // namespace
}  // namespace vramd::memory

BENCHMARK_MAIN();
