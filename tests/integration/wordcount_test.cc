// The example of issue 3, bm-wordcount, run as a real process against a real cluster: a first
// run computes and caches every partition, a second reads them all from the cache, and after a
// worker dies a third recomputes exactly the partitions it held. The counts never change.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/support/local_cluster.h"

namespace bm::testing {
namespace {

constexpr int kPartitions = 8;
constexpr uint64_t kRddId = 100;

// What one `bm-wordcount run` printed: its last two lines.
struct RunSummary {
  int partitions = -1;
  int computed = -1;
  int hits = -1;
  std::string checksum;  // "total_words=... distinct=... digest=..."
};

CommandResult Wordcount(const std::vector<std::string>& args) {
  return RunCommand(BinaryPath("bm-wordcount"), args, "", std::chrono::seconds(60));
}

// Runs the count and parses its checksum and summary lines (recording failures).
RunSummary RunCount(LocalCluster& cluster, const std::string& corpus,
                    std::vector<std::string> more = {}) {
  std::vector<std::string> args = {"run",
                                   "--master",
                                   cluster.master_endpoint(),
                                   "--input",
                                   corpus,
                                   "--partitions",
                                   std::to_string(kPartitions),
                                   "--rdd-id",
                                   std::to_string(kRddId),
                                   "--parallelism",
                                   "2"};
  args.insert(args.end(), more.begin(), more.end());
  CommandResult r = Wordcount(args);
  RunSummary summary;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // The last line is the summary, the one before it the checksum.
  std::string out = r.out;
  if (!out.empty() && out.back() == '\n') out.pop_back();
  const size_t last = out.rfind('\n');
  if (last == std::string::npos) {
    ADD_FAILURE() << "too little output: " << r.out;
    return summary;
  }
  const std::string summary_line = out.substr(last + 1);
  const size_t before = out.rfind('\n', last - 1);
  summary.checksum = out.substr(before == std::string::npos ? 0 : before + 1,
                                last - (before == std::string::npos ? 0 : before + 1));
  double seconds = -1;
  EXPECT_EQ(std::sscanf(summary_line.c_str(), "partitions=%d computed=%d hits=%d seconds=%lf",
                        &summary.partitions, &summary.computed, &summary.hits, &seconds),
            4)
      << "summary line: " << summary_line;
  EXPECT_GE(seconds, 0);
  EXPECT_EQ(summary.checksum.rfind("total_words=", 0), 0u) << r.out;
  return summary;
}

class WordcountTest : public ::testing::Test {
 protected:
  // A 1 s heartbeat timeout so a killed worker is dropped quickly.
  WordcountTest() : cluster_(/*heartbeat_timeout_seconds=*/1) {}

  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(cluster_.StartMaster());
    ASSERT_NO_FATAL_FAILURE(cluster_.StartWorkers(2));
    CommandResult generated =
        Wordcount({"generate", "--output", corpus_, "--size", "3MiB", "--seed", "7"});
    ASSERT_EQ(generated.exit_code, 0) << generated.err;
  }

