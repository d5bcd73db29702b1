// One version per block id across the cluster, with real processes: once a put of X returns, no
// get of X returns an older version, whether it reads through the master, through a client's
// location cache, or from a worker that was stopped or restarted while X was overwritten
// elsewhere; and a worker that rejoins leaves no block above its level.

#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "blockmgr/client.h"
#include "tests/support/files.h"
#include "tests/support/local_cluster.h"

namespace bm::testing {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;

ClientOptions ClientFor(const LocalCluster& cluster) {
  ClientOptions options = cluster.ClientOptionsFor();
  options.request_timeout = 3000ms;
  return options;
}

// The workers `bmctl --json locations` lists for one block.
std::vector<std::string> HoldersOf(LocalCluster& cluster, const std::string& block) {
  std::vector<std::string> workers;
  for (const auto& [id, locations] : cluster.Locations({block})) {
    for (const auto& [worker, tier, size] : locations) workers.push_back(worker);
  }
  return workers;
}

TEST(BlockVersionsTest, OverwriteOnAnotherWorkerServesOnlyTheNewBytes) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkers(2));
  const std::string a = RandomBytes(100 * 1024, 1);
  const std::string b = RandomBytes(70 * 1024, 2);

  ASSERT_EQ(cluster.Bmctl({"put", "rdd_5_0", "-", "--worker", "w1"}, a).exit_code, 0);
  CommandResult second = cluster.Bmctl({"put", "rdd_5_0", "-", "--worker", "w2"}, b);
  ASSERT_EQ(second.exit_code, 0) << second.err;

  CommandResult got = cluster.Bmctl({"get", "rdd_5_0"});
  ASSERT_EQ(got.exit_code, 0) << got.err;
  EXPECT_TRUE(got.out == b) << "get returned " << got.out.size() << " bytes, not the new version";
  EXPECT_EQ(HoldersOf(cluster, "rdd_5_0"), std::vector<std::string>{"w2"});
  // The put returned after the old copy was removed, not merely unlisted.
  EXPECT_FALSE(cluster.WorkerHolds("w1", "rdd_5_0"));
  EXPECT_TRUE(cluster.WorkerHolds("w2", "rdd_5_0"));
}

TEST(BlockVersionsTest, ClientWithACachedLocationReadsTheNewVersion) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkers(2));
  const BlockId id = BlockId::Rdd(6, 0);
  const std::string a = RandomBytes(64 * 1024, 3);
  const std::string b = RandomBytes(64 * 1024, 4);

  Client reader(ClientFor(cluster));
  PutOptions on_w1;
  on_w1.worker_id = "w1";
  ASSERT_TRUE(reader.Put(id, AsBytes(a), StorageLevel::kMemoryOnly, on_w1).ok());
  Result<std::vector<std::byte>> first = reader.Get(id);  // remembers w1
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(AsString(*first) == a);

  Client writer(ClientFor(cluster));
  PutOptions on_w2;
  on_w2.worker_id = "w2";
  ASSERT_TRUE(writer.Put(id, AsBytes(b), StorageLevel::kMemoryOnly, on_w2).ok());

  Result<std::vector<std::byte>> again = reader.Get(id);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(AsString(*again) == b) << "a cached location served the replaced version";
  std::vector<Result<std::vector<std::byte>>> many = reader.GetMany({id});
  ASSERT_TRUE(many[0].ok()) << many[0].status().ToString();
  EXPECT_TRUE(AsString(*many[0]) == b);
}

