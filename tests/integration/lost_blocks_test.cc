// A block whose last copy is lost stays known as lost (PROTOCOL.md, "Lost blocks"): bmctl get
// says "lost:" with when and why instead of "not found", bmctl blocks --lost, the REST API and
// /metrics list and count it, and the record survives a master restart until the id is put
// again or removed.

#include <gtest/gtest.h>
#include <httplib.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "blockmgr/client.h"
#include "tests/support/files.h"
#include "tests/support/local_cluster.h"
#include "tests/support/process.h"

namespace bm::testing {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;

// The reasons in `bmctl --json blocks --lost`, by block. A listing that fails is a test failure
// and an entry of its own, so no "nothing lost" check passes on an error.
std::map<std::string, std::string> LostReasons(LocalCluster& cluster) {
  std::map<std::string, std::string> out;
  CommandResult listed = cluster.Bmctl({"--json", "blocks", "--lost"});
  json blocks = json::parse(listed.out, nullptr, /*allow_exceptions=*/false);
  if (listed.exit_code != 0 || !blocks.is_array()) {
    ADD_FAILURE() << "bmctl blocks --lost exited " << listed.exit_code << ": " << listed.err
                  << listed.out;
    out["(bmctl blocks --lost failed)"] = listed.err;
    return out;
  }
  for (const json& block : blocks) {
    out[block.at("block").get<std::string>()] = block.at("reason").get<std::string>();
  }
  return out;
}

// Whether `bmctl get` of `id` fails (exit 1) saying it was lost for `reason`.
bool GetSaysLost(LocalCluster& cluster, const std::string& id, const std::string& reason,
                 std::string* err = nullptr) {
  CommandResult got = cluster.Bmctl({"get", id});
  if (err != nullptr) *err = got.err;
  return got.exit_code == 1 && got.err.find("lost: ") != std::string::npos &&
         got.err.find(reason) != std::string::npos && got.out.empty();
}

// Flushes a stopped worker's write-ahead log into a new table file and returns its path.
std::string FlushIntoNewTable(const std::string& disk_dir) {
  std::set<std::string> before;
  for (const auto& entry : std::filesystem::directory_iterator(disk_dir)) {
    if (entry.path().extension() == ".sst") before.insert(entry.path().string());
  }
  {
    rocksdb::DB* raw = nullptr;
    rocksdb::Status opened = rocksdb::DB::Open(rocksdb::Options(), disk_dir, &raw);
    EXPECT_TRUE(opened.ok()) << opened.ToString();
    if (!opened.ok()) return "";
    std::unique_ptr<rocksdb::DB> db(raw);
    EXPECT_TRUE(db->Flush(rocksdb::FlushOptions()).ok());
  }
  for (const auto& entry : std::filesystem::directory_iterator(disk_dir)) {
    if (entry.path().extension() == ".sst" && !before.contains(entry.path().string())) {
      return entry.path().string();
    }
  }
  return "";
}

std::string Metrics(LocalCluster& cluster) {
  httplib::Client http("127.0.0.1", cluster.HttpPort("master"));
  httplib::Result metrics = http.Get("/metrics");
  return metrics && metrics->status == 200 ? metrics->body : std::string();
}

TEST(LostBlocksTest, LostMemoryBlockOfAKilledWorkerIsListedCountedAndClearedByAPut) {
  LocalCluster cluster(/*heartbeat_timeout_seconds=*/2);
  cluster.SetMasterExtraArgs({"--http", "127.0.0.1:0"});
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkers(2));
  const std::string bytes = RandomBytes(300 << 10, 1);
  ASSERT_EQ(
      cluster.Bmctl({"put", "rdd_1_0", "-", "--level", "MEMORY_ONLY", "--worker", "w1"}, bytes)
          .exit_code,
      0);
  ASSERT_EQ(cluster.Bmctl({"put", "rdd_1_1", "-", "--level", "MEMORY_ONLY_2"}, bytes).exit_code, 0);
  ASSERT_TRUE(WaitFor([&] { return cluster.Locations({"rdd_1_1"})["rdd_1_1"].size() == 2; }, 10s));

