#include "common/net/handshake_connection_limit.h"

#include <gtest/gtest.h>

#include <vector>

namespace bm {
namespace {

using Events = std::vector<PeerMonitor::Event>;

PeerMonitor::Event Accepted(int fd) { return {ZMQ_EVENT_ACCEPTED, static_cast<uint32_t>(fd)}; }
PeerMonitor::Event Closed(int fd) { return {ZMQ_EVENT_DISCONNECTED, static_cast<uint32_t>(fd)}; }

const PeerIdentity kAlice{.role = KeyRole::kClient, .name = "alice", .public_key = "key-a"};
const PeerIdentity kBob{.role = KeyRole::kClient, .name = "bob", .public_key = "key-b"};

class HandshakeConnectionLimitTest : public ::testing::Test {
 protected:
  void Apply(Events events) {
    limit_.ApplyMonitorEvents([&] { return events; });
  }

  HandshakeConnectionLimit limit_{2};
};

TEST_F(HandshakeConnectionLimitTest, SilentConnectionsCountFromTheirHandshake) {
  EXPECT_TRUE(limit_.AdmitHandshake(kAlice.public_key));
  EXPECT_TRUE(limit_.AdmitHandshake(kAlice.public_key));
  Apply({Accepted(5), Accepted(6)});
  EXPECT_FALSE(limit_.AdmitHandshake(kAlice.public_key));
  EXPECT_TRUE(limit_.AdmitHandshake(kBob.public_key));
  EXPECT_EQ(limit_.CountedFor(kAlice.public_key), 2u);
}

TEST_F(HandshakeConnectionLimitTest, ASilentConnectionThatClosesMakesRoom) {
  ASSERT_TRUE(limit_.AdmitHandshake(kAlice.public_key));
  ASSERT_TRUE(limit_.AdmitHandshake(kAlice.public_key));
  Apply({Accepted(5), Accepted(6)});
  Apply({Closed(6)});
  EXPECT_EQ(limit_.CountedFor(kAlice.public_key), 1u);
  EXPECT_TRUE(limit_.AdmitHandshake(kAlice.public_key));
}

TEST_F(HandshakeConnectionLimitTest, ARefusedHandshakeLeavesNoCountBehind) {
  ASSERT_TRUE(limit_.AdmitHandshake(kAlice.public_key));
  ASSERT_TRUE(limit_.AdmitHandshake(kAlice.public_key));
  // Accepted as 7 and refused; it closes.
  ASSERT_FALSE(limit_.AdmitHandshake(kAlice.public_key));
  Apply({Accepted(5), Accepted(6), Accepted(7), Closed(7)});
  EXPECT_EQ(limit_.CountedFor(kAlice.public_key), 2u);
  EXPECT_FALSE(limit_.AdmitHandshake(kAlice.public_key));
  Apply({Closed(5), Closed(6)});
  EXPECT_EQ(limit_.CountedFor(kAlice.public_key), 0u);
}

TEST_F(HandshakeConnectionLimitTest, AHandshakeCountedWhileEventsAreTakenIsKept) {
  ASSERT_TRUE(limit_.AdmitHandshake(kAlice.public_key));
  // The second handshake comes after its accept was emitted but before it is applied; the first
  // connection closed meanwhile.
  limit_.ApplyMonitorEvents([&] {
    EXPECT_TRUE(limit_.AdmitHandshake(kAlice.public_key));
    return Events{Accepted(5), Closed(5)};
  });
  EXPECT_EQ(limit_.CountedFor(kAlice.public_key), 1u);
  // Its accept arrives with the next events, and it stays counted until it closes.
  Apply({Accepted(6)});
  EXPECT_EQ(limit_.CountedFor(kAlice.public_key), 1u);
  Apply({Closed(6)});
  EXPECT_EQ(limit_.CountedFor(kAlice.public_key), 0u);
}

TEST_F(HandshakeConnectionLimitTest, AFirstRequestTiesTheConnectionToItsDescriptor) {
  ASSERT_TRUE(limit_.AdmitHandshake(kAlice.public_key));
  ASSERT_TRUE(limit_.AdmitHandshake(kBob.public_key));
  Apply({Accepted(5), Accepted(6)});
  EXPECT_FALSE(limit_.Knows(5));
  ASSERT_TRUE(limit_.Admit(5, kAlice).ok());
  EXPECT_TRUE(limit_.Knows(5));
  EXPECT_TRUE(limit_.Admit(5, kAlice).ok());  // further requests on it are free
  EXPECT_EQ(limit_.CountedFor(kAlice.public_key), 1u);
  // Alice's connection closes: exactly hers is released, though Bob still has a silent one.
  Apply({Closed(5)});
  EXPECT_EQ(limit_.CountedFor(kAlice.public_key), 0u);
  EXPECT_EQ(limit_.CountedFor(kBob.public_key), 1u);
}

TEST_F(HandshakeConnectionLimitTest, SilentClosesOfTwoKeysAreReleasedOnceTheyCanBeToldApart) {
  ASSERT_TRUE(limit_.AdmitHandshake(kAlice.public_key));
  ASSERT_TRUE(limit_.AdmitHandshake(kBob.public_key));
  Apply({Accepted(5), Accepted(6)});
  // One of them closed: which one cannot be known, so both stay counted (never fewer than
  // either holds).
  Apply({Closed(5)});
  EXPECT_EQ(limit_.CountedFor(kAlice.public_key), 1u);
  EXPECT_EQ(limit_.CountedFor(kBob.public_key), 1u);
  Apply({Closed(6)});
  EXPECT_EQ(limit_.CountedFor(kAlice.public_key), 0u);
  EXPECT_EQ(limit_.CountedFor(kBob.public_key), 0u);
}

TEST_F(HandshakeConnectionLimitTest, ARequestOnAConnectionNotCountedAtItsHandshakeIsCountedThen) {
  // E.g. handshakes made before the limit was the ZAP handler's gate.
  EXPECT_TRUE(limit_.Admit(5, kAlice).ok());
  EXPECT_TRUE(limit_.Admit(6, kAlice).ok());
  Status refused = limit_.Admit(7, kAlice);
  EXPECT_EQ(refused.code(), StatusCode::kUnavailable);
  EXPECT_EQ(limit_.refused(), 1u);
  // A reused descriptor counts for its new key.
  EXPECT_TRUE(limit_.Admit(6, kBob).ok());
  EXPECT_EQ(limit_.CountedFor(kAlice.public_key), 1u);
}

TEST(HandshakeConnectionLimitZeroTest, ZeroMeansNoLimit) {
  HandshakeConnectionLimit limit(0);
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(limit.AdmitHandshake(kAlice.public_key));
  EXPECT_TRUE(limit.Admit(5, kAlice).ok());
  EXPECT_EQ(limit.CountedFor(kAlice.public_key), 0u);
}

}  // namespace
}  // namespace bm