TEST(BlockVersionsTest, WorkerStoppedDuringAnOverwriteNeverServesTheOldVersion) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkers(2));
  const std::string a = RandomBytes(200 * 1024, 5);
  const std::string b = RandomBytes(150 * 1024, 6);
  ASSERT_EQ(
      cluster.Bmctl({"put", "rdd_7_0", "-", "--worker", "w1", "--level", "DISK_ONLY"}, a).exit_code,
      0);
  Client reader(ClientFor(cluster));
  ASSERT_TRUE(reader.Get(BlockId::Rdd(7, 0)).ok());  // remembers w1

  cluster.SignalWorker("w1", SIGSTOP);
  CommandResult put = cluster.Bmctl({"put", "rdd_7_0", "-", "--worker", "w2"}, b);
  ASSERT_EQ(put.exit_code, 0) << put.err;
  EXPECT_EQ(HoldersOf(cluster, "rdd_7_0"), std::vector<std::string>{"w2"});
  CommandResult got = cluster.Bmctl({"get", "rdd_7_0"});
  ASSERT_EQ(got.exit_code, 0) << got.err;
  EXPECT_TRUE(got.out == b);

  // Resumed, the stopped worker carries out the removal the master queued for it; the client
  // that remembered it falls over to the new copy.
  cluster.SignalWorker("w1", SIGCONT);
  EXPECT_TRUE(WaitFor([&] { return !cluster.WorkerHolds("w1", "rdd_7_0"); }, 10s));
  Result<std::vector<std::byte>> read = reader.Get(BlockId::Rdd(7, 0));
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_TRUE(AsString(*read) == b);
}

TEST(BlockVersionsTest, WorkerRestartedAfterAnOverwriteComesBackWithoutTheOldVersion) {
  LocalCluster cluster(/*heartbeat_timeout_seconds=*/1);
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkers(2));
  const std::string a = RandomBytes(200 * 1024, 7);
  const std::string b = RandomBytes(120 * 1024, 8);
  ASSERT_EQ(
      cluster.Bmctl({"put", "rdd_8_0", "-", "--worker", "w1", "--level", "DISK_ONLY"}, a).exit_code,
      0);
  // w1 goes away (and is dropped) holding version a on disk; b is put on w2 meanwhile.
  cluster.KillWorker("w1");
  ASSERT_TRUE(cluster.WaitForWorkers({"w2"}));
  CommandResult put = cluster.Bmctl({"put", "rdd_8_0", "-", "--worker", "w2"}, b);
  ASSERT_EQ(put.exit_code, 0) << put.err;

  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker({"w1", "64MiB", ""}));
  ASSERT_TRUE(cluster.WaitForWorkers({"w1", "w2"}));
  EXPECT_EQ(HoldersOf(cluster, "rdd_8_0"), std::vector<std::string>{"w2"});
  CommandResult got = cluster.Bmctl({"get", "rdd_8_0"});
  ASSERT_EQ(got.exit_code, 0) << got.err;
  EXPECT_TRUE(got.out == b) << "the restarted worker's old version was served";
  EXPECT_TRUE(WaitFor([&] { return !cluster.WorkerHolds("w1", "rdd_8_0"); }, 10s))
      << "the restarted worker kept the replaced version";
}

TEST(BlockVersionsTest, RemovedWhileAWorkerWasAwayStaysRemoved) {
  LocalCluster cluster(/*heartbeat_timeout_seconds=*/1);
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkers(2));
  const std::string a = RandomBytes(50 * 1024, 9);
  ASSERT_EQ(cluster.Bmctl({"put", "rdd_9_0", "-", "--level", "DISK_ONLY_2"}, a).exit_code, 0);
  ASSERT_EQ(HoldersOf(cluster, "rdd_9_0").size(), 2u);
  cluster.KillWorker("w1");
  ASSERT_TRUE(cluster.WaitForWorkers({"w2"}));
  ASSERT_EQ(cluster.Bmctl({"rm", "rdd_9_0"}).exit_code, 0);

  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker({"w1", "64MiB", ""}));
  ASSERT_TRUE(cluster.WaitForWorkers({"w1", "w2"}));
  EXPECT_TRUE(HoldersOf(cluster, "rdd_9_0").empty());
  EXPECT_NE(cluster.Bmctl({"get", "rdd_9_0"}).exit_code, 0);
  EXPECT_TRUE(WaitFor([&] { return !cluster.WorkerHolds("w1", "rdd_9_0"); }, 10s));
}

