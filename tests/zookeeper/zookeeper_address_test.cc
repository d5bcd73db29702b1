// ParseZooKeeperAddress: what --zookeeper accepts in bm-master, bm-worker, bmctl and clients.

#include <gtest/gtest.h>

#include <string>

#include "common/zookeeper/zookeeper_session.h"

namespace bm {
namespace {

TEST(ZooKeeperAddressTest, TakesServersAndAChroot) {
  Result<ZooKeeperAddress> address =
      ParseZooKeeperAddress("zk1:2181,10.0.0.2:1,[::1]:65535/prod/block-mgr_2");
  ASSERT_TRUE(address.ok()) << address.status().ToString();
  EXPECT_EQ(address->hosts, "zk1:2181,10.0.0.2:1,[::1]:65535");
  EXPECT_EQ(address->chroot, "/prod/block-mgr_2");
  // Segments that merely start with dots are names like any other.
  EXPECT_TRUE(ParseZooKeeperAddress("zk1:2181/.x/..y/z.").ok());
}

TEST(ZooKeeperAddressTest, APortPast65535IsRefusedNotWrappedToAnother) {
  for (const char* bad : {"127.0.0.1:99999", "127.0.0.1:65536", "127.0.0.1:0", "zk1:2181,zk2:70000",
                          "127.0.0.1:4294969477", "127.0.0.1:-1", "127.0.0.1:+2181"}) {
    Result<ZooKeeperAddress> address = ParseZooKeeperAddress(bad);
    ASSERT_FALSE(address.ok()) << bad;
    EXPECT_EQ(address.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(address.status().message().find("from 1 to 65535"), std::string::npos)
        << address.status().message();
  }
}

TEST(ZooKeeperAddressTest, ServersWithoutAHostOrPortAreRefused) {
  for (const char* bad : {"", "/blockmgr", "zk1", "zk1:", ":2181", "zk1:2181,", ",zk1:2181",
                          "zk1:2181,,zk2:2181", "zk1:21 81", "zk 1:2181", "zk1:2181x"}) {
    EXPECT_FALSE(ParseZooKeeperAddress(bad).ok()) << bad;
  }
}

TEST(ZooKeeperAddressTest, AChrootIsRefusedWhereZooKeeperWouldRefuseItsPath) {
  for (const char* bad : {"zk1:2181/x/../y", "zk1:2181/x/./y", "zk1:2181/..", "zk1:2181/.",
                          "zk1:2181/x/", "zk1:2181//x", "zk1:2181/x//y", "zk1:2181/x\ty"}) {
    Result<ZooKeeperAddress> address = ParseZooKeeperAddress(bad);
    ASSERT_FALSE(address.ok()) << bad;
    EXPECT_NE(address.status().message().find("chroot"), std::string::npos)
        << address.status().message();
  }
  EXPECT_EQ(ParseZooKeeperAddress("zk1:2181/")->chroot, "");  // ZooKeeper's root
}

}  // namespace
}  // namespace bm
