// Caching computations against real processes: get-or-compute, exactly-once computing under
// contention, datasets with lineage, unpersist, and what memory pressure does to each level.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "blockmgr/client.h"
#include "blockmgr/dataset.h"
#include "tests/support/files.h"
#include "tests/support/local_cluster.h"

namespace bm::testing {
namespace {

using std::chrono::milliseconds;
using Bytes = std::vector<std::byte>;

constexpr size_t kMiB = 1024 * 1024;

ClientOptions Options(const LocalCluster& cluster, milliseconds lease = milliseconds(1000)) {
  ClientOptions options = cluster.ClientOptionsFor();
  options.compute_lease = lease;
  options.compute_wait = milliseconds(500);
  return options;
}

// The partitions of `rdd` each worker holds, according to the master.
std::map<std::string, std::set<uint32_t>> PartitionsByWorker(Client& client, uint64_t rdd) {
  std::map<std::string, std::set<uint32_t>> out;
  Result<std::vector<BlockLocations>> blocks = client.Blocks(rdd);
  EXPECT_TRUE(blocks.ok()) << blocks.status().ToString();
  if (!blocks.ok()) return out;
  for (const BlockLocations& block : *blocks) {
    for (const BlockLocation& location : block.locations) {
      out[location.worker_id].insert(static_cast<uint32_t>(block.block.partition()));
    }
  }
  return out;
}

size_t LineCount(const std::string& path) {
  std::ifstream in(path);
  size_t lines = 0;
  for (std::string line; std::getline(in, line);) ++lines;
  return lines;
}

TEST(GetOrComputeTest, MissesComputeAndStoreThenHitsReadTheSameBytes) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkers(2));
  Client client(Options(cluster));
  int computed = 0;
  auto compute_partition = [&](uint32_t p) {
    return [&computed, p]() -> Result<Bytes> {
      ++computed;
      return RandomByteVector(100 * 1024, p);
    };
  };
  for (uint32_t p = 0; p < 4; ++p) {
    Result<Bytes> first =
        client.GetOrCompute(BlockId::Rdd(3, p), StorageLevel::kMemoryOnly, compute_partition(p));
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    EXPECT_EQ(*first, RandomByteVector(100 * 1024, p));
  }
  EXPECT_EQ(computed, 4);
  EXPECT_EQ(client.counters().misses, 4u);
  EXPECT_EQ(client.counters().computes, 4u);
  EXPECT_EQ(client.counters().hits(), 0u);
  EXPECT_EQ(client.counters().bytes_fetched, 0u);
  EXPECT_EQ(PartitionsByWorker(client, 3).size(), 2u) << "partitions spread over both workers";

  // Another client (as another process would) finds every partition cached.
  Client other(Options(cluster));
  for (uint32_t p = 0; p < 4; ++p) {
    Result<Bytes> again =
        other.GetOrCompute(BlockId::Rdd(3, p), StorageLevel::kMemoryOnly, compute_partition(p));
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(*again, RandomByteVector(100 * 1024, p));
  }
  EXPECT_EQ(computed, 4);
  const CacheCounters& counters = other.counters();
  EXPECT_EQ(counters.misses, 0u);
  EXPECT_EQ(counters.computes, 0u);
  // Every worker here is on 127.0.0.1, so every hit is local.
  EXPECT_EQ(counters.local_hits, 4u);
  EXPECT_EQ(counters.remote_hits, 0u);
  EXPECT_EQ(counters.bytes_fetched, 4u * 100 * 1024);
}

TEST(GetOrComputeTest, HitsFromWorkersOnOtherHostsCountAsRemote) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkers(1));
  ClientOptions options = Options(cluster);
  options.local_hosts = {"10.255.255.1"};  // this client pretends to run elsewhere
  Client client(options);
  auto compute = [] { return Result<Bytes>(RandomByteVector(1000, 1)); };
  ASSERT_TRUE(client.GetOrCompute(BlockId::Rdd(1, 0), StorageLevel::kMemoryOnly, compute).ok());
  ASSERT_TRUE(client.GetOrCompute(BlockId::Rdd(1, 0), StorageLevel::kMemoryOnly, compute).ok());
  EXPECT_EQ(client.counters().remote_hits, 1u);
  EXPECT_EQ(client.counters().local_hits, 0u);
}