// A worker away while a whole RDD is removed: when it registers again, the master does not list
// its copies and has it remove them. The master's version history of retired versions is what
// remembers the removal (no separate per-worker list: every removed id is retired there).
TEST(BlockVersionsTest, RddRemovedWhileAWorkerWasAwayStaysRemoved) {
  LocalCluster cluster(/*heartbeat_timeout_seconds=*/1);
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkers(2));
  constexpr int kPartitions = 20;
  for (int p = 0; p < kPartitions; ++p) {
    const std::string block = "rdd_12_" + std::to_string(p);
    ASSERT_EQ(cluster.Bmctl({"put", block, "-", "--level", "DISK_ONLY_2"}, RandomBytes(4096, p))
                  .exit_code,
              0);
  }
  ASSERT_EQ(cluster.ListBlockCopies().size(), static_cast<size_t>(kPartitions));
  cluster.KillWorker("w1");
  ASSERT_TRUE(cluster.WaitForWorkers({"w2"}));
  CommandResult removed = cluster.Bmctl({"rm-rdd", "12"});
  ASSERT_EQ(removed.exit_code, 0) << removed.err;
  ASSERT_TRUE(cluster.ListBlockCopies().empty());

  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker({"w1", "64MiB", ""}));
  ASSERT_TRUE(cluster.WaitForWorkers({"w1", "w2"}));
  EXPECT_TRUE(cluster.ListBlockCopies().empty());
  json rdds = cluster.BmctlJson({"rdds"});
  EXPECT_TRUE(rdds.empty()) << rdds.dump();
  for (int p = 0; p < kPartitions; ++p) {
    const std::string block = "rdd_12_" + std::to_string(p);
    EXPECT_TRUE(WaitFor([&] { return !cluster.WorkerHolds("w1", block); }, 10s)) << block;
    EXPECT_NE(cluster.Bmctl({"get", block}).exit_code, 0) << block;
  }
  // The id is free again: a new put of it is accepted and listed.
  ASSERT_EQ(cluster.Bmctl({"put", "rdd_12_0", "-"}, RandomBytes(100, 99)).exit_code, 0);
  EXPECT_EQ(cluster.ListBlockCopies().size(), 1u);
}

// As above, with the master restarted (from its journal) while the worker was away: the
// journal remembers the versions the removal retired.
TEST(BlockVersionsTest, RddRemovedWhileAWorkerWasAwayStaysRemovedAcrossAMasterRestart) {
  LocalCluster cluster(/*heartbeat_timeout_seconds=*/1);
  cluster.SetMasterStateDir((cluster.dir().path() / "master-state").string());
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkers(2));
  for (int p = 0; p < 5; ++p) {
    ASSERT_EQ(cluster
                  .Bmctl({"put", "rdd_13_" + std::to_string(p), "-", "--level", "DISK_ONLY_2"},
                         RandomBytes(4096, p))
                  .exit_code,
              0);
  }
  cluster.KillWorker("w1");
  ASSERT_TRUE(cluster.WaitForWorkers({"w2"}));
  ASSERT_EQ(cluster.Bmctl({"rm-rdd", "13"}).exit_code, 0);
  cluster.KillMaster();
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker({"w1", "64MiB", ""}));
  ASSERT_TRUE(cluster.WaitForWorkers({"w1", "w2"}));
  EXPECT_TRUE(cluster.ListBlockCopies().empty());
  for (int p = 0; p < 5; ++p) {
    const std::string block = "rdd_13_" + std::to_string(p);
    EXPECT_TRUE(WaitFor([&] { return !cluster.WorkerHolds("w1", block); }, 10s)) << block;
  }
}