  LocalCluster cluster_;
  const std::string corpus_ = cluster_.dir().Sub("corpus.txt");
};

TEST_F(WordcountTest, CachedRunComputesNothingAndALostWorkersPartitionsAreRecomputed) {
  RunSummary first = RunCount(cluster_, corpus_);
  EXPECT_EQ(first.partitions, kPartitions);
  EXPECT_EQ(first.computed, kPartitions);
  EXPECT_EQ(first.hits, 0);

  nlohmann::json rdds = cluster_.BmctlJson({"rdds"});
  ASSERT_EQ(rdds.size(), 1u) << rdds.dump();
  EXPECT_EQ(rdds[0]["rdd"], kRddId);
  EXPECT_EQ(rdds[0]["name"], "wordcount:corpus.txt");
  EXPECT_EQ(rdds[0]["level"], "MEMORY_AND_DISK");
  EXPECT_EQ(rdds[0]["cached_partitions"], kPartitions);
  EXPECT_EQ(rdds[0]["total_partitions"], kPartitions);

  RunSummary second = RunCount(cluster_, corpus_);
  EXPECT_EQ(second.computed, 0);
  EXPECT_EQ(second.hits, kPartitions);
  EXPECT_EQ(second.checksum, first.checksum);

  // Kill the worker holding partition 0 (so at least one partition is lost), and count what
  // else it held.
  nlohmann::json blocks = cluster_.BmctlJson({"blocks", "--rdd", std::to_string(kRddId)});
  ASSERT_EQ(blocks.size(), static_cast<size_t>(kPartitions)) << blocks.dump();
  std::map<std::string, int> held;
  std::string victim;
  for (const nlohmann::json& block : blocks) {
    ASSERT_EQ(block["locations"].size(), 1u) << block.dump();
    const std::string worker = block["locations"][0]["worker"];
    ++held[worker];
    if (block["block"] == "rdd_100_0") victim = worker;
  }
  ASSERT_FALSE(victim.empty()) << blocks.dump();
  const std::string survivor = victim == "w1" ? "w2" : "w1";
  const int lost = held[victim];

  cluster_.KillWorker(victim);
  ASSERT_TRUE(cluster_.WaitForWorkers({survivor})) << cluster_.LogTail("master");

  RunSummary third = RunCount(cluster_, corpus_);
  EXPECT_EQ(third.computed, lost);
  EXPECT_EQ(third.hits, kPartitions - lost);
  EXPECT_EQ(third.checksum, first.checksum);
  // The recomputed partitions were cached again, on the survivor.
  nlohmann::json after = cluster_.BmctlJson({"rdds"});
  ASSERT_EQ(after.size(), 1u) << after.dump();
  EXPECT_EQ(after[0]["cached_partitions"], kPartitions);
  EXPECT_EQ(after[0]["workers"], nlohmann::json::array({survivor}));
}

// The counts merged through a shuffle of reducers (README "Shuffles") are the counts merged in
// one process, and the run leaves no shuffle behind.
TEST_F(WordcountTest, ShuffledToReducersTheCountsAreTheSame) {
  const RunSummary merged = RunCount(cluster_, corpus_);
  const RunSummary shuffled = RunCount(cluster_, corpus_, {"--reducers", "3"});
  EXPECT_EQ(shuffled.checksum, merged.checksum);
  EXPECT_EQ(shuffled.computed, 0);  // the counts came from the cache
  nlohmann::json shuffles = cluster_.BmctlJson({"shuffles"});
  EXPECT_TRUE(shuffles.is_array() && shuffles.empty()) << shuffles.dump();
}

TEST_F(WordcountTest, UnpersistRemovesEveryPartitionSoTheNextRunComputesAgain) {
  RunSummary first = RunCount(cluster_, corpus_);
  EXPECT_EQ(first.computed, kPartitions);

  CommandResult removed = Wordcount(
      {"unpersist", "--master", cluster_.master_endpoint(), "--rdd-id", std::to_string(kRddId)});
  ASSERT_EQ(removed.exit_code, 0) << removed.err;
  EXPECT_EQ(cluster_.BmctlJson({"blocks", "--rdd", std::to_string(kRddId)}).size(), 0u);

  RunSummary again = RunCount(cluster_, corpus_);
  EXPECT_EQ(again.computed, kPartitions);
  EXPECT_EQ(again.hits, 0);
  EXPECT_EQ(again.checksum, first.checksum);
}

TEST_F(WordcountTest, RefusesToReadCountsCachedForAnotherSplitOfTheInput) {
  EXPECT_EQ(RunCount(cluster_, corpus_).computed, kPartitions);
  CommandResult r = Wordcount({"run", "--master", cluster_.master_endpoint(), "--input", corpus_,
                               "--partitions", "3", "--rdd-id", std::to_string(kRddId)});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("already caches wordcount:corpus.txt in 8 partitions"), std::string::npos)
      << r.err;
}

TEST_F(WordcountTest, ExitCodesSeparateUsageErrorsFromRuntimeFailures) {
  EXPECT_EQ(Wordcount({"run", "--input", corpus_}).exit_code, 2);  // no --master
  EXPECT_EQ(Wordcount({"run", "--master", cluster_.master_endpoint(), "--input", corpus_, "--level",
                       "SOMETIMES"})
                .exit_code,
            2);
  EXPECT_EQ(
      Wordcount({"generate", "--output", cluster_.dir().Sub("x"), "--size", "lots"}).exit_code, 2);

  CommandResult missing = Wordcount(
      {"run", "--master", cluster_.master_endpoint(), "--input", cluster_.dir().Sub("none")});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_EQ(std::count(missing.err.begin(), missing.err.end(), '\n'), 1) << missing.err;
}

TEST(WordcountGenerateTest, SameSeedGivesTheSameFile) {
  TempDir dir;
  for (const char* name : {"a", "b"}) {
    CommandResult r = RunCommand(BinaryPath("bm-wordcount"),
                                 {"generate", "--output", dir.Sub(name), "--size", "200KiB"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  EXPECT_EQ(RunCommand("/usr/bin/cmp", {dir.Sub("a"), dir.Sub("b")}).exit_code, 0);
}

}  // namespace
}  // namespace bm::testing
