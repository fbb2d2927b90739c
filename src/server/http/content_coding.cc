#include "server/http/content_coding.h"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <optional>

namespace vramd::http {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool EqualsNoCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

// zlib's window bits: 16 + 15 reads a gzip member, 15 a zlib stream, -15 raw deflate.
constexpr int kGzipBits = 16 + MAX_WBITS;
constexpr int kZlibBits = MAX_WBITS;
constexpr int kRawBits = -MAX_WBITS;

// z_stream's lengths are 32-bit; larger inputs and outputs go through in steps of this.
constexpr size_t kStep = size_t{1} << 30;

// One inflate of `body` with `bits`; nullopt (with *why) for data that is not well-formed.
std::optional<std::string> Inflate(std::string_view body, int bits, size_t max_bytes,
                                   bool* too_large, std::string* why) {
  z_stream z{};
  if (inflateInit2(&z, bits) != Z_OK) {
    *why = "zlib could not start";
    return std::nullopt;
  }
  std::string out;
  // Guessing 4x the input saves most regrowth; the limit still bounds it.
  out.resize(std::min(max_bytes, std::max<size_t>(body.size() * 4, 4096)));
  unsigned char probe = 0;
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    const size_t in_used = z.total_in;
    const size_t produced = z.total_out;
    if (produced == out.size() && out.size() < max_bytes) {
      out.resize(std::min(max_bytes, std::max<size_t>(out.size() * 2, 4096)));
    }
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(body.data() + in_used));
    z.avail_in = static_cast<uInt>(std::min(body.size() - in_used, kStep));
    if (produced == out.size()) {
      // Full at the limit: one more byte of output means the body is over it.
      z.next_out = &probe;
      z.avail_out = 1;
    } else {
      z.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
      z.avail_out = static_cast<uInt>(std::min(out.size() - produced, kStep));
    }
    const bool probing = z.next_out == &probe;
    rc = inflate(&z, Z_NO_FLUSH);
    if (probing && z.avail_out == 0) {
      *too_large = true;
      break;
    }
    if (rc == Z_STREAM_END) break;
    if (rc == Z_BUF_ERROR && z.total_in == body.size()) {
      *why = "the data ends before the compressed stream does";
      break;
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR) {
      *why = z.msg != nullptr ? z.msg : fmt::format("zlib error {}", rc);
      break;
    }
  }
  const size_t in_used = z.total_in;
  const size_t produced = z.total_out;
  inflateEnd(&z);
  if (rc != Z_STREAM_END || *too_large) return std::nullopt;
  if (in_used != body.size()) {
    *why = fmt::format("{} bytes follow the end of the compressed stream", body.size() - in_used);
    return std::nullopt;
  }
  out.resize(produced);
  return out;
}

}  // namespace

std::string_view CodingName(ContentCoding coding) {
  switch (coding) {
    case ContentCoding::kGzip:
      return "gzip";
    case ContentCoding::kDeflate:
      return "deflate";
    case ContentCoding::kIdentity:
      break;
  }
  return "identity";
}

Result<ContentCoding> ParseContentEncoding(std::string_view header) {
  const std::string_view value = Trim(header);
  if (value.empty() || EqualsNoCase(value, "identity")) return ContentCoding::kIdentity;
  if (EqualsNoCase(value, "gzip") || EqualsNoCase(value, "x-gzip")) return ContentCoding::kGzip;
  if (EqualsNoCase(value, "deflate")) return ContentCoding::kDeflate;
  return Status::Unsupported(fmt::format(
      "Content-Encoding '{}' is not supported: a request body may be gzip, deflate or identity",
      value));
}

ContentCoding ChooseResponseCoding(std::string_view accept_encoding) {
  std::optional<double> gzip, deflate, any;
  std::string_view rest = accept_encoding;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    double q = 1.0;
    const size_t semi = item.find(';');
    if (semi != std::string_view::npos) {
      std::string_view param = Trim(item.substr(semi + 1));
      item = item.substr(0, semi);
      if (param.size() > 2 && (param[0] == 'q' || param[0] == 'Q') && param[1] == '=') {
        // A weight that does not read as a number counts as 0: the client did not say yes.
        char* end = nullptr;
        const std::string number(param.substr(2));
        q = std::strtod(number.c_str(), &end);
        if (end == number.c_str()) q = 0.0;
      }
    }
    item = Trim(item);
    if (EqualsNoCase(item, "gzip") || EqualsNoCase(item, "x-gzip")) {
      gzip = q;
    } else if (EqualsNoCase(item, "deflate")) {
      deflate = q;
    } else if (item == "*") {
      any = q;
    }
  }
  const double g = gzip.value_or(any.value_or(0.0));
  const double d = deflate.value_or(any.value_or(0.0));
  if (g <= 0.0 && d <= 0.0) return ContentCoding::kIdentity;
  return g >= d ? ContentCoding::kGzip : ContentCoding::kDeflate;
}

Result<std::string> DecodeBody(ContentCoding coding, std::string_view body, size_t max_bytes) {
  if (coding == ContentCoding::kIdentity) {
    if (body.size() > max_bytes) {
      return Status::ResourceExhausted(
          fmt::format("request body exceeds the limit of {} bytes", max_bytes));
    }
    return std::string(body);
  }
  bool too_large = false;
  std::string why;
  std::optional<std::string> out =
      Inflate(body, coding == ContentCoding::kGzip ? kGzipBits : kZlibBits, max_bytes,
              &too_large, &why);
  if (!out && !too_large && coding == ContentCoding::kDeflate) {
    // Not a zlib stream: perhaps raw deflate, as some clients send under this name.
    std::string raw_why;
    out = Inflate(body, kRawBits, max_bytes, &too_large, &raw_why);
  }
  if (too_large) {
    return Status::ResourceExhausted(fmt::format(
        "the {}-compressed request body decodes to more than the limit of {} bytes",
        CodingName(coding), max_bytes));
  }
  if (!out) {
    return Status::InvalidArgument(fmt::format(
        "the request body is not valid {} data (Content-Encoding): {}", CodingName(coding), why));
  }
  return std::move(*out);
}

std::optional<std::string> EncodeBody(ContentCoding coding, std::string_view body) {
  if (coding == ContentCoding::kIdentity) return std::string(body);
  z_stream z{};
  const int bits = coding == ContentCoding::kGzip ? kGzipBits : kZlibBits;
  if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, bits, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    return std::nullopt;
  }
  std::string out;
  out.resize(deflateBound(&z, static_cast<uLong>(body.size())) + 64);
  int rc = Z_OK;
  while (rc == Z_OK || rc == Z_BUF_ERROR) {
    const size_t in_used = z.total_in;
    const size_t produced = z.total_out;
    if (produced == out.size()) out.resize(out.size() * 2);
    const size_t in_avail = std::min(body.size() - in_used, kStep);
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(body.data() + in_used));
    z.avail_in = static_cast<uInt>(in_avail);
    z.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
    z.avail_out = static_cast<uInt>(std::min(out.size() - produced, kStep));
    rc = deflate(&z, in_used + in_avail == body.size() ? Z_FINISH : Z_NO_FLUSH);
  }
  const size_t produced = z.total_out;
  deflateEnd(&z);
  if (rc != Z_STREAM_END) return std::nullopt;
  out.resize(produced);
  return out;
}

}  // namespace vramd::http