TEST(GetOrComputeTest, EightConcurrentClientsComputeAMissingBlockExactlyOnce) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkers(2));
  constexpr int kClients = 8;
  std::atomic<int> asking{0};
  std::atomic<int> computes{0};
  std::vector<Result<Bytes>> results(kClients, Result<Bytes>(InternalError("not run")));
  std::vector<CacheCounters> counters(kClients);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      Client client(Options(cluster, milliseconds(5000)));
      ++asking;
      results[i] = client.GetOrCompute(BlockId::Rdd(8, 0), StorageLevel::kMemoryAndDisk, [&] {
        ++computes;
        // Keep computing until every client has asked, so they all contend for the block.
        WaitFor([&] { return asking.load() == kClients; }, milliseconds(10000));
        return Result<Bytes>(RandomByteVector(2 * kMiB, 8));
      });
      counters[i] = client.counters();
    });
  }
  for (std::thread& thread : threads) thread.join();

  EXPECT_EQ(computes.load(), 1);
  CacheCounters total;
  for (int i = 0; i < kClients; ++i) {
    ASSERT_TRUE(results[i].ok()) << results[i].status().ToString();
    EXPECT_EQ(*results[i], RandomByteVector(2 * kMiB, 8));
    total += counters[i];
  }
  EXPECT_EQ(total.computes, 1u);
  EXPECT_EQ(total.hits() + total.misses, static_cast<uint64_t>(kClients));
  EXPECT_EQ(total.waits + total.computes, total.misses);
  Client client(Options(cluster));
  Result<std::vector<BlockLocations>> where = client.Locations({BlockId::Rdd(8, 0)});
  ASSERT_TRUE(where.ok());
  EXPECT_EQ((*where)[0].locations.size(), 1u) << "stored exactly once";
}

TEST(GetOrComputeTest, EightConcurrentProcessesComputeAMissingBlockExactlyOnce) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkers(2));
  const std::string log = cluster.dir().path().string() + "/computes.log";
  std::vector<Process> probes;
  for (int i = 0; i < 8; ++i) {
    probes.push_back(
        Process::Start(BinaryPath("bm-goc-probe"),
                       {"--master", cluster.master_endpoint(), "--block", "rdd_9_0", "--size",
                        std::to_string(4 * kMiB), "--lease-ms", "5000", "--compute-log", log},
                       cluster.dir().path().string() + "/probe" + std::to_string(i) + ".log"));
  }
  for (Process& probe : probes) EXPECT_EQ(probe.Wait(milliseconds(60000)), 0);
  EXPECT_EQ(LineCount(log), 1u) << "exactly one process computed the block";
  auto where = cluster.Locations({"rdd_9_0"});
  EXPECT_EQ(where["rdd_9_0"].size(), 1u);
}

