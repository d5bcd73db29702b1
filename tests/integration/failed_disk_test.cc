// A worker with several disks: a disk that fails costs only its blocks (re-replicated where
// another copy exists, reported lost otherwise) and the worker keeps serving from the others; a
// full disk is not a failed one; a disk that vanishes (moved away, unmounted) is a failed one;
// a restarted worker uses a replaced (empty) disk again; one directory is never two disks.
//
// Each disk is a small tmpfs of its own, so most tests need root (or CAP_SYS_ADMIN) and skip
// without it (the moved-away disk is a plain directory: a mount point cannot be renamed). A disk
// "goes read-only" by a read-only tmpfs mounted over its directory: a plain `mount -o remount,ro`
// of the disk's own tmpfs is refused (EBUSY) while RocksDB holds files open for writing, and the
// overmount gives what a filesystem remounted read-only after an error gives every new file: EROFS
// (files already open keep writing to the hidden tmpfs).

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/files.h"
#include "tests/support/local_cluster.h"
#include "tests/support/tmpfs_mount.h"

namespace bm::testing {
namespace {

using namespace std::chrono_literals;

constexpr size_t kBlockBytes = 256 << 10;

class Load;

class FailedDiskTest : public ::testing::Test {
 protected:
  // w1 on three tmpfs disks, checked every 200 ms; w2 on a plain directory, so _2 blocks have
  // somewhere to be copied back to.
  // `tmpfs`: false for plain directories.
  void StartCluster(bool tmpfs = true) {
    cluster_.StartMaster();
    disks_ = {cluster_.worker_disk_dir("w1"), cluster_.dir().Sub("w1-disk2"),
              cluster_.dir().Sub("w1-disk3")};
    for (const std::string& disk : disks_) {
      if (!tmpfs) break;
      mounts_.push_back(std::make_unique<TmpfsMount>(disk, "48m"));
      if (!mounts_.back()->mounted()) {
        GTEST_SKIP() << "cannot mount a tmpfs (needs root or CAP_SYS_ADMIN): "
                     << mounts_.back()->error();
      }
    }
    ASSERT_NO_FATAL_FAILURE(StartW1());
    ASSERT_NO_FATAL_FAILURE(cluster_.StartWorker({"w2", "64MiB", ""}));
  }

  void StartW1() {
    cluster_.StartWorker({"w1",
                          "8MiB",
                          "",
                          {"--disk-dir", disks_[1], "--disk-dir", disks_[2],
                           "--disk-check-interval", "0.2", "--disk-check-timeout", "3"}});
  }

  // w1's disks as `bmctl --json workers` shows them, by path.
  std::map<std::string, nlohmann::json> W1Disks() {
    std::map<std::string, nlohmann::json> disks;
    for (const nlohmann::json& worker : cluster_.BmctlJson({"workers"})) {
      if (worker.value("id", "") != "w1") continue;
      for (const nlohmann::json& disk : worker.value("disks", nlohmann::json::array())) {
        disks[disk.value("path", "")] = disk;
      }
    }
    return disks;
  }

  std::string DiskState(const std::string& path) {
    std::map<std::string, nlohmann::json> disks = W1Disks();
    return disks.contains(path) ? disks[path].value("state", "") : "";
  }

  // Copies the master lists for the block.
  size_t Copies(const std::string& id) {
    auto locations = cluster_.Locations({id});
    return locations[id].size();
  }

  // Block -> reason, from `bmctl --json blocks --lost`.
  std::map<std::string, std::string> LostReasons() {
    std::map<std::string, std::string> reasons;
    for (const nlohmann::json& block : cluster_.BmctlJson({"blocks", "--lost"})) {
      reasons[block.value("block", "")] = block.value("reason", "");
    }
    return reasons;
  }

