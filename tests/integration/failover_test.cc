// Standby masters with a real ZooKeeper (docs/standby-masters.md "Standby masters"): two bm-master
// processes elected through ZooKeeper, three workers and clients given both masters' addresses. The
// leader is killed (-9) or paused past its session; the standby takes over with the leader's
// metadata, and clients and workers follow it.

#include <gtest/gtest.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "blockmgr/client.h"
#include "tests/support/files.h"
#include "tests/support/process.h"
#include "tests/support/standby_cluster.h"
#include "tests/support/temp_dir.h"
#include "tests/support/zookeeper_server.h"

namespace bm::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::vector<std::byte> Bytes(const std::string& text) {
  std::vector<std::byte> out(text.size());
  std::memcpy(out.data(), text.data(), text.size());
  return out;
}

std::string Text(const std::vector<std::byte>& bytes) {
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

double Millis(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

class FailoverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ZooKeeperServer::Available()) GTEST_SKIP() << ZooKeeperServer::kNotInstalled;
    spdlog::set_level(spdlog::level::err);
    Status zookeeper = cluster_.StartZooKeeper();
    ASSERT_TRUE(zookeeper.ok()) << zookeeper.ToString();
    cluster_.StartMaster("a");
    client_ = std::make_unique<Client>(cluster_.ClientOptionsFor());
    ASSERT_TRUE(cluster_.WaitForLeader(*client_, "a", 20s)) << cluster_.LogOf("master-a");
    cluster_.StartMaster("b");
    for (const char* id : {"w1", "w2", "w3"}) cluster_.StartWorker(id);
    ASSERT_TRUE(cluster_.WaitForWorkers(*client_, 3, 20s))
        << cluster_.LogOf("w1") << cluster_.LogOf("w2") << cluster_.LogOf("w3")
        << cluster_.LogOf("master-a");
    // From here on, b holds whatever a acknowledges.
    ASSERT_TRUE(StandbyInSync()) << cluster_.LogOf("master-b");
  }

  // Waits until b is a standby holding every record a acknowledged.
  bool StandbyInSync() { return cluster_.WaitForStandbyInSync(*client_, 10s); }

  TempDir dir_;
  StandbyCluster cluster_{StandbyClusterOptions{.dir = dir_.path().string()}};
  std::unique_ptr<Client> client_;
};