TEST(GetOrComputeTest, AWaiterComputesWhenTheComputingProcessIsKilled) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkers(1));
  const std::string dir = cluster.dir().path().string();
  const std::string marker = dir + "/computing";
  const std::string log = dir + "/computes.log";
  const std::vector<std::string> common = {
      "--master", cluster.master_endpoint(), "--block", "rdd_5_2", "--size", "10000", "--lease-ms",
      "1000",     "--compute-log",           log};
  std::vector<std::string> hanging_args = common;
  hanging_args.insert(hanging_args.end(), {"--hang-marker", marker});
  Process hanging = Process::Start(BinaryPath("bm-goc-probe"), hanging_args, dir + "/hang.log");
  ASSERT_TRUE(WaitFor([&] { return std::filesystem::exists(marker); }, milliseconds(10000)));

  Process waiter = Process::Start(BinaryPath("bm-goc-probe"), common, dir + "/waiter.log");
  // The waiter is blocked behind the live (renewing) holder, not computing.
  EXPECT_FALSE(waiter.Wait(milliseconds(1500)).has_value());
  EXPECT_EQ(LineCount(log), 1u);

  const auto killed_at = std::chrono::steady_clock::now();
  hanging.Kill();
  ASSERT_EQ(waiter.Wait(milliseconds(20000)), 0);
  const auto took = std::chrono::steady_clock::now() - killed_at;
  EXPECT_EQ(LineCount(log), 2u) << "the waiter computed after the holder died";
  // Bounded by the lease (1 s) plus a renewal interval and the waiter's re-ask.
  EXPECT_LT(took, std::chrono::seconds(5));
  auto where = cluster.Locations({"rdd_5_2"});
  EXPECT_EQ(where["rdd_5_2"].size(), 1u);
}

// A holder that stalls past its lease (stopped while computing) and then stores its result:
// another process was granted the lease meanwhile and stored its own result first. The
// stalled holder's put carries its lost lease, so the master refuses it: the block stays as
// the second process stored it, once.
TEST(GetOrComputeTest, AHolderStalledPastItsLeaseNeverStoresASecondComputedCopy) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkers(2));
  const std::string dir = cluster.dir().path().string();
  const std::string marker = dir + "/stalled";
  const std::string log = dir + "/computes.log";
  constexpr uint64_t kSize = 3 * kMiB;
  const std::vector<std::string> common = {"--master",      cluster.master_endpoint(),
                                           "--block",       "rdd_14_0",
                                           "--size",        std::to_string(kSize),
                                           "--lease-ms",    "600",
                                           "--compute-log", log};
  std::vector<std::string> stalled_args = common;
  // Its bytes differ from the other's, so the test can tell whose result is stored.
  stalled_args.insert(stalled_args.end(), {"--stall-marker", marker, "--salt", "100"});
  Process stalled = Process::Start(BinaryPath("bm-goc-probe"), stalled_args, dir + "/stalled.log");
  ASSERT_TRUE(WaitFor([&] { return std::filesystem::exists(marker); }, milliseconds(10000)));

  // Granted once the stalled holder's lease expires; computes and stores.
  Process other = Process::Start(BinaryPath("bm-goc-probe"), common, dir + "/other.log");
  ASSERT_EQ(other.Wait(milliseconds(20000)), 0);
  ASSERT_EQ(LineCount(log), 2u);

  stalled.Signal(SIGCONT);
  ASSERT_EQ(stalled.Wait(milliseconds(20000)), 0);
  Client client(Options(cluster));
  Result<Bytes> stored = client.Get(BlockId::Rdd(14, 0));
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  EXPECT_TRUE(*stored == RandomByteVector(kSize, 0))
      << "the stalled holder's result replaced the one stored under the live lease";
  auto where = cluster.Locations({"rdd_14_0"});
  EXPECT_EQ(where["rdd_14_0"].size(), 1u);
}

