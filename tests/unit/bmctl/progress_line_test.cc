#include "bmctl/progress_line.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>

namespace bm {
namespace {

using ::testing::HasSubstr;

TEST(ProgressLineTest, ShowsBytesPercentRateAndEta) {
  FakeClock clock;
  std::ostringstream out;
  ProgressLine line(out, "put rdd_1_0", 100ull << 20, clock);
  clock.Advance(std::chrono::seconds(2));
  line.Update(50ull << 20);
  EXPECT_EQ(line.Render(), "put rdd_1_0  50.0 MiB / 100.0 MiB  50%  25.0 MiB/s  ETA 2 s");
}

TEST(ProgressLineTest, RedrawsAtMostEveryIntervalAndEndsTheLineOnFinish) {
  FakeClock clock;
  std::ostringstream out;
  ProgressLine line(out, "get x", 1000, clock);
  line.Update(10);
  line.Update(20);  // too soon: not drawn
  EXPECT_EQ(out.str().find("20 B"), std::string::npos);
  clock.Advance(ProgressLine::kRedrawInterval);
  line.Update(30);
  EXPECT_THAT(out.str(), HasSubstr("\rget x  30 B / 1000 B  3%"));
  line.Finish();
  EXPECT_EQ(out.str().back(), '\n');
}

TEST(ProgressLineTest, AutoModeNeedsATerminalAndABigTransfer) {
  EXPECT_TRUE(ShouldShowProgress(ProgressMode::kAuto, kProgressMinBytes, true));
  EXPECT_FALSE(ShouldShowProgress(ProgressMode::kAuto, kProgressMinBytes - 1, true));
  EXPECT_FALSE(ShouldShowProgress(ProgressMode::kAuto, kProgressMinBytes, false));
  EXPECT_TRUE(ShouldShowProgress(ProgressMode::kOn, 1, false));
  EXPECT_FALSE(ShouldShowProgress(ProgressMode::kOff, kProgressMinBytes, true));
}

TEST(ProgressStreamBufTest, CountsReadsAndFollowsRewinds) {
  FakeClock clock;
  std::ostringstream out;
  ProgressLine line(out, "put", 10, clock);
  std::istringstream source("0123456789");
  ProgressStreamBuf counted_buffer(*source.rdbuf(), line);
  std::istream counted(&counted_buffer);
  char buffer[6];
  counted.read(buffer, 6);
  ASSERT_EQ(counted.gcount(), 6);
  EXPECT_THAT(line.Render(), HasSubstr("6 B / 10 B"));
  counted.seekg(0);  // a put starting over elsewhere
  EXPECT_THAT(line.Render(), HasSubstr("0 B / 10 B"));
  EXPECT_EQ(counted.tellg(), 0);
  std::string all(10, '\0');
  counted.read(all.data(), 10);
  EXPECT_EQ(all, "0123456789");
  EXPECT_THAT(line.Render(), HasSubstr("10 B / 10 B  100%"));
}

}  // namespace
}  // namespace bm
