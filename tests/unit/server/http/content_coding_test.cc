// Content codings of HTTP bodies: what a client may send (gzip, deflate as zlib or raw, identity)
// decodes to the same bytes, the decoded size is held to the limit however small the coded
// body, malformed data is refused with zlib's reason, and Accept-Encoding picks by weight.
#include "server/http/content_coding.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <random>
#include <string>

namespace vramd::http {
namespace {
using ::testing::HasSubstr;

std::string SampleText(size_t n) {
  std::mt19937 rng(7);
  std::string s;
  for (size_t i = 0; i < n; ++i) s.push_back(static_cast<char>('a' + rng() % 6));
  return s;
}

// A raw deflate stream, as some clients send under "deflate".
std::string RawDeflate(const std::string& in) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, in.size()) + 16, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

TEST(ContentCodingTest, RoundTripsEveryCodingAndSize) {
  for (ContentCoding coding : {ContentCoding::kGzip, ContentCoding::kDeflate}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{1000}, size_t{1} << 20}) {
      const std::string text = SampleText(n);
      auto coded = EncodeBody(coding, text);
      ASSERT_TRUE(coded.has_value());
      if (n >= 1000) EXPECT_LT(coded->size(), n / 2) << CodingName(coding);
      auto back = DecodeBody(coding, *coded, n);
      ASSERT_TRUE(back.ok()) << back.status().ToString();
      EXPECT_EQ(*back, text);
    }
  }
  // gzip's magic number and zlib's header: what a client's library expects.
  EXPECT_EQ(EncodeBody(ContentCoding::kGzip, "x")->substr(0, 2), "\x1f\x8b");
  EXPECT_EQ(static_cast<unsigned char>((*EncodeBody(ContentCoding::kDeflate, "x"))[0]) & 0x0f, 8);
}

TEST(ContentCodingTest, AcceptsRawDeflateUnderDeflate) {
  const std::string text = SampleText(5000);
  auto back = DecodeBody(ContentCoding::kDeflate, RawDeflate(text), 1 << 20);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, text);
}

TEST(ContentCodingTest, TheLimitIsTheDecodedSizes) {
  // 16 MiB of zeros compress to about 16 KiB: the decoder stops at the limit, not the end.
  const std::string zeros(size_t{16} << 20, 0);
  auto bomb = EncodeBody(ContentCoding::kGzip, zeros);
  ASSERT_TRUE(bomb.has_value());
  EXPECT_LT(bomb->size(), size_t{1} << 20);
  auto refused = DecodeBody(ContentCoding::kGzip, *bomb, size_t{1} << 20);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(), HasSubstr("more than the limit of 1048576 bytes"));
  // Exactly at the limit is allowed; one byte over is not.
  const std::string text = SampleText(4096);
  EXPECT_TRUE(DecodeBody(ContentCoding::kGzip, *EncodeBody(ContentCoding::kGzip, text), 4096).ok());
  EXPECT_FALSE(DecodeBody(ContentCoding::kGzip, *EncodeBody(ContentCoding::kGzip, text), 4095).ok());
  EXPECT_FALSE(DecodeBody(ContentCoding::kIdentity, text, 4095).ok());
}

TEST(ContentCodingTest, RefusesMalformedDataNamingWhy) {
  const std::string coded = *EncodeBody(ContentCoding::kGzip, SampleText(20000));
  auto truncated = DecodeBody(ContentCoding::kGzip, coded.substr(0, coded.size() / 2), 1 << 20);
  ASSERT_FALSE(truncated.ok());
  EXPECT_EQ(truncated.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(truncated.status().message(), HasSubstr("not valid gzip data"));
  EXPECT_THAT(truncated.status().message(), HasSubstr("ends before"));
  auto garbage = DecodeBody(ContentCoding::kGzip, "this is not gzip", 1 << 20);
  ASSERT_FALSE(garbage.ok());
  EXPECT_THAT(garbage.status().message(), HasSubstr("not valid gzip data"));
  auto trailing = DecodeBody(ContentCoding::kGzip, coded + "xyz", 1 << 20);
  ASSERT_FALSE(trailing.ok());
  EXPECT_THAT(trailing.status().message(), HasSubstr("3 bytes follow"));
  std::string flipped = coded;
  flipped[flipped.size() - 6] ^= 0x55;  // the CRC
  EXPECT_FALSE(DecodeBody(ContentCoding::kGzip, flipped, 1 << 20).ok());
  EXPECT_FALSE(DecodeBody(ContentCoding::kDeflate, "not deflate either", 1 << 20).ok());
}

TEST(ContentCodingTest, ParsesContentEncoding) {
  EXPECT_EQ(ParseContentEncoding("gzip").value(), ContentCoding::kGzip);
  EXPECT_EQ(ParseContentEncoding(" X-GZIP ").value(), ContentCoding::kGzip);
  EXPECT_EQ(ParseContentEncoding("Deflate").value(), ContentCoding::kDeflate);
  EXPECT_EQ(ParseContentEncoding("identity").value(), ContentCoding::kIdentity);
  EXPECT_EQ(ParseContentEncoding("").value(), ContentCoding::kIdentity);
  for (const char* bad : {"br", "zstd", "gzip, deflate", "compress"}) {
    auto r = ParseContentEncoding(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
    EXPECT_THAT(r.status().message(), HasSubstr(bad));
  }
}

TEST(ContentCodingTest, ChoosesTheResponseCodingByWeight) {
  EXPECT_EQ(ChooseResponseCoding(""), ContentCoding::kIdentity);
  EXPECT_EQ(ChooseResponseCoding("gzip"), ContentCoding::kGzip);
  EXPECT_EQ(ChooseResponseCoding("deflate"), ContentCoding::kDeflate);
  EXPECT_EQ(ChooseResponseCoding("gzip, deflate"), ContentCoding::kGzip);
  EXPECT_EQ(ChooseResponseCoding("gzip;q=0.5, deflate"), ContentCoding::kDeflate);
  EXPECT_EQ(ChooseResponseCoding("deflate;q=0.2, GZIP;q=0.9"), ContentCoding::kGzip);
  EXPECT_EQ(ChooseResponseCoding("gzip;q=0"), ContentCoding::kIdentity);
  EXPECT_EQ(ChooseResponseCoding("br, identity"), ContentCoding::kIdentity);
  EXPECT_EQ(ChooseResponseCoding("*"), ContentCoding::kGzip);
  EXPECT_EQ(ChooseResponseCoding("*;q=0.1, gzip;q=0"), ContentCoding::kDeflate);
  EXPECT_EQ(ChooseResponseCoding("gzip;q=nonsense"), ContentCoding::kIdentity);
}

}  // namespace
}  // namespace vramd::http
