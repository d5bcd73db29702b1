#include "worker/epoch_fence.h"

#include <gtest/gtest.h>

#include <fstream>

#include "tests/support/temp_dir.h"

namespace bm {
namespace {

TEST(EpochFenceTest, CommandsOfAnOlderLeaderAreRefusedAndTheFenceSurvivesARestart) {
  testing::TempDir dir;
  const std::string path = dir.Sub("LEADER_EPOCH");
  {
    Result<EpochFence> fence = EpochFence::Open(path);
    ASSERT_TRUE(fence.ok()) << fence.status().ToString();
    EXPECT_EQ(fence->highest(), 0u);
    EXPECT_TRUE(fence->Admit(0, "removeBlocks").ok());  // a master without election, a client
    EXPECT_TRUE(fence->Admit(3, "removeBlocks").ok());  // raises the fence
    EXPECT_TRUE(fence->Admit(3, "removeBlocks").ok());
    Status stale = fence->Admit(2, "removeBlocks");
    EXPECT_EQ(stale.code(), StatusCode::kPermissionDenied);
    EXPECT_NE(stale.message().find("epoch 2 refused: this worker follows epoch 3"),
              std::string::npos)
        << stale.ToString();
    EXPECT_TRUE(fence->Raise(5).ok());  // heard from a registration reply
    EXPECT_TRUE(fence->Raise(4).ok());  // never lowered
    EXPECT_EQ(fence->highest(), 5u);
  }
  Result<EpochFence> reopened = EpochFence::Open(path);
  ASSERT_TRUE(reopened.ok());
  EXPECT_EQ(reopened->highest(), 5u);
  EXPECT_EQ(reopened->Admit(4, "replicateBlock").code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(reopened->Admit(0, "removeBlocks").ok());
}

TEST(EpochFenceTest, AFileThatIsNotANumberIsAClearError) {
  testing::TempDir dir;
  const std::string path = dir.Sub("LEADER_EPOCH");
  std::ofstream(path) << "seven\n";
  Result<EpochFence> fence = EpochFence::Open(path);
  ASSERT_FALSE(fence.ok());
  EXPECT_NE(fence.status().message().find("does not hold a number"), std::string::npos);
}

}  // namespace
}  // namespace bm
