#include "common/net/master_addresses.h"

#include <gtest/gtest.h>

namespace bm {
namespace {

TEST(MasterAddressesTest, FollowsHintsAddsUnlistedLeadersAndRotates) {
  Result<MasterAddresses> masters = MasterAddresses::Parse("tcp://a:1, tcp://b:2,tcp://a:1");
  ASSERT_TRUE(masters.ok()) << masters.status().ToString();
  EXPECT_EQ(masters->all(), (std::vector<std::string>{"tcp://a:1", "tcp://b:2"}));
  EXPECT_TRUE(masters->several());
  EXPECT_EQ(masters->current(), "tcp://a:1");
  EXPECT_TRUE(masters->FollowHint("tcp://b:2"));
  EXPECT_EQ(masters->current(), "tcp://b:2");
  EXPECT_FALSE(masters->FollowHint("tcp://b:2"));  // nothing new
  EXPECT_FALSE(masters->FollowHint(""));
  EXPECT_TRUE(masters->FollowHint("tcp://c:3"));  // elected, not in the list given
  EXPECT_EQ(masters->ToString(), "tcp://a:1,tcp://b:2,tcp://c:3");
  masters->Rotate();
  EXPECT_EQ(masters->current(), "tcp://a:1");
}

TEST(MasterAddressesTest, AnEmptyEntryIsAClearError) {
  for (const char* bad : {"", "tcp://a:1,", ",tcp://a:1", "tcp://a:1,,tcp://b:2"}) {
    Result<MasterAddresses> masters = MasterAddresses::Parse(bad);
    EXPECT_FALSE(masters.ok()) << bad;
    if (!masters.ok()) {
      EXPECT_EQ(masters.status().code(), StatusCode::kInvalidArgument);
    }
  }
  Result<MasterAddresses> one = MasterAddresses::Parse("tcp://a:1");
  ASSERT_TRUE(one.ok());
  EXPECT_FALSE(one->several());
}

TEST(MasterAddressesTest, OnlyConnectableAddressesAreValid) {
  for (const char* good : {"tcp://127.0.0.1:7700", "tcp://master.example:1", "tcp://[::1]:7700",
                           "ipc:///tmp/bm.sock", "inproc://master", "tcp://a:7700,tcp://b:7701"}) {
    EXPECT_TRUE(MasterAddresses::ValidateConnectable(good).ok()) << good;
  }
  for (const char* bad :
       {"", "127.0.0.1:7700", "tcp://127.0.0.1", "tcp://:7700", "tcp://host:0", "tcp://host:65536",
        "tcp://host:*", "http://h:1", "ipc://", "tcp://a:7700,", "tcp://a:7700,tcp://b"}) {
    EXPECT_FALSE(MasterAddresses::ValidateConnectable(bad).ok()) << bad;
  }
}

}  // namespace

}  // namespace bm
