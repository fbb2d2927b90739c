// The gRPC server's settings from text: VRAMD_GRPC_CHANNEL_ARGS (integer channel arguments for
// measuring gRPC's transport settings) and Triton's --grpc-infer-response-compression-level.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/grpc/grpc_server.h"

namespace vramd::grpc_server {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;

TEST(GrpcChannelArgsTest, ParsesNameIntegerPairs) {
  auto args = GrpcServer::ParseChannelArgs(
      "grpc.http2.max_frame_size=16777215,,grpc.http2.lookahead_bytes=-1");
  ASSERT_TRUE(args.ok()) << args.status().ToString();
  EXPECT_THAT(*args, ElementsAre(Pair("grpc.http2.max_frame_size", 16777215),
                                 Pair("grpc.http2.lookahead_bytes", -1)));
  EXPECT_TRUE(GrpcServer::ParseChannelArgs("")->empty());
}

TEST(GrpcChannelArgsTest, RefusesWhatIsNotNameEqualsInteger) {
  for (const char* bad : {"grpc.x", "=5", "grpc.x=", "grpc.x=5k", "grpc.x=99999999999", "a=1,b"}) {
    auto args = GrpcServer::ParseChannelArgs(bad);
    ASSERT_FALSE(args.ok()) << bad;
    EXPECT_EQ(args.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(args.status().message()), ::testing::HasSubstr("is not name=integer"))
        << bad;
  }
}

TEST(GrpcCompressionLevelTest, TakesTritonsFourLevelsInAnyCase) {
  using Level = GrpcServer::Options::CompressionLevel;
  EXPECT_EQ(*GrpcServer::ParseCompressionLevel("none"), Level::kNone);
  EXPECT_EQ(*GrpcServer::ParseCompressionLevel("Low"), Level::kLow);
  EXPECT_EQ(*GrpcServer::ParseCompressionLevel("MEDIUM"), Level::kMedium);
  EXPECT_EQ(*GrpcServer::ParseCompressionLevel("high"), Level::kHigh);
  for (const char* bad : {"", "max", "gzip", "high "}) {
    auto level = GrpcServer::ParseCompressionLevel(bad);
    ASSERT_FALSE(level.ok()) << bad;
    EXPECT_THAT(std::string(level.status().message()),
                ::testing::HasSubstr("is none of none, low, medium, high"));
  }
}

}  // namespace
}  // namespace vramd::grpc_server