  // Puts 24 blocks, DISK_ONLY ones on w1 alone and DISK_ONLY_2 ones on w1 and w2, so each of
  // w1's disks holds some.
  void PutBlocksOnEveryDisk(std::map<std::string, std::string>& single,
                            std::map<std::string, std::string>& doubled) {
    for (int i = 0; i < 24; ++i) {
      const std::string id = "rdd_1_" + std::to_string(i);
      const std::string bytes = RandomBytes(kBlockBytes, i);
      const bool two = i % 2 == 0;
      CommandResult put =
          two ? cluster_.Bmctl({"put", id, "-", "--level", "DISK_ONLY_2"}, bytes)
              : cluster_.Bmctl({"put", id, "-", "--level", "DISK_ONLY", "--worker", "w1"}, bytes);
      ASSERT_EQ(put.exit_code, 0) << put.err;
      (two ? doubled : single)[id] = bytes;
    }
    for (const auto& [path, disk] : W1Disks()) {
      ASSERT_GT(disk.value("used", uint64_t{0}), 0u) << path << " took no block";
    }
  }

  // After disks_[1] vanished under load: it fails as a disk (its reason containing `why`),
  // the worker keeps running and serving from the others, the single copies it held are lost
  // to "disk failed", the _2 ones return to two copies, and every put under load went through.
  void ExpectTheVanishedDiskFailedAlone(Load& load, const std::string& why,
                                        const std::map<std::string, std::string>& single,
                                        const std::map<std::string, std::string>& doubled);

  LocalCluster cluster_;
  std::vector<std::string> disks_;
  std::vector<std::unique_ptr<TmpfsMount>>
      mounts_;                        // after cluster_: unmounted before its files go
  std::unique_ptr<TmpfsMount> over_;  // the read-only overmount, if any
};

// Puts and gets in a loop on a thread of its own, keeping what each put stored and counting
// wrong bytes and unclear errors.
class Load {
 public:
  explicit Load(LocalCluster& cluster) : cluster_(cluster) {
    thread_ = std::thread([this] { Run(); });
  }
  ~Load() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  int wrong_bytes() const { return wrong_bytes_; }
  int operations() const { return operations_; }
  std::vector<std::string> unclear_errors() {
    std::lock_guard lock(mutex_);
    return unclear_errors_;
  }

 private:
  void Run() {
    for (int i = 0; !stop_; ++i) {
      const std::string id = "rdd_7_" + std::to_string(i);
      const std::string bytes = RandomBytes(kBlockBytes, 7000 + i);
      const char* level = i % 2 == 0 ? "DISK_ONLY_2" : "DISK_ONLY";
      CommandResult put = cluster_.Bmctl({"put", id, "-", "--level", level}, bytes);
      Check(put);
      if (put.exit_code == 0) stored_[id] = bytes;
      // Reads back an earlier block: it is right, or gone with a clear error.
      if (!stored_.empty()) {
        auto it = stored_.begin();
        std::advance(it, i % stored_.size());
        CommandResult got = cluster_.Bmctl({"get", it->first});
        Check(got);
        if (got.exit_code == 0 && got.out != it->second) ++wrong_bytes_;
      }
      ++operations_;
    }
  }

  void Check(const CommandResult& result) {
    if (result.exit_code == 0) return;
    // A clear error names what happened; an internal error or a crash of bmctl does not.
    const bool clear = result.exit_code == 1 && !result.err.empty() &&
                       result.err.find("internal") == std::string::npos;
    if (!clear) {
      std::lock_guard lock(mutex_);
      unclear_errors_.push_back("exit " + std::to_string(result.exit_code) + ": " + result.err);
    }
  }

