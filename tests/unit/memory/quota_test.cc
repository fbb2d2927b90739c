#include "memory/quota.h"

#include <gtest/gtest.h>

#include <string>

namespace vramd::memory {
namespace {

constexpr int64_t kQuotaMiB = int64_t{1} << 20;

TEST(ByteSizeTest, ReadsBytesAndBinaryUnits) {
  EXPECT_EQ(*ParseByteSize("1048576"), kQuotaMiB);
  EXPECT_EQ(*ParseByteSize("512MiB"), 512 * kQuotaMiB);
  EXPECT_EQ(*ParseByteSize(" 2 GiB "), 2048 * kQuotaMiB);
  EXPECT_EQ(*ParseByteSize("1.5GiB"), 1536 * kQuotaMiB);
  EXPECT_EQ(*ParseByteSize("4KiB"), 4096);
  EXPECT_EQ(*ParseByteSize("1TiB"), 1024 * 1024 * kQuotaMiB);
  EXPECT_EQ(*ParseByteSize("100B"), 100);
}

TEST(ByteSizeTest, RefusesWhatIsNotASize) {
  for (const char* text : {"", "MiB", "lots", "-1MiB", "1e3", "0", "0.1", "1 GB", "1gib",
                           "12MiB3", "inf", "nan", "1..5GiB", "99999999999TiB"}) {
    auto size = ParseByteSize(text);
    ASSERT_FALSE(size.ok()) << "'" << text << "' read as " << *size;
    EXPECT_EQ(size.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(size.status().message().find("size"), std::string::npos) << size.status().message();
  }
}

TEST(MemoryQuotaTest, ASizeAloneBoundsEachGpuAndNoHostMemory) {
  auto quota = ParseMemoryQuota("2GiB");
  ASSERT_TRUE(quota.ok()) << quota.status().ToString();
  EXPECT_EQ(QuotaLimitFor(*quota, Device::Cuda(0)), 2048 * kQuotaMiB);
  EXPECT_EQ(QuotaLimitFor(*quota, Device::Cuda(7)), 2048 * kQuotaMiB);
  EXPECT_EQ(QuotaLimitFor(*quota, Device::Cpu()), 0);
  EXPECT_EQ(QuotaLimitFor(*quota, Device::CudaHost()), 0);
  EXPECT_EQ(FormatMemoryQuota(*quota), "cuda:*=2.00 GiB");
}

TEST(MemoryQuotaTest, NamedDevicesWinOverEachGpu) {
  auto quota = ParseMemoryQuota("1GiB, cuda:1=256MiB, cpu=64MiB, cuda_host=8MiB");
  ASSERT_TRUE(quota.ok()) << quota.status().ToString();
  EXPECT_EQ(QuotaLimitFor(*quota, Device::Cuda(0)), 1024 * kQuotaMiB);
  EXPECT_EQ(QuotaLimitFor(*quota, Device::Cuda(1)), 256 * kQuotaMiB);
  EXPECT_EQ(QuotaLimitFor(*quota, Device::Cpu()), 64 * kQuotaMiB);
  EXPECT_EQ(QuotaLimitFor(*quota, Device::CudaHost()), 8 * kQuotaMiB);
}

TEST(MemoryQuotaTest, RefusesMalformedTextNamingIt) {
  struct Case {
    const char* text;
    const char* says;
  };
  for (const Case& c : {Case{"", "empty entry"}, Case{"cpu=1MiB,", "empty entry"},
                        Case{"gpu0=1GiB", "gpu0"}, Case{"cuda:0=", "is not a size"},
                        Case{"cpu=lots", "'lots' is not a size"},
                        Case{"cpu=1MiB,cpu=2MiB", "names cpu twice"},
                        Case{"1GiB,2GiB", "names every GPU twice"}}) {
    auto quota = ParseMemoryQuota(c.text);
    ASSERT_FALSE(quota.ok()) << c.text;
    EXPECT_EQ(quota.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(quota.status().message().find(c.says), std::string::npos)
        << c.text << ": " << quota.status().message();
  }
}

}  // namespace
}  // namespace vramd::memory