TEST_F(FailoverTest, KilledLeaderIsReplacedWithinThreeSecondsAndNothingAcknowledgedIsLost) {
  // A writer puts _2 blocks and reads an earlier one back, in a loop, through the masters'
  // list.
  std::atomic<bool> stop{false};
  std::mutex mutex;
  std::map<std::string, std::string> acknowledged;  // block id -> content
  std::vector<std::string> failures;
  std::thread writer([&] {
    Client client(cluster_.ClientOptionsFor());
    for (int i = 0; !stop.load(); ++i) {
      const BlockId id = BlockId::Rdd(7, static_cast<uint32_t>(i));
      const std::string content = "partition " + std::to_string(i) + std::string(1000, 'x');
      Result<PutResult> put = client.Put(id, Bytes(content), StorageLevel::kMemoryAndDisk2);
      // Read back one put a while ago: across the failover too, reads find their copies.
      const BlockId earlier = BlockId::Rdd(7, static_cast<uint32_t>(i / 2));
      std::optional<std::string> expected;
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (!put.ok()) {
          failures.push_back("put " + id.ToString() + ": " + put.status().ToString());
        } else {
          acknowledged[id.ToString()] = content;
        }
        if (auto it = acknowledged.find(earlier.ToString()); it != acknowledged.end()) {
          expected = it->second;
        }
      }
      if (!expected) continue;
      Result<std::vector<std::byte>> got = client.Get(earlier);
      std::lock_guard<std::mutex> lock(mutex);
      if (!got.ok()) {
        failures.push_back("get " + earlier.ToString() + ": " + got.status().ToString());
      } else if (Text(*got) != *expected) {
        failures.push_back("get " + earlier.ToString() + " read other bytes");
      }
    }
  });
  struct JoinAtExit {
    std::atomic<bool>& stop;
    std::thread& thread;
    ~JoinAtExit() {
      stop = true;
      if (thread.joinable()) thread.join();
    }
  } join_at_exit{stop, writer};
  ASSERT_TRUE(WaitFor(
      [&] {
        std::lock_guard<std::mutex> lock(mutex);
        return acknowledged.size() >= 50;
      },
      20s));
  ASSERT_TRUE(StandbyInSync()) << cluster_.LogOf("master-b");

  const Clock::time_point killed = Clock::now();
  cluster_.master("a").Signal(SIGKILL);
  // The first lookup that succeeds through the new leader.
  Client prober(cluster_.ClientOptionsFor());
  std::string probe_block;
  {
    std::lock_guard<std::mutex> lock(mutex);
    probe_block = acknowledged.begin()->first;
  }
  Result<std::vector<BlockLocations>> located = prober.Locations({*BlockId::Parse(probe_block)});
  const double failover_ms = Millis(Clock::now() - killed);
  ASSERT_TRUE(located.ok()) << located.status().ToString() << cluster_.LogOf("master-b");
  std::printf("failover: kill -9 of the leader to the first lookup through the new one: %.0f ms\n",
              failover_ms);
  EXPECT_LT(failover_ms, 3000);
  // Exact at once: the new leader lists the copies from the journal it followed, before the
  // workers register with it again.
  ASSERT_EQ(located->size(), 1u);
  EXPECT_EQ((*located)[0].locations.size(), 2u);

  // The writer goes on through the new leader.
  size_t at_failover = 0;
  {
    std::lock_guard<std::mutex> lock(mutex);
    at_failover = acknowledged.size();
  }
  ASSERT_TRUE(WaitFor(
      [&] {
        std::lock_guard<std::mutex> lock(mutex);
        return acknowledged.size() >= at_failover + 50;
      },
      20s));
  stop = true;
  writer.join();
  EXPECT_TRUE(failures.empty()) << failures.size()
                                << " calls failed, the first: " << failures.front();
  EXPECT_EQ(cluster_.Leader(*client_), "b");
  // Every acknowledged block reads back byte-exact, and is listed with both its copies.
  for (const auto& [block, content] : acknowledged) {
    Result<std::vector<std::byte>> got = client_->Get(*BlockId::Parse(block));
    ASSERT_TRUE(got.ok()) << block << ": " << got.status().ToString();
    EXPECT_EQ(Text(*got), content) << block;
  }
}

// The new leader lists the workers from its journal, unconfirmed and with no stats, until they
// register with it: a memory-only put started then waits for them instead of taking their
// unknown room for none ("out of space").
TEST_F(FailoverTest, SmallReplicatedPutsStartedRightAfterTheLeaderIsKilledAllSucceed) {
  constexpr int kPuts = 6;
  const auto content = [](int i) { return std::to_string(i) + std::string(1000, 'm'); };
  cluster_.master("a").Signal(SIGKILL);
  std::vector<Result<PutResult>> puts(kPuts, UnavailableError("not run"));
  std::vector<std::thread> putters;
  for (int i = 0; i < kPuts; ++i) {
    putters.emplace_back([&, i] {
      Client client(cluster_.ClientOptionsFor());
      puts[i] = client.Put(BlockId::Rdd(101, static_cast<uint32_t>(i)), Bytes(content(i)),
                           StorageLevel::kMemoryOnly2);
    });
  }
  for (std::thread& putter : putters) putter.join();
  for (int i = 0; i < kPuts; ++i) {
    ASSERT_TRUE(puts[i].ok()) << "put " << i << ": " << puts[i].status().ToString()
                              << cluster_.LogOf("master-b");
    EXPECT_EQ(puts[i]->replicas.size(), 2u) << "put " << i;
    EXPECT_EQ(puts[i]->tier, Tier::kMemory) << "put " << i;
  }
  EXPECT_EQ(cluster_.Leader(*client_), "b");
  for (int i = 0; i < kPuts; ++i) {
    const BlockId block = BlockId::Rdd(101, static_cast<uint32_t>(i));
    Result<std::vector<std::byte>> got = client_->Get(block);
    ASSERT_TRUE(got.ok()) << block.ToString() << ": " << got.status().ToString();
    EXPECT_EQ(Text(*got), content(i)) << block.ToString();
    Result<std::vector<BlockLocations>> places = client_->Locations({block});
    ASSERT_TRUE(places.ok()) << places.status().ToString();
    EXPECT_EQ((*places)[0].locations.size(), 2u) << block.ToString();
  }
}