  LocalCluster& cluster_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int> wrong_bytes_{0};
  std::atomic<int> operations_{0};
  std::map<std::string, std::string> stored_;  // the load thread's
  std::mutex mutex_;
  std::vector<std::string> unclear_errors_;
};

void FailedDiskTest::ExpectTheVanishedDiskFailedAlone(
    Load& load, const std::string& why, const std::map<std::string, std::string>& single,
    const std::map<std::string, std::string>& doubled) {
  ASSERT_TRUE(WaitFor([&] { return DiskState(disks_[1]) == "failed"; }, 10s))
      << cluster_.LogTail("w1");
  EXPECT_NE(W1Disks()[disks_[1]].value("reason", "").find(why), std::string::npos)
      << W1Disks()[disks_[1]].dump();
  // The load goes on through the failure and past it.
  const int operations_at_failure = load.operations();
  ASSERT_TRUE(WaitFor([&] { return load.operations() >= operations_at_failure + 6; }, 60s))
      << cluster_.LogTail("w1");
  for (const auto& [id, bytes] : doubled) {
    EXPECT_TRUE(WaitFor([&] { return Copies(id) == 2; }, 15s)) << id;
    CommandResult got = cluster_.Bmctl({"get", id});
    ASSERT_EQ(got.exit_code, 0) << id << ": " << got.err;
    EXPECT_TRUE(got.out == bytes) << id;
  }
  std::map<std::string, std::string> lost_reasons = LostReasons();
  int lost = 0;
  for (const auto& [id, bytes] : single) {
    CommandResult got = cluster_.Bmctl({"get", id});
    if (got.exit_code == 0) {
      EXPECT_TRUE(got.out == bytes) << id;
      continue;
    }
    ++lost;
    EXPECT_EQ(lost_reasons[id], "disk failed") << id << ": " << got.err;
  }
  EXPECT_GT(lost, 0) << "no DISK_ONLY block was on the vanished disk";
  EXPECT_LT(lost, static_cast<int>(single.size())) << "every block was on the vanished disk";
  load.Stop();
  EXPECT_EQ(load.wrong_bytes(), 0);
  EXPECT_TRUE(load.unclear_errors().empty()) << load.unclear_errors().front();
  EXPECT_TRUE(cluster_.worker_process("w1").Running()) << cluster_.LogTail("w1");
  const std::map<std::string, nlohmann::json> after = W1Disks();
  EXPECT_EQ(after.at(disks_[0]).value("state", ""), "ok");
  EXPECT_EQ(after.at(disks_[2]).value("state", ""), "ok");
  EXPECT_EQ(after.at(disks_[1]).value("state", ""), "failed") << "a failed disk came back";
  // New DISK_ONLY blocks go to the disks that work.
  for (int i = 0; i < 6; ++i) {
    const std::string id = "rdd_6_" + std::to_string(i);
    const std::string bytes = RandomBytes(kBlockBytes, 600 + i);
    CommandResult put =
        cluster_.Bmctl({"put", id, "-", "--level", "DISK_ONLY", "--worker", "w1"}, bytes);
    ASSERT_EQ(put.exit_code, 0) << put.err << cluster_.LogTail("w1");
    CommandResult got = cluster_.Bmctl({"get", id});
    ASSERT_EQ(got.exit_code, 0) << got.err;
    EXPECT_TRUE(got.out == bytes) << id;
  }
  EXPECT_EQ(ReadFile(cluster_.dir().Sub("w1.log")).find("reopening the database"),
            std::string::npos)
      << "the failed disk's store was reopened";
}

TEST_F(FailedDiskTest, ADiskGoneReadOnlyFailsAndCostsOnlyItsBlocks) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  if (IsSkipped()) return;
  // Blocks on every disk of w1: DISK_ONLY ones on w1 alone, DISK_ONLY_2 on w1 and w2.
  std::map<std::string, std::string> single, doubled;
  for (int i = 0; i < 24; ++i) {
    const std::string id = "rdd_1_" + std::to_string(i);
    const std::string bytes = RandomBytes(kBlockBytes, i);
    const bool two = i % 2 == 0;
    CommandResult put =
        two ? cluster_.Bmctl({"put", id, "-", "--level", "DISK_ONLY_2"}, bytes)
            : cluster_.Bmctl({"put", id, "-", "--level", "DISK_ONLY", "--worker", "w1"}, bytes);
    ASSERT_EQ(put.exit_code, 0) << put.err;
    (two ? doubled : single)[id] = bytes;
  }
  std::map<std::string, nlohmann::json> before = W1Disks();
  ASSERT_EQ(before.size(), 3u) << cluster_.BmctlJson({"workers"}).dump();
  for (const std::string& disk : disks_) {
    EXPECT_GT(before[disk].value("used", uint64_t{0}), 0u) << disk << " took no block";
    EXPECT_EQ(before[disk].value("state", ""), "ok");
  }

