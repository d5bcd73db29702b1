#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>

#include "tests/support/zookeeper_server.h"

namespace bm::testing {

// The session timeout of the tests' candidates: the masters' default.
inline constexpr std::chrono::milliseconds kSessionTimeout{2000};

// One ZooKeeper server per test, and a chroot named for the test. Skips where ZooKeeper is not
// installed.
class ZooKeeperTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ZooKeeperServer::Available()) GTEST_SKIP() << ZooKeeperServer::kNotInstalled;
    Result<std::unique_ptr<ZooKeeperServer>> server = ZooKeeperServer::Start();
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    zookeeper_ = std::move(server).value();
    connect_ = zookeeper_->connect_string() + "/" +
               ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }

  std::unique_ptr<ZooKeeperServer> zookeeper_;
  std::string connect_;  // "127.0.0.1:port/TestName"
};

// Milliseconds since `start`, for the measured times the tests print.
inline long long MillisSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               start)
      .count();
}

}  // namespace bm::testing
