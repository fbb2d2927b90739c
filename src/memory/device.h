// Device: where memory lives, "cpu" or "cuda:N".
//
// Thread safety: a Device is a value; every method is safe from any thread.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace vramd::memory {

enum class DeviceType { kCpu, kCuda };

struct Device {
  DeviceType type = DeviceType::kCpu;
  int index = 0;  // CUDA ordinal; 0 for the CPU

  static Device Cpu() { return {DeviceType::kCpu, 0}; }
  static Device Cuda(int ordinal) { return {DeviceType::kCuda, ordinal}; }

  // "cpu" or "cuda:N".
  std::string ToString() const;
  // Parses ToString's forms ("cuda" alone means cuda:0). Exact and case-sensitive: N is decimal
  // digits that fit an int, with no sign or spaces. InvalidArgument otherwise, quoting `text`.
  // Whether device N exists is not checked here.
  static Result<Device> Parse(std::string_view text);

  bool is_cuda() const { return type == DeviceType::kCuda; }
  friend bool operator==(const Device&, const Device&) = default;
};

}  // namespace vramd::memory