  Load load(cluster_);
  ASSERT_TRUE(WaitFor([&] { return load.operations() >= 2; }, 30s));
  over_ = std::make_unique<TmpfsMount>(disks_[1], "1m", /*read_only=*/true);
  ASSERT_TRUE(over_->mounted()) << over_->error();
  const auto gone_read_only = std::chrono::steady_clock::now();

  // Failed within a few check intervals (200 ms each; the master hears it with a heartbeat).
  ASSERT_TRUE(WaitFor([&] { return DiskState(disks_[1]) == "failed"; }, 10s))
      << cluster_.LogTail("w1");
  const auto failed_after = std::chrono::steady_clock::now() - gone_read_only;
  EXPECT_LT(failed_after, 5s);
  // The overmount that stands in for a remount is another filesystem over the directory, which
  // the check now sees (a directory no longer the one opened) before it would meet EROFS; a
  // filesystem remounted read-only in place keeps its identity and fails on EROFS.
  const std::string reason = W1Disks()[disks_[1]].value("reason", "");
  EXPECT_TRUE(reason.find("Read-only file system") != std::string::npos ||
              reason.find("no longer the one opened") != std::string::npos)
      << W1Disks()[disks_[1]].dump();
  EXPECT_NE(ReadFile(cluster_.dir().Sub("w1.log")).find("disk " + disks_[1] + " has failed"),
            std::string::npos);

  // The _2 blocks are back at two copies within seconds; each reads back right.
  for (const auto& [id, bytes] : doubled) {
    EXPECT_TRUE(WaitFor([&] { return Copies(id) == 2; }, 15s)) << id;
    CommandResult got = cluster_.Bmctl({"get", id});
    ASSERT_EQ(got.exit_code, 0) << id << ": " << got.err;
    EXPECT_TRUE(got.out == bytes) << id;
  }
  // The single copies on the failed disk are gone from the master's locations (lost); the
  // others still read back right.
  int lost = 0;
  for (const auto& [id, bytes] : single) {
    CommandResult got = cluster_.Bmctl({"get", id});
    if (got.exit_code == 0) {
      EXPECT_TRUE(got.out == bytes) << id;
      continue;
    }
    ++lost;
    EXPECT_EQ(Copies(id), 0u) << id;
    EXPECT_EQ(got.exit_code, 1) << got.err;
  }
  EXPECT_GT(lost, 0) << "no DISK_ONLY block was on the failed disk";
  EXPECT_LT(lost, static_cast<int>(single.size())) << "every block was on the failed disk";

