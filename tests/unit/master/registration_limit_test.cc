#include "master/registration_limit.h"

#include <gtest/gtest.h>

namespace bm {
namespace {

using std::chrono::seconds;

const PeerIdentity kW1{KeyRole::kWorker, "w1", "w1-key"};
const PeerIdentity kW2{KeyRole::kWorker, "w2", "w2-key"};

TEST(RegistrationLimitTest, AKeyRegistersItsBurstThenOnceAPeriod) {
  FakeClock clock;
  RegistrationLimit limit(6, clock);  // a burst of 6, then one every 10 s
  for (int i = 0; i < 6; ++i) EXPECT_TRUE(limit.Admit(kW1).ok()) << i;
  Status refused = limit.Admit(kW1);
  EXPECT_EQ(refused.code(), StatusCode::kUnavailable);
  EXPECT_NE(refused.message().find("key 'w1' registered 6 times within a minute"),
            std::string::npos)
      << refused.ToString();
  EXPECT_NE(refused.message().find("retry in 10000 ms"), std::string::npos) << refused.ToString();
  EXPECT_TRUE(limit.Admit(kW2).ok());  // other keys are not affected

  clock.Advance(seconds(9));
  EXPECT_FALSE(limit.Admit(kW1).ok());
  clock.Advance(seconds(1));
  EXPECT_TRUE(limit.Admit(kW1).ok());
  EXPECT_FALSE(limit.Admit(kW1).ok());
  EXPECT_EQ(limit.refused(), 3u);
}

TEST(RegistrationLimitTest, AQuietKeyIsForgottenAndStartsFull) {
  FakeClock clock;
  RegistrationLimit limit(2, clock);
  EXPECT_TRUE(limit.Admit(kW1).ok());
  EXPECT_TRUE(limit.Admit(kW1).ok());
  EXPECT_FALSE(limit.Admit(kW1).ok());
  clock.Advance(seconds(120));
  EXPECT_TRUE(limit.Admit(kW2).ok());  // sweeps w1's full bucket
  EXPECT_EQ(limit.tracked_keys(), 1u);
  EXPECT_TRUE(limit.Admit(kW1).ok());
  EXPECT_TRUE(limit.Admit(kW1).ok());
}

TEST(RegistrationLimitTest, ZeroMeansNoLimit) {
  FakeClock clock;
  RegistrationLimit limit(0, clock);
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(limit.Admit(kW1).ok());
}

}  // namespace
}  // namespace bm
