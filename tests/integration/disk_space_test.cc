// A worker whose disk fills up refuses puts with "out of space" and keeps serving; a worker
// restarted on a full disk serves what it holds; blocks a damaged write-ahead log dropped are
// named in the worker's log and re-replicated.

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "tests/support/files.h"
#include "tests/support/local_cluster.h"
#include "tests/support/tmpfs_mount.h"

namespace bm::testing {
namespace {

using namespace std::chrono_literals;

constexpr size_t kBlockBytes = 4 << 20;

std::string BlockName(int i) { return "rdd_1_" + std::to_string(i); }

class DiskSpaceTest : public ::testing::Test {
 protected:
  // Mounts a 64 MiB tmpfs as w1's disk directory and starts the master and w1 (no
  // --disk-limit). Skips when mounting is not allowed here.
  void StartOnTmpfs() {
    cluster_.StartMaster();
    mount_ = std::make_unique<TmpfsMount>(cluster_.worker_disk_dir("w1"), "64m");
    if (!mount_->mounted()) {
      GTEST_SKIP() << "cannot mount a tmpfs (needs root or CAP_SYS_ADMIN): " << mount_->error();
    }
    ASSERT_NO_FATAL_FAILURE(cluster_.StartWorker({"w1", "64MiB", ""}));
  }

  void ExpectServes(const std::map<std::string, std::string>& blocks) {
    for (const auto& [id, bytes] : blocks) {
      CommandResult got = cluster_.Bmctl({"get", id});
      ASSERT_EQ(got.exit_code, 0) << id << ": " << got.err;
      EXPECT_TRUE(got.out == bytes) << id << " came back with different bytes";
    }
  }

