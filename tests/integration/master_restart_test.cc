// A master killed with SIGKILL and restarted on the same endpoint, with its journal
// (--state-dir) and without: workers re-register, nothing a client was told is stored goes
// missing, and with the journal the master answers from it before the workers are back.

#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <vector>

#include "blockmgr/client.h"
#include "tests/support/files.h"
#include "tests/support/local_cluster.h"

namespace bm::testing {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;

// Every listed worker's state, by id, from `bmctl --json workers`.
std::map<std::string, std::string> WorkerStates(LocalCluster& cluster) {
  CommandResult r = cluster.Bmctl({"--json", "workers"});
  std::map<std::string, std::string> out;
  if (r.exit_code != 0) return out;
  json j = json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  if (!j.is_array()) return out;
  for (const json& worker : j) {
    out[worker.at("id").get<std::string>()] = worker.at("state").get<std::string>();
  }
  return out;
}

bool AllActive(LocalCluster& cluster, const std::vector<std::string>& ids) {
  std::map<std::string, std::string> expected;
  for (const std::string& id : ids) expected[id] = "active";
  return WorkerStates(cluster) == expected;
}

std::vector<std::string> Ids(const std::map<std::string, std::string>& blocks) {
  std::vector<std::string> ids;
  for (const auto& [id, bytes] : blocks) ids.push_back(id);
  return ids;
}

std::vector<std::string> Concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

ClientOptions ClientFor(const LocalCluster& cluster) {
  ClientOptions options = cluster.ClientOptionsFor();
  options.request_timeout = 2000ms;
  return options;
}

const std::vector<std::string> kWorkers = {"w1", "w2", "w3"};

TEST(MasterRestartTest, JournaledMasterAnswersFromItsJournalThenExactlyAsBefore) {
  LocalCluster cluster(/*heartbeat_timeout_seconds=*/5);
  cluster.SetMasterStateDir(cluster.dir().Sub("master-state"));
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker({"w1", "64MiB", ""}));
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker({"w2", "64MiB", ""}));
  // Small memory: later memory-and-disk puts spill earlier ones to disk.
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker({"w3", "3MiB", ""}));

  // In this order, so that on w3 the memory-only blocks spill the memory-and-disk ones.
  const std::vector<StorageLevel> levels = {StorageLevel::kMemoryAndDisk, StorageLevel::kMemoryOnly,
                                            StorageLevel::kDiskOnly};
  std::map<std::string, std::string> blocks;  // id -> bytes
  {
    Client client(ClientFor(cluster));
    int n = 0;
    for (const std::string& worker : kWorkers) {
      for (size_t l = 0; l < levels.size(); ++l) {
        for (int p = 0; p < 4; ++p, ++n) {
          const BlockId id = BlockId::Rdd(10 + l, n);
          const std::string bytes = RandomBytes(1000 + n * 20 * 1024, n);
          Result<PutResult> put =
              client.Put(id, AsBytes(bytes), levels[l], PutOptions{.worker_id = worker});
          ASSERT_TRUE(put.ok()) << id.ToString() << ": " << put.status().ToString();
          blocks[id.ToString()] = bytes;
        }
      }
    }
    // Placed by the client, and a broadcast and a shuffle block (other index maps).
    for (const BlockId& id : {BlockId::Broadcast(5), BlockId::Shuffle(1, 2, 3)}) {
      const std::string bytes = RandomBytes(5000, id.Hash());
      Result<PutResult> put = client.Put(id, AsBytes(bytes), StorageLevel::kMemoryAndDisk);
      ASSERT_TRUE(put.ok()) << id.ToString() << ": " << put.status().ToString();
      blocks[id.ToString()] = bytes;
    }
    ASSERT_TRUE(client.RegisterRdd(10, "tens", StorageLevel::kMemoryOnly, 40).ok());
  }
  const std::vector<std::string> ids = Ids(blocks);
  const json locations_before = cluster.BmctlJson(Concat({"locations"}, ids));
  const json blocks_before = cluster.BmctlJson({"blocks"});
  const json rdds_before = cluster.BmctlJson({"rdds"});
  ASSERT_TRUE(locations_before.is_array());
  ASSERT_EQ(locations_before.size(), blocks.size());
  for (const json& block : locations_before) {
    ASSERT_FALSE(block.at("locations").empty()) << block.dump();
  }
  ASSERT_NE(locations_before.dump().find("\"disk\""), std::string::npos);
  ASSERT_NE(locations_before.dump().find("\"memory\""), std::string::npos);

  // Stop the workers so that none registers again before the journal's answers are checked.
  cluster.KillMaster();
  for (const std::string& w : kWorkers) cluster.SignalWorker(w, SIGSTOP);
  const auto restart = std::chrono::steady_clock::now();
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  const auto answering = std::chrono::steady_clock::now();
  EXPECT_EQ(WorkerStates(cluster),
            (std::map<std::string, std::string>{
                {"w1", "unconfirmed"}, {"w2", "unconfirmed"}, {"w3", "unconfirmed"}}));
  EXPECT_EQ(cluster.BmctlJson(Concat({"locations"}, ids)), locations_before);
  EXPECT_EQ(cluster.BmctlJson({"rdds"}), rdds_before);

  for (const std::string& w : kWorkers) cluster.SignalWorker(w, SIGCONT);
  const auto resumed = std::chrono::steady_clock::now();
  ASSERT_TRUE(WaitFor([&] { return AllActive(cluster, kWorkers); }, 30s))
      << cluster.LogTail("master");
  const auto confirmed = std::chrono::steady_clock::now();
  EXPECT_EQ(cluster.BmctlJson(Concat({"locations"}, ids)), locations_before);
  EXPECT_EQ(cluster.BmctlJson({"blocks"}), blocks_before);
  EXPECT_EQ(cluster.BmctlJson({"rdds"}), rdds_before);
  const auto ms = [](auto d) {
    return static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
  };
  std::printf(
      "[ timing ] %zu blocks: master start to answering from the journal %lld ms; workers "
      "resumed to all %zu re-registered %lld ms\n",
      blocks.size(), ms(answering - restart), kWorkers.size(), ms(confirmed - resumed));

  Client client(ClientFor(cluster));
  for (const auto& [id, bytes] : blocks) {
    Result<std::vector<std::byte>> got = client.Get(*BlockId::Parse(id));
    ASSERT_TRUE(got.ok()) << id << ": " << got.status().ToString();
    EXPECT_TRUE(AsString(*got) == bytes) << id << " differs";
  }
}

