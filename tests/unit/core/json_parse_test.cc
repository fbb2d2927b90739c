// Tests for core/json_parse.h: limits on depth and size, messages, and that nothing recurses.
#include "core/json_parse.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <string_view>

namespace vramd {
namespace {

using ::testing::HasSubstr;

std::string Nested(size_t depth, std::string_view open, std::string_view inner,
                   std::string_view close) {
  std::string text;
  for (size_t i = 0; i < depth; ++i) text += open;
  text += inner;
  for (size_t i = 0; i < depth; ++i) text += close;
  return text;
}

TEST(ParseJsonTest, ParsesADocumentThatOutlivesItsText) {
  auto text = std::make_unique<std::string>(R"({"name": "m", "dims": [1, -2], "ok": true})");
  auto doc = ParseJson(*text, "test JSON");
  text.reset();
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  ASSERT_TRUE(doc->IsObject());
  EXPECT_STREQ((*doc)["name"].GetString(), "m");
  EXPECT_EQ((*doc)["dims"][1].GetInt(), -2);
  EXPECT_TRUE((*doc)["ok"].GetBool());
}

TEST(ParseJsonTest, DepthUpToTheLimitParses) {
  const JsonLimits limits{.max_depth = 5};
  EXPECT_TRUE(ParseJson(Nested(5, "[", "1", "]"), "t", limits).ok());
  EXPECT_TRUE(ParseJson(Nested(5, "{\"a\":", "1", "}"), "t", limits).ok());
  EXPECT_TRUE(ParseJson("7", "t", limits).ok());  // a scalar has no depth
}

TEST(ParseJsonTest, OneLevelPastTheLimitIsRefusedNamingIt) {
  const JsonLimits limits{.max_depth = 5};
  for (const std::string& text : {Nested(6, "[", "1", "]"), Nested(6, "{\"a\":", "1", "}"),
                                  Nested(3, "[{\"a\":", "[]", "}]")}) {
    auto doc = ParseJson(text, "the body", limits);
    ASSERT_FALSE(doc.ok()) << text;
    EXPECT_EQ(doc.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(doc.status().message(), HasSubstr("the body nests deeper than 5 levels"));
  }
}

TEST(ParseJsonTest, MillionsOfLevelsAreRefusedWithoutRecursing) {
  // Unterminated, as an attacker sends it: the refusal comes at level 65, long before the end.
  auto doc = ParseJson(std::string(5'000'000, '['), "the body");
  ASSERT_FALSE(doc.ok());
  EXPECT_THAT(doc.status().message(), HasSubstr("nests deeper than 64 levels (at offset "));
  doc = ParseJson(Nested(2'000'000, "{\"k\":", "null", "}"), "the body");
  ASSERT_FALSE(doc.ok());
  EXPECT_THAT(doc.status().message(), HasSubstr("nests deeper than 64 levels"));
}

TEST(ParseJsonTest, BracketsInsideStringsAreNotNesting) {
  auto doc = ParseJson("[\"" + std::string(100'000, '[') + "\"]", "t");
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  EXPECT_EQ((*doc)[0].GetStringLength(), 100'000u);
}

TEST(ParseJsonTest, TextOverTheSizeLimitIsRefusedBeforeParsing) {
  const JsonLimits limits{.max_bytes = 10};
  EXPECT_TRUE(ParseJson("[1,2,3,4]", "t", limits).ok());
  auto doc = ParseJson("[1,2,3,4,5]", "the index body", limits);
  ASSERT_FALSE(doc.ok());
  EXPECT_EQ(doc.status().message(), "the index body has 11 bytes, over the limit of 10 bytes");
  // The default limit: 16 MiB.
  doc = ParseJson("\"" + std::string((16 << 20) - 1, 'a') + "\"", "t");
  EXPECT_FALSE(doc.ok());
  EXPECT_THAT(doc.status().message(), HasSubstr("over the limit of 16777216 bytes"));
}

TEST(ParseJsonTest, SyntaxErrorsNameTheOffsetAndTheProblem) {
  for (const char* text : {"", "{\"a\": }", "[1, 2", "{} trailing", "{\"a\" 1}", "NaN"}) {
    auto doc = ParseJson(text, "model config JSON");
    ASSERT_FALSE(doc.ok()) << text;
    EXPECT_EQ(doc.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(doc.status().message(), HasSubstr("model config JSON is not valid JSON at offset "))
        << text;
  }
  EXPECT_THAT(ParseJson("{\"a\": }", "x").status().message(),
              HasSubstr("at offset 6: Invalid value."));
}

TEST(ParseJsonTest, InvalidUtf8IsRefusedOnlyWhenAsked) {
  const std::string text = "{\"t\xff\": 1}";
  EXPECT_TRUE(ParseJson(text, "t").ok());
  auto doc = ParseJson(text, "the header", {.validate_utf8 = true});
  ASSERT_FALSE(doc.ok());
  EXPECT_THAT(doc.status().message(), HasSubstr("the header is not valid JSON"));
}

}  // namespace
}  // namespace vramd
