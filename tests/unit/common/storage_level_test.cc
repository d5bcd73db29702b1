#include "blockmgr/storage_level.h"

#include <gtest/gtest.h>

namespace bm {
namespace {

TEST(StorageLevelTest, ParsesEveryLevelCaseInsensitively) {
  for (StorageLevel level :
       {StorageLevel::kMemoryOnly, StorageLevel::kMemoryAndDisk, StorageLevel::kDiskOnly,
        StorageLevel::kMemoryOnly2, StorageLevel::kMemoryAndDisk2, StorageLevel::kDiskOnly2}) {
    std::string name(StorageLevelName(level));
    EXPECT_EQ(ParseStorageLevel(name).value(), level);
    std::string lower = name;
    for (char& c : lower) c = static_cast<char>(std::tolower(c));
    EXPECT_EQ(ParseStorageLevel(lower).value(), level);
  }
}

TEST(StorageLevelTest, DescribesTiersAndReplication) {
  EXPECT_TRUE(UsesMemory(StorageLevel::kMemoryOnly));
  EXPECT_FALSE(UsesDisk(StorageLevel::kMemoryOnly));
  EXPECT_TRUE(UsesMemory(StorageLevel::kMemoryAndDisk));
  EXPECT_TRUE(UsesDisk(StorageLevel::kMemoryAndDisk));
  EXPECT_FALSE(UsesMemory(StorageLevel::kDiskOnly));
  EXPECT_EQ(ReplicationOf(StorageLevel::kDiskOnly), 1);
  EXPECT_EQ(ReplicationOf(StorageLevel::kMemoryAndDisk2), 2);
}

TEST(StorageLevelTest, RejectsUnknownLevelListingValidOnes) {
  Result<StorageLevel> level = ParseStorageLevel("OFF_HEAP");
  ASSERT_FALSE(level.ok());
  EXPECT_EQ(level.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(level.status().message().find("OFF_HEAP"), std::string::npos);
  EXPECT_NE(level.status().message().find("MEMORY_AND_DISK_2"), std::string::npos);
}

}  // namespace
}  // namespace bm
