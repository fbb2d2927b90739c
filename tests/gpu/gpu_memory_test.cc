// memory:: on a real GPU: the pool's reservations as NVML sees them, trim handing memory back,
// a planted leak reported with its owner and backtrace, and a direct cudaMalloc behind the
// ledger's back showing up as unattributed memory.
//
// Without a CUDA device every test skips, saying so; scripts/device/run.sh runs them on the
// GPU machine. Each test prints "FIGURE <name> <value> <unit>" lines that the device script
// collects for docs/benchmarks.md.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "memory/allocator.h"
#include "memory/cuda_devices.h"
#include "memory/ledger.h"
#include "memory/memory_report.h"
#include "memory/nvml.h"

namespace vramd::memory {

// Outside the anonymous namespace and never inlined, so that with ENABLE_EXPORTS (-rdynamic)
// its name is in the dynamic symbol table and the leak's backtrace can show it.
__attribute__((noinline)) Result<void*> PlantLeakForTest(Allocator* allocator, size_t bytes) {
  return allocator->AllocateRaw(Device::Cuda(0), bytes);
}

namespace {

constexpr int64_t kMiB = 1 << 20;

void Figure(const std::string& name, double value, const char* unit) {
  std::printf("FIGURE %s %.3f %s\n", name.c_str(), value, unit);
  std::fflush(stdout);
}

class GpuMemoryTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (CudaDeviceCount() == 0) return;
    cudaSetDevice(0);
    cudaFree(nullptr);  // create the context before the baseline is measured
    auto nvml = Nvml::Load();
    if (nvml.ok()) {
      nvml_ = std::move(nvml).value().release();
      // Leaked with nvml_: lives for the test binary.
      auto* contexts = new DeviceContexts(DeviceContexts::ForThisProcess(nvml_, ""));
      for (int d = 0; d < CudaDeviceCount(); ++d) (void)contexts->Open(d);
      baselines_ = new std::vector<ContextBaseline>(contexts->Baselines());
    } else {
      nvml_reason_ = new std::string(nvml.status().message());
    }
  }

  void SetUp() override {
    if (CudaDeviceCount() == 0) {
      GTEST_SKIP() << "no CUDA device (" << CudaDescription()
                   << "); this test runs on the GPU machine through scripts/device/run.sh";
    }
    ASSERT_NE(nvml_, nullptr) << "a GPU without NVML: " << (nvml_reason_ ? *nvml_reason_ : "");
  }

  // This process's device memory as NVML reports it. Where the driver does not list our PID
  // (a container's PID namespace), the device-wide used figure stands in: the machine is ours
  // alone, so its changes are ours.
  int64_t NvmlUsed() {
    auto mine = nvml_->ProcessUsedBytes(0, static_cast<uint32_t>(getpid()));
    if (mine.ok()) return static_cast<int64_t>(*mine);
    if (!printed_fallback_) {
      std::printf("note: NVML process figure unavailable (%s); using device used bytes\n",
                  mine.status().message().c_str());
      printed_fallback_ = true;
    }
    auto dev = nvml_->DeviceMemory(0);
    EXPECT_TRUE(dev.ok()) << dev.status().ToString();
    return dev.ok() ? static_cast<int64_t>(dev->used_bytes) : 0;
  }

  // NVML counts in 2 MiB pages and the driver may add bookkeeping: allow 4 MiB or 1%.
  static int64_t Tolerance(int64_t expected) { return std::max<int64_t>(4 * kMiB, expected / 100); }

  static inline Nvml* nvml_ = nullptr;  // leaked on purpose: lives for the test binary
  static inline std::string* nvml_reason_ = nullptr;
  static inline std::vector<ContextBaseline>* baselines_ = nullptr;
  bool printed_fallback_ = false;
};

