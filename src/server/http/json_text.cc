#include "server/http/json_text.h"

#include <cstddef>

namespace vramd::http::internal {
namespace {

// Length of the valid UTF-8 sequence at p[0..n) (RFC 3629: no overlong forms, surrogates or
// code points above U+10FFFF), or 0 if p[0] does not start one.
size_t Utf8SequenceLength(const unsigned char* p, size_t n) {
  auto cont = [&](size_t i, unsigned char lo = 0x80, unsigned char hi = 0xBF) {
    return i < n && p[i] >= lo && p[i] <= hi;
  };
  const unsigned char c = p[0];
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c == 0xE0) return cont(1, 0xA0) && cont(2) ? 3 : 0;
  if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) return cont(1) && cont(2) ? 3 : 0;
  if (c == 0xED) return cont(1, 0x80, 0x9F) && cont(2) ? 3 : 0;
  if (c == 0xF0) return cont(1, 0x90) && cont(2) && cont(3) ? 4 : 0;
  if (c >= 0xF1 && c <= 0xF3) return cont(1) && cont(2) && cont(3) ? 4 : 0;
  if (c == 0xF4) return cont(1, 0x80, 0x8F) && cont(2) && cont(3) ? 4 : 0;
  return 0;
}

// The body of both writers: with `exact`, stops at the first byte that is not valid UTF-8
// and returns its offset; otherwise escapes such bytes as \u00XX.
std::optional<size_t> AppendString(std::string* out, std::string_view bytes, bool exact) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  out->push_back('"');
  size_t copied = 0;  // bytes before this are in `out`
  size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
      ++i;
      continue;
    }
    if (c >= 0x80) {
      const size_t len = Utf8SequenceLength(p + i, n - i);
      if (len != 0) {
        i += len;
        continue;
      }
      if (exact) return i;
    }
    out->append(bytes.data() + copied, i - copied);
    switch (c) {
      case '"': out->append("\\\""); break;
      case '\\': out->append("\\\\"); break;
      case '\b': out->append("\\b"); break;
      case '\f': out->append("\\f"); break;
      case '\n': out->append("\\n"); break;
      case '\r': out->append("\\r"); break;
      case '\t': out->append("\\t"); break;
      default: {
        const char escape[6] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 0xf]};
        out->append(escape, sizeof(escape));
      }
    }
    ++i;
    copied = i;
  }
  out->append(bytes.data() + copied, n - copied);
  out->push_back('"');
  return std::nullopt;
}

}  // namespace

void AppendJsonString(std::string* out, std::string_view bytes) {
  (void)AppendString(out, bytes, /*exact=*/false);
}

std::optional<size_t> AppendExactJsonString(std::string* out, std::string_view bytes) {
  return AppendString(out, bytes, /*exact=*/true);
}

}  // namespace vramd::http::internal