// A shuffle's assignment and its committed maps are journaled before they are acknowledged:
// the leader killed mid-shuffle, the standby serves the layout and the commits, later maps
// commit through it, and every partition reads back byte-exact.
TEST_F(FailoverTest, AShuffleSurvivesTheLeaderKilledMidShuffle) {
  const ShuffleSpec spec{.id = 5, .maps = 4, .partitions = 6, .level = StorageLevel::kMemoryOnly2};
  Result<ShuffleLayout> before = client_->RegisterShuffle(spec);
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  const auto output = [](uint32_t map, uint32_t partition) {
    return "map " + std::to_string(map) + " partition " + std::to_string(partition) +
           std::string(2000 + map * 100 + partition, 'q');
  };
  const auto run_map = [&](Client& client, uint32_t map) -> Status {
    BM_ASSIGN_OR_RETURN(std::unique_ptr<ShuffleWriter> writer,
                        client.OpenShuffleWriter(spec.id, map, 0));
    for (uint32_t partition = 0; partition < spec.partitions; ++partition) {
      BM_RETURN_IF_ERROR(writer->Write(partition, Bytes(output(map, partition))));
    }
    return writer->Commit();
  };
  ASSERT_TRUE(run_map(*client_, 0).ok());
  ASSERT_TRUE(run_map(*client_, 1).ok());
  cluster_.master("a").Signal(SIGKILL);
  Client after_kill(cluster_.ClientOptionsFor());
  for (uint32_t map = 2; map < spec.maps; ++map) {
    Status ran = run_map(after_kill, map);
    ASSERT_TRUE(ran.ok()) << "map " << map << ": " << ran.ToString() << cluster_.LogOf("master-b");
  }
  EXPECT_EQ(cluster_.Leader(after_kill), "b");
  Result<ShuffleLayout> layout = after_kill.ShuffleLayoutOf(spec.id);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  EXPECT_EQ(layout->primaries, before->primaries);
  EXPECT_EQ(layout->replicas, before->replicas);
  EXPECT_EQ(layout->committed_maps, spec.maps);
  for (uint32_t partition = 0; partition < spec.partitions; ++partition) {
    Result<std::unique_ptr<ShuffleReader>> reader =
        after_kill.OpenShuffleReader(spec.id, partition);
    ASSERT_TRUE(reader.ok());
    std::map<uint32_t, std::string> by_map;
    Status read = (*reader)->ForEach([&](uint32_t map, std::span<const std::byte> bytes) {
      by_map[map] += std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
      return Status::Ok();
    });
    ASSERT_TRUE(read.ok()) << read.ToString();
    for (uint32_t map = 0; map < spec.maps; ++map) {
      EXPECT_EQ(by_map[map], output(map, partition)) << map << "/" << partition;
    }
  }
}

