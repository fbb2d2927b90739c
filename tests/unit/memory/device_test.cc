#include "memory/device.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace vramd::memory {
namespace {

using ::testing::HasSubstr;

TEST(DeviceTest, FormatsCpuAndCuda) {
  EXPECT_EQ(Device::Cpu().ToString(), "cpu");
  EXPECT_EQ(Device().ToString(), "cpu");
  EXPECT_EQ(Device::Cuda(0).ToString(), "cuda:0");
  EXPECT_EQ(Device::Cuda(13).ToString(), "cuda:13");
  EXPECT_FALSE(Device::Cpu().is_cuda());
  EXPECT_TRUE(Device::Cuda(1).is_cuda());
}

TEST(DeviceTest, PinnedHostMemoryIsCudaHostAndNotDeviceMemory) {
  EXPECT_EQ(Device::CudaHost().ToString(), "cuda_host");
  EXPECT_EQ(Device::CudaHost().type, DeviceType::kCudaHost);
  EXPECT_EQ(Device::CudaHost().index, 0);
  // Host memory: nothing that picks GPUs by is_cuda() (the memory report's devices, NVML
  // figures) may count it.
  EXPECT_FALSE(Device::CudaHost().is_cuda());
}

TEST(DeviceTest, ParsesEveryFormToStringWrites) {
  for (Device d : {Device::Cpu(), Device::Cuda(0), Device::Cuda(1), Device::Cuda(7),
                   Device::Cuda(12), Device::Cuda(2147483647), Device::CudaHost()}) {
    Result<Device> parsed = Device::Parse(d.ToString());
    ASSERT_TRUE(parsed.ok()) << d.ToString() << ": " << parsed.status().ToString();
    EXPECT_EQ(*parsed, d) << d.ToString();
  }
}

TEST(DeviceTest, CudaAloneMeansTheFirstDevice) {
  Result<Device> parsed = Device::Parse("cuda");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(*parsed, Device::Cuda(0));
}

TEST(DeviceTest, LeadingZerosAreTheSameOrdinal) {
  Result<Device> parsed = Device::Parse("cuda:01");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(*parsed, Device::Cuda(1));
}

TEST(DeviceTest, RejectsAnythingElseWithInvalidArgument) {
  for (const char* text : {"", "gpu", "CPU", "Cuda:0", "cpu:0", "cuda:", "cuda:-1", "cuda:+1",
                           "cuda:x", "cuda:1x", "cuda:1 ", " cuda:1", "cuda: 1", "cuda0",
                           "cuda:2147483648", "cuda:99999999999999999999", "cuda::1",
                           "cuda_host:0", "CUDA_HOST", "cuda_host ", "cuda-host", "cudahost",
                           "pinned", "cuda_host:"}) {
    Result<Device> parsed = Device::Parse(text);
    ASSERT_FALSE(parsed.ok()) << '"' << text << '"';
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(parsed.status().message(), HasSubstr('"' + std::string(text) + '"'));
  }
}

TEST(DeviceTest, EqualityComparesTypeAndIndex) {
  EXPECT_EQ(Device::Cuda(2), Device::Cuda(2));
  EXPECT_NE(Device::Cuda(2), Device::Cuda(3));
  EXPECT_NE(Device::Cpu(), Device::Cuda(0));
  EXPECT_NE(Device::CudaHost(), Device::Cpu());
  EXPECT_NE(Device::CudaHost(), Device::Cuda(0));
  EXPECT_EQ(Device::CudaHost(), Device::CudaHost());
}

TEST(DeviceTest, TheParseErrorListsCudaHost) {
  Result<Device> parsed = Device::Parse("gpu");
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(), HasSubstr("\"cuda_host\""));
}

}  // namespace
}  // namespace vramd::memory
