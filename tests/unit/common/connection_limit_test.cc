#include "common/security/connection_limit.h"

#include <gtest/gtest.h>

namespace bm {
namespace {

const PeerIdentity kAlice{KeyRole::kClient, "alice", "alice-key"};
const PeerIdentity kBob{KeyRole::kClient, "bob", "bob-key"};

TEST(ConnectionLimitTest, RefusesAKeysConnectionsBeyondItsLimitOnly) {
  ConnectionLimit limit(2, nullptr);
  EXPECT_TRUE(limit.Admit(10, kAlice).ok());
  EXPECT_TRUE(limit.Admit(11, kAlice).ok());
  EXPECT_TRUE(limit.Admit(10, kAlice).ok());  // a connection already counted
  Status third = limit.Admit(12, kAlice);
  EXPECT_EQ(third.code(), StatusCode::kUnavailable);
  EXPECT_NE(third.message().find("key 'alice' already holds 2 connections"), std::string::npos)
      << third.ToString();
  EXPECT_TRUE(limit.Admit(13, kBob).ok());
  EXPECT_EQ(limit.refused(), 1u);
  EXPECT_EQ(limit.counted_connections(), 3u);
}

TEST(ConnectionLimitTest, AClosedConnectionMakesRoomAgain) {
  ConnectionLimit limit(1, nullptr);
  EXPECT_TRUE(limit.Admit(10, kAlice).ok());
  EXPECT_FALSE(limit.Admit(11, kAlice).ok());
  limit.Closed(10);
  EXPECT_FALSE(limit.Knows(10));
  EXPECT_TRUE(limit.Admit(11, kAlice).ok());
  limit.Closed(99);  // never counted: ignored
  EXPECT_EQ(limit.counted_connections(), 1u);
}

TEST(ConnectionLimitTest, AReusedDescriptorCountsForItsNewKey) {
  ConnectionLimit limit(1, nullptr);
  EXPECT_TRUE(limit.Admit(10, kAlice).ok());
  EXPECT_TRUE(limit.Admit(10, kBob).ok());  // alice's close was not reported
  EXPECT_TRUE(limit.Admit(11, kAlice).ok());
}

TEST(ConnectionLimitTest, ZeroMeansNoLimit) {
  ConnectionLimit limit(0, nullptr);
  for (int fd = 0; fd < 100; ++fd) EXPECT_TRUE(limit.Admit(fd, kAlice).ok());
}

}  // namespace
}  // namespace bm
