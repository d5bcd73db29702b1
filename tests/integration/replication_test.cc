// Replication and faults with real processes: _2 levels keep two copies on distinct workers
// (and racks), a killed worker's blocks stay readable and get their copies back, a stopped
// worker comes back without stale locations, a decommissioned worker drains under load without
// losing anything, and a full disk refuses puts without harming what is stored.

#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
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
constexpr uint64_t kKiB = 1 << 10;
constexpr uint64_t kMiB = 1 << 20;

ClientOptions ClientFor(const LocalCluster& cluster, std::chrono::milliseconds timeout = 2000ms) {
  ClientOptions options = cluster.ClientOptionsFor();
  options.request_timeout = timeout;
  return options;
}

std::vector<std::string> Concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Puts `count` blocks rdd_<rdd>_<i> of `size` bytes at `level` through one client; returns
// their bytes by id.
std::map<std::string, std::string> PutBlocks(LocalCluster& cluster, uint64_t rdd, int count,
                                             size_t size, StorageLevel level) {
  Client client(ClientFor(cluster));
  std::map<std::string, std::string> blocks;
  for (int i = 0; i < count; ++i) {
    const BlockId id = BlockId::Rdd(rdd, i);
    std::string data = RandomBytes(size, rdd * 1000 + i);
    Result<PutResult> put = client.Put(id, AsBytes(data), level);
    EXPECT_TRUE(put.ok()) << id.ToString() << ": " << put.status().ToString();
    if (put.ok()) {
      EXPECT_EQ(put->replicas.size(), put->copies_wanted) << id.ToString();
      blocks[id.ToString()] = std::move(data);
    }
  }
  return blocks;
}

// Reads every block through `client` and checks its bytes.
void ExpectAllReadBack(Client& client, const std::map<std::string, std::string>& blocks) {
  for (const auto& [id, data] : blocks) {
    Result<std::vector<std::byte>> got = client.Get(*BlockId::Parse(id));
    ASSERT_TRUE(got.ok()) << id << ": " << got.status().ToString();
    EXPECT_TRUE(AsString(*got) == data) << id << " read back different bytes";
  }
}

// Every one of `ids` is listed with exactly its wanted copies, all on `live` workers.
bool FullyReplicatedOn(const std::map<std::string, BlockCopies>& listed,
                       const std::map<std::string, std::string>& ids,
                       const std::set<std::string>& live) {
  for (const auto& [id, data] : ids) {
    auto it = listed.find(id);
    if (it == listed.end()) return false;
    const BlockCopies& copies = it->second;
    if (static_cast<int>(copies.workers.size()) != copies.wanted) return false;
    for (const std::string& worker : copies.workers) {
      if (!live.contains(worker)) return false;
    }
  }
  return true;
}

TEST(ReplicationTest, TwoCopyLevelsAndReplicationOptionStoreCopiesOnDistinctWorkers) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkers(3));

  const std::string two = RandomBytes(300 * kKiB, 1);
  json put = cluster.BmctlJson({"put", "rdd_1_0", "-", "--level", "MEMORY_AND_DISK_2"}, two);
  ASSERT_TRUE(put.is_object()) << put;
  EXPECT_EQ(put["copies_wanted"], 2);
  ASSERT_EQ(put["replicas"].size(), 2u) << put;
  EXPECT_NE(put["replicas"][0], put["replicas"][1]);
  EXPECT_EQ(put["replicas"][0], put["worker"]);

  const std::string three = RandomBytes(200 * kKiB, 2);
  json put3 = cluster.BmctlJson(
      {"put", "rdd_1_1", "-", "--level", "DISK_ONLY", "--replication", "3"}, three);
  ASSERT_TRUE(put3.is_object()) << put3;
  EXPECT_EQ(put3["copies_wanted"], 3);
  EXPECT_EQ(put3["replicas"].get<std::set<std::string>>(),
            (std::set<std::string>{"w1", "w2", "w3"}));

  auto locations = cluster.Locations({"rdd_1_0", "rdd_1_1"});
  std::set<std::string> holders_two, holders_three;
  for (const auto& [worker, tier, size] : locations["rdd_1_0"]) {
    holders_two.insert(worker);
    EXPECT_EQ(size, two.size());
  }
  for (const auto& [worker, tier, size] : locations["rdd_1_1"]) {
    holders_three.insert(worker);
    EXPECT_EQ(tier, "disk");
  }
  EXPECT_EQ(holders_two, put["replicas"].get<std::set<std::string>>());
  EXPECT_EQ(holders_three.size(), 3u);
  // Each worker itself holds its copy.
  for (const std::string& worker : holders_two) EXPECT_TRUE(cluster.WorkerHolds(worker, "rdd_1_0"));
  for (const std::string& worker : holders_three) {
    EXPECT_TRUE(cluster.WorkerHolds(worker, "rdd_1_1"));
  }
  CommandResult get = cluster.Bmctl({"get", "rdd_1_1"});
  ASSERT_EQ(get.exit_code, 0) << get.err;
  EXPECT_TRUE(get.out == three);
}

