// kill -9 of a worker under DISK_ONLY puts: every put the worker acknowledged reads back
// byte-exact after it restarts, whatever the moment of the kill, and a put cut short by the
// kill leaves no partial block (the disk store's chunk files, worker/disk/chunk_files.h, and its
// RocksDB records for small blocks).

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "blockmgr/client.h"
#include "tests/support/files.h"
#include "tests/support/local_cluster.h"
#include "tests/support/process.h"

namespace bm::testing {
namespace {

using namespace std::chrono_literals;

struct PutBlock {
  BlockId id;
  uint64_t size;
  uint64_t seed;
};

TEST(DiskCrashTest, EveryAcknowledgedDiskOnlyPutSurvivesKillNineAtRandomPoints) {
  constexpr int kRounds = 20;
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 random(seed);
  // Mostly chunk-file sizes, around and across the 1 MiB unit, and a RocksDB-record one.
  const std::vector<uint64_t> sizes = {4 * 1024, 64 * 1024,     300 * 1024,
                                       1 << 20,  (1 << 20) + 1, 5 * (1 << 19) + 77};

  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker({"w1", "16MiB", ""}));
  ClientOptions options = cluster.ClientOptionsFor();
  options.request_timeout = 1000ms;

  std::vector<PutBlock> acknowledged;  // over every round
  std::vector<PutBlock> cut_short;     // puts in flight at a kill
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const int kill_after = std::uniform_int_distribution<int>(1, 6)(random);
    std::mutex mutex;
    std::vector<PutBlock> acked;
    std::atomic<bool> stop{false};
    std::vector<PutBlock> planned;
    for (int i = 0; i < 64; ++i) {
      planned.push_back({BlockId::Rdd(round, i),
                         sizes[std::uniform_int_distribution<size_t>(0, sizes.size() - 1)(random)],
                         random()});
    }
    std::thread writer([&] {
      Client client(options);
      for (const PutBlock& block : planned) {
        if (stop.load()) return;
        const std::string bytes = RandomBytes(block.size, block.seed);
        Result<PutResult> put = client.Put(block.id, AsBytes(bytes), StorageLevel::kDiskOnly);
        std::lock_guard lock(mutex);
        if (!put.ok()) {
          cut_short.push_back(block);
          return;  // the worker is gone
        }
        acked.push_back(block);
      }
    });
    // The kill lands right after the kill_after-th acknowledgement, with the next put on its
    // way (the writer does not wait).
    const bool reached = WaitFor(
        [&] {
          std::lock_guard lock(mutex);
          return static_cast<int>(acked.size()) >= kill_after;
        },
        30s);
    cluster.KillWorker("w1");
    stop = true;
    writer.join();
    ASSERT_TRUE(reached) << cluster.LogTail("w1");
    ASSERT_NO_FATAL_FAILURE(cluster.StartWorker({"w1", "16MiB", ""}));

    Client reader(options);
    for (const PutBlock& block : acked) {
      Result<std::vector<std::byte>> got = reader.Get(block.id);
      ASSERT_TRUE(got.ok()) << block.id.ToString()
                            << " was acknowledged: " << got.status().ToString() << "\n"
                            << cluster.LogTail("w1");
      EXPECT_EQ(AsString(*got), RandomBytes(block.size, block.seed)) << block.id.ToString();
    }
    acknowledged.insert(acknowledged.end(), acked.begin(), acked.end());
  }

  // After all the kills: every acknowledged block is still whole, and a put the kill cut
  // short is either absent or whole, never part of a block.
  Client reader(options);
  for (const PutBlock& block : acknowledged) {
    Result<std::vector<std::byte>> got = reader.Get(block.id);
    ASSERT_TRUE(got.ok()) << block.id.ToString() << ": " << got.status().ToString();
    EXPECT_EQ(AsString(*got), RandomBytes(block.size, block.seed)) << block.id.ToString();
  }
  for (const PutBlock& block : cut_short) {
    Result<std::vector<std::byte>> got = reader.Get(block.id);
    if (got.ok()) {
      EXPECT_EQ(AsString(*got), RandomBytes(block.size, block.seed)) << block.id.ToString();
    } else {
      EXPECT_EQ(got.status().code(), StatusCode::kNotFound) << got.status().ToString();
    }
  }
  EXPECT_GE(acknowledged.size(), static_cast<size_t>(kRounds));
}

}  // namespace
}  // namespace bm::testing
