#include "common/core/metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>

namespace bm {
namespace {

using ::testing::HasSubstr;

TEST(PrometheusTextTest, WritesFamiliesWithHelpTypeAndLabelledSamples) {
  PrometheusText out;
  out.Family("blockmgr_blocks", PrometheusText::Type::kGauge, "Blocks.");
  out.Sample("blockmgr_blocks", {{"tier", "memory"}}, 42);
  out.Sample("blockmgr_blocks", 7);
  EXPECT_EQ(out.text(),
            "# HELP blockmgr_blocks Blocks.\n"
            "# TYPE blockmgr_blocks gauge\n"
            "blockmgr_blocks{tier=\"memory\"} 42\n"
            "blockmgr_blocks 7\n");
}

TEST(PrometheusTextTest, EscapesLabelValues) {
  PrometheusText out;
  out.Sample("m", {{"worker", "a\"b\\c\nd"}}, 1);
  EXPECT_EQ(out.text(), "m{worker=\"a\\\"b\\\\c\\nd\"} 1\n");
}

TEST(PrometheusTextTest, PrintsLargeCountsExactlyAndFractionsInFull) {
  PrometheusText out;
  out.Sample("bytes", 1099511627776.0);
  out.Sample("seconds", 0.25);
  EXPECT_EQ(out.text(), "bytes 1099511627776\nseconds 0.25\n");
}

TEST(LatencyHistogramTest, HistogramBucketsAreCumulativeWithSumAndCount) {
  LatencyHistogram histogram;
  histogram.Observe(std::chrono::microseconds(50));  // first bucket (<= 100 us)
  histogram.Observe(std::chrono::milliseconds(3));   // <= 5 ms
  histogram.Observe(std::chrono::seconds(20));       // past the last bound
  PrometheusText out;
  out.Histogram("lat_seconds", {{"op", "get"}}, histogram);
  const std::string& text = out.text();
  EXPECT_THAT(text, HasSubstr("lat_seconds_bucket{op=\"get\",le=\"0.0001\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("lat_seconds_bucket{op=\"get\",le=\"0.0025\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("lat_seconds_bucket{op=\"get\",le=\"0.005\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("lat_seconds_bucket{op=\"get\",le=\"10\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("lat_seconds_bucket{op=\"get\",le=\"+Inf\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("lat_seconds_count{op=\"get\"} 3\n"));
  EXPECT_EQ(histogram.count(), 3u);
  EXPECT_NEAR(histogram.sum_seconds(), 20.00305, 1e-9);
}

}  // namespace
}  // namespace bm
