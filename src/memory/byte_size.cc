#include "memory/byte_size.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>

namespace vramd::memory {
namespace {

constexpr size_t kOneKiB = size_t{1} << 10;
constexpr size_t kOneMiB = size_t{1} << 20;

std::string_view TrimBlanks(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

struct SizeUnit {
  std::string_view suffix;
  double scale;
};
constexpr SizeUnit kSizeUnits[] = {{"TiB", 1024.0 * 1024 * 1024 * 1024},
                           {"GiB", 1024.0 * 1024 * 1024},
                           {"MiB", 1024.0 * 1024},
                           {"KiB", 1024.0},
                           {"B", 1.0}};

}  // namespace

std::string FormatBytes(size_t bytes) {
  if (bytes < kOneKiB) return fmt::format("{} B", bytes);
  if (bytes < kOneMiB) return fmt::format("{:.1f} KiB", static_cast<double>(bytes) / kOneKiB);
  if (bytes < 1024 * kOneMiB) {
    return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / kOneMiB);
  }
  return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / (1024 * kOneMiB));
}

Result<int64_t> ParseByteSize(std::string_view text) {
  const std::string_view whole = TrimBlanks(text);
  std::string_view number = whole;
  double scale = 1.0;
  for (const SizeUnit& unit : kSizeUnits) {
    if (number.size() > unit.suffix.size() && number.ends_with(unit.suffix)) {
      number = TrimBlanks(number.substr(0, number.size() - unit.suffix.size()));
      scale = unit.scale;
      break;
    }
  }
  const std::string digits(number);
  char* end = nullptr;
  const double value = digits.empty() ? NAN : std::strtod(digits.c_str(), &end);
  const bool plain = digits.find_first_not_of("0123456789.") == std::string::npos;
  if (digits.empty() || !plain || end != digits.c_str() + digits.size() || !std::isfinite(value)) {
    return Status::InvalidArgument(fmt::format(
        "'{}' is not a size: give bytes (1048576) or a number with KiB, MiB, GiB or TiB (1.5GiB)",
        whole));
  }
  const double bytes = std::round(value * scale);
  if (bytes < 1 || bytes > 9.0e18) {
    return Status::InvalidArgument(
        fmt::format("'{}' is not a size from 1 byte to 8 EiB", whole));
  }
  return static_cast<int64_t>(bytes);
}

}  // namespace vramd::memory
