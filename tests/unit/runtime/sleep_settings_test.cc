// A model's sleep settings from its config's parameters, and the durations they are written in
// (runtime/sleep_settings.h).
#include "runtime/sleep_settings.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

namespace vramd::runtime {
namespace {

using ::testing::HasSubstr;
using std::chrono::milliseconds;

config::ModelConfig SleepSettingsTest_Config(const std::string& after_idle,
                                             const std::string& level) {
  config::ModelConfig config;
  config.set_name("m");
  if (!after_idle.empty()) {
    (*config.mutable_parameters())[std::string(kSleepAfterIdleParameter)].set_string_value(
        after_idle);
  }
  if (!level.empty()) {
    (*config.mutable_parameters())[std::string(kSleepLevelParameter)].set_string_value(level);
  }
  return config;
}

void SleepSettingsTest_ExpectDuration(const std::string& text, milliseconds expected) {
  auto parsed = ParseDuration(text);
  ASSERT_TRUE(parsed.ok()) << text << ": " << parsed.status().ToString();
  EXPECT_EQ(*parsed, expected) << text;
}

TEST(SleepSettingsTest, ParseDurationReadsEachUnit) {
  SleepSettingsTest_ExpectDuration("1500ms", milliseconds(1500));
  SleepSettingsTest_ExpectDuration("2s", milliseconds(2000));
  SleepSettingsTest_ExpectDuration("5m", milliseconds(300'000));
  SleepSettingsTest_ExpectDuration("1h", milliseconds(3'600'000));
  SleepSettingsTest_ExpectDuration("30", milliseconds(30'000));  // a bare number is seconds
  SleepSettingsTest_ExpectDuration("0.5s", milliseconds(500));
  SleepSettingsTest_ExpectDuration("0", milliseconds(0));
  SleepSettingsTest_ExpectDuration(" 2s ", milliseconds(2000));
}

TEST(SleepSettingsTest, ParseDurationRefusesWhatIsNotADurationQuotingIt) {
  const std::vector<std::string> bad = {
      "", "abc", "5 parsecs", "-1s", "1e400s", "s", "1.2.3s", "5sec",
      "1" + std::string(400, '0') + "s",  // more than a double holds
      "99999999999h"};                     // past ten years
  for (const std::string& text : bad) {
    auto parsed = ParseDuration(text);
    ASSERT_FALSE(parsed.ok()) << "'" << text << "' parsed as " << parsed->count() << " ms";
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(parsed.status().message(), HasSubstr("'" + text + "' is not a duration"));
  }
}

TEST(SleepSettingsTest, AConfigWithoutTheParametersSaysNothingAboutSleeping) {
  auto settings = SleepSettingsOfConfig(SleepSettingsTest_Config("", ""));
  ASSERT_TRUE(settings.ok()) << settings.status().ToString();
  EXPECT_FALSE(settings->configured);
  EXPECT_FALSE(settings->after_idle.has_value());
  EXPECT_EQ(settings->level, backends::SleepLevel::kHostCopy);
}

TEST(SleepSettingsTest, AnIdleTimeOfZeroIsConfiguredButNeverSleepsByItself) {
  auto settings = SleepSettingsOfConfig(SleepSettingsTest_Config("0", ""));
  ASSERT_TRUE(settings.ok()) << settings.status().ToString();
  EXPECT_TRUE(settings->configured);
  EXPECT_FALSE(settings->after_idle.has_value());
  EXPECT_EQ(settings->level, backends::SleepLevel::kHostCopy);
}

TEST(SleepSettingsTest, AnIdleTimeAndALevelAreRead) {
  auto settings = SleepSettingsOfConfig(SleepSettingsTest_Config("5m", "2"));
  ASSERT_TRUE(settings.ok()) << settings.status().ToString();
  EXPECT_TRUE(settings->configured);
  ASSERT_TRUE(settings->after_idle.has_value());
  EXPECT_EQ(*settings->after_idle, milliseconds(300'000));
  EXPECT_EQ(settings->level, backends::SleepLevel::kDiscard);

  auto level_one = SleepSettingsOfConfig(SleepSettingsTest_Config("", "1"));
  ASSERT_TRUE(level_one.ok()) << level_one.status().ToString();
  EXPECT_TRUE(level_one->configured);  // a level alone says the model is meant to sleep
  EXPECT_FALSE(level_one->after_idle.has_value());
  EXPECT_EQ(level_one->level, backends::SleepLevel::kHostCopy);
}

TEST(SleepSettingsTest, AnUnknownLevelIsRefusedNamingTheParameter) {
  auto settings = SleepSettingsOfConfig(SleepSettingsTest_Config("", "3"));
  ASSERT_FALSE(settings.ok());
  EXPECT_EQ(settings.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(settings.status().message(), HasSubstr("vramd.sleep_level"));
  EXPECT_THAT(settings.status().message(), HasSubstr("'3'"));
}

TEST(SleepSettingsTest, ABadIdleTimeIsRefusedNamingTheParameterAndTheValue) {
  auto settings = SleepSettingsOfConfig(SleepSettingsTest_Config("soon", "1"));
  ASSERT_FALSE(settings.ok());
  EXPECT_EQ(settings.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(settings.status().message(), HasSubstr("parameter 'vramd.sleep_after_idle'"));
  EXPECT_THAT(settings.status().message(), HasSubstr("'soon' is not a duration"));
}

}  // namespace
}  // namespace vramd::runtime