// Two clients put and get continuously; the master is SIGKILLed in the middle and restarted.
// Every put that was acknowledged must be located and read back byte-exact afterwards.
class MasterKilledMidLoadTest : public ::testing::TestWithParam<bool> {};

TEST_P(MasterKilledMidLoadTest, NoAcknowledgedBlockIsLost) {
  const bool journaled = GetParam();
  LocalCluster cluster(/*heartbeat_timeout_seconds=*/4);
  if (journaled) cluster.SetMasterStateDir(cluster.dir().Sub("master-state"));
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkers(3));

  std::mutex mutex;
  std::map<std::string, std::string> acked;  // guarded by mutex
  std::atomic<int> acked_count{0};
  std::atomic<int> failed_calls{0};
  std::atomic<int> bad_reads{0};
  std::atomic<bool> stop{false};
  auto load = [&](int thread) {
    Client client(ClientFor(cluster));
    std::mt19937_64 random(thread);
    std::vector<std::string> mine;
    for (int i = 0; !stop.load(); ++i) {
      const BlockId id = BlockId::Rdd(100 + thread, i);
      const std::string bytes = RandomBytes(4096 + random() % (60 * 1024), random());
      const StorageLevel level =
          i % 3 == 0 ? StorageLevel::kDiskOnly : StorageLevel::kMemoryAndDisk;
      Result<PutResult> put = client.Put(id, AsBytes(bytes), level);
      if (put.ok()) {
        std::lock_guard<std::mutex> lock(mutex);
        acked[id.ToString()] = bytes;
        mine.push_back(id.ToString());
        ++acked_count;
      } else {
        ++failed_calls;
      }
      if (!mine.empty()) {
        const std::string& pick = mine[random() % mine.size()];
        Result<std::vector<std::byte>> got = client.Get(*BlockId::Parse(pick));
        if (!got.ok()) {
          ++failed_calls;
        } else {
          std::lock_guard<std::mutex> lock(mutex);
          if (AsString(*got) != acked[pick]) ++bad_reads;
        }
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) threads.emplace_back(load, t);

  ASSERT_TRUE(WaitFor([&] { return acked_count.load() >= 40; }, 60s));
  cluster.KillMaster();
  const int acked_at_kill = acked_count.load();
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  const bool more = WaitFor([&] { return acked_count.load() >= acked_at_kill + 40; }, 60s);
  stop = true;
  for (std::thread& t : threads) t.join();
  ASSERT_TRUE(more) << "clients made no progress after the restart\n" << cluster.LogTail("master");

  ASSERT_TRUE(WaitFor([&] { return AllActive(cluster, kWorkers); }, 30s))
      << cluster.LogTail("master");
  EXPECT_EQ(bad_reads.load(), 0);
  std::printf("[ info   ] %zu puts acknowledged, %d calls failed meanwhile (journal: %s)\n",
              acked.size(), failed_calls.load(), journaled ? "yes" : "no");

  const std::vector<std::string> ids = Ids(acked);
  auto located = cluster.Locations(ids);
  for (const std::string& id : ids) {
    EXPECT_FALSE(located[id].empty()) << id << " was acknowledged but is not located";
  }
  Client client(ClientFor(cluster));
  for (const auto& [id, bytes] : acked) {
    Result<std::vector<std::byte>> got = client.Get(*BlockId::Parse(id));
    ASSERT_TRUE(got.ok()) << id << ": " << got.status().ToString();
    EXPECT_TRUE(AsString(*got) == bytes) << id << " differs";
  }
}

INSTANTIATE_TEST_SUITE_P(WithAndWithoutJournal, MasterKilledMidLoadTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Journaled" : "ReRegistrationOnly";
                         });

