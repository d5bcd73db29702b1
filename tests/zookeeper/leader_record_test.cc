#include "common/zookeeper/leader_record.h"

#include <gtest/gtest.h>

#include "common/zookeeper/zookeeper_session.h"

namespace bm {
namespace {

TEST(LeaderRecordTest, RoundTrips) {
  LeaderRecord record{"master-a", "tcp://10.0.0.1:7700", 42};
  Result<LeaderRecord> parsed = ParseLeaderRecord(EncodeLeaderRecord(record));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(*parsed, record);
}

TEST(LeaderRecordTest, RefusesWhatItDidNotWrite) {
  for (const char* bad :
       {"", "null", "[]", "{", R"({"id":"a","address":"x"})",
        R"({"id":"","address":"x","epoch":1})", R"({"id":"a","address":"x","epoch":0})",
        R"({"id":"a","address":"x","epoch":-1})", R"({"id":"a","address":"x","epoch":"1"})",
        R"({"id":7,"address":"x","epoch":1})"}) {
    EXPECT_FALSE(ParseLeaderRecord(bad).ok()) << bad;
  }
}

TEST(LeaderRecordTest, EpochIsDecimalText) {
  EXPECT_EQ(*ParseEpoch("17"), 17u);
  for (const char* bad : {"", "-1", "1.5", " 1", "0x10", "99999999999999999999"}) {
    EXPECT_FALSE(ParseEpoch(bad).ok()) << bad;
  }
}

TEST(LeaderRecordTest, ZooKeeperAddressesNameHostsAndAChroot) {
  Result<ZooKeeperAddress> address = ParseZooKeeperAddress("zk1:2181,zk2:2181/prod/blockmgr");
  ASSERT_TRUE(address.ok());
  EXPECT_EQ(address->hosts, "zk1:2181,zk2:2181");
  EXPECT_EQ(address->chroot, "/prod/blockmgr");
  // Without a chroot blockmgr keeps to /blockmgr; "/" asks for ZooKeeper's root.
  EXPECT_EQ(ParseZooKeeperAddress("zk1:2181")->chroot, "/blockmgr");
  EXPECT_EQ(ParseZooKeeperAddress("zk1:2181/")->chroot, "");
  EXPECT_EQ(ParseZooKeeperAddress("[::1]:2181")->hosts, "[::1]:2181");
}

}  // namespace
}  // namespace bm

namespace bm {
namespace {

TEST(LeaderRecordTest, InSyncRecordsRoundTripAndSayWhoMayLead) {
  const InSyncRecord record{7, "a", {"b", "c"}};
  Result<InSyncRecord> parsed = ParseInSyncRecord(EncodeInSyncRecord(record));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(*parsed, record);
  EXPECT_TRUE(parsed->Eligible("a"));
  EXPECT_TRUE(parsed->Eligible("c"));
  EXPECT_FALSE(parsed->Eligible("d"));
  for (const char* bad :
       {"", "{}", R"({"epoch":1,"leader":"","in_sync":[]})",
        R"({"epoch":1,"leader":"a","in_sync":[3]})", R"({"epoch":-1,"leader":"a","in_sync":[]})"}) {
    EXPECT_FALSE(ParseInSyncRecord(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace bm