TEST(ReplicationTest, TwoCopyPutWithOneWorkerStoresOneAndWarns) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkers(1));
  const std::string data = RandomBytes(100 * kKiB, 3);
  CommandResult r =
      cluster.Bmctl({"--json", "put", "broadcast_4", "-", "--level", "MEMORY_AND_DISK_2"}, data);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("only 1 of 2 copies"), std::string::npos) << r.err;
  json put = json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  EXPECT_EQ(put["replicas"], json({"w1"})) << r.out;
  EXPECT_EQ(put["copies_wanted"], 2);
  EXPECT_EQ(cluster.Locations({"broadcast_4"})["broadcast_4"].size(), 1u);
}

TEST(ReplicationTest, TwoCopiesOfEachBlockAreOnDifferentRacks) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  const std::map<std::string, std::string> rack_of = {
      {"w1", "r1"}, {"w2", "r1"}, {"w3", "r2"}, {"w4", "r2"}};
  for (const auto& [id, rack] : rack_of) {
    ASSERT_NO_FATAL_FAILURE(cluster.StartWorker({id, "64MiB", "", {"--rack", rack}}));
  }
  json workers = cluster.BmctlJson({"workers"});
  for (const json& worker : workers) {
    EXPECT_EQ(worker["rack"], rack_of.at(worker["id"].get<std::string>())) << worker;
  }
  std::map<std::string, std::string> blocks =
      PutBlocks(cluster, 2, 12, 64 * kKiB, StorageLevel::kMemoryAndDisk2);
  std::map<std::string, BlockCopies> listed = cluster.ListBlockCopies();
  ASSERT_EQ(listed.size(), blocks.size());
  std::set<std::string> used;
  for (const auto& [id, copies] : listed) {
    ASSERT_EQ(copies.workers.size(), 2u) << id;
    EXPECT_NE(rack_of.at(copies.workers[0]), rack_of.at(copies.workers[1]))
        << id << " has both copies on rack " << rack_of.at(copies.workers[0]) << " ("
        << copies.workers[0] << ", " << copies.workers[1] << ")";
    used.insert(copies.workers.begin(), copies.workers.end());
  }
  EXPECT_EQ(used.size(), 4u) << "copies should spread over every worker";
}

