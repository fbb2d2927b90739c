#include "server/http/base64.h"

#include <fmt/format.h>

#include <array>

namespace vramd::http {
namespace {

constexpr int kNotBase64 = -1;

constexpr std::array<int, 256> MakeTable() {
  std::array<int, 256> table{};
  for (int& v : table) v = kNotBase64;
  constexpr std::string_view kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (size_t i = 0; i < kAlphabet.size(); ++i) {
    table[static_cast<unsigned char>(kAlphabet[i])] = static_cast<int>(i);
  }
  return table;
}

constexpr std::array<int, 256> kTable = MakeTable();

}  // namespace

Result<std::string> DecodeBase64(std::string_view text) {
  if (text.size() % 4 != 0) {
    return Status::InvalidArgument(
        fmt::format("base64 text of {} characters is not a multiple of 4", text.size()));
  }
  size_t padding = 0;
  if (!text.empty() && text.back() == '=') ++padding;
  if (text.size() >= 2 && text[text.size() - 2] == '=') ++padding;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  uint32_t bits = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const bool pad = i >= text.size() - padding;
    const int v = pad ? 0 : kTable[static_cast<unsigned char>(text[i])];
    if (v == kNotBase64) {
      return Status::InvalidArgument(
          fmt::format("'{}' at position {} is not a base64 character", text[i], i));
    }
    bits = (bits << 6) | static_cast<uint32_t>(v);
    if (i % 4 == 3) {
      out.push_back(static_cast<char>((bits >> 16) & 0xff));
      out.push_back(static_cast<char>((bits >> 8) & 0xff));
      out.push_back(static_cast<char>(bits & 0xff));
      bits = 0;
    }
  }
  out.resize(out.size() - padding);
  return out;
}

}  // namespace vramd::http