  const int operations_at_failure = load.operations();
  ASSERT_TRUE(WaitFor([&] { return load.operations() >= operations_at_failure + 4; }, 30s));
  load.Stop();
  EXPECT_EQ(load.wrong_bytes(), 0);
  EXPECT_TRUE(load.unclear_errors().empty()) << load.unclear_errors().front();
  EXPECT_TRUE(cluster_.worker_process("w1").Running()) << cluster_.LogTail("w1");
  EXPECT_TRUE(cluster_.WaitForWorkers({"w1", "w2"}, 5s));
  // New blocks go to the disks that work.
  const std::map<std::string, nlohmann::json> after = W1Disks();
  EXPECT_EQ(after.at(disks_[0]).value("state", ""), "ok");
  EXPECT_EQ(after.at(disks_[2]).value("state", ""), "ok");
}

TEST_F(FailedDiskTest, AFullDiskIsNotFailedAndNewBlocksGoToTheOthers) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  if (IsSkipped()) return;
  FillUp(disks_[2] + "/filler");
  // Several check intervals pass: the full disk stays ok (or read-only), never failed.
  const auto until = std::chrono::steady_clock::now() + 2s;
  while (std::chrono::steady_clock::now() < until) {
    ASSERT_NE(DiskState(disks_[2]), "failed") << W1Disks()[disks_[2]].dump();
    std::this_thread::sleep_for(200ms);
  }
  const uint64_t full_used = W1Disks()[disks_[2]].value("used", uint64_t{0});
  std::map<std::string, std::string> stored;
  for (int i = 0; i < 12; ++i) {
    const std::string id = "rdd_2_" + std::to_string(i);
    const std::string bytes = RandomBytes(kBlockBytes, 100 + i);
    CommandResult put =
        cluster_.Bmctl({"put", id, "-", "--level", "DISK_ONLY", "--worker", "w1"}, bytes);
    ASSERT_EQ(put.exit_code, 0) << put.err << cluster_.LogTail("w1");
    stored[id] = bytes;
  }
  std::map<std::string, nlohmann::json> disks = W1Disks();
  EXPECT_NE(disks[disks_[2]].value("state", ""), "failed");
  EXPECT_EQ(disks[disks_[2]].value("used", uint64_t{0}), full_used)
      << "a block went to the full disk";
  EXPECT_GT(
      disks[disks_[0]].value("used", uint64_t{0}) + disks[disks_[1]].value("used", uint64_t{0}),
      12 * kBlockBytes - 1);
  for (const auto& [id, bytes] : stored) {
    CommandResult got = cluster_.Bmctl({"get", id});
    ASSERT_EQ(got.exit_code, 0) << got.err;
    EXPECT_TRUE(got.out == bytes) << id;
  }
}

TEST_F(FailedDiskTest, ARestartedWorkerUsesAFailedDiskReplacedByAnEmptyOne) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  if (IsSkipped()) return;
  std::map<std::string, std::string> stored;
  for (int i = 0; i < 6; ++i) {
    const std::string id = "rdd_3_" + std::to_string(i);
    const std::string bytes = RandomBytes(kBlockBytes, 300 + i);
    ASSERT_EQ(cluster_.Bmctl({"put", id, "-", "--level", "DISK_ONLY_2"}, bytes).exit_code, 0);
    stored[id] = bytes;
  }
  over_ = std::make_unique<TmpfsMount>(disks_[1], "1m", /*read_only=*/true);
  ASSERT_TRUE(over_->mounted()) << over_->error();
  ASSERT_TRUE(WaitFor([&] { return DiskState(disks_[1]) == "failed"; }, 10s))
      << cluster_.LogTail("w1");

  // The disk is swapped for an empty one, and the worker restarted.
  cluster_.KillWorker("w1");
  over_->Unmount();
  mounts_[1]->Unmount();
  mounts_[1] = std::make_unique<TmpfsMount>(disks_[1], "48m");
  ASSERT_TRUE(mounts_[1]->mounted());
  ASSERT_NO_FATAL_FAILURE(StartW1());
  for (const std::string& disk : disks_) {
    EXPECT_TRUE(WaitFor([&] { return DiskState(disk) == "ok"; }, 10s)) << disk;
  }
  // New blocks land on the replaced disk too (it is the emptiest), and every block reads back.
  for (int i = 0; i < 3; ++i) {
    const std::string id = "rdd_4_" + std::to_string(i);
    const std::string bytes = RandomBytes(kBlockBytes, 400 + i);
    ASSERT_EQ(
        cluster_.Bmctl({"put", id, "-", "--level", "DISK_ONLY", "--worker", "w1"}, bytes).exit_code,
        0);
    stored[id] = bytes;
  }
  EXPECT_TRUE(WaitFor([&] { return W1Disks()[disks_[1]].value("used", uint64_t{0}) > 0; }, 10s));
  for (const auto& [id, bytes] : stored) {
    CommandResult got = cluster_.Bmctl({"get", id});
    ASSERT_EQ(got.exit_code, 0) << id << ": " << got.err;
    EXPECT_TRUE(got.out == bytes) << id;
  }
}

