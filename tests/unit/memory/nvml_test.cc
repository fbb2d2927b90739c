#include "memory/nvml.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "memory/cuda_devices.h"
#include "memory/device_contexts.h"

namespace vramd::memory {
namespace {

TEST(NvmlTest, MissingLibraryIsUnavailableWithTheReason) {
  auto nvml = Nvml::LoadFrom("libvramd-no-such-nvml.so.1");
  ASSERT_FALSE(nvml.ok());
  EXPECT_EQ(nvml.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(nvml.status().message().find("libvramd-no-such-nvml.so.1"), std::string::npos)
      << nvml.status().message();
}

TEST(NvmlTest, LibraryWithoutNvmlSymbolsIsUnavailableNamingTheSymbol) {
  auto nvml = Nvml::LoadFrom("libm.so.6");
  ASSERT_FALSE(nvml.ok());
  EXPECT_EQ(nvml.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(nvml.status().message().find("nvmlInit_v2"), std::string::npos)
      << nvml.status().message();
}

// On a machine without a driver this is the Unavailable path; on a GPU machine it reads every
// figure for every device and checks that they hang together.
TEST(NvmlTest, LoadOnThisMachineEitherFailsWithAReasonOrAnswers) {
  auto nvml = Nvml::Load();
  if (!nvml.ok()) {
    EXPECT_EQ(nvml.status().code(), StatusCode::kUnavailable);
    EXPECT_NE(nvml.status().message().find("NVML unavailable"), std::string::npos);
    EXPECT_GT(nvml.status().message().size(), std::string("NVML unavailable: ").size());
    return;
  }
  const Nvml& n = **nvml;
  ASSERT_GE(n.DeviceCount(), 0);
  if (CudaDeviceCount() > 0) {
    EXPECT_EQ(n.DeviceCount(), CudaDeviceCount());
  }
  for (int i = 0; i < n.DeviceCount(); ++i) {
    auto memory = n.DeviceMemory(i);
    ASSERT_TRUE(memory.ok()) << memory.status().ToString();
    EXPECT_GT(memory->total_bytes, 0u);
    EXPECT_LE(memory->used_bytes, memory->total_bytes);
    EXPECT_LE(memory->free_bytes, memory->total_bytes);
    auto name = n.Name(i);
    auto uuid = n.Uuid(i);
    auto util = n.Utilization(i);
    ASSERT_TRUE(name.ok()) << name.status().ToString();
    ASSERT_TRUE(uuid.ok()) << uuid.status().ToString();
    EXPECT_EQ(uuid->rfind("GPU-", 0), 0u) << *uuid;
    if (util.ok()) {
      EXPECT_LE(util->gpu_percent, 100u);
    }
    std::printf("cuda:%d %s %s total %llu used %llu free %llu reserved %lld util %d\n", i,
                name->c_str(), uuid->c_str(), (unsigned long long)memory->total_bytes,
                (unsigned long long)memory->used_bytes, (unsigned long long)memory->free_bytes,
                (long long)memory->reserved_bytes.value_or(-1),
                util.ok() ? static_cast<int>(util->gpu_percent) : -1);
  }
  EXPECT_EQ(n.DeviceMemory(n.DeviceCount()).status().code(), StatusCode::kUnavailable);

  // With CUDA, this process has a context on each device once it is opened, so NVML lists it,
  // unless a container's PID namespace hides it (then NotFound says so).
  DeviceContexts contexts(DeviceContexts::ForThisProcess(&n, ""));
  for (int d = 0; d < CudaDeviceCount(); ++d) ASSERT_TRUE(contexts.Open(d).ok());
  auto baselines = contexts.Baselines();
  ASSERT_EQ(baselines.size(), static_cast<size_t>(CudaDeviceCount()));
  for (const ContextBaseline& b : baselines) {
    auto used = n.ProcessUsedBytes(b.ordinal, static_cast<uint32_t>(getpid()));
    std::printf("cuda:%d baseline %lld (%s); process used now %s\n", b.ordinal,
                (long long)b.bytes.value_or(-1), b.reason.c_str(),
                used.ok() ? std::to_string(*used).c_str() : used.status().ToString().c_str());
    if (b.bytes) {
      EXPECT_GT(*b.bytes, 0);
      ASSERT_TRUE(used.ok());
    } else {
      EXPECT_FALSE(b.reason.empty());
      EXPECT_FALSE(used.ok());
    }
  }
}

}  // namespace
}  // namespace vramd::memory