TEST(ReplicationTest, KilledWorkersBlocksStayReadableAndGetTheirSecondCopyBack) {
  LocalCluster cluster(/*heartbeat_timeout_seconds=*/1);
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkers(3));
  std::map<std::string, std::string> blocks =
      PutBlocks(cluster, 3, 24, 256 * kKiB, StorageLevel::kMemoryAndDisk2);
  ASSERT_EQ(blocks.size(), 24u);
  std::map<std::string, BlockCopies> before = cluster.ListBlockCopies();
  int on_w2 = 0;
  for (const auto& [id, copies] : before) {
    on_w2 += std::count(copies.workers.begin(), copies.workers.end(), "w2");
  }
  ASSERT_GT(on_w2, 0) << "w2 should hold copies";

  cluster.KillWorker("w2");
  const auto killed = std::chrono::steady_clock::now();
  {
    // Right after the kill, while the master still lists w2: reads fall over to the other copy.
    Client reader(ClientFor(cluster, /*timeout=*/300ms));
    ASSERT_NO_FATAL_FAILURE(ExpectAllReadBack(reader, blocks));
  }
  const double readable_after = SecondsSince(killed);

  std::map<std::string, BlockCopies> listed;
  const bool replicated = WaitFor(
      [&] {
        listed = cluster.ListBlockCopies();
        return FullyReplicatedOn(listed, blocks, {"w1", "w3"});
      },
      30s);
  const double recovery = SecondsSince(killed);
  ASSERT_TRUE(replicated) << cluster.LogTail("master");
  for (const auto& [id, copies] : listed) {
    for (const std::string& worker : copies.workers) {
      EXPECT_TRUE(cluster.WorkerHolds(worker, id)) << id << " listed on " << worker;
    }
  }
  std::cout << "[ recovery ] " << on_w2 << " copies lost with w2; all " << blocks.size()
            << " blocks read back " << readable_after << " s after the kill; back at two copies "
            << recovery << " s after the kill (heartbeat timeout 1 s)\n";
  ::testing::Test::RecordProperty("kill_to_full_replication_ms", static_cast<int>(recovery * 1000));
  Client client(ClientFor(cluster));
  ExpectAllReadBack(client, blocks);
}

TEST(ReplicationTest, StoppedWorkerReRegistersAndIsNeverListedWithBlocksItLacks) {
  LocalCluster cluster(/*heartbeat_timeout_seconds=*/1);
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkers(3));
  std::map<std::string, std::string> blocks =
      PutBlocks(cluster, 4, 16, 64 * kKiB, StorageLevel::kMemoryAndDisk2);

  // Every location the master lists is held by that worker (asked directly).
  auto expect_listed_locations_held = [&](const std::string& when) {
    std::map<std::string, BlockCopies> listed = cluster.ListBlockCopies();
    EXPECT_FALSE(listed.empty()) << when;
    for (const auto& [id, copies] : listed) {
      for (const std::string& worker : copies.workers) {
        EXPECT_TRUE(cluster.WorkerHolds(worker, id))
            << when << ": master lists " << id << " on " << worker << ", which lacks it";
      }
    }
  };

  cluster.SignalWorker("w1", SIGSTOP);
  ASSERT_TRUE(cluster.WaitForWorkers({"w2", "w3"})) << cluster.LogTail("master");
  // While w1 is away: its blocks get copies elsewhere, one is removed, one more is put.
  ASSERT_TRUE(WaitFor(
      [&] {
        return FullyReplicatedOn(cluster.ListBlockCopies(), blocks, {"w2", "w3"});
      },
      20s))
      << cluster.LogTail("master");
  ASSERT_NO_FATAL_FAILURE(expect_listed_locations_held("w1 stopped"));

  cluster.SignalWorker("w1", SIGCONT);
  const auto resumed = std::chrono::steady_clock::now();
  ASSERT_TRUE(cluster.WaitForWorkers({"w1", "w2", "w3"})) << cluster.LogTail("w1");
  std::cout << "[ recovery ] stopped worker listed again " << SecondsSince(resumed)
            << " s after SIGCONT\n";
  EXPECT_TRUE(cluster.worker_process("w1").Running());
  // Check a few times: right after it re-registered, and once its report and heartbeats went on.
  for (int round = 0; round < 3; ++round) {
    expect_listed_locations_held("after SIGCONT, round " + std::to_string(round));
  }
  // The re-registered worker's copies are listed again (it reported them in full).
  std::map<std::string, BlockCopies> listed = cluster.ListBlockCopies();
  int on_w1 = 0;
  for (const auto& [id, copies] : listed) {
    on_w1 += std::count(copies.workers.begin(), copies.workers.end(), "w1");
  }
  EXPECT_GT(on_w1, 0) << "w1 re-registered without its blocks";
  Client client(ClientFor(cluster));
  ExpectAllReadBack(client, blocks);
}

