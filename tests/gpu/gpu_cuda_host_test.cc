// Pinned host memory (Device::CudaHost()) on a real GPU: an allocation through the Allocator is
// page-locked and portable, is charged in the ledger under its owner, copies to and from the
// GPU, stays cached in its pool when freed and goes back to the system with TrimAll. And the
// rate it is for: a host-to-device copy from it against one from pageable memory
// (bench/h2d_bench.cc measures that in depth).
//
// Without a CUDA device every test skips, saying so; scripts/device/run.sh runs them on the
// GPU machine. Figures are printed as "FIGURE <name> <value> <unit>".
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "memory/allocator.h"
#include "memory/cuda_devices.h"
#include "memory/ledger.h"

namespace vramd::memory {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

void Figure(const std::string& name, double value, const char* unit) {
  std::printf("FIGURE %s %.3f %s\n", name.c_str(), value, unit);
  std::fflush(stdout);
}

int64_t BytesOn(const Ledger& ledger, OwnerId owner, Device device) {
  for (const auto& o : ledger.Snapshot()) {
    if (o.id != owner) continue;
    for (const auto& [d, bytes] : o.live_bytes_by_device) {
      if (d == device) return bytes;
    }
  }
  return 0;
}

// The best of `repetitions` synchronous host-to-device copies of `bytes`, in GB/s (10^9).
double BestH2dGbps(void* dst, const void* src, size_t bytes, int repetitions) {
  double best = 0;
  for (int i = 0; i < repetitions; ++i) {
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
    const std::chrono::duration<double> s = std::chrono::steady_clock::now() - start;
    best = std::max(best, static_cast<double>(bytes) / s.count() / 1e9);
  }
  return best;
}

class GpuCudaHostTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) {
      GTEST_SKIP() << "no CUDA device (" << CudaDescription()
                   << "); this test runs on the GPU machine through scripts/device/run.sh";
    }
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  }
};

TEST_F(GpuCudaHostTest, PinnedAllocationIsPageLockedInTheLedgerAndTrimmed) {
  Ledger ledger;
  Allocator allocator(&ledger);
  const OwnerId owner = ledger.OpenOwner(ledger.root(), OwnerKind::kVersion, "staging");
  const size_t bytes = 64 * kMiB;
  auto pinned = allocator.Allocate(Device::CudaHost(), bytes, 0, owner);
  ASSERT_TRUE(pinned.ok()) << pinned.status().ToString();
  EXPECT_EQ(pinned->device(), Device::CudaHost());

  // Page-locked, and portable: pinned for every device's context.
  cudaPointerAttributes attributes{};
  ASSERT_EQ(cudaPointerGetAttributes(&attributes, pinned->data()), cudaSuccess);
  EXPECT_EQ(attributes.type, cudaMemoryTypeHost);
  unsigned flags = 0;
  ASSERT_EQ(cudaHostGetFlags(&flags, pinned->data()), cudaSuccess);
  EXPECT_NE(flags & cudaHostAllocPortable, 0u);

  // In the ledger under its owner, on cuda_host only; in its own pool.
  EXPECT_EQ(BytesOn(ledger, owner, Device::CudaHost()), static_cast<int64_t>(bytes));
  EXPECT_EQ(BytesOn(ledger, owner, Device::Cpu()), 0);
  EXPECT_EQ(BytesOn(ledger, owner, Device::Cuda(0)), 0);
  auto pool = allocator.Pool(Device::CudaHost());
  ASSERT_TRUE(pool.ok());
  EXPECT_EQ((*pool)->Stats().device, Device::CudaHost());
  EXPECT_EQ((*pool)->Stats().reserved_bytes, bytes);

  // A round trip through the GPU keeps every byte.
  auto* p = static_cast<unsigned char*>(pinned->data());
  for (size_t i = 0; i < bytes; ++i) p[i] = static_cast<unsigned char>(i * 131 + 7);
  auto device = allocator.Allocate(Device::Cuda(0), bytes, 0, owner);
  auto back = allocator.Allocate(Device::CudaHost(), bytes, 0, owner);
  ASSERT_TRUE(device.ok() && back.ok());
  ASSERT_EQ(cudaMemcpy(device->data(), pinned->data(), bytes, cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy(back->data(), device->data(), bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(std::memcmp(back->data(), pinned->data(), bytes), 0);

  // Freed blocks stay cached (pinned) until a trim; TrimAll includes the pinned pool.
  pinned->Reset();
  back->Reset();
  device->Reset();
  EXPECT_EQ(BytesOn(ledger, owner, Device::CudaHost()), 0);
  EXPECT_EQ((*pool)->Stats().reserved_bytes, 2 * bytes);
  const size_t trimmed = allocator.TrimAll();
  EXPECT_GE(trimmed, 2 * bytes);
  EXPECT_EQ((*pool)->Stats().reserved_bytes, 0u);
  EXPECT_EQ((*pool)->Stats().segment_frees, 2u);
  Figure("cuda_host_trimmed_mib", static_cast<double>(trimmed) / kMiB, "MiB");
  EXPECT_TRUE(ledger.CloseOwner(owner).empty());
}

TEST_F(GpuCudaHostTest, PinnedCopiesToTheGpuAgainstPageableOnes) {
  Ledger ledger;
  Allocator allocator(&ledger);
  const size_t bytes = 256 * kMiB;
  auto pinned = allocator.Allocate(Device::CudaHost(), bytes);
  auto device = allocator.Allocate(Device::Cuda(0), bytes);
  ASSERT_TRUE(pinned.ok()) << pinned.status().ToString();
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  std::unique_ptr<void, decltype(&std::free)> pageable(std::malloc(bytes), &std::free);
  ASSERT_NE(pageable, nullptr);
  // Touch every page first, so neither side times page faults.
  std::memset(pinned->data(), 1, bytes);
  std::memset(pageable.get(), 1, bytes);

  const double pinned_gbps = BestH2dGbps(device->data(), pinned->data(), bytes, 5);
  const double pageable_gbps = BestH2dGbps(device->data(), pageable.get(), bytes, 5);
  Figure("cuda_host_h2d_256mib_gbps", pinned_gbps, "GB/s");
  Figure("pageable_h2d_256mib_gbps", pageable_gbps, "GB/s");
  Figure("pageable_over_pinned_h2d_ratio", pageable_gbps / pinned_gbps, "ratio");
  EXPECT_GT(pinned_gbps, 0.0);
  pinned->Reset();
  device->Reset();
  allocator.TrimAll();
}

}  // namespace
}  // namespace vramd::memory
