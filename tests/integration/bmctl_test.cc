// bmctl's contract with operators and scripts: JSON shapes, exit codes, one-line errors.

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "tests/support/files.h"
#include "tests/support/local_cluster.h"

namespace bm::testing {
namespace {

class BmctlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(cluster_.StartMaster());
    ASSERT_NO_FATAL_FAILURE(cluster_.StartWorker({"w1", "64MiB", ""}));
    ASSERT_NO_FATAL_FAILURE(cluster_.StartWorker({"w2", "64MiB", ""}));
  }

  LocalCluster cluster_;
};

bool OneLine(const std::string& text) {
  return !text.empty() && text.find('\n') == text.size() - 1;
}

TEST_F(BmctlTest, WorkersJsonListsEveryWorkerWithItsNumbers) {
  ASSERT_EQ(cluster_
                .Bmctl({"put", "rdd_1_0", "-", "--worker", "w2", "--level", "MEMORY_ONLY"},
                       RandomBytes(1000, 1))
                .exit_code,
            0);
  nlohmann::json workers = cluster_.BmctlJson({"workers"});
  ASSERT_TRUE(workers.is_array());
  ASSERT_EQ(workers.size(), 2u);
  for (const auto& w : workers) {
    for (const char* key :
         {"id", "address", "memory_capacity", "memory_used", "disk_used", "blocks"}) {
      EXPECT_TRUE(w.contains(key)) << key << " missing in " << w.dump();
    }
    EXPECT_EQ(w["memory_capacity"].get<uint64_t>(), 64u << 20);
    EXPECT_EQ(w["address"].get<std::string>(), cluster_.worker_endpoint(w["id"]));
  }
  auto w2 = workers[0]["id"] == "w2" ? workers[0] : workers[1];
  EXPECT_EQ(w2["blocks"].get<uint64_t>(), 1u);
  EXPECT_EQ(w2["memory_used"].get<uint64_t>(), 1000u);
}

TEST_F(BmctlTest, PutHonoursNamedWorkerAndLevel) {
  ASSERT_EQ(cluster_.Bmctl({"put", "rdd_2_0", "-", "--worker", "w1", "--level", "DISK_ONLY"}, "abc")
                .exit_code,
            0);
  ASSERT_EQ(
      cluster_.Bmctl({"put", "rdd_2_1", "-", "--worker", "w2", "--level", "memory_only"}, "defg")
          .exit_code,
      0);
  using Loc = std::tuple<std::string, std::string, uint64_t>;
  auto locations = cluster_.Locations({"rdd_2_0", "rdd_2_1"});
  EXPECT_EQ(locations["rdd_2_0"], (std::vector<Loc>{{"w1", "disk", 3}}));
  EXPECT_EQ(locations["rdd_2_1"], (std::vector<Loc>{{"w2", "memory", 4}}));
}

TEST_F(BmctlTest, RddsJsonSummarisesEachRdd) {
  ASSERT_EQ(cluster_
                .Bmctl({"put", "rdd_5_0", "-", "--worker", "w1", "--level", "MEMORY_ONLY"},
                       RandomBytes(100, 1))
                .exit_code,
            0);
  ASSERT_EQ(cluster_
                .Bmctl({"put", "rdd_5_1", "-", "--worker", "w2", "--level", "DISK_ONLY"},
                       RandomBytes(200, 2))
                .exit_code,
            0);
  ASSERT_EQ(cluster_
                .Bmctl({"put", "rdd_6_0", "-", "--worker", "w2", "--level", "MEMORY_ONLY"},
                       RandomBytes(50, 3))
                .exit_code,
            0);
  nlohmann::json rdds = cluster_.BmctlJson({"rdds"});
  ASSERT_TRUE(rdds.is_array());
  ASSERT_EQ(rdds.size(), 2u);
  EXPECT_EQ(rdds[0]["rdd"], 5);
  EXPECT_EQ(rdds[0]["cached_partitions"], 2);
  EXPECT_EQ(rdds[0]["memory_bytes"], 100);
  EXPECT_EQ(rdds[0]["disk_bytes"], 200);
  EXPECT_EQ(rdds[0]["workers"], nlohmann::json({"w1", "w2"}));
  EXPECT_EQ(rdds[1]["rdd"], 6);
  EXPECT_EQ(rdds[1]["workers"], nlohmann::json({"w2"}));

  nlohmann::json blocks = cluster_.BmctlJson({"blocks", "--rdd", "5"});
  ASSERT_TRUE(blocks.is_array());
  ASSERT_EQ(blocks.size(), 2u);
  EXPECT_EQ(blocks[0]["block"], "rdd_5_0");
  EXPECT_EQ(blocks[1]["block"], "rdd_5_1");
}

