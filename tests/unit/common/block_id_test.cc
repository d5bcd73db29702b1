#include "blockmgr/block_id.h"

#include <gtest/gtest.h>

#include <unordered_set>

namespace bm {
namespace {

TEST(BlockIdTest, ParsesAndPrintsEachKindExactly) {
  for (const char* text :
       {"rdd_0_0", "rdd_12_345", "broadcast_7", "shuffle_1_2_3", "rdd_18446744073709551615_1"}) {
    Result<BlockId> id = BlockId::Parse(text);
    ASSERT_TRUE(id.ok()) << text << ": " << id.status().ToString();
    EXPECT_EQ(id->ToString(), text);
  }
}

TEST(BlockIdTest, ExposesRddAndPartition) {
  BlockId id = BlockId::Parse("rdd_4_9").value();
  ASSERT_TRUE(id.rdd_id().has_value());
  EXPECT_EQ(*id.rdd_id(), 4u);
  EXPECT_EQ(id.partition(), 9u);
  EXPECT_FALSE(BlockId::Parse("broadcast_4").value().rdd_id().has_value());
}

TEST(BlockIdTest, RejectsMalformedIdsNamingThem) {
  for (const char* text :
       {"", "rdd", "rdd_", "rdd_1", "rdd_1_", "rdd_1_2_3", "rdd_-1_2", "rdd_+1_2", "rdd_01_2",
        "rdd_1_2x", "RDD_1_2", "broadcast_", "broadcast_1_2", "shuffle_1_2", "taskresult_1",
        "rdd_99999999999999999999_1", " rdd_1_2", "rdd_1_2 "}) {
    Result<BlockId> id = BlockId::Parse(text);
    ASSERT_FALSE(id.ok()) << "accepted '" << text << "'";
    EXPECT_EQ(id.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(id.status().message().find(std::string("'") + text + "'"), std::string::npos)
        << id.status().message();
  }
}

TEST(BlockIdTest, DistinctIdsCompareAndHashApart) {
  std::unordered_set<BlockId> ids{BlockId::Rdd(1, 2), BlockId::Rdd(2, 1), BlockId::Broadcast(1),
                                  BlockId::Shuffle(1, 2, 0)};
  EXPECT_EQ(ids.size(), 4u);
  EXPECT_EQ(BlockId::Rdd(1, 2), BlockId::Parse("rdd_1_2").value());
  EXPECT_NE(BlockId::Rdd(1, 2), BlockId::Rdd(2, 1));
}

}  // namespace
}  // namespace bm
