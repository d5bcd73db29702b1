#include "worker/disk_set.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include "common/core/byte_size.h"
#include "tests/support/files.h"
#include "tests/support/temp_dir.h"
#include "tests/unit/worker/block_manager_sync.h"
#include "tests/unit/worker/fault_injecting_store.h"
#include "tests/unit/worker/in_memory_store.h"
#include "worker/block_manager.h"
#include "worker/eviction_policy.h"

namespace bm {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

TEST(ParseDiskDirTest, ReadsAPathAlone) {
  Result<DiskDirSpec> spec = ParseDiskDir("/data1");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->path, "/data1");
  EXPECT_EQ(spec->limit, 0u);
}

TEST(ParseDiskDirTest, ReadsAPathWithALimit) {
  Result<DiskDirSpec> spec = ParseDiskDir("/data1:200GiB");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->path, "/data1");
  EXPECT_EQ(spec->limit, 200 * kGiB);
}

TEST(ParseDiskDirTest, BadLimitsGiveAClearError) {
  for (const char* text : {"/data1:", "/data1:lots", "/data1:-5GiB", "/data1:12XB"}) {
    Result<DiskDirSpec> spec = ParseDiskDir(text);
    ASSERT_FALSE(spec.ok()) << text;
    EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(spec.status().message(), HasSubstr(text));
    EXPECT_THAT(spec.status().message(), HasSubstr("limit"));
  }
}

TEST(ParseDiskDirTest, AnEmptyPathIsRefused) {
  for (const char* text : {"", ":10GiB"}) {
    Result<DiskDirSpec> spec = ParseDiskDir(text);
    ASSERT_FALSE(spec.ok()) << text;
    EXPECT_THAT(spec.status().message(), HasSubstr("directory is empty"));
  }
}

TEST(ChooseDiskTest, PicksTheDiskWithTheMostFreeSpaceRelativeToItsCapacity) {
  // 50% free of 100, 60% free of 1000, 90% free of 10: the fraction decides, not the bytes.
  std::vector<DiskRoom> disks = {{true, 50, 100}, {true, 400, 1000}, {true, 1, 10}};
  EXPECT_EQ(ChooseDiskByAvailableSpace(disks, 1), 2u);
  // Too big for the emptiest: the next by fraction that fits.
  EXPECT_EQ(ChooseDiskByAvailableSpace(disks, 20), 1u);
  EXPECT_EQ(ChooseDiskByAvailableSpace(disks, 600), 1u);
  EXPECT_EQ(ChooseDiskByAvailableSpace(disks, 601), std::nullopt);
}

TEST(ChooseDiskTest, SkipsFailedAndReadOnlyDisksAndBreaksTiesByOrder) {
  std::vector<DiskRoom> disks = {{false, 0, 100}, {true, 10, 100}, {true, 10, 100}};
  EXPECT_EQ(ChooseDiskByAvailableSpace(disks, 1), 1u);
  disks[1].usable = false;
  EXPECT_EQ(ChooseDiskByAvailableSpace(disks, 1), 2u);
  disks[2].usable = false;
  EXPECT_EQ(ChooseDiskByAvailableSpace(disks, 1), std::nullopt);
}