  LocalCluster cluster_;
  std::unique_ptr<TmpfsMount> mount_;  // after cluster_: unmounted before its files go
};

// The 15th 4 MiB put to a 64 MiB disk aborted the worker inside RocksDB.
TEST_F(DiskSpaceTest, AFillingDiskFailsThePutAndTheWorkerKeepsServing) {
  ASSERT_NO_FATAL_FAILURE(StartOnTmpfs());
  if (IsSkipped()) return;
  std::map<std::string, std::string> stored;
  CommandResult refused;
  int i = 0;
  // Sent to w1 by name, past the client's placement (which may refuse first from the disk room
  // the master last heard of): the worker itself decides.
  for (; i < 20; ++i) {
    std::string bytes = RandomBytes(kBlockBytes, i);
    CommandResult put =
        cluster_.Bmctl({"put", BlockName(i), "-", "--level", "DISK_ONLY", "--worker", "w1"}, bytes);
    if (put.exit_code != 0) {
      refused = put;
      break;
    }
    stored[BlockName(i)] = bytes;
  }
  ASSERT_LT(i, 20) << "a 64 MiB disk took 80 MiB";
  EXPECT_GE(stored.size(), 3u) << "the headroom should leave room for some blocks";
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_NE(refused.err.find("out of space"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("does not fit on disk"), std::string::npos) << refused.err;
  EXPECT_EQ(std::count(refused.err.begin(), refused.err.end(), '\n'), 1) << refused.err;
  // Through placement: refused the same way, or stored if RocksDB freed its log meanwhile
  // (the free space breathes around a memtable flush).
  const std::string placed_first = RandomBytes(kBlockBytes, 99);
  CommandResult placed =
      cluster_.Bmctl({"put", "rdd_3_0", "-", "--level", "DISK_ONLY"}, placed_first);
  if (placed.exit_code == 0) {
    stored["rdd_3_0"] = placed_first;
  } else {
    EXPECT_EQ(placed.exit_code, 1);
    EXPECT_NE(placed.err.find("out of space"), std::string::npos) << placed.err;
  }
  ASSERT_TRUE(cluster_.worker_process("w1").Running()) << cluster_.LogTail("w1");
  ASSERT_NO_FATAL_FAILURE(ExpectServes(stored));

  // Freed space is taken again.
  std::vector<std::string> removed = {BlockName(0), BlockName(1)};
  ASSERT_EQ(cluster_.Bmctl({"rm", removed[0], removed[1]}).exit_code, 0);
  for (const std::string& id : removed) stored.erase(id);
  std::string bytes = RandomBytes(kBlockBytes, 100);
  CommandResult again =
      cluster_.Bmctl({"put", "rdd_2_0", "-", "--level", "DISK_ONLY", "--worker", "w1"}, bytes);
  ASSERT_EQ(again.exit_code, 0) << again.err << cluster_.LogTail("w1");
  stored["rdd_2_0"] = bytes;
  // And through placement, once the master has heard of the room.
  std::string placed_bytes = RandomBytes(kBlockBytes, 101);
  ASSERT_EQ(cluster_.Bmctl({"rm", BlockName(2)}).exit_code, 0);
  stored.erase(BlockName(2));
  EXPECT_TRUE(WaitFor(
      [&] {
        return cluster_.Bmctl({"put", "rdd_2_1", "-", "--level", "DISK_ONLY"}, placed_bytes)
                   .exit_code == 0;
      },
      10s));
  stored["rdd_2_1"] = placed_bytes;
  ASSERT_NO_FATAL_FAILURE(ExpectServes(stored));
  EXPECT_TRUE(cluster_.worker_process("w1").Running());
  // Every refusal came up front: RocksDB itself never met the full disk.
  EXPECT_EQ(ReadFile(cluster_.dir().Sub("w1.log")).find("read-only"), std::string::npos)
      << cluster_.LogTail("w1");
  std::cout << stored.size() << " blocks of 4 MiB held on a 64 MiB disk\n";
}

TEST_F(DiskSpaceTest, AWorkerStartedOnAFullDiskServesItsBlocksAndRecovers) {
  ASSERT_NO_FATAL_FAILURE(StartOnTmpfs());
  if (IsSkipped()) return;
  std::map<std::string, std::string> stored;
  for (int i = 0; i < 3; ++i) {
    std::string bytes = RandomBytes(kBlockBytes, i);
    ASSERT_EQ(cluster_.Bmctl({"put", BlockName(i), "-", "--level", "DISK_ONLY"}, bytes).exit_code,
              0);
    stored[BlockName(i)] = bytes;
  }
  cluster_.KillWorker("w1");
  const std::string filler = cluster_.worker_disk_dir("w1") + "/filler";
  FillUp(filler);
  ASSERT_NO_FATAL_FAILURE(cluster_.StartWorker({"w1", "64MiB", ""}));
  const std::string log = cluster_.dir().Sub("w1.log");
  ASSERT_TRUE(
      WaitFor([&] { return ReadFile(log).find("opened read-only") != std::string::npos; }, 10s))
      << cluster_.LogTail("w1");
  ASSERT_NO_FATAL_FAILURE(ExpectServes(stored));
  CommandResult refused =
      cluster_.Bmctl({"put", "rdd_2_0", "-", "--level", "DISK_ONLY"}, RandomBytes(1000, 9));
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_NE(refused.err.find("out of space"), std::string::npos) << refused.err;
  nlohmann::json workers = cluster_.BmctlJson({"workers"});
  ASSERT_EQ(workers.size(), 1u);
  EXPECT_TRUE(WaitFor(
      [&] { return cluster_.BmctlJson({"workers"})[0].value("disk_read_only", false); }, 10s))
      << "the master should hear that w1 takes no disk blocks";

  // A removal while read-only is taken; freeing the disk brings puts back.
  ASSERT_EQ(cluster_.Bmctl({"rm", BlockName(0)}).exit_code, 0);
  stored.erase(BlockName(0));
  std::filesystem::remove(filler);
  const std::string bytes = RandomBytes(kBlockBytes, 50);
  EXPECT_TRUE(WaitFor(
      [&] {
        return cluster_.Bmctl({"put", "rdd_2_1", "-", "--level", "DISK_ONLY"}, bytes).exit_code ==
               0;
      },
      15s))
      << cluster_.LogTail("w1");
  stored["rdd_2_1"] = bytes;
  ASSERT_NO_FATAL_FAILURE(ExpectServes(stored));
  EXPECT_EQ(cluster_.Bmctl({"get", BlockName(0)}).exit_code, 1);
}

// One byte flipped in the middle of a killed worker's write-ahead log: RocksDB recovers up to
// it and drops the rest; the worker names every dropped block, counts them, and the master
// restores the copies of a _2 block among them.
TEST(LostBlocksTest, BlocksADamagedLogDroppedAreNamedCountedAndReReplicated) {
  LocalCluster cluster(/*heartbeat_timeout_seconds=*/30);
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  // Every block's bytes in RocksDB (and so in its log), not in chunk files.
  const std::vector<std::string> in_rocksdb = {"--disk-chunk-file-min", "off"};
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker({"w1", "64MiB", "", in_rocksdb}));
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker({"w2", "64MiB", "", in_rocksdb}));
  std::vector<std::string> ids;
  for (int i = 0; i < 6; ++i) {
    ids.push_back(BlockName(i));
    ASSERT_EQ(cluster
                  .Bmctl({"put", ids.back(), "-", "--level", "DISK_ONLY", "--worker", "w1"},
                         RandomBytes(200000, i))
                  .exit_code,
              0);
  }
  const std::string replicated = "rdd_2_0";
  ids.push_back(replicated);
  ASSERT_EQ(cluster
                .Bmctl({"put", replicated, "-", "--level", "DISK_ONLY_2", "--worker", "w1"},
                       RandomBytes(200000, 7))
                .exit_code,
            0);
  ASSERT_EQ(cluster.Locations({replicated})[replicated].size(), 2u);

