// bmctl's operator conveniences: the master from BLOCKMGR_MASTER, progress lines on stderr,
// and `workers --watch`.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "tests/support/files.h"
#include "tests/support/local_cluster.h"

namespace bm::testing {
namespace {

using ::testing::HasSubstr;

class BmctlProgressTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(cluster_.StartMaster());
    ASSERT_NO_FATAL_FAILURE(cluster_.StartWorkers(1));
  }

  std::string WriteFile(const std::string& name, size_t size) {
    const std::string path = cluster_.dir().Sub(name);
    std::ofstream(path, std::ios::binary) << std::string(size, 'x');
    return path;
  }

  LocalCluster cluster_;
};

TEST_F(BmctlProgressTest, MasterComesFromTheEnvironmentWhenNotGiven) {
  ::setenv("BLOCKMGR_MASTER", cluster_.master_endpoint().c_str(), 1);
  CommandResult listed = RunCommand(BinaryPath("bmctl"), {"workers"});
  ::unsetenv("BLOCKMGR_MASTER");
  EXPECT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_THAT(listed.out, HasSubstr("w1"));

  CommandResult missing = RunCommand(BinaryPath("bmctl"), {"workers"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.err, HasSubstr("--master"));
}

TEST_F(BmctlProgressTest, ProgressIsForcedOnOrOffAndQuietByDefaultOffATerminal) {
  const std::string file = WriteFile("block.bin", 300000);
  CommandResult forced = cluster_.Bmctl({"--progress", "put", "rdd_1_0", file});
  ASSERT_EQ(forced.exit_code, 0) << forced.err;
  EXPECT_THAT(forced.err, HasSubstr("put rdd_1_0"));
  EXPECT_THAT(forced.err, HasSubstr("/ 293.0 KiB  100%"));

  CommandResult got =
      cluster_.Bmctl({"--progress", "get", "rdd_1_0", "-o", cluster_.dir().Sub("copy.bin")});
  ASSERT_EQ(got.exit_code, 0) << got.err;
  EXPECT_THAT(got.err, HasSubstr("get rdd_1_0"));
  EXPECT_THAT(got.err, HasSubstr("100%"));

  // stderr is a pipe here: no progress unless forced.
  CommandResult quiet = cluster_.Bmctl({"put", "rdd_1_1", file});
  ASSERT_EQ(quiet.exit_code, 0) << quiet.err;
  EXPECT_EQ(quiet.err, "");
  CommandResult off =
      cluster_.Bmctl({"--no-progress", "get", "rdd_1_1", "-o", cluster_.dir().Sub("copy2.bin")});
  ASSERT_EQ(off.exit_code, 0) << off.err;
  EXPECT_EQ(off.err, "");

  CommandResult both = cluster_.Bmctl({"--progress", "--no-progress", "workers"});
  EXPECT_EQ(both.exit_code, 2);
}

TEST_F(BmctlProgressTest, WorkersWatchRedrawsEverySecond) {
  // bmctl runs until interrupted; killed after 3.5 s it has drawn the list at least twice.
  CommandResult watched = RunCommand(BinaryPath("bmctl"),
                                     {"--master", cluster_.master_endpoint(), "workers", "--watch"},
                                     "", std::chrono::milliseconds(3500));
  size_t frames = 0;
  for (size_t at = watched.out.find("Every 1 s"); at != std::string::npos;
       at = watched.out.find("Every 1 s", at + 1)) {
    ++frames;
  }
  EXPECT_GE(frames, 2u) << watched.out;
  EXPECT_THAT(watched.out, HasSubstr("w1"));
}

}  // namespace
}  // namespace bm::testing
