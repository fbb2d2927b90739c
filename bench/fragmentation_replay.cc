// fragmentation_replay: the same fragmenting allocation trace against the caching pool and the
// VMM pool (docs/memory.md, "The VMM pool"), one after the other in one process, then one weight
// allocation of half of what is free. Issue 17's target: the VMM pool serves it, the caching pool
// fails.
//
//   fragmentation_replay [--device cuda:0|cpu] [--fill 0.85] [--seed 17] [--steps N]
//                        [--min-size 65536] [--max-size 8388608]
//
// The trace: sizes log-uniform from 64 KiB to 8 MiB (activations and workspaces: what the
// caching pool packs into shared 2 and 12 MiB segments), 60% allocations and 40% frees of a random
// live block, until the live bytes reach --fill of what the device had free at the start (the
// capacity); then half of the live blocks, in random order, are freed. "Free" for the final
// request is what the device has left plus what the pool caches. On the CPU both pools use the
// host VMM source with a capacity of 1 GiB (the caching pool with decommit hidden), which tests
// the policy, not a device.
//
// Prints one JSON object per pool and a final line with both results; also the time one fresh
// 1 GiB allocation takes from each pool (a segment made from nothing, the cost of mapping
// granules one by one). Exit status 0 when the VMM pool served the request and the caching pool
// did not, 1 otherwise.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "memory/caching_pool.h"
#include "memory/segment_source.h"

#if VRAMD_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace {

using vramd::memory::CachingPool;
using vramd::memory::PoolStats;
using vramd::memory::SegmentSource;

constexpr size_t MiB = size_t{1} << 20;

struct Options {
  bool cpu = false;
  int ordinal = 0;
  double fill = 0.85;
  uint64_t seed = 17;
  int steps = 0;  // 0: until the fill is reached and 20,000 steps more
  double min_size = 64 * 1024;
  double max_size = 8 * 1024 * 1024;
};

class NoDecommit final : public SegmentSource {
 public:
  explicit NoDecommit(std::unique_ptr<SegmentSource> inner) : inner_(std::move(inner)) {}
  vramd::memory::Device device() const override { return inner_->device(); }
  vramd::Result<void*> Allocate(size_t size) override { return inner_->Allocate(size); }
  void Free(void* ptr, size_t size) override { inner_->Free(ptr, size); }
  void Synchronize() override { inner_->Synchronize(); }

 private:
  std::unique_ptr<SegmentSource> inner_;
};

constexpr size_t kCpuCapacity = 1024 * MiB;

// What the device has free now (the CPU: the host source's capacity less the pool's reserve).
size_t DeviceFree(const Options& o, const CachingPool* pool) {
  if (o.cpu) return kCpuCapacity - (pool != nullptr ? pool->Stats().reserved_bytes : 0);
#if VRAMD_WITH_CUDA
  size_t free_bytes = 0, total = 0;
  cudaSetDevice(o.ordinal);
  cudaMemGetInfo(&free_bytes, &total);
  return free_bytes;
#else
  return 0;
#endif
}