  // The acknowledged blocks are only in the write-ahead log (nothing flushed yet).
  cluster.KillWorker("w1");
  std::string wal;
  uint64_t wal_size = 0;
  for (const auto& entry : std::filesystem::directory_iterator(cluster.worker_disk_dir("w1"))) {
    if (entry.path().extension() == ".log" && entry.file_size() > wal_size) {
      wal = entry.path().string();
      wal_size = entry.file_size();
    }
  }
  ASSERT_GT(wal_size, 1000000u) << "the blocks should be in the write-ahead log";
  {
    std::fstream file(wal, std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(static_cast<std::streamoff>(wal_size / 2));
    char byte = 0;
    file.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x5a);
    file.seekp(static_cast<std::streamoff>(wal_size / 2));
    file.write(&byte, 1);
  }
  const std::string log_path = cluster.dir().Sub("w1.log");
  const size_t log_before = ReadFile(log_path).size();
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker({"w1", "64MiB", "", in_rocksdb}));
  std::string log;
  ASSERT_TRUE(WaitFor(
      [&] {
        log = ReadFile(log_path).substr(log_before);
        return log.find("blocks lost") != std::string::npos;
      },
      15s))
      << cluster.LogTail("w1");
  ASSERT_TRUE(WaitFor([&] { return cluster.ListedWorkers().size() == 2; }, 15s));

  // Written last, so among the dropped (its copy may be back on w1 already: asked by the log).
  EXPECT_NE(log.find("block " + replicated + " lost"), std::string::npos) << log;
  std::vector<std::string> lost = {replicated};
  for (const std::string& id : ids) {
    if (id != replicated && !cluster.WorkerHolds("w1", id)) lost.push_back(id);
  }
  EXPECT_GT(lost.size(), 1u) << "a byte flipped mid-log should drop the blocks after it";
  EXPECT_LT(lost.size(), ids.size()) << "the blocks before the flipped byte survive";
  EXPECT_NE(log.find(std::to_string(lost.size()) + " blocks lost"), std::string::npos) << log;
  for (const std::string& id : lost) {
    EXPECT_NE(log.find("block " + id + " lost"), std::string::npos) << id << "\n" << log;
  }
  EXPECT_TRUE(WaitFor([&] { return cluster.Locations({replicated})[replicated].size() == 2; }, 20s))
      << cluster.LogTail("master");
  // The worker reported them as lost, not just left them out of its block report.
  EXPECT_NE(ReadFile(cluster.dir().Sub("master.log"))
                .find("worker w1 lost " + std::to_string(lost.size()) + " blocks"),
            std::string::npos)
      << cluster.LogTail("master");

  // A clean restart says so.
  const size_t w2_before = ReadFile(cluster.dir().Sub("w2.log")).size();
  cluster.KillWorker("w2");
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker({"w2", "64MiB", ""}));
  EXPECT_TRUE(WaitFor(
      [&] {
        return ReadFile(cluster.dir().Sub("w2.log")).substr(w2_before).find("0 blocks lost") !=
               std::string::npos;
      },
      15s))
      << cluster.LogTail("w2");
}

}  // namespace
}  // namespace bm::testing