TEST_F(GpuMemoryTest, PoolReservationsShowInNvmlAndTrimReturnsThem) {
  Ledger ledger;
  Allocator allocator(&ledger);
  const int64_t before = NvmlUsed();

  std::vector<Buffer> buffers;
  for (int i = 0; i < 8; ++i) {
    auto b = allocator.Allocate(Device::Cuda(0), 256 * kMiB);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    buffers.push_back(std::move(b).value());
  }
  auto pool = allocator.Pool(Device::Cuda(0));
  ASSERT_TRUE(pool.ok());
  const int64_t reserved = static_cast<int64_t>((*pool)->Stats().reserved_bytes);
  const int64_t after_alloc = NvmlUsed();
  Figure("pool_reserved_mib", double(reserved) / kMiB, "MiB");
  Figure("nvml_delta_after_alloc_mib", double(after_alloc - before) / kMiB, "MiB");
  EXPECT_EQ(reserved, 8 * 256 * kMiB);
  EXPECT_NEAR(after_alloc - before, reserved, Tolerance(reserved));
  EXPECT_EQ(*ledger.SubtreeLiveBytes(ledger.root()), 8 * 256 * kMiB);

  // Freed blocks stay cached: NVML does not move. Trim hands them to the driver: it drops.
  buffers.clear();
  const int64_t after_free = NvmlUsed();
  EXPECT_NEAR(after_free, after_alloc, Tolerance(reserved));
  const size_t trimmed = allocator.Trim(Device::Cuda(0));
  const int64_t after_trim = NvmlUsed();
  Figure("trimmed_mib", double(trimmed) / kMiB, "MiB");
  Figure("nvml_drop_after_trim_mib", double(after_free - after_trim) / kMiB, "MiB");
  EXPECT_EQ(static_cast<int64_t>(trimmed), reserved);
  EXPECT_NEAR(after_free - after_trim, reserved, Tolerance(reserved));
  EXPECT_NEAR(after_trim, before, Tolerance(reserved));
  EXPECT_EQ((*pool)->Stats().reserved_bytes, 0u);
}

TEST_F(GpuMemoryTest, PlantedLeakIsReportedWithOwnerAndBacktrace) {
  Ledger ledger({.trace = true});
  Allocator allocator(&ledger);
  std::vector<LeakReport> reported;
  ledger.SetLeakCallback([&](const LeakReport& r) { reported.push_back(r); });

  OwnerId model = ledger.OpenOwner(ledger.root(), OwnerKind::kModel, "leaky");
  void* leaked = nullptr;
  {
    OwnerScope scope(model);
    auto p = PlantLeakForTest(&allocator, 3 * kMiB);  // never freed by its owner
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    leaked = *p;
  }
  auto reports = ledger.CloseOwner(model);
  ASSERT_EQ(reports.size(), 1u);
  ASSERT_EQ(reported.size(), 1u);
  const LeakReport& leak = reports[0];
  EXPECT_EQ(leak.owner_path, "server/model:leaky");
  EXPECT_EQ(leak.bytes, size_t(3 * kMiB));
  ASSERT_EQ(leak.allocations.size(), 1u);
  EXPECT_EQ(leak.allocations[0].device, Device::Cuda(0));
  ASSERT_FALSE(leak.allocations[0].backtrace.empty());
  std::string frames;
  for (const auto& f : leak.allocations[0].backtrace) frames += f + "\n";
  std::printf("leak backtrace:\n%s", frames.c_str());
  EXPECT_NE(frames.find("PlantLeakForTest"), std::string::npos) << frames;
  Figure("planted_leak_reported_mib", double(leak.bytes) / kMiB, "MiB");

  allocator.Free(Device::Cuda(0), leaked);
  EXPECT_EQ(ledger.Leaks()[0].still_live_bytes, 0u);
  allocator.TrimAll();
}

TEST_F(GpuMemoryTest, DirectCudaMallocShowsAsUnattributed) {
  Ledger ledger;
  Allocator allocator(&ledger);
  // Some pooled memory too, so unattributed is not just "everything".
  auto pooled = allocator.Allocate(Device::Cuda(0), 64 * kMiB);
  ASSERT_TRUE(pooled.ok());
  MemoryReportOptions options;
  options.pid = static_cast<uint32_t>(getpid());
  auto unattributed = [&] {
    MemoryReport report = BuildMemoryReport(ledger, allocator, nvml_, *baselines_, options);
    EXPECT_FALSE(report.devices.empty());
    const auto& d = report.devices.at(0);
    EXPECT_TRUE(d.unattributed_bytes.has_value()) << d.unattributed_reason;
    return d.unattributed_bytes.value_or(0);
  };
  const int64_t before = unattributed();
  void* behind_our_back = nullptr;
  ASSERT_EQ(cudaMalloc(&behind_our_back, 512 * kMiB), cudaSuccess);
  const int64_t after = unattributed();
  ASSERT_EQ(cudaFree(behind_our_back), cudaSuccess);
  const int64_t after_free = unattributed();
  Figure("context_baseline_mib", double((*baselines_)[0].bytes.value_or(-1)) / kMiB, "MiB");
  Figure("unattributed_before_mib", double(before) / kMiB, "MiB");
  Figure("unattributed_with_direct_512mib_mib", double(after) / kMiB, "MiB");
  EXPECT_NEAR(after - before, 512 * kMiB, Tolerance(512 * kMiB));
  EXPECT_NEAR(after_free, before, Tolerance(512 * kMiB));
  // With only pooled memory, unattributed stays small: the pool is not counted as a mystery.
  EXPECT_LT(std::llabs(before), 64 * kMiB) << "unattributed before the direct cudaMalloc";
  pooled->Reset();
  allocator.TrimAll();
}