TEST(CheckDiskDirectoryTest, PassesOnAWritableDirectoryAndLeavesNothingBehind) {
  testing::TempDir dir;
  EXPECT_TRUE(CheckDiskDirectory(dir.path()).ok());
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(CheckDiskDirectoryTest, FailsOnAMissingDirectory) {
  testing::TempDir dir;
  Status checked = CheckDiskDirectory(dir.Sub("gone"));
  EXPECT_EQ(checked.code(), StatusCode::kInternal) << checked.ToString();
  EXPECT_THAT(checked.message(), HasSubstr("gone"));
}

std::vector<std::byte> Bytes(size_t size, uint8_t seed) {
  std::vector<std::byte> bytes(size);
  for (size_t i = 0; i < size; ++i) bytes[i] = std::byte(static_cast<uint8_t>(i * 7 + seed));
  return bytes;
}

// A block manager over three in-memory disks, the second behind a fault-injecting store.
class SeveralDisksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<DiskSlot> disks;
    for (int i = 0; i < 3; ++i) {
      std::unique_ptr<BlockStore> store = std::make_unique<testing::InMemoryStore>(kDiskBytes);
      if (i == 1) {
        auto faulty = std::make_unique<testing::FaultInjectingStore>(std::move(store));
        faulty_ = faulty.get();
        store = std::move(faulty);
      }
      disks.push_back(DiskSlot{"", std::move(store), kDiskBytes});
    }
    BlockManagerOptions options;
    options.disk_check_interval = 50ms;
    options.disk_check_timeout = 300ms;
    manager_ = std::make_unique<BlockManager>(std::make_unique<MemoryStore>(kKiB), std::move(disks),
                                              options);
  }

  void TearDown() override {
    if (faulty_ != nullptr) faulty_->ClearFaults();  // lets an abandoned thread finish
  }

  Status Put(const BlockId& id, const std::vector<std::byte>& bytes) {
    BM_ASSIGN_OR_RETURN(BlockManager::UploadId upload,
                        manager_->BeginPut(id, StorageLevel::kDiskOnly, bytes.size()));
    BM_RETURN_IF_ERROR(testing::AppendPut(*manager_, upload, {MakeChunk(std::span(bytes))}));
    return testing::CommitPut(*manager_, upload).status();
  }

  // Which disk each block went to, from the stats' per-disk use.
  std::vector<uint64_t> DiskUse() const {
    std::vector<uint64_t> used;
    for (const DiskStats& disk : manager_->Stats().disks) used.push_back(disk.used);
    return used;
  }

  static constexpr uint64_t kDiskBytes = 64 * kKiB;
  testing::FaultInjectingStore* faulty_ = nullptr;
  std::unique_ptr<BlockManager> manager_;
};

TEST_F(SeveralDisksTest, NewBlocksSpreadOverTheDisksByFreeSpace) {
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(Put(BlockId::Rdd(1, i), Bytes(4 * kKiB, i)).ok());
  }
  // Each put went to the emptiest disk: two blocks on each.
  EXPECT_EQ(DiskUse(), (std::vector<uint64_t>{8 * kKiB, 8 * kKiB, 8 * kKiB}));
  for (int i = 0; i < 6; ++i) {
    Result<BlockRead> read = testing::Read(*manager_, BlockId::Rdd(1, i), 0, UINT64_MAX);
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    EXPECT_EQ(testing::Concat(read->chunks), Bytes(4 * kKiB, i));
  }
  const WorkerStats stats = manager_->Stats();
  EXPECT_EQ(stats.disk_used, 24 * kKiB);
  EXPECT_EQ(stats.disk_capacity, 3 * kDiskBytes);
}

TEST_F(SeveralDisksTest, AReplacementStaysOnItsDiskAndTheOldCopyGoes) {
  ASSERT_TRUE(Put(BlockId::Rdd(1, 0), Bytes(4 * kKiB, 1)).ok());
  ASSERT_TRUE(Put(BlockId::Rdd(1, 0), Bytes(2 * kKiB, 2)).ok());
  EXPECT_EQ(DiskUse(), (std::vector<uint64_t>{2 * kKiB, 0, 0}));
}

