// Peer (src/backends/remote/peer.h) over a socketpair: a call that gives up at its deadline
// leaves the conversation going (its late reply is dropped, not taken for the other side's
// mistake), and WaitClosed returns the closing reason once a Shutdown ends the conversation.
#include "backends/remote/peer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>

namespace vramd::backends::remote {
namespace {
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

// Two peers: `vramd` calls, `host` holds back each call's reply until the test releases it.
class PeerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto pair = Channel::SocketPair();
    ASSERT_TRUE(pair.ok()) << pair.status().ToString();
    vramd_ = std::make_unique<Peer>(
        std::move(pair->first), [](Frame) { return Status::InvalidArgument("vramd takes no calls"); },
        [](const Status& receive) {
          return Status::Unavailable(receive.ok() ? "ended" : "bad frame: " + receive.message());
        });
    host_ = std::make_unique<Peer>(
        std::move(pair->second),
        [this](Frame f) {
          held_.set_value(f.id);
          return Status::Ok();
        },
        [](const Status&) { return Status::Unavailable("host side ended"); });
    vramd_->Start();
    host_->Start();
  }
  void TearDown() override {
    host_.reset();
    vramd_.reset();
  }

  std::promise<uint64_t> held_;  // the id of the call the host got
  std::unique_ptr<Peer> vramd_;
  std::unique_ptr<Peer> host_;
};

TEST_F(PeerTest, ACallGivesUpAtItsDeadlineAndItsLateReplyIsDropped) {
  auto held = held_.get_future();
  const auto start = Clock::now();
  auto late = vramd_->CallUntil(MessageType::kExecute, "payload", start + std::chrono::milliseconds(50));
  ASSERT_TRUE(late.ok()) << late.status().ToString();
  EXPECT_FALSE(late->has_value());
  EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(50));

  // The reply comes after all: dropped, and the conversation goes on.
  const uint64_t id = held.get();
  ASSERT_TRUE(host_->Reply(id, "too late").ok());
  held_ = std::promise<uint64_t>();
  auto next = held_.get_future();
  auto answered = std::async(std::launch::async, [&] {
    return vramd_->CallUntil(MessageType::kExecute, "again", Clock::now() + std::chrono::seconds(30));
  });
  ASSERT_TRUE(host_->Reply(next.get(), "in time").ok());
  auto reply = answered.get();
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  ASSERT_TRUE(reply->has_value());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>((*reply)->data()), (*reply)->size()), "in time");
  EXPECT_FALSE(vramd_->closed());
}

TEST_F(PeerTest, ShutdownEndsTheConversationAndWaitClosedSaysWhy) {
  auto held = held_.get_future();
  auto waiting = std::async(std::launch::async, [&] { return vramd_->Call(MessageType::kExecute, "x"); });
  held.get();  // the call is in flight
  vramd_->Shutdown();
  EXPECT_THAT(vramd_->WaitClosed().message(), HasSubstr("ended"));
  auto failed = waiting.get();
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(failed.status().message(), HasSubstr("ended"));
  // Later calls fail at once with the same reason.
  auto later = vramd_->CallUntil(MessageType::kExecute, "y", Clock::now() + std::chrono::seconds(30));
  ASSERT_FALSE(later.ok());
  EXPECT_THAT(later.status().message(), HasSubstr("ended"));
}

}  // namespace
}  // namespace vramd::backends::remote