// 200 overwrite-then-get rounds: four writers at once, each overwriting its own block on a
// random worker with bmctl (a new process each time), then reading it back with bmctl and
// through a long-lived client that remembers locations.
TEST(BlockVersionsTest, RandomOverwritesFromSeveralProcessesNeverReadStaleBytes) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkers(3));
  constexpr int kWriters = 4;
  constexpr int kRounds = 50;
  std::atomic<int> stale{0};
  std::atomic<int> failed{0};
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      Client cached(ClientFor(cluster));
      std::mt19937 random(w);
      const std::string block = "rdd_11_" + std::to_string(w);
      for (int round = 0; round < kRounds; ++round) {
        const std::string data = "writer " + std::to_string(w) + " round " + std::to_string(round) +
                                 " " + RandomBytes(1000 + random() % 5000, w * 1000 + round);
        const std::string worker = "w" + std::to_string(1 + random() % 3);
        std::vector<std::string> put = {"put", block, "-"};
        if (random() % 4 != 0) put.insert(put.end(), {"--worker", worker});
        if (cluster.Bmctl(put, data).exit_code != 0) {
          ++failed;
          continue;
        }
        CommandResult got = cluster.Bmctl({"get", block});
        if (got.exit_code != 0) {
          ++failed;
        } else if (got.out != data) {
          ++stale;
        }
        Result<std::vector<std::byte>> read = cached.Get(*BlockId::Parse(block));
        if (!read.ok()) {
          ++failed;
        } else if (AsString(*read) != data) {
          ++stale;
        }
      }
    });
  }
  for (std::thread& t : writers) t.join();
  EXPECT_EQ(stale.load(), 0) << "reads returned a replaced version";
  EXPECT_EQ(failed.load(), 0);
  // One copy of each block in the end, nothing left behind on other workers.
  std::map<std::string, BlockCopies> listed = cluster.ListBlockCopies();
  for (int w = 0; w < kWriters; ++w) {
    const std::string block = "rdd_11_" + std::to_string(w);
    ASSERT_TRUE(listed.contains(block));
    EXPECT_EQ(listed[block].workers.size(), 1u) << block;
    int holders = 0;
    for (const std::string worker : {"w1", "w2", "w3"}) {
      holders += cluster.WorkerHolds(worker, block) ? 1 : 0;
    }
    EXPECT_EQ(holders, 1) << block << " is held by " << holders << " workers";
  }
}

TEST(BlockVersionsTest, RejoinedWorkerLeavesNoBlockAboveItsLevel) {
  LocalCluster cluster(/*heartbeat_timeout_seconds=*/1);
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkers(3));
  Client client(ClientFor(cluster));
  std::map<std::string, std::string> blocks;
  for (int i = 0; i < 12; ++i) {
    const BlockId id = BlockId::Rdd(12, i);
    std::string data = RandomBytes(20 * 1024, 100 + i);
    Result<PutResult> put = client.Put(id, AsBytes(data), StorageLevel::kMemoryAndDisk2);
    ASSERT_TRUE(put.ok()) << put.status().ToString();
    ASSERT_EQ(put->replicas.size(), 2u);
    blocks[id.ToString()] = std::move(data);
  }
  // w1 stops answering, is dropped, and its blocks are copied back to two copies elsewhere.
  cluster.SignalWorker("w1", SIGSTOP);
  ASSERT_TRUE(cluster.WaitForWorkers({"w2", "w3"}));
  auto all_at_level = [&](const std::set<std::string>& live) {
    std::map<std::string, BlockCopies> listed = cluster.ListBlockCopies();
    for (const auto& [id, data] : blocks) {
      auto it = listed.find(id);
      if (it == listed.end() || it->second.workers.size() != 2) return false;
      for (const std::string& worker : it->second.workers) {
        if (!live.contains(worker)) return false;
      }
    }
    return true;
  };
  ASSERT_TRUE(WaitFor([&] { return all_at_level({"w2", "w3"}); }, 30s));

  // w1 comes back with its old copies: the extra ones are removed, none stays above 2.
  cluster.SignalWorker("w1", SIGCONT);
  ASSERT_TRUE(cluster.WaitForWorkers({"w1", "w2", "w3"}));
  ASSERT_TRUE(WaitFor(
      [&] {
        if (!all_at_level({"w1", "w2", "w3"})) return false;
        // Every copy a worker holds is a listed one: none was left behind unlisted.
        std::map<std::string, BlockCopies> listed = cluster.ListBlockCopies();
        for (const auto& [id, data] : blocks) {
          int held = 0;
          for (const std::string worker : {"w1", "w2", "w3"}) {
            held += cluster.WorkerHolds(worker, id) ? 1 : 0;
          }
          if (held != 2) return false;
        }
        return true;
      },
      30s))
      << "blocks stayed above their level after the worker rejoined";
  for (const auto& [id, data] : blocks) {
    Result<std::vector<std::byte>> got = client.Get(*BlockId::Parse(id));
    ASSERT_TRUE(got.ok()) << id;
    EXPECT_TRUE(AsString(*got) == data) << id;
  }
}

}  // namespace
}  // namespace bm::testing