TEST_F(SeveralDisksTest, AHangingDiskFailsByTimeoutAndDoesNotStallTheOthers) {
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Put(BlockId::Rdd(1, i), Bytes(4 * kKiB, i)).ok());
  ASSERT_EQ(DiskUse(), (std::vector<uint64_t>{4 * kKiB, 4 * kKiB, 4 * kKiB}));
  manager_->TakeChanges();

  // Disk 1 (holding rdd_1_1) hangs on reads: a read of its block waits in its thread.
  faulty_->HoldReads();
  bool hung_read_answered = false;
  Status hung_read;
  manager_->Read(BlockId::Rdd(1, 1), 0, UINT64_MAX, [&](Result<BlockRead> read) {
    hung_read_answered = true;
    hung_read = read.status();
  });
  while (faulty_->reads_waiting() == 0) std::this_thread::sleep_for(1ms);

  // Gets from the other disks are not held up behind it: each is answered while the hung
  // read still waits (well within the timeout, before anything is failed).
  for (int i : {0, 2}) {
    std::optional<Result<BlockRead>> read;
    manager_->Read(BlockId::Rdd(1, i), 0, UINT64_MAX,
                   [&](Result<BlockRead> result) { read = std::move(result); });
    const auto by = std::chrono::steady_clock::now() + 200ms;
    while (!read.has_value() && std::chrono::steady_clock::now() < by) {
      pollfd fd{manager_->completion_fd(), POLLIN, 0};
      ::poll(&fd, 1, 10);
      manager_->RunCompletions();
    }
    ASSERT_TRUE(read.has_value()) << "a get from disk " << i << " waited for the hung disk";
    ASSERT_TRUE(read->ok()) << read->status().ToString();
    EXPECT_EQ(testing::Concat((*read)->chunks), Bytes(4 * kKiB, i));
  }
  EXPECT_FALSE(hung_read_answered);
  EXPECT_EQ(manager_->failed_disk_count(), 0u);

  // Past the timeout, maintenance finds it hung and fails it.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (manager_->failed_disk_count() == 0 && std::chrono::steady_clock::now() < deadline) {
    manager_->Maintain();
    manager_->RunCompletions();
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_EQ(manager_->failed_disk_count(), 1u);
  const WorkerStats stats = manager_->Stats();
  ASSERT_EQ(stats.disks.size(), 3u);
  EXPECT_EQ(stats.disks[1].state, DiskState::kFailed);
  EXPECT_THAT(stats.disks[1].reason, HasSubstr("timeout"));
  EXPECT_EQ(stats.disks[0].state, DiskState::kOk);

  // Its block is reported lost and removed; a read of it now fails at once, naming the disk.
  std::vector<LostBlock> lost = manager_->TakeLost();
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].id, BlockId::Rdd(1, 1));
  EXPECT_EQ(lost[0].cause, LostCause::kDiskFailed);
  EXPECT_THAT(lost[0].reason, HasSubstr("disk failed"));
  EXPECT_FALSE(manager_->Find(BlockId::Rdd(1, 1)).has_value());
  Result<BlockRead> read = testing::Read(*manager_, BlockId::Rdd(1, 1), 0, UINT64_MAX);
  EXPECT_EQ(read.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(read.status().message(), HasSubstr("has failed"));

  // New blocks go to the disks that work, and the others keep serving.
  for (int i = 10; i < 14; ++i) ASSERT_TRUE(Put(BlockId::Rdd(1, i), Bytes(4 * kKiB, i)).ok());
  for (int i : {0, 2, 10, 11, 12, 13}) {
    Result<BlockRead> again = testing::Read(*manager_, BlockId::Rdd(1, i), 0, UINT64_MAX);
    ASSERT_TRUE(again.ok()) << again.status().ToString();
  }
  EXPECT_EQ(manager_->Stats().disks[1].used, 0u);

  // The hung read is answered if the disk ever returns (the test lets it go).
  faulty_->ClearFaults();
  // Once the read returns, the failed disk's store is closed (destroyed) behind it: not ours to
  // touch any more, TearDown included.
  faulty_ = nullptr;
  const auto answered_by = std::chrono::steady_clock::now() + 10s;
  while (!hung_read_answered && std::chrono::steady_clock::now() < answered_by) {
    manager_->RunCompletions();
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_TRUE(hung_read_answered);
}

// The directory of a disk replaced under the worker (moved away and another put in its place,
// or the disk unmounted from under its mount point): the disk fails, naming why, though the
// new directory takes the check's writes.
TEST(DiskCheckTest, ADiskWhoseDirectoryIsReplacedFails) {
  testing::TempDir dir;
  const std::string disk = dir.Sub("disk");
  std::filesystem::create_directories(disk);
  std::vector<DiskSlot> disks;
  disks.push_back(DiskSlot{disk, std::make_unique<testing::InMemoryStore>(64 * kKiB), 64 * kKiB});
  disks.push_back(DiskSlot{"", std::make_unique<testing::InMemoryStore>(64 * kKiB), 64 * kKiB});
  BlockManagerOptions options;
  options.disk_check_interval = 20ms;
  options.disk_check_timeout = 5s;
  BlockManager manager(std::make_unique<MemoryStore>(kKiB), std::move(disks), options);
  std::filesystem::rename(disk, dir.Sub("moved-away"));
  std::filesystem::create_directories(disk);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (manager.failed_disk_count() == 0 && std::chrono::steady_clock::now() < deadline) {
    manager.Maintain();
    pollfd fd{manager.completion_fd(), POLLIN, 0};
    ::poll(&fd, 1, 10);
    manager.RunCompletions();
  }
  ASSERT_EQ(manager.failed_disk_count(), 1u);
  EXPECT_EQ(manager.Stats().disks[0].state, DiskState::kFailed);
  EXPECT_THAT(manager.Stats().disks[0].reason, HasSubstr("no longer the one opened"));
  EXPECT_EQ(manager.Stats().disks[1].state, DiskState::kOk);
}

// A disk with more work queued than the timeout, each job well within it, is busy, not hung:
// its directory check waits behind that work and the disk is not failed for it.
TEST(DiskCheckTest, ADiskCheckQueuedBehindSlowButMovingWorkDoesNotFailTheDisk) {
  testing::TempDir dir;
  auto faulty = std::make_unique<testing::FaultInjectingStore>(
      std::make_unique<testing::InMemoryStore>(64 * kKiB));
  testing::FaultInjectingStore& store = *faulty;
  std::vector<DiskSlot> disks;
  disks.push_back(DiskSlot{dir.path().string(), std::move(faulty), 64 * kKiB});
  BlockManagerOptions options;
  options.disk_check_interval = 20ms;
  options.disk_check_timeout = 300ms;
  BlockManager manager(std::make_unique<MemoryStore>(kKiB), std::move(disks), options);
  Result<BlockManager::UploadId> upload =
      manager.BeginPut(BlockId::Rdd(1, 0), StorageLevel::kDiskOnly, 4 * kKiB);
  ASSERT_TRUE(upload.ok()) << upload.status().ToString();
  const std::vector<std::byte> bytes = Bytes(4 * kKiB, 0);
  ASSERT_TRUE(testing::AppendPut(manager, *upload, {MakeChunk(std::span(bytes))}).ok());
  ASSERT_TRUE(testing::CommitPut(manager, *upload).ok());

  // Ten reads of 100 ms each: a second of work, queued at once, behind which checks queue.
  store.SetReadDelay(100ms);
  int answered = 0;
  for (int i = 0; i < 10; ++i) {
    manager.Read(BlockId::Rdd(1, 0), 0, UINT64_MAX, [&](Result<BlockRead> read) {
      EXPECT_TRUE(read.ok()) << read.status().ToString();
      ++answered;
    });
  }
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (answered < 10 && std::chrono::steady_clock::now() < deadline) {
    manager.Maintain();
    pollfd fd{manager.completion_fd(), POLLIN, 0};
    ::poll(&fd, 1, 10);
    manager.RunCompletions();
  }
  EXPECT_EQ(answered, 10);
  EXPECT_EQ(manager.failed_disk_count(), 0u) << manager.Stats().disks[0].reason;
}

// A block manager with an 8 KiB LRU memory tier over two disks, the first behind a
// fault-injecting store that the tests hang. Both disks start empty, so every spill chooses
// disk 0 (the first of equals) while its stats stay as they are.
class SpillToAFailedDiskTest : public ::testing::Test {
 protected:
  using UploadId = BlockManager::UploadId;

  void SetUp() override {
    auto faulty = std::make_unique<testing::FaultInjectingStore>(
        std::make_unique<testing::InMemoryStore>(64 * kKiB));
    hung_ = faulty.get();
    std::vector<DiskSlot> disks;
    disks.push_back(DiskSlot{"", std::move(faulty), 64 * kKiB});
    disks.push_back(DiskSlot{"", std::make_unique<testing::InMemoryStore>(64 * kKiB), 64 * kKiB});
    BlockManagerOptions options;
    options.disk_check_interval = 50ms;
    options.disk_check_timeout = 300ms;
    manager_ = std::make_unique<BlockManager>(
        std::make_unique<MemoryStore>(8 * kKiB, MakeEvictionPolicy(EvictionMode::kLru)),
        std::move(disks), options);
  }

  void TearDown() override {
    if (hung_ != nullptr) hung_->ClearFaults();  // lets the held thread finish
  }

  // Runs the manager's maintenance and completions until `done`, for at most 10 s.
  bool RunUntil(const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!done() && std::chrono::steady_clock::now() < deadline) {
      manager_->Maintain();
      pollfd fd{manager_->completion_fd(), POLLIN, 0};
      ::poll(&fd, 1, 10);
      manager_->RunCompletions();
    }
    return done();
  }

  // A MEMORY_AND_DISK upload of `bytes`, every byte appended, not committed.
  UploadId Append(const BlockId& id, const std::vector<std::byte>& bytes) {
    Result<UploadId> upload = manager_->BeginPut(id, StorageLevel::kMemoryAndDisk, bytes.size());
    EXPECT_TRUE(upload.ok()) << upload.status().ToString();
    if (!upload.ok()) return 0;
    std::optional<Status> appended;
    manager_->AppendPut(*upload, {MakeChunk(std::span(bytes))}, {},
                        [&](Status s) { appended = std::move(s); });
    EXPECT_TRUE(RunUntil([&] { return appended.has_value(); })) << id.ToString();
    EXPECT_TRUE(appended.has_value() && appended->ok()) << id.ToString();
    return *upload;
  }

  void Put(const BlockId& id, const std::vector<std::byte>& bytes) {
    const UploadId upload = Append(id, bytes);
    std::optional<Result<Tier>> committed;
    manager_->CommitPut(upload, [&](Result<Tier> tier) { committed = std::move(tier); });
    ASSERT_TRUE(RunUntil([&] { return committed.has_value(); })) << id.ToString();
    ASSERT_TRUE(committed->ok()) << committed->status().ToString();
  }

  // Once a held write returns, the failed disk's store is closed (destroyed) behind it: not
  // ours to touch any more, TearDown included.
  void ReleaseTheHungDisk() {
    hung_->ClearFaults();
    hung_ = nullptr;
  }

  testing::FaultInjectingStore* hung_ = nullptr;
  std::unique_ptr<BlockManager> manager_;
};