TEST(ReplicationTest, DecommissionUnderLoadLosesNothing) {
  LocalCluster cluster(/*heartbeat_timeout_seconds=*/2);
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkers(3));
  // Single-copy blocks spread over all three workers: w1's have no other copy until drained.
  std::map<std::string, std::string> acked;
  for (const char* worker : {"w1", "w2", "w3"}) {
    Client client(ClientFor(cluster));
    PutOptions options;
    options.worker_id = worker;
    for (int i = 0; i < 10; ++i) {
      const BlockId id = BlockId::Rdd(5, acked.size());
      std::string data = RandomBytes(128 * kKiB, 500 + acked.size());
      StorageLevel level = i % 3 == 0   ? StorageLevel::kMemoryOnly
                           : i % 3 == 1 ? StorageLevel::kDiskOnly
                                        : StorageLevel::kMemoryAndDisk2;
      ASSERT_TRUE(client.Put(id, AsBytes(data), level, options).ok()) << id.ToString();
      acked[id.ToString()] = std::move(data);
    }
  }
  ASSERT_GT(cluster.BmctlJson({"workers"})[0]["blocks"].get<int>(), 0);

  std::mutex mutex;  // guards acked while the threads run
  std::atomic<bool> stop = false;
  std::atomic<int> puts = 0, put_failures = 0, gets = 0, get_failures = 0, mismatches = 0;
  std::thread load([&] {
    Client client(ClientFor(cluster));
    uint64_t next = 0;
    while (!stop) {
      const BlockId id = BlockId::Rdd(6, next);
      std::string data = RandomBytes(64 * kKiB, 600 + next);
      ++next;
      Result<PutResult> put = client.Put(id, AsBytes(data), StorageLevel::kMemoryAndDisk);
      if (put.ok()) {
        ++puts;
        std::lock_guard lock(mutex);
        acked[id.ToString()] = std::move(data);
      } else {
        ++put_failures;
        std::cerr << "put " << id.ToString() << " failed: " << put.status().ToString() << "\n";
      }
      std::string read_id, expected;
      {
        std::lock_guard lock(mutex);
        auto it = acked.begin();
        std::advance(it, next * 7919 % acked.size());
        read_id = it->first;
        expected = it->second;
      }
      Result<std::vector<std::byte>> got = client.Get(*BlockId::Parse(read_id));
      ++gets;
      if (!got.ok()) {
        ++get_failures;
        std::cerr << "get " << read_id << " failed: " << got.status().ToString() << "\n";
      } else if (AsString(*got) != expected) {
        ++mismatches;
      }
    }
  });
  // Polls where every acknowledged block is; none may be without a copy.
  std::atomic<int> polls = 0;
  std::vector<std::string> lost;
  std::thread poller([&] {
    while (!stop) {
      std::vector<std::string> ids = {"locations"};
      {
        std::lock_guard lock(mutex);
        for (const auto& [id, data] : acked) ids.push_back(id);
      }
      CommandResult r = cluster.Bmctl(Concat({"--json"}, ids));
      json j = json::parse(r.out, nullptr, /*allow_exceptions=*/false);
      if (r.exit_code != 0 || !j.is_array()) continue;
      ++polls;
      for (const json& entry : j) {
        if (entry["locations"].empty()) lost.push_back(entry["block"].get<std::string>());
      }
    }
  });

  const auto started = std::chrono::steady_clock::now();
  CommandResult drain = cluster.Bmctl({"decommission", "w1"});
  const double drain_seconds = SecondsSince(started);
  std::optional<int> exit_code = cluster.worker_process("w1").Wait(10s);
  // Keep the load on a little past the drain, then stop.
  const int polls_at_drain = polls;
  WaitFor([&] { return polls >= polls_at_drain + 2; }, 10s);
  stop = true;
  load.join();
  poller.join();

  ASSERT_EQ(drain.exit_code, 0) << drain.err << cluster.LogTail("master");
  EXPECT_NE(drain.out.find("decommissioned w1"), std::string::npos) << drain.out;
  EXPECT_EQ(exit_code, std::optional<int>(0)) << cluster.LogTail("w1");
  EXPECT_EQ(cluster.ListedWorkers(), (std::vector<std::string>{"w2", "w3"}));
  EXPECT_GT(polls, 0);
  EXPECT_TRUE(lost.empty()) << lost.size() << " polls showed an acknowledged block with no copy, "
                            << "first " << lost.front();
  EXPECT_EQ(mismatches, 0);
  EXPECT_GT(puts, 0);
  std::cout << "[ recovery ] decommission of w1 took " << drain_seconds << " s under load (" << puts
            << " puts, " << put_failures << " failed; " << gets << " gets, " << get_failures
            << " failed; " << polls << " location polls)\n";
  ::testing::Test::RecordProperty("decommission_ms", static_cast<int>(drain_seconds * 1000));

  Client client(ClientFor(cluster));
  ExpectAllReadBack(client, acked);
  for (const auto& [id, copies] : cluster.ListBlockCopies()) {
    EXPECT_EQ(std::count(copies.workers.begin(), copies.workers.end(), "w1"), 0) << id;
  }
}