TEST_F(FailoverTest, LeaderPausedPastItsSessionIsFencedAndRejoinsAsStandby) {
  for (uint32_t i = 0; i < 10; ++i) {
    ASSERT_TRUE(client_->Put(BlockId::Rdd(3, i), Bytes("v1"), StorageLevel::kMemoryOnly2).ok());
  }
  ASSERT_TRUE(StandbyInSync());
  cluster_.master("a").Signal(SIGSTOP);
  ASSERT_TRUE(WaitFor([&] { return cluster_.Leader(*client_) == "b"; }, 15s))
      << cluster_.LogOf("master-b");
  // Through the new leader: remove half, overwrite the rest.
  for (uint32_t i = 0; i < 5; ++i) ASSERT_TRUE(client_->Remove({BlockId::Rdd(3, i)}).ok());
  for (uint32_t i = 5; i < 10; ++i) {
    ASSERT_TRUE(client_->Put(BlockId::Rdd(3, i), Bytes("v2"), StorageLevel::kMemoryOnly2).ok());
  }
  cluster_.master("a").Signal(SIGCONT);
  // The old leader wakes, sees its lease gone, and starts over as a standby of b.
  ASSERT_TRUE(WaitFor(
      [&] {
        std::map<std::string, MasterInfo> masters = cluster_.MasterInfos(*client_);
        const MasterInfo& a = masters[cluster_.MasterAddress("a")];
        return a.error.empty() && !a.leader && a.in_sync;
      },
      20s))
      << cluster_.LogOf("master-a");
  EXPECT_EQ(cluster_.Leader(*client_), "b");
  // Nothing it might have sent was obeyed: every block reads as b left it.
  for (uint32_t i = 0; i < 10; ++i) {
    Result<std::vector<std::byte>> got = client_->Get(BlockId::Rdd(3, i));
    if (i < 5) {
      EXPECT_EQ(got.status().code(), StatusCode::kNotFound) << i;
    } else {
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      EXPECT_EQ(Text(*got), "v2");
    }
  }
}

TEST_F(FailoverTest, AStandbyThatFellBehindNeverTakesOverAndLosesWhatWasAcknowledged) {
  // b stops fetching; a waits for it up to the standby timeout, has ZooKeeper list it out of
  // sync, and only then acknowledges without it.
  cluster_.master("b").Signal(SIGSTOP);
  ASSERT_TRUE(
      client_->Put(BlockId::Rdd(5, 0), Bytes("acknowledged"), StorageLevel::kMemoryAndDisk).ok());
  cluster_.master("a").Signal(SIGKILL);
  cluster_.master("b").Signal(SIGCONT);
  // b lacks that put: it may not lead, and says why.
  ASSERT_TRUE(WaitFor(
      [&] { return cluster_.LogOf("master-b").find("may not lead") != std::string::npos; }, 15s))
      << cluster_.LogOf("master-b");
  EXPECT_EQ(cluster_.Leader(*client_), "");
  // a comes back: the last leader leads again, with everything it acknowledged.
  cluster_.StartMaster("a");
  ASSERT_TRUE(WaitFor([&] { return cluster_.Leader(*client_) == "a"; }, 20s))
      << cluster_.LogOf("master-a");
  Result<std::vector<std::byte>> got = client_->Get(BlockId::Rdd(5, 0));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(Text(*got), "acknowledged");
}