// Copies between GPUs (issue 19): the route is chosen once per pair, the bytes arrive, and
// they count as device to device. One GPU checks the same-GPU route; two also check the
// cross-GPU one and print its rate against cudaMemcpyPeer's with peer access as CUDA left it.
TEST(GpuCopyTest, CopiesBetweenGpusArriveAndCountAsDeviceToDevice) {
  const int gpus = CudaDeviceCount();
  if (gpus == 0) {
    GTEST_SKIP() << "no CUDA device (" << CudaDescription()
                 << "); this test runs on the GPU machine through scripts/device/run.sh";
  }
  auto same = GpuToGpuRoute(0, 0);
  ASSERT_TRUE(same.ok()) << same.status().ToString();
  EXPECT_EQ(*same, GpuRoute::kSame);
  EXPECT_FALSE(GpuToGpuRoute(gpus, 0).ok()) << "a GPU past those seen has no route";

  const size_t bytes = 64 * kMiB;
  const int dst_gpu = gpus > 1 ? 1 : 0;
  std::vector<unsigned char> host(bytes), back(bytes);
  for (size_t i = 0; i < bytes; ++i) host[i] = static_cast<unsigned char>(i * 7 + 3);
  void* src = nullptr;
  void* dst = nullptr;
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&src, bytes), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(dst_gpu), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dst, bytes), cudaSuccess);
  ASSERT_TRUE(CopyBytes(Device::Cuda(0), src, Device::Cpu(), host.data(), bytes, nullptr).ok());
  const CopiedBytes before = CopiedBytesTotal();
  const auto start = std::chrono::steady_clock::now();
  Status copied = CopyBytes(Device::Cuda(dst_gpu), dst, Device::Cuda(0), src, bytes, nullptr);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(copied.ok()) << copied.ToString();
  EXPECT_EQ(CopiedBytesTotal().device_to_device - before.device_to_device, bytes);
  ASSERT_TRUE(CopyBytes(Device::Cpu(), back.data(), Device::Cuda(dst_gpu), dst, bytes, nullptr).ok());
  EXPECT_TRUE(back == host) << "the bytes that arrived on cuda:" << dst_gpu << " differ";
  if (gpus > 1) {
    auto route = GpuToGpuRoute(1, 0);
    ASSERT_TRUE(route.ok());
    std::printf("route cuda:0 -> cuda:1: %s\n", GpuRouteName(*route));
    Figure(std::string("gpu_copy_rate_") + (*route == GpuRoute::kPeer ? "peer" : "staged"),
           bytes / seconds / 1e9, "GB/s (first copy, route chosen in it)");
    // The same copy again, and cudaMemcpyPeer's in the same run: what the hardware gives.
    auto timed = [&](auto&& copy) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < 5; ++i) copy();
      return 5.0 * bytes / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 1e9;
    };
    const double ours = timed([&] {
      EXPECT_TRUE(CopyBytes(Device::Cuda(1), dst, Device::Cuda(0), src, bytes, nullptr).ok());
    });
    const double peer = timed([&] {
      EXPECT_EQ(cudaMemcpyPeer(dst, 1, src, 0, bytes), cudaSuccess);
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    });
    Figure("gpu_copy_rate_vramd", ours, "GB/s");
    Figure("gpu_copy_rate_cudaMemcpyPeer", peer, "GB/s");
    Figure("gpu_copy_rate_ratio", ours / peer, "ratio");
  } else {
    std::printf("one GPU: the cross-GPU route is checked on a machine with two\n");
  }
  ASSERT_EQ(cudaFree(dst), cudaSuccess);
  ASSERT_EQ(cudaFree(src), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
}

}  // namespace
}  // namespace vramd::memory
