// Blocks go in and come back byte-exact through real processes, and the master reports them
// on the right tier with the right size.

#include <gtest/gtest.h>

#include "tests/support/files.h"
#include "tests/support/local_cluster.h"

namespace bm::testing {
namespace {

using Loc = std::tuple<std::string, std::string, uint64_t>;

class BlockRoundTripTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(cluster_.StartMaster());
    ASSERT_NO_FATAL_FAILURE(cluster_.StartWorker({"w1", "256MiB", ""}));
  }

  // Puts `data` as `block` at `level` through a file, gets it back, and checks the bytes.
  void RoundTrip(const std::string& block, const std::string& data, const std::string& level) {
    std::string in = cluster_.dir().Sub(block + ".in");
    std::string out = cluster_.dir().Sub(block + ".out");
    WriteFile(in, data);
    CommandResult put = cluster_.Bmctl({"put", block, in, "--level", level});
    ASSERT_EQ(put.exit_code, 0) << put.err;
    CommandResult get = cluster_.Bmctl({"get", block, "-o", out});
    ASSERT_EQ(get.exit_code, 0) << get.err;
    std::string back = ReadFile(out);
    ASSERT_EQ(back.size(), data.size());
    EXPECT_TRUE(back == data) << block << " came back with different bytes";
  }

  LocalCluster cluster_;
};

TEST_F(BlockRoundTripTest, MemoryBlocksComeBackByteExactAtEverySize) {
  const std::vector<size_t> sizes = {0, 1, 4096, 1 << 20, 64 << 20};
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::string block = "rdd_1_" + std::to_string(i);
    std::string data = RandomBytes(sizes[i], i + 1);
    ASSERT_NO_FATAL_FAILURE(RoundTrip(block, data, "MEMORY_ONLY"));
    EXPECT_EQ(cluster_.Locations({block})[block], (std::vector<Loc>{{"w1", "memory", sizes[i]}}));
  }
}

TEST_F(BlockRoundTripTest, DiskBlocksComeBackByteExactAtEverySize) {
  const std::vector<size_t> sizes = {0, 1, 4096, 1 << 20, (64 << 20) + 3};
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::string block = "rdd_2_" + std::to_string(i);
    std::string data = RandomBytes(sizes[i], 100 + i);
    ASSERT_NO_FATAL_FAILURE(RoundTrip(block, data, "DISK_ONLY"));
    EXPECT_EQ(cluster_.Locations({block})[block], (std::vector<Loc>{{"w1", "disk", sizes[i]}}));
  }
}

TEST_F(BlockRoundTripTest, GetWritesExactBytesToStdout) {
  std::string data = RandomBytes(300000, 7);
  data[10] = '\0';  // binary-safe
  CommandResult put = cluster_.Bmctl({"put", "broadcast_3", "-"}, data);
  ASSERT_EQ(put.exit_code, 0) << put.err;
  CommandResult get = cluster_.Bmctl({"get", "broadcast_3"});
  ASSERT_EQ(get.exit_code, 0) << get.err;
  EXPECT_TRUE(get.out == data);
}

TEST_F(BlockRoundTripTest, PutReplacesAnExistingBlock) {
  ASSERT_NO_FATAL_FAILURE(RoundTrip("shuffle_1_2_3", RandomBytes(5000, 1), "MEMORY_ONLY"));
  ASSERT_NO_FATAL_FAILURE(RoundTrip("shuffle_1_2_3", RandomBytes(7000, 2), "DISK_ONLY"));
  EXPECT_EQ(cluster_.Locations({"shuffle_1_2_3"})["shuffle_1_2_3"],
            (std::vector<Loc>{{"w1", "disk", 7000}}));
}

TEST_F(BlockRoundTripTest, LocationsOfUnknownBlockAreEmpty) {
  EXPECT_TRUE(cluster_.Locations({"rdd_99_0"})["rdd_99_0"].empty());
}

}  // namespace
}  // namespace bm::testing
