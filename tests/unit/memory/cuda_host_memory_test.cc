// Pinned host memory (Device::CudaHost(), "cuda_host") where no GPU is needed: without a CUDA
// device it is Unavailable, clearly, and leaves nothing behind; the ledger keeps its bytes
// apart from the CPU's and the GPUs'; the memory report and the metrics show it as a pool and a
// by-device entry of its own, never as a GPU. tests/gpu/gpu_cuda_host_test.cc covers the
// allocations themselves on a GPU.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <string>
#include <vector>

#include "memory/allocator.h"
#include "memory/cuda_devices.h"
#include "memory/ledger.h"
#include "memory/memory_report.h"
#include "memory/segment_source.h"
#include "server/metrics/memory_metrics.h"

namespace vramd::memory {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const void* HostMemAddr(uintptr_t i) { return reinterpret_cast<const void*>(i * 4096); }

class CudaHostWithoutGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() > 0) {
      GTEST_SKIP() << "this machine has a CUDA device; tests/gpu/gpu_cuda_host_test.cc covers "
                      "pinned allocations there";
    }
  }
};

TEST_F(CudaHostWithoutGpuTest, TheSourceIsUnavailableAndSaysWhy) {
  auto source = MakeCudaHostSegmentSource();
  ASSERT_FALSE(source.ok());
  EXPECT_EQ(source.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(source.status().message(), HasSubstr("cuda_host"));
  EXPECT_THAT(source.status().message(), HasSubstr("not available"));
}

TEST_F(CudaHostWithoutGpuTest, AllocatingIsUnavailableAndLeavesNoPoolOrRecord) {
  Ledger ledger;
  Allocator allocator(&ledger);
  auto buffer = allocator.Allocate(Device::CudaHost(), 1 << 20);
  ASSERT_FALSE(buffer.ok());
  EXPECT_EQ(buffer.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(buffer.status().message(), HasSubstr("cuda_host"));
  EXPECT_FALSE(allocator.Pool(Device::CudaHost()).ok());
  EXPECT_TRUE(allocator.PoolStatistics().empty());
  EXPECT_EQ(*ledger.SubtreeLiveBytes(ledger.root()), 0);
  EXPECT_EQ(allocator.Trim(Device::CudaHost()), 0u);
  EXPECT_EQ(allocator.TrimAll(), 0u);
  // The CPU still works beside it.
  auto cpu = allocator.Allocate(Device::Cpu(), 1 << 20);
  EXPECT_TRUE(cpu.ok()) << cpu.status().ToString();
}

TEST(CudaHostLedgerTest, PinnedBytesHaveTheirOwnByDeviceEntry) {
  Ledger ledger;
  OwnerId owner = ledger.OpenOwner(ledger.root(), OwnerKind::kVersion, "1");
  ledger.RecordAllocation(HostMemAddr(1), 10, Device::Cpu(), owner);
  ledger.RecordAllocation(HostMemAddr(2), 300, Device::CudaHost(), owner);
  ledger.RecordAllocation(HostMemAddr(3), 20, Device::Cuda(0), owner);
  ledger.RecordAllocation(HostMemAddr(4), 40, Device::Cuda(99), owner);  // the overflow entry, cuda:16
  ledger.RecordAllocation(HostMemAddr(5), 5, Device::CudaHost(), owner);
  std::vector<std::pair<Device, int64_t>> want = {{Device::Cpu(), 10},
                                                  {Device::Cuda(0), 20},
                                                  {Device::Cuda(16), 40},
                                                  {Device::CudaHost(), 305}};
  for (const OwnerSnapshot& o : ledger.Snapshot()) {
    if (o.id == owner) {
      EXPECT_EQ(o.live_bytes_by_device, want);
    }
  }
  ledger.RecordFree(HostMemAddr(2));
  ledger.RecordFree(HostMemAddr(5));
  want.pop_back();
  for (const OwnerSnapshot& o : ledger.Snapshot()) {
    if (o.id == owner) {
      EXPECT_EQ(o.live_bytes_by_device, want);
    }
  }
  for (int i = 1; i <= 5; ++i) ledger.RecordFree(HostMemAddr(i));
  EXPECT_TRUE(ledger.CloseOwner(owner).empty());
}

TEST(CudaHostReportTest, ThePinnedPoolIsReportedAndNeverTakenForAGpu) {
  Ledger ledger;
  OwnerId model = ledger.OpenOwner(kNoOwner, OwnerKind::kModel, "big");
  OwnerId version = ledger.OpenOwner(model, OwnerKind::kVersion, "1");
  ledger.RecordAllocation(HostMemAddr(7), 64 << 20, Device::CudaHost(), version);

  PoolStats pinned;
  pinned.device = Device::CudaHost();
  pinned.reserved_bytes = pinned.allocated_bytes = 64 << 20;
  pinned.segments = 1;
  PoolStats gpu;
  gpu.device = Device::Cuda(0);
  PoolStats cpu;
  cpu.device = Device::Cpu();
  MemoryReport report = BuildMemoryReport(ledger, {pinned, gpu, cpu}, nullptr, {});

  // Pools in device order; devices (GPUs) only the CUDA ordinal.
  ASSERT_EQ(report.pools.size(), 3u);
  EXPECT_EQ(report.pools[0].device, Device::Cpu());
  EXPECT_EQ(report.pools[1].device, Device::Cuda(0));
  EXPECT_EQ(report.pools[2].device, Device::CudaHost());
  for (const DeviceMemoryReport& d : report.devices) EXPECT_TRUE(d.device.is_cuda());

  rapidjson::Document doc;
  doc.Parse(MemoryReportToJson(report).c_str());
  ASSERT_FALSE(doc.HasParseError());
  EXPECT_STREQ(doc["pools"][2]["device"].GetString(), "cuda_host");
  const auto& version_node = doc["owners"]["children"][0]["children"][0];
  EXPECT_EQ(version_node["by_device"]["cuda_host"].GetInt64(), 64 << 20);

  const std::string text = metrics::RenderMemoryMetrics(report);
  EXPECT_THAT(text, HasSubstr(R"(vramd_pool_reserved_bytes{device="cuda_host"} 67108864)"));
  EXPECT_THAT(text, HasSubstr(R"(vramd_memory_live_bytes{model="big",version="1",instance="",)"
                              R"(device="cuda_host"} 67108864)"));
  EXPECT_THAT(text, Not(HasSubstr(R"(vramd_memory_unattributed_bytes{device="cuda_host"})")));
  ledger.RecordFree(HostMemAddr(7));
}

}  // namespace
}  // namespace vramd::memory
