#include "worker/upload_table.h"

#include <gtest/gtest.h>

namespace bm {
namespace {

UploadTable::Entry EntryOf(const std::string& owner, TimePoint when) {
  return UploadTable::Entry{1,    BlockId::Broadcast(1), StorageLevel::kMemoryOnly, 10, 0, when,
                            owner};
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

}  // namespace
}  // namespace bm