TEST_F(BmctlTest, TablesAreTheDefault) {
  ASSERT_EQ(cluster_.Bmctl({"put", "rdd_1_0", "-"}, "xyz").exit_code, 0);
  CommandResult r = cluster_.Bmctl({"locations", "rdd_1_0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("rdd_1_0"), std::string::npos);
  EXPECT_EQ(r.out.find('{'), std::string::npos) << "expected a table, got: " << r.out;
}

TEST_F(BmctlTest, UsageErrorsExitTwoWithOneLine) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"get", "rdd_x_1"},
                                             {"locations", "rdd_1_0", "bogus_1"},
                                             {"put", "rdd_1_0", "-", "--level", "OFF_HEAP"},
                                             {"workers", "--no-such-flag"},
                                             {"rm-rdd", "seven"},
                                             {"frobnicate"}}) {
    CommandResult r = cluster_.Bmctl(args, "data");
    EXPECT_EQ(r.exit_code, 2) << ::testing::PrintToString(args) << " stderr: " << r.err;
    EXPECT_FALSE(r.err.empty()) << ::testing::PrintToString(args);
  }
  CommandResult bad_id = cluster_.Bmctl({"get", "rdd_x_1"});
  EXPECT_TRUE(OneLine(bad_id.err)) << bad_id.err;
  EXPECT_NE(bad_id.err.find("rdd_x_1"), std::string::npos) << bad_id.err;
}

// --help lists every exit code bmctl uses, 3 (a tenant's quota refused a put) included.
TEST(BmctlHelpTest, HelpListsEveryExitCode) {
  CommandResult help = RunCommand(BinaryPath("bmctl"), {"--help"});
  ASSERT_EQ(help.exit_code, 0) << help.err;
  for (const std::string code :
       {"0 success", "1 operational failure", "2 usage error", "3 quota"}) {
    EXPECT_NE(help.out.find(code), std::string::npos) << code << " missing from:\n" << help.out;
  }
}

TEST_F(BmctlTest, MissingBlockExitsOneWithOneLine) {
  CommandResult r = cluster_.Bmctl({"get", "rdd_9_9"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(OneLine(r.err)) << r.err;
  EXPECT_NE(r.err.find("rdd_9_9"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty());
}

// A directory made bmctl die on an uncaught std::ios_failure (exit 134); /proc/self/mem
// announced size 0 and was stored as an empty block.
TEST_F(BmctlTest, PutOfADirectoryOrAnUnreadableFileExitsOneWithOneLine) {
  std::string directory = cluster_.dir().Sub("a-directory");
  std::filesystem::create_directories(directory);
  std::vector<std::string> inputs = {directory, "/proc/self/mem", cluster_.dir().Sub("absent")};
  if (::geteuid() != 0) {
    // Permissions stop only an unprivileged reader.
    std::string locked = cluster_.dir().Sub("locked");
    WriteFile(locked, "secret");
    std::filesystem::permissions(locked, std::filesystem::perms::none);
    inputs.push_back(locked);
  }
  for (const std::string& input : inputs) {
    CommandResult r = cluster_.Bmctl({"put", "rdd_4_0", input});
    EXPECT_EQ(r.exit_code, 1) << input << ": " << r.err;
    EXPECT_TRUE(OneLine(r.err)) << input << ": " << r.err;
    EXPECT_NE(r.err.find(input), std::string::npos) << r.err;
  }
  EXPECT_NE(cluster_.Bmctl({"put", "rdd_4_0", directory}).err.find("is a directory"),
            std::string::npos);
  EXPECT_EQ(cluster_.Bmctl({"get", "rdd_4_0"}).exit_code, 1) << "nothing may have been stored";
}

TEST_F(BmctlTest, FailedGetLeavesNoOutputFile) {
  std::string out = cluster_.dir().Sub("never");
  EXPECT_EQ(cluster_.Bmctl({"get", "rdd_9_9", "-o", out}).exit_code, 1);
  EXPECT_FALSE(std::filesystem::exists(out));
}

TEST_F(BmctlTest, UnreachableMasterExitsOneWithinTheTimeout) {
  int port = FreeLoopbackPort();
  auto start = std::chrono::steady_clock::now();
  CommandResult r = RunCommand(BinaryPath("bmctl"),
                               {"--master", LoopbackEndpoint(port), "--timeout", "1", "workers"});
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(OneLine(r.err)) << r.err;
  EXPECT_LT(took, std::chrono::seconds(10));
}

TEST_F(BmctlTest, RmReportsHowManyBlocksWereRemoved) {
  ASSERT_EQ(cluster_.Bmctl({"put", "rdd_3_0", "-"}, "a").exit_code, 0);
  ASSERT_EQ(cluster_.Bmctl({"put", "broadcast_1", "-"}, "b").exit_code, 0);
  nlohmann::json removed = cluster_.BmctlJson({"rm", "rdd_3_0", "broadcast_1", "rdd_3_9"});
  EXPECT_EQ(removed, nlohmann::json({{"removed", 2}}));
  EXPECT_EQ(cluster_.Bmctl({"get", "rdd_3_0"}).exit_code, 1);
}

}  // namespace
}  // namespace bm::testing