TEST_F(FailoverTest, TheStandbyIsNotReadyAndMetricsShowEachMastersRole) {
  ASSERT_GT(cluster_.HttpPort("a"), 0) << cluster_.LogOf("master-a");
  ASSERT_GT(cluster_.HttpPort("b"), 0) << cluster_.LogOf("master-b");
  auto [a_status, a_body] = cluster_.HttpGet("a", "/readyz");
  EXPECT_EQ(a_status, 200) << a_body;
  auto [b_status, b_body] = cluster_.HttpGet("b", "/readyz");
  EXPECT_EQ(b_status, 503);
  EXPECT_NE(b_body.find("a standby master; the leader is " + cluster_.MasterAddress("a")),
            std::string::npos)
      << b_body;
  const std::string leader_metrics = cluster_.HttpGet("a", "/metrics").second;
  EXPECT_NE(leader_metrics.find("blockmgr_master_is_leader 1"), std::string::npos);
  EXPECT_NE(leader_metrics.find("blockmgr_master_epoch 1"), std::string::npos);
  EXPECT_NE(leader_metrics.find("blockmgr_master_elections_total 1"), std::string::npos);
  EXPECT_NE(leader_metrics.find("blockmgr_master_standbys_in_sync 1"), std::string::npos);
  EXPECT_NE(cluster_.HttpGet("b", "/metrics").second.find("blockmgr_master_is_leader 0"),
            std::string::npos);
  // bmctl masters: one leader, one standby in sync.
  CommandResult masters =
      RunCommand(BinaryPath("bmctl"), {"--master", cluster_.Masters(), "masters"});
  EXPECT_EQ(masters.exit_code, 0) << masters.err;
  EXPECT_NE(masters.out.find("leader"), std::string::npos) << masters.out;
  EXPECT_NE(masters.out.find("standby"), std::string::npos) << masters.out;
}

// The line of `text` that holds `needle`, or "".
std::string LineWith(const std::string& text, const std::string& needle) {
  const size_t at = text.find(needle);
  if (at == std::string::npos) return "";
  const size_t start = text.rfind('\n', at) == std::string::npos ? 0 : text.rfind('\n', at) + 1;
  return text.substr(start, text.find('\n', at) - start);
}

TEST_F(FailoverTest, BmctlMastersThroughZooKeeperListsEveryMasterNotOnlyTheLeader) {
  CommandResult masters = RunCommand(
      BinaryPath("bmctl"), {"--zookeeper", cluster_.zookeeper().connect_string(), "masters"});
  EXPECT_EQ(masters.exit_code, 0) << masters.err;
  const std::string a = LineWith(masters.out, cluster_.MasterAddress("a"));
  const std::string b = LineWith(masters.out, cluster_.MasterAddress("b"));
  EXPECT_NE(a.find("leader"), std::string::npos) << masters.out;
  EXPECT_NE(b.find("standby"), std::string::npos) << masters.out;

  // A master that stood and died is listed until its session expires, with why it did not
  // answer; once it is gone, the new leader is listed as such.
  cluster_.master("a").Signal(SIGKILL);
  ASSERT_TRUE(WaitFor([&] { return cluster_.Leader(*client_) == "b"; }, 15s))
      << cluster_.LogOf("master-b");
  masters = RunCommand(BinaryPath("bmctl"),
                       {"--zookeeper", cluster_.zookeeper().connect_string(), "--json", "masters"});
  EXPECT_EQ(masters.exit_code, 0) << masters.err;
  EXPECT_NE(masters.out.find("\"role\": \"leader\""), std::string::npos) << masters.out;
  EXPECT_EQ(masters.out.find(cluster_.MasterAddress("a")), std::string::npos) << masters.out;
}

TEST_F(FailoverTest, ZooKeeperAwayLongerThanASessionStopsTheLeaderUntilItReturns) {
  ASSERT_TRUE(client_->Put(BlockId::Rdd(4, 0), Bytes("kept"), StorageLevel::kMemoryAndDisk).ok());
  cluster_.zookeeper().Kill();
  ASSERT_TRUE(WaitFor([&] { return cluster_.Leader(*client_).empty(); }, 10s));
  ClientOptions impatient = cluster_.ClientOptionsFor();
  impatient.leader_wait = 1000ms;
  Client waiting(impatient);
  Result<std::vector<BlockLocations>> refused = waiting.Locations({BlockId::Rdd(4, 0)});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable) << refused.status().ToString();
  std::this_thread::sleep_for(2s);  // away longer than the 1.5 s session, on purpose
  ASSERT_TRUE(cluster_.zookeeper().Restart().ok());
  ASSERT_TRUE(WaitFor([&] { return !cluster_.Leader(*client_).empty(); }, 20s));
  Result<std::vector<std::byte>> got = client_->Get(BlockId::Rdd(4, 0));
  ASSERT_TRUE(got.ok()) << got.status().ToString() << cluster_.LogOf("w1")
                        << cluster_.LogOf("master-a") << cluster_.LogOf("master-b");
  EXPECT_EQ(Text(*got), "kept");
}