// Spills queued on a disk that hangs wait behind its hung job. When the disk is failed they go
// to another disk: their bytes are still in memory, so they are neither lost nor held in the spill
// backlog (which holds back puts) for as long as the disk hangs.
TEST_F(SpillToAFailedDiskTest, SpillsQueuedOnAHungDiskGoToAnotherDiskWhenItFails) {
  // One RDD per block: a block never evicts its own RDD's.
  hung_->HoldWrites();
  for (int i = 0; i < 4; ++i) {
    ASSERT_NO_FATAL_FAILURE(Put(BlockId::Rdd(i, 0), Bytes(4 * kKiB, i)));
  }
  // The third and fourth puts evicted two blocks to make room; their spills wait on disk 0.
  ASSERT_TRUE(RunUntil([&] { return hung_->writes_waiting() == 1; }));
  EXPECT_EQ(manager_->spills_pending(), 2u);
  EXPECT_EQ(manager_->spill_backlog_bytes(), 8 * kKiB);
  EXPECT_EQ(manager_->failed_disk_count(), 0u);

  // Past the timeout disk 0 is failed, and the spills queued on it are written to disk 1.
  ASSERT_TRUE(RunUntil([&] {
    return manager_->failed_disk_count() == 1 && manager_->spills_pending() == 0;
  })) << manager_->spills_pending()
      << " spills still pending, " << manager_->spill_backlog_bytes()
      << " bytes in the spill backlog";
  EXPECT_EQ(manager_->spill_backlog_bytes(), 0u);
  // The hung jobs still hold the bytes they were given: counted until they return.
  EXPECT_EQ(manager_->orphaned_spill_bytes(), 8 * kKiB);
  EXPECT_EQ(manager_->Stats().disks[1].used, 8 * kKiB);
  // Nothing was on disk 0 and nothing is lost.
  EXPECT_TRUE(manager_->TakeLost().empty());
  auto every_block_reads_back = [&] {
    int on_disk = 0;
    for (int i = 0; i < 4; ++i) {
      std::optional<BlockStatus> found = manager_->Find(BlockId::Rdd(i, 0));
      EXPECT_TRUE(found.has_value()) << i;
      if (found.has_value() && found->tier == Tier::kDisk) ++on_disk;
      Result<BlockRead> read = testing::Read(*manager_, BlockId::Rdd(i, 0), 0, UINT64_MAX);
      EXPECT_TRUE(read.ok()) << read.status().ToString();
      if (read.ok()) {
        EXPECT_EQ(testing::Concat(read->chunks), Bytes(4 * kKiB, i)) << i;
      }
    }
    EXPECT_EQ(on_disk, 2);
  };
  every_block_reads_back();

  // If the disk returns, its old spills' completions change nothing.
  ReleaseTheHungDisk();
  // Two stale spills and the closing of the store: three completions (and any disk check of
  // disk 1 still queued).
  size_t ran = 0;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (ran < 3 && std::chrono::steady_clock::now() < deadline) {
    pollfd fd{manager_->completion_fd(), POLLIN, 0};
    ::poll(&fd, 1, 10);
    ran += manager_->RunCompletions();
  }
  EXPECT_GE(ran, 3u);
  every_block_reads_back();
  EXPECT_EQ(manager_->orphaned_spill_bytes(), 0u);
}

