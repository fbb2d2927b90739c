#include "memory/device.h"

#include <charconv>
#include <string>

namespace vramd::memory {

std::string Device::ToString() const {
  switch (type) {
    case DeviceType::kCpu: return "cpu";
    case DeviceType::kCuda: return "cuda:" + std::to_string(index);
    case DeviceType::kCudaHost: return "cuda_host";
  }
  return "unknown";
}

Result<Device> Device::Parse(std::string_view text) {
  if (text == "cpu") return Device::Cpu();
  if (text == "cuda") return Device::Cuda(0);
  if (text == "cuda_host") return Device::CudaHost();
  constexpr std::string_view kCudaPrefix = "cuda:";
  if (text.starts_with(kCudaPrefix)) {
    std::string_view digits = text.substr(kCudaPrefix.size());
    int ordinal = 0;
    // Decimal digits only: no sign, no spaces, nothing after the number, no overflow.
    if (!digits.empty() && digits.front() >= '0' && digits.front() <= '9') {
      auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), ordinal);
      if (ec == std::errc() && end == digits.data() + digits.size()) return Device::Cuda(ordinal);
    }
  }
  return Status::InvalidArgument("invalid device \"" + std::string(text) +
                                 "\": expected \"cpu\", \"cuda\", \"cuda:N\" (N a device "
                                 "ordinal, 0 or more) or \"cuda_host\" (pinned host memory)");
}

}  // namespace vramd::memory