// The disk's directory is moved away and a file put in its place while the worker writes to it:
// the disk fails, and nothing (a reopen of its store, RocksDB) takes the worker down with it.
TEST_F(FailedDiskTest, ADiskMovedAwayUnderLoadFailsAndTheWorkerServesFromTheOthers) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(/*tmpfs=*/false));
  std::map<std::string, std::string> single, doubled;
  ASSERT_NO_FATAL_FAILURE(PutBlocksOnEveryDisk(single, doubled));
  Load load(cluster_);
  ASSERT_TRUE(WaitFor([&] { return load.operations() >= 2; }, 30s));
  std::filesystem::rename(disks_[1], disks_[1] + "-moved-away");
  WriteFile(disks_[1], "a file where the disk's directory was");
  ExpectTheVanishedDiskFailedAlone(load, "no longer the one opened", single, doubled);
}

// `umount -l` of a disk under load: its directory becomes the bare mount point on the root
// filesystem, where every write succeeds. The disk fails as a disk, and nothing of its store is
// written into the mount point.
TEST_F(FailedDiskTest, AnUnmountedDiskFailsAndNothingIsWrittenIntoItsMountPoint) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  if (IsSkipped()) return;
  std::map<std::string, std::string> single, doubled;
  ASSERT_NO_FATAL_FAILURE(PutBlocksOnEveryDisk(single, doubled));
  Load load(cluster_);
  ASSERT_TRUE(WaitFor([&] { return load.operations() >= 2; }, 30s));
  mounts_[1]->Unmount();
  ExpectTheVanishedDiskFailedAlone(load, "no longer the one opened", single, doubled);
  std::vector<std::string> written;
  for (const auto& entry : std::filesystem::directory_iterator(disks_[1])) {
    written.push_back(entry.path().string());
  }
  EXPECT_TRUE(written.empty()) << written.front();
}

// One directory given twice, in any spelling, would be two stores naming their chunk files from
// the same generations in one chunks/ directory: refused at start, naming both spellings.
TEST(DiskAtStartTest, OneDirectoryGivenTwiceInAnySpellingIsRefused) {
  LocalCluster cluster;
  cluster.StartMaster();
  const std::string disk = cluster.dir().Sub("the-disk");
  std::filesystem::create_directories(disk);
  std::filesystem::create_directory_symlink(disk, cluster.dir().Sub("the-link"));
  for (const std::string& again : {disk + "/", disk + "/.", cluster.dir().Sub("the-link")}) {
    CommandResult refused = RunCommand(
        BinaryPath("bm-worker"),
        {"--master", cluster.master_endpoint(), "--listen", LoopbackEndpoint(FreeLoopbackPort()),
         "--memory", "8MiB", "--disk-dir", disk, "--disk-dir", again + ":1GiB"},
        "", 30s);
    EXPECT_EQ(refused.exit_code, 2) << again << ": " << refused.err;  // a usage error
    EXPECT_NE(refused.err.find("--disk-dir " + disk + " and --disk-dir " + again +
                               " are the same directory"),
              std::string::npos)
        << refused.err;
  }
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(disk) / "CURRENT"));
}

