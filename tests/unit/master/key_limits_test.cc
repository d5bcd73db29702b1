#include "master/key_limits.h"

#include <gtest/gtest.h>

namespace bm {
namespace {

class KeyLimitsTest : public ::testing::Test {
 protected:
  KeyLimitsTest() {
    ConfigureServerSocket(router_, CurveKeys{});
    router_.bind("inproc://key-limits-test");
  }
  std::unique_ptr<KeyLimits> Create(size_t registrations_per_minute) {
    Result<std::unique_ptr<KeyLimits>> limits =
        KeyLimits::Create(context_, router_, /*max_connections_per_key=*/4, /*zap=*/nullptr,
                          registrations_per_minute, clock_);
    EXPECT_TRUE(limits.ok()) << limits.status().ToString();
    return limits.ok() ? std::move(limits).value() : nullptr;
  }

  FakeClock clock_;
  zmq::context_t context_;
  zmq::socket_t router_{context_, zmq::socket_type::router};
};

TEST_F(KeyLimitsTest, RegistrationsBeyondTheKeysRateAreRefusedUntilItRefills) {
  std::unique_ptr<KeyLimits> limits = Create(/*registrations_per_minute=*/1);
  ASSERT_NE(limits, nullptr);
  const PeerIdentity worker{.role = KeyRole::kWorker, .name = "w1", .public_key = "key-1"};
  EXPECT_TRUE(limits->AdmitRegistration(worker).ok());
  EXPECT_EQ(limits->AdmitRegistration(worker).code(), StatusCode::kUnavailable);
  // Another key has its own bucket.
  EXPECT_TRUE(
      limits->AdmitRegistration({.role = KeyRole::kWorker, .name = "w2", .public_key = "key-2"})
          .ok());
  clock_.Advance(std::chrono::seconds(61));
  EXPECT_TRUE(limits->AdmitRegistration(worker).ok());
}

TEST_F(KeyLimitsTest, DrainingClosedConnectionsWithNoneClosedNeverBlocks) {
  std::unique_ptr<KeyLimits> limits = Create(/*registrations_per_minute=*/0);
  ASSERT_NE(limits, nullptr);
  limits->DrainClosed();
  EXPECT_GE(limits->monitor_socket().get(zmq::sockopt::fd), 0);
}

}  // namespace
}  // namespace bm