TEST_F(FailoverTest, WorkersClientsAndBmctlGivenOnlyZooKeeperFollowTheLeader) {
  cluster_.StartWorker("w4", /*through_zookeeper=*/true);
  Client client(cluster_.ClientOptionsFor(/*through_zookeeper=*/true));
  ASSERT_TRUE(WaitFor(
      [&] {
        Result<std::vector<WorkerInfo>> workers = client.Workers();
        return workers.ok() && workers->size() == 4;
      },
      20s))
      << cluster_.LogOf("w4");
  PutOptions on_w4;
  on_w4.worker_id = "w4";
  Result<PutResult> before =
      client.Put(BlockId::Rdd(8, 0), Bytes("before"), StorageLevel::kMemoryAndDisk2, on_w4);
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  ASSERT_TRUE(StandbyInSync());

  cluster_.master("a").Signal(SIGKILL);
  // The same client goes on through b: ZooKeeper names it once a's session expires.
  Result<std::vector<std::byte>> got = client.Get(BlockId::Rdd(8, 0));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(Text(*got), "before");
  Result<PutResult> after =
      client.Put(BlockId::Rdd(8, 1), Bytes("after"), StorageLevel::kMemoryOnly, on_w4);
  ASSERT_TRUE(after.ok()) << after.status().ToString() << cluster_.LogOf("w4");
  EXPECT_EQ(cluster_.Leader(client), "b");
  // w4, told only of ZooKeeper, heartbeats to b.
  ASSERT_TRUE(WaitFor(
      [&] {
        Result<std::vector<WorkerInfo>> workers = client.Workers();
        if (!workers.ok()) return false;
        for (const WorkerInfo& worker : *workers) {
          if (worker.id == "w4") {
            return worker.state == WorkerState::kActive && worker.last_heartbeat_age_ms < 1000;
          }
        }
        return false;
      },
      10s))
      << cluster_.LogOf("w4");

  CommandResult located =
      RunCommand(BinaryPath("bmctl"),
                 {"--zookeeper", cluster_.zookeeper().connect_string(), "locations", "rdd_8_1"});
  EXPECT_EQ(located.exit_code, 0) << located.err;
  EXPECT_NE(located.out.find("w4"), std::string::npos) << located.out;
  CommandResult usage = RunCommand(BinaryPath("bmctl"), {"locations", "rdd_8_1"});
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_NE(usage.err.find("--master or --zookeeper is required"), std::string::npos) << usage.err;
}

