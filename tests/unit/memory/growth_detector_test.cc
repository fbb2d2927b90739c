#include "memory/growth_detector.h"

#include <gtest/gtest.h>

namespace vramd::memory {
namespace {

constexpr OwnerId kOwner = 7;

TEST(GrowthDetectorTest, FlagsAfterThresholdConsecutiveRises) {
  GrowthDetector detector(3);
  EXPECT_EQ(detector.threshold(), 3);
  EXPECT_FALSE(detector.Observe(kOwner, 100));  // first sight: nothing to compare with
  EXPECT_FALSE(detector.Observe(kOwner, 110));
  EXPECT_FALSE(detector.Observe(kOwner, 120));
  auto growth = detector.Observe(kOwner, 130);
  ASSERT_TRUE(growth);
  EXPECT_EQ(growth->owner, kOwner);
  EXPECT_EQ(growth->consecutive_rises, 3);
  EXPECT_EQ(growth->from_bytes, 100);
  EXPECT_EQ(growth->to_bytes, 130);
}

TEST(GrowthDetectorTest, AnythingButARiseResetsTheRun) {
  GrowthDetector detector(2);
  detector.Observe(kOwner, 100);
  EXPECT_FALSE(detector.Observe(kOwner, 200));
  EXPECT_FALSE(detector.Observe(kOwner, 200));  // equal is not a rise
  EXPECT_FALSE(detector.Observe(kOwner, 300));
  EXPECT_FALSE(detector.Observe(kOwner, 50));   // a fall resets too
  EXPECT_FALSE(detector.Observe(kOwner, 60));
  auto growth = detector.Observe(kOwner, 70);
  ASSERT_TRUE(growth);
  EXPECT_EQ(growth->consecutive_rises, 2);
  EXPECT_EQ(growth->from_bytes, 50);  // the run started after the fall
  EXPECT_EQ(growth->to_bytes, 70);
}

TEST(GrowthDetectorTest, ThresholdOfOneFlagsEveryRise) {
  GrowthDetector detector(1);
  detector.Observe(kOwner, 0);
  EXPECT_TRUE(detector.Observe(kOwner, 1));
  EXPECT_TRUE(detector.Observe(kOwner, 2));
  EXPECT_FALSE(detector.Observe(kOwner, 2));
  EXPECT_EQ(GrowthDetector(0).threshold(), 1);  // below 1 means 1
}

TEST(GrowthDetectorTest, FlagsAgainOnlyAfterAnotherThresholdRises) {
  GrowthDetector detector(3);
  detector.Observe(kOwner, 0);
  int flagged = 0;
  for (int i = 1; i <= 9; ++i) {
    auto growth = detector.Observe(kOwner, i * 10);
    if (i % 3 == 0) {
      ASSERT_TRUE(growth) << i;
      EXPECT_EQ(growth->consecutive_rises, i);
      EXPECT_EQ(growth->from_bytes, 0);
      EXPECT_EQ(growth->to_bytes, i * 10);
      ++flagged;
    } else {
      EXPECT_FALSE(growth) << i;
    }
  }
  EXPECT_EQ(flagged, 3);
}

TEST(GrowthDetectorTest, OwnersAreTrackedApart) {
  GrowthDetector detector(2);
  detector.Observe(1, 0);
  detector.Observe(2, 0);
  EXPECT_FALSE(detector.Observe(1, 1));
  EXPECT_FALSE(detector.Observe(2, 0));
  EXPECT_TRUE(detector.Observe(1, 2));
  EXPECT_FALSE(detector.Observe(2, 1));
}

TEST(GrowthDetectorTest, ForgetStartsOver) {
  GrowthDetector detector(2);
  detector.Observe(kOwner, 0);
  detector.Observe(kOwner, 1);
  detector.Forget(kOwner);
  EXPECT_FALSE(detector.Observe(kOwner, 2));  // first sight again, not a rise
  EXPECT_FALSE(detector.Observe(kOwner, 3));
  auto growth = detector.Observe(kOwner, 4);
  ASSERT_TRUE(growth);
  EXPECT_EQ(growth->from_bytes, 2);
  detector.Forget(12345);  // unknown: no effect
}

}  // namespace
}  // namespace vramd::memory