TEST(MasterRestartTest, AnUnconfirmedWorkerThatNeverComesBackIsDroppedWithItsLocations) {
  LocalCluster cluster(/*heartbeat_timeout_seconds=*/2);
  cluster.SetMasterStateDir(cluster.dir().Sub("master-state"));
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkers(2));
  {
    Client client(ClientFor(cluster));
    const std::string bytes = RandomBytes(10000, 1);
    ASSERT_TRUE(client
                    .Put(BlockId::Rdd(1, 0), AsBytes(bytes), StorageLevel::kMemoryOnly,
                         PutOptions{.worker_id = "w1"})
                    .ok());
    ASSERT_TRUE(client
                    .Put(BlockId::Rdd(1, 1), AsBytes(bytes), StorageLevel::kDiskOnly,
                         PutOptions{.worker_id = "w2"})
                    .ok());
  }
  cluster.KillWorker("w2");
  cluster.KillMaster();
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  const auto restarted = std::chrono::steady_clock::now();
  // w2 is known from the journal only, with its block, until the heartbeat timeout.
  EXPECT_EQ(WorkerStates(cluster)["w2"], "unconfirmed");
  EXPECT_EQ(cluster.Locations({"rdd_1_1"})["rdd_1_1"].size(), 1u);

  ASSERT_TRUE(WaitFor(
      [&] {
        return WorkerStates(cluster) == std::map<std::string, std::string>{{"w1", "active"}};
      },
      20s))
      << cluster.LogTail("master");
  EXPECT_GE(std::chrono::steady_clock::now() - restarted, 1000ms)
      << "dropped before the heartbeat timeout";
  EXPECT_TRUE(cluster.Locations({"rdd_1_1"})["rdd_1_1"].empty());
  EXPECT_EQ(cluster.Locations({"rdd_1_0"})["rdd_1_0"].size(), 1u);
}

}  // namespace
}  // namespace bm::testing
