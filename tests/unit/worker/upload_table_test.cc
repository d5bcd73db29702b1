#include "worker/upload_table.h"

#include <gtest/gtest.h>

namespace bm {
namespace {

UploadTable::Entry EntryOf(const std::string& owner, TimePoint when, int connection = -1) {
  UploadTable::Entry entry{1, BlockId::Broadcast(1), StorageLevel::kMemoryOnly, 10, 0, when, owner};
  entry.connection = connection;
  return entry;
}

TEST(UploadTableTest, CountsUploadsPerOwnerThroughEveryWayOut) {
  UploadTable table;
  const TimePoint t0{};
  table.Insert({"peer-a", 1}, EntryOf("key-a", t0));
  table.Insert({"peer-a", 2}, EntryOf("key-a", t0 + std::chrono::seconds(5)));
  table.Insert({"peer-b", 1}, EntryOf("key-b", t0));
  EXPECT_EQ(table.CountOwnedBy("key-a"), 2u);
  EXPECT_EQ(table.CountOwnedBy("key-b"), 1u);
  EXPECT_EQ(table.CountOwnedBy("key-c"), 0u);

  ASSERT_TRUE(table.Erase({"peer-a", 2}).has_value());
  EXPECT_EQ(table.CountOwnedBy("key-a"), 1u);
  EXPECT_EQ(table.TakeIdleSince(t0).size(), 2u);
  EXPECT_EQ(table.CountOwnedBy("key-a"), 0u);
  EXPECT_EQ(table.CountOwnedBy("key-b"), 0u);

  table.Insert({"peer-a", 3}, EntryOf("key-a", t0));
  EXPECT_EQ(table.TakeAll().size(), 1u);
  EXPECT_EQ(table.CountOwnedBy("key-a"), 0u);
}

// Issue 32, item 4: a key whose connection closed with uploads in progress got its upload slots
// back only when the worker restarted.
TEST(UploadTableTest, ClosingAConnectionReleasesItsKeysUploadSlots) {
  UploadTable table;
  const TimePoint t0{};
  table.Insert({"peer-a", 1}, EntryOf("key-a", t0, /*connection=*/7));
  table.Insert({"peer-a", 2}, EntryOf("key-a", t0, /*connection=*/7));
  table.Insert({"peer-b", 1}, EntryOf("key-a", t0, /*connection=*/8));
  EXPECT_EQ(table.TakeFromConnection(7).size(), 2u);
  EXPECT_EQ(table.CountOwnedBy("key-a"), 1u);
  EXPECT_EQ(table.TakeFromConnection(8).size(), 1u);
  EXPECT_EQ(table.CountOwnedBy("key-a"), 0u);
}

}  // namespace
}  // namespace bm