// A spill refused with an I/O error by a disk not (yet) failed: its bytes are still in memory,
// so another disk takes them rather than the block being dropped.
TEST_F(SpillToAFailedDiskTest, ASpillRefusedWithAnIOErrorGoesToAnotherDisk) {
  hung_->FailWrites(InternalError("injected I/O error"));
  for (int i = 0; i < 3; ++i) {
    ASSERT_NO_FATAL_FAILURE(Put(BlockId::Rdd(i, 0), Bytes(4 * kKiB, i)));
  }
  // The third put evicted rdd_0_0; disk 0 refused its spill, disk 1 took it.
  ASSERT_TRUE(RunUntil([&] { return manager_->spills_pending() == 0; }));
  EXPECT_EQ(manager_->failed_disk_count(), 0u);
  EXPECT_EQ(manager_->Stats().disks[1].used, 4 * kKiB);
  std::optional<BlockStatus> found = manager_->Find(BlockId::Rdd(0, 0));
  ASSERT_TRUE(found.has_value()) << "the evicted block was dropped";
  EXPECT_EQ(found->tier, Tier::kDisk);
  Result<BlockRead> read = testing::Read(*manager_, BlockId::Rdd(0, 0), 0, UINT64_MAX);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(testing::Concat(read->chunks), Bytes(4 * kKiB, 0));
  EXPECT_TRUE(manager_->TakeLost().empty());
}

