#include "common/core/log_rate_limiter.h"

#include <gtest/gtest.h>

#include <chrono>

#include "common/core/clock.h"

namespace bm {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

class LogRateLimiterTest : public ::testing::Test {
 protected:
  FakeClock clock_;
  LogRateLimiter limiter_{seconds(30)};
};

TEST_F(LogRateLimiterTest, TheFirstLineIsWrittenAtOnce) {
  EXPECT_EQ(limiter_.Admit(clock_.Now()), 0u);
}

TEST_F(LogRateLimiterTest, AMinuteOfLinesEvery25MsWritesOnePer30sCountingTheRest) {
  ASSERT_EQ(limiter_.Admit(clock_.Now()), 0u);
  int written = 0;
  uint64_t counted = 0;
  for (int i = 0; i < 2400; ++i) {
    clock_.Advance(milliseconds(25));
    if (std::optional<uint64_t> held_back = limiter_.Admit(clock_.Now())) {
      ++written;
      counted += *held_back;
    }
  }
  EXPECT_EQ(written, 2);  // at 30 s and at 60 s
  // Every line held back is counted into the next one written.
  EXPECT_EQ(counted, 2400u - 2u);
}

TEST_F(LogRateLimiterTest, ALineAnIntervalAfterTheLastWrittenIsWrittenWithTheCount) {
  ASSERT_EQ(limiter_.Admit(clock_.Now()), 0u);
  clock_.Advance(seconds(1));
  EXPECT_EQ(limiter_.Admit(clock_.Now()), std::nullopt);
  clock_.Advance(seconds(1));
  EXPECT_EQ(limiter_.Admit(clock_.Now()), std::nullopt);
  clock_.Advance(milliseconds(27999));
  EXPECT_EQ(limiter_.Admit(clock_.Now()), std::nullopt);  // 29.999 s after the first
  clock_.Advance(milliseconds(1));
  EXPECT_EQ(limiter_.Admit(clock_.Now()), 3u);
  // The count starts over.
  clock_.Advance(seconds(31));
  EXPECT_EQ(limiter_.Admit(clock_.Now()), 0u);
}

}  // namespace
}  // namespace bm
