// Triton's header forwarding: which names a pattern takes (anywhere in the name, without
// case, RE2's syntax), what reaches the request's parameters, and the refusal of a pattern that
// does not compile.
#include "server/headers/header_forwarding.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace vramd::server {
namespace {

using ::testing::HasSubstr;

TEST(HeaderForwardingTest, MatchesAnywhereInTheNameWithoutCase) {
  auto forward = HeaderForwarding::Compile("--http-header-forward-pattern", "^x-fwd-|tenant");
  ASSERT_TRUE(forward.ok()) << forward.status().ToString();
  EXPECT_TRUE(forward->Matches("x-fwd-user"));
  EXPECT_TRUE(forward->Matches("X-Fwd-User"));
  EXPECT_TRUE(forward->Matches("my-TENANT-id"));
  EXPECT_FALSE(forward->Matches("a-x-fwd-user"));  // ^ anchors at the name's start
  EXPECT_FALSE(forward->Matches("content-type"));
  EXPECT_FALSE(forward->Matches(""));
}

TEST(HeaderForwardingTest, ForwardsMatchingHeadersAsStringParametersInOrder) {
  auto forward = HeaderForwarding::Compile("--grpc-header-forward-pattern", "user|trace");
  ASSERT_TRUE(forward.ok());
  std::vector<InferParameter> parameters = {{"p", int64_t{1}}};
  forward->Forward({{"x-user", "alice"}, {"accept", "*/*"}, {"Trace-Id", "t1"}}, &parameters);
  ASSERT_EQ(parameters.size(), 3u);
  EXPECT_EQ(parameters[1].name, "x-user");
  EXPECT_EQ(std::get<std::string>(parameters[1].value), "alice");
  EXPECT_EQ(parameters[2].name, "Trace-Id");
  EXPECT_EQ(std::get<std::string>(parameters[2].value), "t1");
}

TEST(HeaderForwardingTest, WhatIsNotUtf8BecomesTheReplacementCharacter) {
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(ValidUtf8("plain ascii"), "plain ascii");
  EXPECT_EQ(ValidUtf8("caf\xC3\xA9 \xF0\x9F\x98\x80"), "caf\xC3\xA9 \xF0\x9F\x98\x80");
  EXPECT_EQ(ValidUtf8("caf\xE9"), "caf" + fffd);                     // Latin-1
  EXPECT_EQ(ValidUtf8("\xFF\xFE"), fffd + fffd);
  EXPECT_EQ(ValidUtf8("\xC0\xAF"), fffd + fffd);                    // overlong '/'
  EXPECT_EQ(ValidUtf8("\xED\xA0\x80"), fffd + fffd + fffd);         // a surrogate
  EXPECT_EQ(ValidUtf8("\xF4\x90\x80\x80"), fffd + fffd + fffd + fffd);  // past U+10FFFF
  EXPECT_EQ(ValidUtf8("\xE2\x82"), fffd + fffd);                    // cut short
  EXPECT_EQ(ValidUtf8(std::string("a\0b", 3)), std::string("a\0b", 3));
  auto forward = HeaderForwarding::Compile("--f", "^x-");
  ASSERT_TRUE(forward.ok());
  std::vector<InferParameter> parameters;
  forward->Forward({{"x-raw-bin", "\xFF" "ok"}}, &parameters);
  ASSERT_EQ(parameters.size(), 1u);
  EXPECT_EQ(std::get<std::string>(parameters[0].value), fffd + "ok");
}

TEST(HeaderForwardingTest, APatternThatDoesNotCompileIsRefusedNamingTheFlag) {
  for (const char* bad : {"(unclosed", "x-[", "a**"}) {
    auto forward = HeaderForwarding::Compile("--http-header-forward-pattern", bad);
    ASSERT_FALSE(forward.ok()) << bad;
    EXPECT_EQ(forward.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(forward.status().message()),
                HasSubstr(std::string("--http-header-forward-pattern='") + bad +
                          "' is not a regular expression"));
  }
  auto empty = HeaderForwarding::Compile("--grpc-header-forward-pattern", "");
  EXPECT_THAT(std::string(empty.status().message()), HasSubstr("the pattern is empty"));
}

TEST(HeaderForwardingTest, ALongNameIsMatchedInLinearTime) {
  // RE2 does not backtrack: a pattern that would take exponential time in a backtracking
  // engine answers at once for a name a client chose.
  auto forward = HeaderForwarding::Compile("--f", "^(a+)+$");
  ASSERT_TRUE(forward.ok());
  EXPECT_FALSE(forward->Matches(std::string(8000, 'a') + "!"));
}

}  // namespace
}  // namespace vramd::server