// A put replacing a block whose spill waits on a disk that then fails: the old version is not
// spilled to another disk. The put deletes the block from the disk its spill was queued on, so a
// copy written elsewhere would outlive the put (and come back at the next start).
TEST_F(SpillToAFailedDiskTest, TheOldVersionOfABlockBeingReplacedIsNotSpilledElsewhere) {
  hung_->HoldWrites();
  for (int i = 0; i < 3; ++i) {
    ASSERT_NO_FATAL_FAILURE(Put(BlockId::Rdd(i, 0), Bytes(4 * kKiB, i)));
  }
  ASSERT_EQ(manager_->spills_pending(), 1u) << "the third put evicts rdd_0_0 (LRU)";
  // rdd_0_0 put anew: its bytes evict rdd_1_0 (whose spill queues on disk 0 too), and its
  // commit deletes the old version from disk 0 first, behind the held spill.
  const std::vector<std::byte> second = Bytes(4 * kKiB, 9);
  const UploadId upload = Append(BlockId::Rdd(0, 0), second);
  std::optional<Result<Tier>> committed;
  manager_->CommitPut(upload, [&](Result<Tier> tier) { committed = std::move(tier); });

  ASSERT_TRUE(RunUntil(
      [&] { return manager_->failed_disk_count() == 1 && manager_->spills_pending() == 0; }));
  EXPECT_EQ(manager_->Stats().disks[1].used, 4 * kKiB) << "rdd_1_0 alone went to disk 1";

  // The disk returns: the put commits, serves its own bytes, and disk 1 still holds only
  // rdd_1_0.
  ReleaseTheHungDisk();
  ASSERT_TRUE(RunUntil([&] { return committed.has_value(); }));
  ASSERT_TRUE(committed->ok()) << committed->status().ToString();
  Result<BlockRead> read = testing::Read(*manager_, BlockId::Rdd(0, 0), 0, UINT64_MAX);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(testing::Concat(read->chunks), second);
  EXPECT_EQ(manager_->Stats().disks[1].used, 4 * kKiB);
}

TEST_F(SeveralDisksTest, AnErrorFromADiskWithoutADirectoryDoesNotFailIt) {
  // An I/O error triggers a check; with no directory to check (in-memory stores) only the store's
  // own state says anything, and a refused write alone fails nothing.
  faulty_->FailWrites(InternalError("injected I/O error"));
  for (int i = 0; i < 6; ++i) {
    static_cast<void>(Put(BlockId::Rdd(2, i), Bytes(kKiB, i)));
  }
  manager_->Maintain();
  manager_->RunCompletions();
  EXPECT_EQ(manager_->failed_disk_count(), 0u);
}

}  // namespace
}  // namespace bm