TEST(ReplicationTest, FullDiskRefusesPutsWithOutOfSpaceAndKeepsStoredBlocks) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker({"w1", "64MiB", "2MiB"}));
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker({"w2", "64MiB", ""}));
  std::map<std::string, std::string> stored;
  auto put = [&](const std::string& block, size_t size, const std::string& level,
                 const std::string& worker) {
    std::string data = RandomBytes(size, std::hash<std::string>()(block));
    CommandResult r =
        cluster.Bmctl({"put", block, "-", "--level", level, "--worker", worker}, data);
    if (r.exit_code == 0) stored[block] = data;
    return r;
  };
  ASSERT_EQ(put("rdd_7_0", 1536 * kKiB, "DISK_ONLY", "w1").exit_code, 0);
  ASSERT_EQ(put("rdd_7_1", 256 * kKiB, "MEMORY_ONLY", "w1").exit_code, 0);
  ASSERT_EQ(put("rdd_7_2", 3 * kMiB, "DISK_ONLY", "w2").exit_code, 0);

  for (size_t size : {1 * kMiB, 2 * kMiB + 1}) {
    CommandResult full = put("rdd_8_0", size, "DISK_ONLY", "w1");
    EXPECT_EQ(full.exit_code, 1) << size;
    EXPECT_NE(full.err.find("out of space"), std::string::npos) << full.err;
    EXPECT_TRUE(full.out.empty()) << full.out;
  }
  EXPECT_TRUE(cluster.Locations({"rdd_8_0"})["rdd_8_0"].empty());
  EXPECT_FALSE(cluster.WorkerHolds("w1", "rdd_8_0"));

  // A two-copy disk put without --worker goes where there is room: one copy, with a warning.
  std::string two = RandomBytes(1 * kMiB, 9);
  CommandResult r = cluster.Bmctl({"--json", "put", "rdd_8_1", "-", "--level", "DISK_ONLY_2"}, two);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("only 1 of 2 copies"), std::string::npos) << r.err;
  EXPECT_EQ(json::parse(r.out)["replicas"], json({"w2"})) << r.out;
  stored["rdd_8_1"] = two;

  for (const auto& [block, data] : stored) {
    CommandResult get = cluster.Bmctl({"get", block});
    ASSERT_EQ(get.exit_code, 0) << block << ": " << get.err;
    EXPECT_TRUE(get.out == data) << block;
  }
  EXPECT_TRUE(cluster.WorkerHolds("w1", "rdd_7_0"));
}

}  // namespace
}  // namespace bm::testing
