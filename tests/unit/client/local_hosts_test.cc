#include "client/local_hosts.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace bm {
namespace {

using ::testing::Contains;

TEST(LocalHostsTest, HostOfAddressTakesTheHostPart) {
  EXPECT_EQ(HostOfAddress("tcp://10.0.0.5:7701"), "10.0.0.5");
  EXPECT_EQ(HostOfAddress("tcp://node-3.example:7701"), "node-3.example");
  EXPECT_EQ(HostOfAddress("tcp://[::1]:7701"), "::1");
  EXPECT_EQ(HostOfAddress("tcp://[::1"), "");
  EXPECT_EQ(HostOfAddress("ipc:///tmp/w1"), "");
  EXPECT_EQ(HostOfAddress("garbage"), "");
}

TEST(LocalHostsTest, DetectedHostsIncludeLoopback) {
  const std::vector<std::string> hosts = DetectLocalHosts();
  EXPECT_THAT(hosts, Contains("127.0.0.1"));
  EXPECT_THAT(hosts, Contains("localhost"));
}

TEST(LocalHostsTest, AnAddressIsLocalWhenItsHostIsListed) {
  const std::vector<std::string> hosts = {"10.0.0.5", "node-3"};
  EXPECT_TRUE(IsLocalAddress("tcp://10.0.0.5:7701", hosts));
  EXPECT_TRUE(IsLocalAddress("tcp://node-3:1", hosts));
  EXPECT_FALSE(IsLocalAddress("tcp://10.0.0.6:7701", hosts));
  EXPECT_FALSE(IsLocalAddress("tcp://127.0.0.1:7701", hosts));
  EXPECT_TRUE(IsLocalAddress("ipc:///tmp/w1", hosts));
}

}  // namespace
}  // namespace bm