  cluster.KillWorker("w1");
  std::string err;
  ASSERT_TRUE(WaitFor([&] { return GetSaysLost(cluster, "rdd_1_0", "worker dropped", &err); }, 20s))
      << err << cluster.LogTail("master");
  EXPECT_NE(err.find("rdd_1_0"), std::string::npos) << err;
  EXPECT_NE(err.find("w1"), std::string::npos) << "names the worker: " << err;
  // Another copy of rdd_1_1 is left: not lost.
  CommandResult other = cluster.Bmctl({"get", "rdd_1_1"});
  ASSERT_EQ(other.exit_code, 0) << other.err;
  EXPECT_TRUE(other.out == bytes);
  // Never stored: still "not found", not "lost".
  CommandResult never = cluster.Bmctl({"get", "rdd_9_9"});
  EXPECT_EQ(never.exit_code, 1);
  EXPECT_NE(never.err.find("not found"), std::string::npos) << never.err;
  EXPECT_EQ(never.err.find("lost"), std::string::npos) << never.err;

  // The client library: a distinct status.
  {
    Client client(cluster.ClientOptionsFor());
    Result<std::vector<std::byte>> got = client.Get(BlockId::Rdd(1, 0));
    EXPECT_EQ(got.status().code(), StatusCode::kDataLoss) << got.status().ToString();
    EXPECT_EQ(got.status().message().rfind("lost: ", 0), 0u) << got.status().message();
    Result<std::vector<std::byte>> missing = client.Get(BlockId::Rdd(9, 9));
    EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
    std::vector<Result<std::vector<std::byte>>> many =
        client.GetMany({BlockId::Rdd(1, 0), BlockId::Rdd(1, 1)});
    ASSERT_EQ(many.size(), 2u);
    EXPECT_EQ(many[0].status().code(), StatusCode::kDataLoss);
    EXPECT_TRUE(many[1].ok());
  }