std::unique_ptr<CachingPool> MakePool(const Options& o, bool vmm, std::string* error) {
  if (o.cpu) {
    auto source = vramd::memory::MakeHostVmmSegmentSource(kCpuCapacity, 2 * MiB);
    if (!vmm) source = std::make_unique<NoDecommit>(std::move(source));
    return std::make_unique<CachingPool>(std::move(source));
  }
  auto source = vmm ? vramd::memory::MakeCudaVmmSegmentSource(o.ordinal)
                    : vramd::memory::MakeCudaSegmentSource(o.ordinal);
  if (!source.ok()) {
    *error = source.status().message();
    return nullptr;
  }
  return std::make_unique<CachingPool>(std::move(source).value());
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

struct Outcome {
  bool served = false;
  size_t wanted = 0;
};

Outcome Run(const Options& o, bool vmm) {
  const char* name = vmm ? "vmm" : "caching";
  std::string error;
  std::unique_ptr<CachingPool> pool = MakePool(o, vmm, &error);
  if (pool == nullptr) {
    std::printf("{\"pool\": \"%s\", \"error\": \"%s\"}\n", name, error.c_str());
    return {};
  }
  // A fresh 1 GiB segment, timed, then given back.
  auto t0 = std::chrono::steady_clock::now();
  auto gib = pool->Allocate(1024 * MiB);
  const double fresh_gib_s = Seconds(t0);
  if (gib.ok()) pool->Free(*gib);
  pool->Trim();

  const size_t capacity = DeviceFree(o, nullptr);
  const size_t target = static_cast<size_t>(o.fill * static_cast<double>(capacity));
  std::mt19937_64 rng(o.seed);
  std::uniform_real_distribution<double> log_size(std::log2(o.min_size), std::log2(o.max_size));
  struct Live {
    void* ptr;
    size_t size;
  };
  std::vector<Live> live;
  size_t live_bytes = 0, failures = 0;
  int steps = 0, after_fill = 0;
  bool filled = false;
  t0 = std::chrono::steady_clock::now();
  while (o.steps > 0 ? steps < o.steps : after_fill < 20000) {
    ++steps;
    if (filled) ++after_fill;
    const bool allocate = live.empty() || (live_bytes < target && (rng() % 100) < 60);
    if (allocate) {
      const size_t size = static_cast<size_t>(std::exp2(log_size(rng)));
      auto p = pool->Allocate(size);
      if (!p.ok()) {
        ++failures;
        continue;
      }
      live.push_back({*p, size});
      live_bytes += size;
      if (live_bytes >= target) filled = true;
    } else {
      const size_t i = rng() % live.size();
      pool->Free(live[i].ptr);
      live_bytes -= live[i].size;
      live[i] = live.back();
      live.pop_back();
    }
  }
  std::shuffle(live.begin(), live.end(), rng);
  for (size_t i = live.size() / 2; i < live.size(); ++i) {
    pool->Free(live[i].ptr);
    live_bytes -= live[i].size;
  }
  live.resize(live.size() / 2);
  const double trace_s = Seconds(t0);

  const PoolStats before = pool->Stats();
  const size_t device_free = DeviceFree(o, pool.get());
  const size_t free_bytes = device_free + before.cached_free_bytes;
  Outcome outcome;
  outcome.wanted = free_bytes / 2;
  t0 = std::chrono::steady_clock::now();
  auto big = pool->Allocate(outcome.wanted);
  const double big_s = Seconds(t0);
  outcome.served = big.ok();
  const PoolStats after = pool->Stats();
  std::printf(
      "{\"pool\": \"%s\", \"device\": \"%s\", \"capacity_bytes\": %zu, \"steps\": %d, "
      "\"trace_seconds\": %.3f, \"failed_allocations_in_trace\": %zu, \"live_blocks\": %zu, "
      "\"live_bytes\": %zu, \"device_free_bytes\": %zu, \"cached_free_bytes\": %zu, "
      "\"largest_free_block_bytes\": %zu, \"remappable_free_bytes\": %zu, "
      "\"fragmentation\": %.3f, \"wanted_bytes\": %zu, \"served\": %s, "
      "\"allocate_seconds\": %.4f, \"hole_bytes_after\": %zu, \"fresh_1gib_seconds\": %.4f%s%s}\n",
      name, pool->device().ToString().c_str(), capacity, steps, trace_s, failures, live.size(),
      live_bytes, device_free, before.cached_free_bytes, before.largest_free_block_bytes,
      before.remappable_free_bytes, before.fragmentation, outcome.wanted,
      outcome.served ? "true" : "false", big_s, after.hole_bytes, fresh_gib_s,
      outcome.served ? "" : ", \"error\": ",
      outcome.served ? "" : ("\"" + std::string(big.status().message().substr(0, 300)) + "\"").c_str());
  std::fflush(stdout);
  if (big.ok()) pool->Free(*big);
  for (const Live& b : live) pool->Free(b.ptr);
  pool->Trim();
  return outcome;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--device") {
      std::string d = value();
      if (d == "cpu") {
        o.cpu = true;
      } else if (d.rfind("cuda:", 0) == 0) {
        o.ordinal = std::stoi(d.substr(5));
      } else {
        std::fprintf(stderr, "--device: cpu or cuda:N, not %s\n", d.c_str());
        return 2;
      }
    } else if (arg == "--fill") {
      o.fill = std::stod(value());
    } else if (arg == "--seed") {
      o.seed = std::stoull(value());
    } else if (arg == "--steps") {
      o.steps = std::stoi(value());
    } else if (arg == "--min-size") {
      o.min_size = std::stod(value());
    } else if (arg == "--max-size") {
      o.max_size = std::stod(value());
    } else {
      std::fprintf(stderr,
                   "usage: fragmentation_replay [--device cuda:0|cpu] [--fill F] [--seed N] "
                   "[--steps N] [--min-size BYTES] [--max-size BYTES]\n");
      return 2;
    }
  }
#if !VRAMD_WITH_CUDA
  if (!o.cpu) {
    std::fprintf(stderr, "built without CUDA: only --device cpu\n");
    return 2;
  }
#endif
  const Outcome caching = Run(o, false);
  const Outcome vmm = Run(o, true);
  const bool met = vmm.served && !caching.served;
  std::printf("RESULT half-of-free allocation: caching pool %s, vmm pool %s -> %s\n",
              caching.served ? "served" : "FAILED", vmm.served ? "served" : "FAILED",
              met ? "target met" : "target NOT met");
  return met ? 0 : 1;
}