TEST_F(FailoverTest, TwoGetOrComputeCallersStraddlingAFailoverComputeTheBlockOnce) {
  const BlockId block = BlockId::Rdd(9, 0);
  std::atomic<int> computes{0};
  std::atomic<bool> computing{false};
  std::atomic<bool> may_finish{false};
  Result<std::vector<std::byte>> first = UnavailableError("not run");
  std::thread first_caller([&] {
    Client client(cluster_.ClientOptionsFor());
    first = client.GetOrCompute(block, StorageLevel::kMemoryAndDisk2,
                                [&]() -> Result<std::vector<std::byte>> {
                                  ++computes;
                                  computing = true;
                                  while (!may_finish.load()) std::this_thread::sleep_for(10ms);
                                  return Bytes("computed once");
                                });
  });
  struct ReleaseAtExit {
    std::atomic<bool>& may_finish;
    std::thread& thread;
    ~ReleaseAtExit() {
      may_finish = true;
      if (thread.joinable()) thread.join();
    }
  } release_at_exit{may_finish, first_caller};
  ASSERT_TRUE(WaitFor([&] { return computing.load(); }, 10s));
  ASSERT_TRUE(StandbyInSync());  // the lease is journaled, so b holds it

  cluster_.master("a").Signal(SIGKILL);
  ASSERT_TRUE(WaitFor([&] { return cluster_.Leader(*client_) == "b"; }, 10s))
      << cluster_.LogOf("master-b");
  // The second caller, through the new leader, finds the lease held and waits for it.
  Result<std::vector<std::byte>> second = UnavailableError("not run");
  std::thread second_caller([&] {
    Client client(cluster_.ClientOptionsFor());
    second = client.GetOrCompute(block, StorageLevel::kMemoryAndDisk2,
                                 [&]() -> Result<std::vector<std::byte>> {
                                   ++computes;
                                   return Bytes("computed twice");
                                 });
  });
  // Longer than a lease (5 s) unrenewed would last: the first caller's renewals reach b.
  std::this_thread::sleep_for(6s);  // what is tested is that nothing happens meanwhile
  EXPECT_EQ(computes.load(), 1);
  may_finish = true;
  first_caller.join();
  second_caller.join();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_TRUE(second.ok()) << second.status().ToString() << cluster_.LogOf("master-b");
  EXPECT_EQ(Text(*first), "computed once");
  EXPECT_EQ(Text(*second), "computed once");
  EXPECT_EQ(computes.load(), 1);
}

TEST_F(FailoverTest, ABlockOverwrittenOrRemovedJustBeforeTheFailoverStaysSoAfterIt) {
  const BlockId overwritten = BlockId::Rdd(10, 0);
  const BlockId removed = BlockId::Rdd(10, 1);
  ASSERT_TRUE(client_->Put(overwritten, Bytes("old"), StorageLevel::kMemoryAndDisk2).ok());
  ASSERT_TRUE(client_->Put(removed, Bytes("gone"), StorageLevel::kMemoryAndDisk2).ok());
  // The overwrite may land on other workers than the old copies: those may keep stale
  // copies, which only the retired-version history tells apart.
  // Its copies: both, unless a copy's upload failed on a loaded machine (the put then returns
  // with the copies it made).
  Result<PutResult> overwrite =
      client_->Put(overwritten, Bytes("new"), StorageLevel::kMemoryAndDisk2);
  ASSERT_TRUE(overwrite.ok()) << overwrite.status().ToString();
  const size_t copies = overwrite->replicas.size();
  ASSERT_GE(copies, 1u);
  Result<uint64_t> gone = client_->Remove({removed});
  ASSERT_TRUE(gone.ok()) << gone.status().ToString();
  // At once: acknowledged is held by b.
  cluster_.master("a").Signal(SIGKILL);

  // A worker answers a put after 2 s without the master's acknowledgement (a master that
  // slow is a loaded test machine) and says so: that copy reaches the new leader only with the
  // worker's registration, so it cannot be listed at once.
  const bool answered_unacknowledged = [&] {
    for (const char* id : {"w1", "w2", "w3"}) {
      if (cluster_.LogOf(id).find("answering the put of rdd_10_0 before the master") !=
          std::string::npos) {
        return true;
      }
    }
    return false;
  }();
  auto check = [&](const char* when) {
    Result<std::vector<std::byte>> got = client_->Get(overwritten);
    ASSERT_TRUE(got.ok()) << when << ": " << got.status().ToString();
    EXPECT_EQ(Text(*got), "new") << when;
    Result<std::vector<BlockLocations>> places = client_->Locations({overwritten, removed});
    ASSERT_TRUE(places.ok()) << when << ": " << places.status().ToString();
    if (!answered_unacknowledged || std::string(when) != "right after the failover") {
      EXPECT_EQ((*places)[0].locations.size(), copies)
          << when << cluster_.LogOf("master-a") << cluster_.LogOf("master-b")
          << cluster_.LogOf("w1") << cluster_.LogOf("w2") << cluster_.LogOf("w3");
    }
    EXPECT_TRUE((*places)[1].locations.empty()) << when;
    EXPECT_EQ(client_->Get(removed).status().code(), StatusCode::kNotFound) << when;
  };
  check("right after the failover");
  // Every worker registers with b again, reporting what it holds: nothing old comes back.
  ASSERT_TRUE(WaitFor(
      [&] {
        Result<std::vector<WorkerInfo>> workers = client_->Workers();
        if (!workers.ok() || workers->size() != 3) return false;
        for (const WorkerInfo& worker : *workers) {
          if (worker.state != WorkerState::kActive || worker.last_heartbeat_age_ms > 1000) {
            return false;
          }
        }
        return true;
      },
      15s));
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const char* id : {"w1", "w2", "w3"}) {
          if (cluster_.LogOf(id).find("registered with master " + cluster_.MasterAddress("b")) ==
              std::string::npos) {
            return false;
          }
        }
        return true;
      },
      10s));
  check("once the workers registered with the new leader");
  EXPECT_EQ(cluster_.Leader(*client_), "b");
}