TEST(GetOrComputeTest, AWaiterGivesUpAtItsDeadlineWhileAnotherProcessComputes) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkers(1));
  const std::string dir = cluster.dir().path().string();
  const std::string marker = dir + "/computing";
  // A live holder that never finishes (it keeps renewing its lease).
  Process hanging = Process::Start(BinaryPath("bm-goc-probe"),
                                   {"--master", cluster.master_endpoint(), "--block", "rdd_15_0",
                                    "--lease-ms", "1000", "--hang-marker", marker},
                                   dir + "/hang.log");
  ASSERT_TRUE(WaitFor([&] { return std::filesystem::exists(marker); }, milliseconds(10000)));

  ClientOptions options = Options(cluster);
  options.get_or_compute_deadline = milliseconds(800);
  bool computed = false;
  std::future<Result<Bytes>> call = std::async(std::launch::async, [&] {
    Client client(options);
    return client.GetOrCompute(BlockId::Rdd(15, 0), StorageLevel::kMemoryOnly,
                               [&]() -> Result<Bytes> {
                                 computed = true;
                                 return Bytes(10);
                               });
  });
  const auto started = std::chrono::steady_clock::now();
  const bool returned = call.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  const auto took = std::chrono::steady_clock::now() - started;
  if (!returned) hanging.Kill();  // lets the call finish, so the test can end
  ASSERT_TRUE(returned) << "GetOrCompute did not give up at its deadline";
  Result<Bytes> result = call.get();
  EXPECT_EQ(result.status().code(), StatusCode::kUnavailable) << result.status().ToString();
  EXPECT_FALSE(computed);
  EXPECT_LT(took, milliseconds(3000));
}

TEST(GetOrComputeTest, AFailedComputeHandsTheBlockToAWaiterAtOnce) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkers(1));
  // A long lease: the waiter must get the block through the release, not the expiry.
  const ClientOptions options = Options(cluster, milliseconds(60000));
  std::atomic<bool> failing_started{false};
  std::atomic<bool> waiter_asking{false};
  Result<Bytes> failed(InternalError("not run"));
  std::thread failing([&] {
    Client client(options);
    failed = client.GetOrCompute(BlockId::Rdd(6, 0), StorageLevel::kMemoryOnly, [&] {
      failing_started = true;
      WaitFor([&] { return waiter_asking.load(); }, milliseconds(10000));
      return Result<Bytes>(InternalError("the input is corrupt"));
    });
  });
  ASSERT_TRUE(WaitFor([&] { return failing_started.load(); }, milliseconds(10000)));
  Client waiter(options);
  waiter_asking = true;
  const auto start = std::chrono::steady_clock::now();
  Result<Bytes> got = waiter.GetOrCompute(BlockId::Rdd(6, 0), StorageLevel::kMemoryOnly,
                                          [] { return Result<Bytes>(RandomByteVector(500, 6)); });
  failing.join();
  EXPECT_EQ(failed.status().code(), StatusCode::kInternal);
  EXPECT_EQ(failed.status().message(), "the input is corrupt");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, RandomByteVector(500, 6));
  EXPECT_EQ(waiter.counters().computes, 1u);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

// ---- datasets ----

class DatasetTest : public ::testing::Test {
 protected:
  void Start(int workers, const std::string& memory = "64MiB", double heartbeat_timeout = 10) {
    cluster_ = std::make_unique<LocalCluster>(heartbeat_timeout);
    ASSERT_NO_FATAL_FAILURE(cluster_->StartMaster());
    ASSERT_NO_FATAL_FAILURE(cluster_->StartWorkers(workers, memory));
    session_ = std::make_shared<CacheSession>(Options(*cluster_));
    client_ = std::make_unique<Client>(Options(*cluster_));
  }

  // A source of `partitions` partitions of `size` bytes, counting its computes.
  std::shared_ptr<Dataset> Numbers(uint64_t rdd, uint32_t partitions, size_t size,
                                   std::atomic<int>& computes) {
    return Dataset::Source(session_, rdd, "numbers", partitions,
                           [size, &computes](uint32_t p) -> Result<PartitionData> {
                             ++computes;
                             return RandomByteVector(size, p);
                           });
  }

  std::unique_ptr<LocalCluster> cluster_;
  std::shared_ptr<CacheSession> session_;
  std::unique_ptr<Client> client_;
};

// Reverses each partition's bytes: a derived dataset whose result is checkable.
Result<PartitionData> Reverse(uint32_t, std::span<const std::byte> parent) {
  return PartitionData(parent.rbegin(), parent.rend());
}

PartitionData Reversed(size_t size, uint32_t p) {
  PartitionData data = RandomByteVector(size, p);
  std::reverse(data.begin(), data.end());
  return data;
}