// A second worker given a disk directory that a running worker uses does not start (it would
// share the first one's chunk files), whatever its other disks.
TEST(DiskAtStartTest, ADiskDirectoryInUseByAnotherWorkerIsRefused) {
  LocalCluster cluster;
  cluster.StartMaster();
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker({"w1", "8MiB", ""}));
  const std::string shared = cluster.worker_disk_dir("w1");
  CommandResult refused =
      RunCommand(BinaryPath("bm-worker"),
                 {"--master", cluster.master_endpoint(), "--listen",
                  LoopbackEndpoint(FreeLoopbackPort()), "--memory", "8MiB", "--disk-dir",
                  cluster.dir().Sub("w2-own-disk"), "--disk-dir", shared + "/"},
                 "", 30s);
  EXPECT_EQ(refused.exit_code, 1) << refused.err;
  EXPECT_NE(refused.err.find("in use by another disk store"), std::string::npos) << refused.err;
  EXPECT_TRUE(cluster.worker_process("w1").Running());
  const std::string bytes = RandomBytes(kBlockBytes, 700);
  ASSERT_EQ(cluster.Bmctl({"put", "rdd_7_0", "-", "--level", "DISK_ONLY"}, bytes).exit_code, 0);
  CommandResult got = cluster.Bmctl({"get", "rdd_7_0"});
  ASSERT_EQ(got.exit_code, 0) << got.err;
  EXPECT_TRUE(got.out == bytes);
}

// A disk that cannot be opened at start (here its path is a file, not a directory) is failed
// from the start: the worker serves from its other disk and shows the bad one as failed, with
// the reason. Past --failed-disks-tolerated it does not start, naming the disk.
TEST(DiskAtStartTest, ADiskThatCannotBeOpenedIsFailedAndTheWorkerServesFromTheOthers) {
  LocalCluster cluster;
  cluster.StartMaster();
  const std::string bad = cluster.dir().Sub("not-a-directory");
  WriteFile(bad, "a file where a disk directory should be");

  CommandResult refused = RunCommand(
      BinaryPath("bm-worker"),
      {"--master", cluster.master_endpoint(), "--listen", LoopbackEndpoint(FreeLoopbackPort()),
       "--memory", "8MiB", "--disk-dir", cluster.dir().Sub("refused-disk"), "--disk-dir", bad,
       "--failed-disks-tolerated", "0"},
      "", 30s);
  EXPECT_EQ(refused.exit_code, 1) << refused.err;
  EXPECT_NE(refused.err.find("cannot open disk store in " + bad), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("--failed-disks-tolerated"), std::string::npos) << refused.err;

  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker({"w1", "8MiB", "", {"--disk-dir", bad}}));
  nlohmann::json shown;
  for (const nlohmann::json& worker : cluster.BmctlJson({"workers"})) {
    for (const nlohmann::json& disk : worker.value("disks", nlohmann::json::array())) {
      if (disk.value("path", "") == bad) shown = disk;
    }
  }
  EXPECT_EQ(shown.value("state", ""), "failed") << shown.dump();
  EXPECT_NE(shown.value("reason", "").find("could not be opened at start"), std::string::npos)
      << shown.dump();
  EXPECT_NE(cluster.LogTail("w1").find("disk " + bad + " has failed"), std::string::npos);

  // Every DISK_ONLY block goes to the disk that opened, and reads back.
  for (int i = 0; i < 4; ++i) {
    const std::string id = "rdd_5_" + std::to_string(i);
    const std::string bytes = RandomBytes(kBlockBytes, 500 + i);
    CommandResult put = cluster.Bmctl({"put", id, "-", "--level", "DISK_ONLY"}, bytes);
    ASSERT_EQ(put.exit_code, 0) << put.err;
    CommandResult got = cluster.Bmctl({"get", id});
    ASSERT_EQ(got.exit_code, 0) << got.err;
    EXPECT_TRUE(got.out == bytes) << id;
  }
  EXPECT_TRUE(cluster.worker_process("w1").Running());
}

}  // namespace
}  // namespace bm::testing