// Where nothing listens at the ZooKeeper address, bmctl says so in one line: the ZooKeeper
// client's own log of each reconnect attempt stays out of it.
TEST(ZooKeeperAddressFlagTest, BmctlWithNoZooKeeperListeningPrintsOneLineOfError) {
  const std::string nobody = "127.0.0.1:" + std::to_string(FreeLoopbackPort());
  CommandResult got = RunCommand(BinaryPath("bmctl"), {"--zookeeper", nobody, "get", "rdd_1_0"});
  EXPECT_EQ(got.exit_code, 1) << got.err;
  ASSERT_FALSE(got.err.empty());
  EXPECT_EQ(std::count(got.err.begin(), got.err.end(), '\n'), 1) << got.err;
  EXPECT_EQ(got.err.find("ZOO_"), std::string::npos) << got.err;
  EXPECT_NE(got.err.find("ZooKeeper"), std::string::npos) << got.err;
}

// A port past 65535 would wrap round to another (another cluster's ZooKeeper may listen
// there), and a chroot ZooKeeper refuses would fail every request for as long as the process
// ran: each is refused at start, in each of the programs that take --zookeeper.
TEST(ZooKeeperAddressFlagTest, AMalformedZooKeeperAddressIsRefusedAtStart) {
  TempDir dir;
  for (const std::string bad : {"127.0.0.1:99999", "127.0.0.1:2181/x/../y"}) {
    CommandResult bmctl = RunCommand(BinaryPath("bmctl"), {"--zookeeper", bad, "masters"});
    EXPECT_EQ(bmctl.exit_code, 2) << bad << ": " << bmctl.err;
    EXPECT_NE(bmctl.err.find("--zookeeper"), std::string::npos) << bmctl.err;
    CommandResult master =
        RunCommand(BinaryPath("bm-master"),
                   {"--listen", "tcp://127.0.0.1:" + std::to_string(FreeLoopbackPort()),
                    "--zookeeper", bad, "--state-dir", dir.path().string()},
                   "", 20s);
    EXPECT_EQ(master.exit_code, 2) << bad << ": " << master.err;
    EXPECT_NE(master.err.find("--zookeeper"), std::string::npos) << master.err;
    CommandResult worker = RunCommand(
        BinaryPath("bm-worker"),
        {"--listen", "tcp://127.0.0.1:" + std::to_string(FreeLoopbackPort()), "--zookeeper", bad,
         "--memory", "16MiB", "--disk-dir", (dir.path() / "disk").string()},
        "", 20s);
    EXPECT_EQ(worker.exit_code, 2) << bad << ": " << worker.err;
    EXPECT_NE(worker.err.find("--zookeeper"), std::string::npos) << worker.err;
  }
}

}  // namespace
}  // namespace bm::testing