TEST_F(DatasetTest, PersistedPartitionsAreComputedOnceAndUnpersistRemovesThemEverywhere) {
  ASSERT_NO_FATAL_FAILURE(Start(2));
  std::atomic<int> computes{0};
  auto numbers = Numbers(1, 6, 64 * 1024, computes);
  auto reversed = numbers->Map(2, "reversed", Reverse);
  ASSERT_TRUE(reversed->Persist(StorageLevel::kMemoryAndDisk).ok());

  Result<std::vector<PartitionData>> first = reversed->Collect(3);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_EQ(first->size(), 6u);
  for (uint32_t p = 0; p < 6; ++p) EXPECT_EQ((*first)[p], Reversed(64 * 1024, p)) << p;
  EXPECT_EQ(computes.load(), 6);

  Result<std::vector<PartitionData>> second = reversed->Collect(3);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(*second, *first);
  EXPECT_EQ(computes.load(), 6) << "the second collect reads the cache";
  CacheCounters counters = session_->counters();
  EXPECT_EQ(counters.computes, 6u);
  EXPECT_EQ(counters.hits(), 6u);

  Result<std::vector<RddInfo>> rdds = client_->Rdds();
  ASSERT_TRUE(rdds.ok());
  ASSERT_EQ(rdds->size(), 1u);
  EXPECT_EQ((*rdds)[0].name, "reversed");
  EXPECT_EQ((*rdds)[0].level, StorageLevel::kMemoryAndDisk);
  EXPECT_EQ((*rdds)[0].cached_partitions, 6u);
  EXPECT_EQ((*rdds)[0].total_partitions, 6u);

  std::map<std::string, std::set<uint32_t>> held = PartitionsByWorker(*client_, 2);
  ASSERT_EQ(held.size(), 2u) << "partitions on both workers";
  Result<uint64_t> removed = reversed->Unpersist();
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_EQ(*removed, 6u);
  for (const auto& [worker, partitions] : held) {
    for (uint32_t p : partitions) {
      EXPECT_FALSE(cluster_->WorkerHolds(worker, BlockId::Rdd(2, p).ToString())) << worker << p;
    }
  }
  EXPECT_TRUE(PartitionsByWorker(*client_, 2).empty());
  rdds = client_->Rdds();
  ASSERT_TRUE(rdds.ok());
  EXPECT_TRUE(rdds->empty());
}

TEST_F(DatasetTest, PartitionsLostWithAWorkerAreRecomputedFromLineage) {
  ASSERT_NO_FATAL_FAILURE(Start(2, "64MiB", /*heartbeat_timeout=*/1));
  std::atomic<int> computes{0};
  auto numbers = Numbers(1, 8, 32 * 1024, computes);
  auto reversed = numbers->Map(2, "reversed", Reverse);
  ASSERT_TRUE(reversed->Persist(StorageLevel::kMemoryOnly).ok());
  Result<std::vector<PartitionData>> first = reversed->Collect();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_EQ(computes.load(), 8);

  std::map<std::string, std::set<uint32_t>> held = PartitionsByWorker(*client_, 2);
  const std::set<uint32_t> lost = held["w1"];
  ASSERT_FALSE(lost.empty());
  cluster_->KillWorker("w1");
  ASSERT_TRUE(cluster_->WaitForWorkers({"w2"})) << cluster_->LogTail("master");

  Result<std::vector<PartitionData>> again = reversed->Collect();
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(*again, *first);
  EXPECT_EQ(computes.load(), 8 + static_cast<int>(lost.size()))
      << "exactly the lost partitions are recomputed, from their source";
  EXPECT_EQ(PartitionsByWorker(*client_, 2)["w2"].size(), 8u) << "and cached again";
}