  // Listed by bmctl (table and JSON), the REST API and counted in /metrics.
  EXPECT_EQ(LostReasons(cluster),
            (std::map<std::string, std::string>{{"rdd_1_0", "worker dropped"}}));
  CommandResult table = cluster.Bmctl({"blocks", "--lost"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("REASON"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("worker dropped"), std::string::npos) << table.out;
  httplib::Client http("127.0.0.1", cluster.HttpPort("master"));
  httplib::Result rest = http.Get("/api/v1/blocks?state=lost");
  ASSERT_TRUE(rest && rest->status == 200);
  json listed = json::parse(rest->body);
  ASSERT_EQ(listed.at("blocks").size(), 1u) << rest->body;
  EXPECT_EQ(listed.at("blocks")[0].at("blockName"), "rdd_1_0");
  EXPECT_EQ(listed.at("blocks")[0].at("reason"), "worker dropped");
  EXPECT_EQ(listed.at("blocks")[0].at("worker"), "w1");
  EXPECT_EQ(listed.at("blocks")[0].at("size"), bytes.size());
  httplib::Result bad_state = http.Get("/api/v1/blocks?state=gone");
  ASSERT_TRUE(bad_state);
  EXPECT_EQ(bad_state->status, 400);
  httplib::Result page = http.Get("/storage");
  ASSERT_TRUE(page && page->status == 200);
  EXPECT_NE(page->body.find("Lost blocks"), std::string::npos);
  EXPECT_NE(page->body.find("rdd_1_0"), std::string::npos);
  std::string metrics;
  EXPECT_TRUE(WaitFor(
      [&] {
        metrics = Metrics(cluster);
        return metrics.find("blockmgr_blocks_lost_total{reason=\"worker_dropped\"} 1\n") !=
               std::string::npos;
      },
      5s))
      << metrics;
  EXPECT_NE(metrics.find("blockmgr_blocks_lost_total{reason=\"copy_corrupt\"} 0\n"),
            std::string::npos);

  // Get-or-compute recomputes it as it always did, and the new copy clears the record.
  {
    Client client(cluster.ClientOptionsFor());
    int computed = 0;
    Result<std::vector<std::byte>> got =
        client.GetOrCompute(BlockId::Rdd(1, 0), StorageLevel::kMemoryOnly, [&] {
          ++computed;
          return Result<std::vector<std::byte>>(
              std::vector<std::byte>(AsBytes(bytes).begin(), AsBytes(bytes).end()));
        });
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(computed, 1);
  }
  EXPECT_TRUE(LostReasons(cluster).empty()) << cluster.Bmctl({"blocks", "--lost"}).out;
  CommandResult back = cluster.Bmctl({"get", "rdd_1_0"});
  ASSERT_EQ(back.exit_code, 0) << back.err;
  EXPECT_TRUE(back.out == bytes);
}

TEST(LostBlocksTest, LostCorruptSingleCopyIsLostAsCopyCorruptAndARemovalClearsIt) {
  LocalCluster cluster(/*heartbeat_timeout_seconds=*/30);
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(
      cluster.StartWorker({"w1", "64MiB", "", {"--scrub-rate", "0", "--enable-fault-injection"}}));
  const std::string bytes = RandomBytes(2 << 20, 2);
  ASSERT_EQ(cluster.Bmctl({"put", "rdd_5_0", "-", "--level", "MEMORY_ONLY"}, bytes).exit_code, 0);
  ASSERT_EQ(cluster.Bmctl({"put", "rdd_5_1", "-", "--level", "DISK_ONLY"}, bytes).exit_code, 0);
  ASSERT_TRUE(cluster.CorruptCopy("w1", "rdd_5_0", proto::Tier::MEMORY, 100).ok());
  ASSERT_TRUE(cluster.CorruptCopy("w1", "rdd_5_1", proto::Tier::DISK, 100).ok());

  for (const std::string id : {"rdd_5_0", "rdd_5_1"}) {
    // The read that finds it bad fails as corrupt; the worker drops the copy and reports it.
    CommandResult first = cluster.Bmctl({"get", id});
    EXPECT_EQ(first.exit_code, 1);
    std::string err;
    EXPECT_TRUE(WaitFor([&] { return GetSaysLost(cluster, id, "copy corrupt", &err); }, 10s))
        << id << ": " << err << cluster.LogTail("master");
  }
  EXPECT_EQ(LostReasons(cluster), (std::map<std::string, std::string>{
                                      {"rdd_5_0", "copy corrupt"}, {"rdd_5_1", "copy corrupt"}}));

  // Removing the block (or its RDD) forgets it was lost.
  ASSERT_EQ(cluster.Bmctl({"rm", "rdd_5_1"}).exit_code, 0);
  EXPECT_EQ(LostReasons(cluster),
            (std::map<std::string, std::string>{{"rdd_5_0", "copy corrupt"}}));
  ASSERT_EQ(cluster.Bmctl({"rm-rdd", "5"}).exit_code, 0);
  EXPECT_TRUE(LostReasons(cluster).empty());
  CommandResult gone = cluster.Bmctl({"get", "rdd_5_0"});
  EXPECT_EQ(gone.exit_code, 1);
  EXPECT_NE(gone.err.find("not found"), std::string::npos) << gone.err;
}

// A memory block does not survive its worker's restart: the worker comes back (before the
// master would drop it) without the block, which is then lost as "worker restarted".
TEST(LostBlocksTest, LostMemoryBlockOfARestartedWorkerIsLostAsWorkerRestarted) {
  LocalCluster cluster(/*heartbeat_timeout_seconds=*/30);
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker({"w1"}));
  ASSERT_EQ(cluster.Bmctl({"put", "rdd_6_0", "-", "--level", "MEMORY_ONLY"}, "memory").exit_code,
            0);
  ASSERT_EQ(cluster.Bmctl({"put", "rdd_6_1", "-", "--level", "DISK_ONLY"}, "disk").exit_code, 0);
  cluster.KillWorker("w1");
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker({"w1"}));
  std::string err;
  EXPECT_TRUE(
      WaitFor([&] { return GetSaysLost(cluster, "rdd_6_0", "worker restarted", &err); }, 20s))
      << err << cluster.LogTail("master");
  CommandResult disk = cluster.Bmctl({"get", "rdd_6_1"});
  EXPECT_EQ(disk.exit_code, 0) << disk.err;
  EXPECT_EQ(disk.out, "disk");
  EXPECT_EQ(LostReasons(cluster),
            (std::map<std::string, std::string>{{"rdd_6_0", "worker restarted"}}));
}

