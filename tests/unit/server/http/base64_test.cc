// DecodeBase64: the standard alphabet with padding, as Triton's HTTP protocol carries a CUDA IPC
// handle; anything else is refused with where it went wrong.
#include "server/http/base64.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace vramd::http {
namespace {
using ::testing::HasSubstr;

TEST(Base64Test, DecodesEveryPaddingLength) {
  EXPECT_EQ(DecodeBase64("").value(), "");
  EXPECT_EQ(DecodeBase64("Zg==").value(), "f");
  EXPECT_EQ(DecodeBase64("Zm8=").value(), "fo");
  EXPECT_EQ(DecodeBase64("Zm9v").value(), "foo");
  EXPECT_EQ(DecodeBase64("Zm9vYmFy").value(), "foobar");
  EXPECT_EQ(DecodeBase64("AP8+/w==").value(), std::string("\x00\xff\x3e\xff", 4));
}

TEST(Base64Test, RefusesWhatIsNotBase64) {
  auto length = DecodeBase64("abc");
  ASSERT_FALSE(length.ok());
  EXPECT_THAT(length.status().message(), HasSubstr("not a multiple of 4"));
  auto character = DecodeBase64("ab*d");
  ASSERT_FALSE(character.ok());
  EXPECT_THAT(character.status().message(), HasSubstr("'*' at position 2"));
  EXPECT_FALSE(DecodeBase64("a=bc").ok());  // padding only at the end
  EXPECT_FALSE(DecodeBase64("ab c").ok());
}

}  // namespace
}  // namespace vramd::http