TEST_F(DatasetTest, AReadFromADeadWorkerNotYetDroppedFallsBackToComputing) {
  ASSERT_NO_FATAL_FAILURE(Start(1));
  std::atomic<int> computes{0};
  auto numbers = Numbers(4, 1, 1000, computes);
  ASSERT_TRUE(numbers->Persist(StorageLevel::kMemoryOnly).ok());
  ASSERT_TRUE(numbers->Partition(0).ok());
  cluster_->KillWorker("w1");
  ASSERT_NO_FATAL_FAILURE(cluster_->StartWorker({.id = "w2", .memory = "64MiB", .disk_limit = ""}));
  // The master still lists w1 (its heartbeat timeout is 10 s): the read fails (after the
  // request timeout, shortened here), the client asks again naming w1, and computes.
  ClientOptions options = Options(*cluster_);
  options.request_timeout = milliseconds(1000);
  auto impatient = Dataset::Source(std::make_shared<CacheSession>(options), 4, "numbers", 1,
                                   [&computes](uint32_t p) -> Result<PartitionData> {
                                     ++computes;
                                     return RandomByteVector(1000, p);
                                   });
  ASSERT_TRUE(impatient->Persist(StorageLevel::kMemoryOnly).ok());
  Result<PartitionData> again = impatient->Partition(0);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(*again, RandomByteVector(1000, 0));
  EXPECT_EQ(computes.load(), 2);
}

TEST_F(DatasetTest, EvictedMemoryOnlyPartitionsAreRecomputedMemoryAndDiskOnesReadFromDisk) {
  ASSERT_NO_FATAL_FAILURE(Start(1, "4MiB"));
  std::atomic<int> memory_only_computes{0};
  std::atomic<int> spilling_computes{0};
  auto memory_only = Numbers(1, 3, kMiB, memory_only_computes);
  auto spilling = Numbers(2, 6, kMiB, spilling_computes);
  ASSERT_TRUE(memory_only->Persist(StorageLevel::kMemoryOnly).ok());
  ASSERT_TRUE(spilling->Persist(StorageLevel::kMemoryAndDisk).ok());

  ASSERT_TRUE(memory_only->Collect(1).ok());
  ASSERT_EQ(PartitionsByWorker(*client_, 1)["w1"].size(), 3u);
  // Six more MiB in a 4 MiB budget: RDD 1's partitions are evicted (dropped, MEMORY_ONLY);
  // RDD 2 never evicts itself, so its later partitions go to disk.
  ASSERT_TRUE(spilling->Collect(1).ok());
  const size_t memory_only_left = PartitionsByWorker(*client_, 1)["w1"].size();
  EXPECT_LT(memory_only_left, 3u);
  Result<std::vector<BlockLocations>> spilled = client_->Blocks(2);
  ASSERT_TRUE(spilled.ok());
  ASSERT_EQ(spilled->size(), 6u);
  const auto on_disk = std::count_if(spilled->begin(), spilled->end(), [](const BlockLocations& b) {
    return !b.locations.empty() && b.locations[0].tier == Tier::kDisk;
  });
  EXPECT_GT(on_disk, 0);

  Result<std::vector<PartitionData>> memory_only_again = memory_only->Collect(1);
  ASSERT_TRUE(memory_only_again.ok()) << memory_only_again.status().ToString();
  EXPECT_EQ(memory_only_computes.load(), 3 + static_cast<int>(3 - memory_only_left));
  EXPECT_EQ((*memory_only_again)[0], RandomByteVector(kMiB, 0));

  const CacheCounters before = session_->counters();
  Result<std::vector<PartitionData>> spilling_again = spilling->Collect(1);
  ASSERT_TRUE(spilling_again.ok()) << spilling_again.status().ToString();
  EXPECT_EQ(spilling_computes.load(), 6) << "MEMORY_AND_DISK partitions are all still cached";
  EXPECT_EQ(session_->counters().hits() - before.hits(), 6u);
  for (uint32_t p = 0; p < 6; ++p) EXPECT_EQ((*spilling_again)[p], RandomByteVector(kMiB, p));
}

}  // namespace
}  // namespace bm::testing