// The record is journaled: a restarted master still says "lost"; a put clears it, also for the
// master after the next restart.
TEST(LostBlocksTest, LostRecordIsKeptAcrossAMasterRestartAndClearedByAPut) {
  LocalCluster cluster(/*heartbeat_timeout_seconds=*/2);
  cluster.SetMasterStateDir(cluster.dir().Sub("master-state"));
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkers(2));
  ASSERT_EQ(
      cluster.Bmctl({"put", "rdd_2_0", "-", "--level", "MEMORY_ONLY", "--worker", "w1"}, "first")
          .exit_code,
      0);
  cluster.KillWorker("w1");
  std::string err;
  ASSERT_TRUE(WaitFor([&] { return GetSaysLost(cluster, "rdd_2_0", "worker dropped", &err); }, 20s))
      << err;

  cluster.KillMaster();
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  EXPECT_TRUE(GetSaysLost(cluster, "rdd_2_0", "worker dropped", &err)) << err;
  EXPECT_EQ(LostReasons(cluster),
            (std::map<std::string, std::string>{{"rdd_2_0", "worker dropped"}}));

  // Placement takes only workers that registered again since the restart (not "unconfirmed").
  ASSERT_TRUE(WaitFor(
      [&] {
        json workers = cluster.BmctlJson({"workers"});
        return workers.is_array() && workers.size() == 1 && workers[0].at("id") == "w2" &&
               workers[0].at("state") == "active";
      },
      20s))
      << cluster.LogTail("master");
  CommandResult put = cluster.Bmctl({"put", "rdd_2_0", "-", "--level", "MEMORY_ONLY"}, "second");
  ASSERT_EQ(put.exit_code, 0) << put.err;
  CommandResult got = cluster.Bmctl({"get", "rdd_2_0"});
  ASSERT_EQ(got.exit_code, 0) << got.err;
  EXPECT_EQ(got.out, "second");
  EXPECT_TRUE(LostReasons(cluster).empty());

  cluster.KillMaster();
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  EXPECT_TRUE(LostReasons(cluster).empty()) << "the clearing was journaled too";
  got = cluster.Bmctl({"get", "rdd_2_0"});
  ASSERT_EQ(got.exit_code, 0) << got.err;
  EXPECT_EQ(got.out, "second");
}

// A table file cut in half while its worker was down kept the worker from starting at all. Now
// the worker starts, serves the blocks of its other table file, and the blocks of the cut one
// are lost at start-up, the master listing them with the file named. The cut table's blocks are
// small ones, whose bytes were in the table itself: a large block keeps its bytes in a chunk file
// that describes itself, and is taken back from it (IntegrityTest).
TEST(LostBlocksTest, LostTruncatedTableFileCostsOnlyItsBlocksAndTheWorkerStarts) {
  LocalCluster cluster(/*heartbeat_timeout_seconds=*/30);
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker({"w1"}));
  const std::string disk = cluster.worker_disk_dir("w1");
  std::map<std::string, std::string> stored;
  std::string second_table;
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < 4; ++i) {
      const std::string id = "rdd_3_" + std::to_string(round * 4 + i);
      // Under the chunk-file threshold (64 KiB) in the round whose table is cut.
      stored[id] = RandomBytes((round == 0 ? (256 << 10) : (16 << 10)) + i, round * 4 + i);
      CommandResult put = cluster.Bmctl({"put", id, "-", "--level", "DISK_ONLY"}, stored[id]);
      ASSERT_EQ(put.exit_code, 0) << put.err;
    }
    cluster.KillWorker("w1");
    const std::string table = FlushIntoNewTable(disk);
    ASSERT_FALSE(table.empty());
    if (round == 1) {
      second_table = table;
    } else {
      ASSERT_NO_FATAL_FAILURE(cluster.StartWorker({"w1"}));
    }
  }
  std::filesystem::resize_file(second_table, std::filesystem::file_size(second_table) / 2);
  const std::string name = std::filesystem::path(second_table).filename().string();

  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker({"w1"}));
  ASSERT_TRUE(cluster.WaitForWorkers({"w1"})) << cluster.LogTail("w1");
  for (int i = 0; i < 4; ++i) {  // the first table's blocks are served
    const std::string id = "rdd_3_" + std::to_string(i);
    CommandResult got = cluster.Bmctl({"get", id});
    ASSERT_EQ(got.exit_code, 0) << id << ": " << got.err << cluster.LogTail("w1");
    EXPECT_TRUE(got.out == stored[id]) << id;
  }
  std::map<std::string, std::string> expected;
  for (int i = 4; i < 8; ++i) expected["rdd_3_" + std::to_string(i)] = "lost at start-up";
  EXPECT_TRUE(WaitFor([&] { return LostReasons(cluster) == expected; }, 10s))
      << cluster.Bmctl({"blocks", "--lost"}).out << cluster.LogTail("master");
  std::string err;
  EXPECT_TRUE(GetSaysLost(cluster, "rdd_3_5", "lost at start-up", &err)) << err;
  EXPECT_NE(err.find(name), std::string::npos) << "names the table file: " << err;
  EXPECT_TRUE(std::filesystem::exists(disk + "/lost/" + name));
  // The worker still stores.
  ASSERT_EQ(cluster.Bmctl({"put", "rdd_3_5", "-", "--level", "DISK_ONLY"}, "again").exit_code, 0);
  CommandResult again = cluster.Bmctl({"get", "rdd_3_5"});
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(again.out, "again");
}

}  // namespace
}  // namespace bm::testing
