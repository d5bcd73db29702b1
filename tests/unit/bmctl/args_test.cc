#include "bmctl/args.h"

#include <gtest/gtest.h>

namespace bm {
namespace {

TEST(BmctlArgsTest, ParsesBlockIdsInOrder) {
  Result<std::vector<BlockId>> ids = ParseBlockIds({"rdd_1_0", "broadcast_3", "shuffle_1_2_3"});
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  EXPECT_EQ(*ids, (std::vector<BlockId>{BlockId::Rdd(1, 0), BlockId::Broadcast(3),
                                        BlockId::Shuffle(1, 2, 3)}));
}

TEST(BmctlArgsTest, BadBlockIdIsNamed) {
  Result<std::vector<BlockId>> ids = ParseBlockIds({"rdd_1_0", "rdd_x_1"});
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ids.status().message().find("rdd_x_1"), std::string::npos);
}

TEST(BmctlArgsTest, ParsesUnsignedAndRejectsEverythingElse) {
  EXPECT_EQ(ParseUnsigned("RDD id", "0").value(), 0u);
  EXPECT_EQ(ParseUnsigned("RDD id", "18446744073709551615").value(), UINT64_MAX);
  for (const char* text : {"", "-1", "+1", "1x", " 1", "1.0", "18446744073709551616", "abc"}) {
    Result<uint64_t> parsed = ParseUnsigned("RDD id", text);
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(ParseUnsigned("RDD id", "-1").status().message(),
            "bad RDD id '-1': expected a non-negative integer");
}

TEST(BmctlArgsTest, TimeoutIsPositiveSeconds) {
  EXPECT_EQ(ParseTimeout("5").value(), std::chrono::milliseconds(5000));
  EXPECT_EQ(ParseTimeout("0.25").value(), std::chrono::milliseconds(250));
  EXPECT_EQ(ParseTimeout("0.0001").value(), std::chrono::milliseconds(1));
  for (const char* text : {"", "0", "-1", "abc", "5s", "inf", "nan", "100000"}) {
    EXPECT_FALSE(ParseTimeout(text).ok()) << text;
  }
}

TEST(BmctlArgsTest, ComputeCostTakesAUnit) {
  using std::chrono::microseconds;
  EXPECT_EQ(ParseComputeCost("2.5s").value(), microseconds(2'500'000));
  EXPECT_EQ(ParseComputeCost("2.5").value(), microseconds(2'500'000));
  EXPECT_EQ(ParseComputeCost("150ms").value(), microseconds(150'000));
  EXPECT_EQ(ParseComputeCost("300us").value(), microseconds(300));
  EXPECT_EQ(ParseComputeCost("2m").value(), microseconds(120'000'000));
  EXPECT_EQ(ParseComputeCost("0").value(), microseconds(0));
  for (const char* text : {"", "-1s", "abc", "5 s", "5sec", "inf", "nan", "8d", "200h"}) {
    EXPECT_FALSE(ParseComputeCost(text).ok()) << text;
  }
}

}  // namespace
}  // namespace bm
