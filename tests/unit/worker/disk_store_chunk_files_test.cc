// The disk store's chunk files (DiskStoreOptions::chunk_file_min_bytes, worker/disk/chunk_files.h):
// blocks whose bytes live in a file of their own beside RocksDB, which keeps only their meta.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <set>
#include <span>
#include <vector>

#include "common/core/byte_size.h"
#include "common/core/digest.h"
#include "common/core/protocol.h"
#include "tests/support/files.h"
#include "tests/support/temp_dir.h"
#include "tests/unit/worker/disk_store_helpers.h"
#include "worker/disk/disk_store.h"

namespace bm {
namespace {

using testing::Concat;
using ::testing::HasSubstr;

std::vector<std::byte> RandomBytes(size_t size, uint64_t seed) {
  return testing::RandomByteVector(size, seed);
}

using testing::ReadAll;
using testing::WriteBlock;

// `chunk_file_min_bytes` UINT64_MAX writes as stores were written before chunk files.
std::unique_ptr<DiskStore> OpenStore(
    const std::string& dir,
    uint64_t chunk_file_min_bytes = DiskStoreOptions::kDefaultChunkFileMinBytes) {
  DiskStoreOptions options;
  options.chunk_file_min_bytes = chunk_file_min_bytes;
  return testing::OpenDiskStore(dir, std::move(options));
}

class ChunkFilesTest : public ::testing::Test {
 protected:
  void SetUp() override { Reopen(); }
  void Reopen(uint64_t chunk_file_min_bytes = DiskStoreOptions::kDefaultChunkFileMinBytes) {
    store_.reset();
    store_ = OpenStore(dir_.Sub("db"), chunk_file_min_bytes);
    ASSERT_NE(store_, nullptr);
  }
  std::string ChunkDir() const { return dir_.Sub("db") + "/chunks"; }
  // The chunk files on disk, by name.
  std::set<std::string> ChunkFileNames() const {
    std::set<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(ChunkDir())) {
      names.insert(entry.path().filename().string());
    }
    return names;
  }
  std::string FileOf(const BlockId& id) {
    Result<DiskRead> read = store_->Read(id, 0, 0);
    EXPECT_TRUE(read.ok());
    char name[17];
    std::snprintf(name, sizeof name, "%016llx",
                  static_cast<unsigned long long>(read.ok() ? read->generation : 0));
    return ChunkDir() + "/" + name;
  }

  testing::TempDir dir_;
  std::unique_ptr<DiskStore> store_;
};

TEST_F(ChunkFilesTest, LargeBlocksGoToAFileOfTheirOwnAndSmallOnesStayInRocksDB) {
  const std::vector<std::byte> large = RandomBytes(3 * kChunkBytes + 17, 1);
  const std::vector<std::byte> small = RandomBytes(4 * kKiB, 2);
  ASSERT_TRUE(WriteBlock(*store_, BlockId::Rdd(1, 0), large).ok());
  ASSERT_TRUE(WriteBlock(*store_, BlockId::Rdd(1, 1), small).ok());
  const std::set<std::string> names = ChunkFileNames();
  ASSERT_EQ(names.size(), 1u);
  const std::string path = FileOf(BlockId::Rdd(1, 0));
  EXPECT_TRUE(names.contains(std::filesystem::path(path).filename().string()));
  // The file holds the block's bytes at their offsets, then the trailer describing them.
  const std::string file = testing::ReadFile(path);
  ASSERT_GT(file.size(), large.size());
  EXPECT_EQ(file.substr(0, large.size()), testing::AsString(large));
  EXPECT_NE(file.find(BlockId::Rdd(1, 0).ToString(), large.size()), std::string::npos);
  EXPECT_TRUE(ReadAll(*store_, BlockId::Rdd(1, 0)) == large);
  EXPECT_TRUE(ReadAll(*store_, BlockId::Rdd(1, 1)) == small);
  EXPECT_EQ(store_->used(), large.size() + small.size());
}

TEST_F(ChunkFilesTest, RoundTripsAnySizeAndPieces) {
  for (size_t size : {size_t{64 * kKiB}, kChunkBytes, kChunkBytes + 1, 5 * kChunkBytes + 12345}) {
    for (size_t piece : {size_t{7777}, kChunkBytes, size_t{1} << 30}) {
      const BlockId id = BlockId::Rdd(2, static_cast<int>(size + piece));
      const std::vector<std::byte> bytes = RandomBytes(size, size ^ piece);
      ASSERT_TRUE(WriteBlock(*store_, id, bytes, piece).ok());
      EXPECT_TRUE(ReadAll(*store_, id) == bytes) << size << " in pieces of " << piece;
      Result<DiskRead> checked = store_->ReadForCheckingReader(id, 0, UINT64_MAX);
      ASSERT_TRUE(checked.ok());
      EXPECT_TRUE(Concat(checked->chunks) == bytes);
      EXPECT_EQ(checked->unit_digests.size(), (size + kChunkBytes - 1) / kChunkBytes);
    }
  }
}

TEST_F(ChunkFilesTest, ReadsRangesWithTheDigestsOfTheUnitsTheyOverlap) {
  const uint64_t size = 5 * kChunkBytes + 123;
  const std::vector<std::byte> bytes = RandomBytes(size, 42);
  const BlockId id = BlockId::Broadcast(3);
  ASSERT_TRUE(WriteBlock(*store_, id, bytes).ok());
  struct Range {
    uint64_t offset;
    uint64_t length;
  };
  for (Range r : {Range{0, 1}, Range{1, kChunkBytes}, Range{kChunkBytes - 1, 2},
                  Range{2 * kChunkBytes + 5, 2 * kChunkBytes}, Range{size - 1, 100},
                  Range{12345, size}, Range{size, 10}}) {
    const uint64_t length = std::min(r.length, size - r.offset);
    const std::vector<std::byte> expected(bytes.begin() + r.offset,
                                          bytes.begin() + r.offset + length);
    for (bool for_checking_reader : {false, true}) {
      Result<DiskRead> read = for_checking_reader
                                  ? store_->ReadForCheckingReader(id, r.offset, r.length)
                                  : store_->Read(id, r.offset, r.length);
      ASSERT_TRUE(read.ok()) << read.status().ToString();
      EXPECT_EQ(read->total_size, size);
      EXPECT_TRUE(Concat(read->chunks) == expected) << r.offset << "+" << r.length;
      if (length == 0) continue;
      const uint64_t first = r.offset / kChunkBytes;
      const uint64_t last = (r.offset + length - 1) / kChunkBytes;
      ASSERT_EQ(read->unit_digests.size(), last - first + 1);
      // One chunk per unit, never one across a unit boundary.
      EXPECT_EQ(read->chunks.size(), last - first + 1);
      for (uint64_t i = first; i <= last; ++i) {
        const uint64_t end = std::min<uint64_t>((i + 1) * kChunkBytes, size);
        EXPECT_EQ(read->unit_digests[i - first],
                  DigestOf(std::span(bytes).subspan(i * kChunkBytes, end - i * kChunkBytes)));
      }
    }
  }
  EXPECT_EQ(store_->Read(id, size + 1, 1).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(ChunkFilesTest, ReplacingAndRemovingDeleteTheFileAfterTheMeta) {
  const BlockId id = BlockId::Rdd(3, 0);
  ASSERT_TRUE(WriteBlock(*store_, id, RandomBytes(2 * kChunkBytes, 1)).ok());
  const std::string first = FileOf(id);
  const std::vector<std::byte> second_bytes = RandomBytes(kChunkBytes + 5, 2);
  ASSERT_TRUE(WriteBlock(*store_, id, second_bytes).ok());
  const std::string second = FileOf(id);
  EXPECT_NE(first, second);
  store_->WaitForDeletions();
  EXPECT_FALSE(std::filesystem::exists(first));
  EXPECT_TRUE(ReadAll(*store_, id) == second_bytes);
  EXPECT_EQ(store_->used(), second_bytes.size());

  ASSERT_TRUE(store_->Remove(id).ok());
  store_->WaitForDeletions();
  EXPECT_FALSE(std::filesystem::exists(second));
  EXPECT_TRUE(ChunkFileNames().empty());
  EXPECT_EQ(store_->used(), 0u);
  Reopen();
  EXPECT_FALSE(store_->Find(id).has_value());
  EXPECT_TRUE(store_->TakeLost().empty());
}

// A file system whose deletions wait until the test lets them go: a disk slow to free a file.
class HeldDeletesFileSystem final : public rocksdb::FileSystemWrapper {
 public:
  HeldDeletesFileSystem() : FileSystemWrapper(rocksdb::FileSystem::Default()) {}
  const char* Name() const override { return "HeldDeletesFileSystem"; }

  rocksdb::IOStatus DeleteFile(const std::string& name, const rocksdb::IOOptions& options,
                               rocksdb::IODebugContext* dbg) override {
    {
      std::unique_lock lock(mutex_);
      ++started_;
      changed_.notify_all();
      // Bounded: a store that waited for its deletions fails the test instead of hanging it.
      changed_.wait_for(lock, std::chrono::seconds(5), [this] { return !hold_; });
    }
    return target()->DeleteFile(name, options, dbg);
  }
  void Hold() {
    std::lock_guard lock(mutex_);
    hold_ = true;
  }
  void Release() {
    std::lock_guard lock(mutex_);
    hold_ = false;
    changed_.notify_all();
  }
  // Waits until a deletion has begun.
  void AwaitDeletion() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [this] { return started_ > 0; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool hold_ = false;
  int started_ = 0;
};

// Removing or replacing a block does not wait for its chunk file to be deleted: while the file
// system holds the deletion, the store goes on writing and reading other blocks. The file goes
// once the file system lets it.
TEST(ChunkFileDeletionTest, RemovalsDoNotWaitForTheFileSystemToDeleteTheFile) {
  testing::TempDir dir;
  auto fs = std::make_shared<HeldDeletesFileSystem>();
  std::unique_ptr<rocksdb::Env> env = rocksdb::NewCompositeEnv(fs);
  DiskStoreOptions options;
  options.env = env.get();
  Result<std::unique_ptr<DiskStore>> opened = DiskStore::Open(dir.Sub("db"), std::move(options));
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  DiskStore& store = **opened;
  const BlockId removed = BlockId::Rdd(7, 0);
  ASSERT_TRUE(WriteBlock(store, removed, RandomBytes(2 * kChunkBytes, 1)).ok());
  Result<DiskRead> read = store.Read(removed, 0, 0);
  ASSERT_TRUE(read.ok());
  const std::string chunks = dir.Sub("db") + "/chunks";
  ASSERT_EQ(std::distance(std::filesystem::directory_iterator(chunks), {}), 1);

  fs->Hold();
  ASSERT_TRUE(store.Remove(removed).ok());
  fs->AwaitDeletion();
  // The deletion is held, and the store works on: the removal is done, another block is
  // written and read back.
  EXPECT_FALSE(store.Find(removed).has_value());
  EXPECT_EQ(store.used(), 0u);
  const std::vector<std::byte> other = RandomBytes(2 * kChunkBytes, 2);
  ASSERT_TRUE(WriteBlock(store, BlockId::Rdd(7, 1), other).ok());
  EXPECT_TRUE(ReadAll(store, BlockId::Rdd(7, 1)) == other);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(chunks), {}), 2)
      << "the removed block's file is still there while its deletion is held";

  fs->Release();
  store.WaitForDeletions();
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(chunks), {}), 1);
  opened->reset();
}

TEST_F(ChunkFilesTest, AnAbandonedWriteLeavesNoFile) {
  {
    Result<std::unique_ptr<DiskWriter>> writer =
        store_->BeginWrite(BlockId::Rdd(4, 0), StorageLevel::kDiskOnly, 4 * kChunkBytes);
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->Append(RandomBytes(3 * kChunkBytes, 1)).ok());
    EXPECT_EQ(ChunkFileNames().size(), 1u);
    EXPECT_EQ(store_->used(), 4 * kChunkBytes);
  }
  EXPECT_TRUE(ChunkFileNames().empty());
  EXPECT_EQ(store_->used(), 0u);
  // Too few bytes at commit.
  Result<std::unique_ptr<DiskWriter>> writer =
      store_->BeginWrite(BlockId::Rdd(4, 1), StorageLevel::kDiskOnly, 2 * kChunkBytes);
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->Append(RandomBytes(kChunkBytes, 2)).ok());
  EXPECT_EQ((*writer)->Commit().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(ChunkFileNames().empty());
  EXPECT_FALSE(store_->Find(BlockId::Rdd(4, 1)).has_value());
}

TEST_F(ChunkFilesTest, ReopenKeepsCommittedFilesAndSweepsOrphans) {
  const std::vector<std::byte> bytes = RandomBytes(2 * kChunkBytes + 3, 1);
  ASSERT_TRUE(WriteBlock(*store_, BlockId::Rdd(5, 0), bytes).ok());
  const uint64_t generation = store_->Read(BlockId::Rdd(5, 0), 0, 0)->generation;
  const std::string kept = FileOf(BlockId::Rdd(5, 0));
  // A crash between a file's write and its meta's commit leaves a file no meta names; a name
  // that is no generation is not the store's and stays.
  store_.reset();
  char orphan[17];
  std::snprintf(orphan, sizeof orphan, "%016llx", static_cast<unsigned long long>(generation + 40));
  testing::WriteFile(ChunkDir() + "/" + orphan, std::string(kChunkBytes, 'x'));
  testing::WriteFile(ChunkDir() + "/notes.txt", "operator's file");

  Reopen();
  EXPECT_TRUE(ReadAll(*store_, BlockId::Rdd(5, 0)) == bytes);
  EXPECT_TRUE(std::filesystem::exists(kept));
  EXPECT_FALSE(std::filesystem::exists(ChunkDir() + "/" + orphan));
  EXPECT_TRUE(std::filesystem::exists(ChunkDir() + "/notes.txt"));
  EXPECT_GT(store_->next_generation(), generation + 40) << "no generation names two files";
  EXPECT_TRUE(store_->TakeLost().empty());
  EXPECT_EQ(store_->used(), bytes.size());
}

// A crash of the machine (not promised: nothing is fsynced) can leave a meta whose file was cut
// short or never reached the disk: the block is lost, named, never served in part.
TEST_F(ChunkFilesTest, AFileCutShortOrMissingCostsItsBlockOnlyAndIsReportedLost) {
  const std::vector<std::byte> whole = RandomBytes(2 * kChunkBytes, 1);
  ASSERT_TRUE(WriteBlock(*store_, BlockId::Rdd(6, 0), whole).ok());
  ASSERT_TRUE(WriteBlock(*store_, BlockId::Rdd(6, 1), RandomBytes(3 * kChunkBytes, 2)).ok());
  ASSERT_TRUE(WriteBlock(*store_, BlockId::Rdd(6, 2), RandomBytes(kChunkBytes, 3)).ok());
  const std::string cut = FileOf(BlockId::Rdd(6, 1));
  const std::string missing = FileOf(BlockId::Rdd(6, 2));
  store_.reset();
  std::filesystem::resize_file(cut, kChunkBytes + 100);
  std::filesystem::remove(missing);

  Reopen();
  EXPECT_TRUE(ReadAll(*store_, BlockId::Rdd(6, 0)) == whole);
  EXPECT_FALSE(store_->Find(BlockId::Rdd(6, 1)).has_value());
  EXPECT_FALSE(store_->Find(BlockId::Rdd(6, 2)).has_value());
  std::vector<LostBlock> lost = store_->TakeLost();
  ASSERT_EQ(lost.size(), 2u);
  EXPECT_EQ(lost[0].id, BlockId::Rdd(6, 1));
  EXPECT_THAT(lost[0].reason, HasSubstr("holds " + std::to_string(kChunkBytes + 100)));
  EXPECT_EQ(lost[1].id, BlockId::Rdd(6, 2));
  EXPECT_THAT(lost[1].reason, HasSubstr("missing"));
  EXPECT_EQ(store_->corrupt_count(), 2u);
  EXPECT_EQ(store_->used(), whole.size());
  store_->WaitForDeletions();  // the short file goes on the deleter's thread
  EXPECT_FALSE(std::filesystem::exists(cut)) << "the short file is swept with its meta";
  // Reported once: the next open finds nothing more.
  Reopen();
  EXPECT_TRUE(store_->TakeLost().empty());
}

TEST_F(ChunkFilesTest, AFileCutShortUnderARunningStoreFailsTheReadAsDataLoss) {
  const std::vector<std::byte> bytes = RandomBytes(3 * kChunkBytes, 1);
  ASSERT_TRUE(WriteBlock(*store_, BlockId::Rdd(7, 0), bytes).ok());
  std::filesystem::resize_file(FileOf(BlockId::Rdd(7, 0)), kChunkBytes);
  // The first unit is still whole.
  Result<DiskRead> head = store_->Read(BlockId::Rdd(7, 0), 0, kChunkBytes);
  ASSERT_TRUE(head.ok());
  EXPECT_TRUE(Concat(head->chunks) == std::vector(bytes.begin(), bytes.begin() + kChunkBytes));
  Result<DiskRead> read = store_->ReadForCheckingReader(BlockId::Rdd(7, 0), 0, UINT64_MAX);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), StatusCode::kDataLoss);
  EXPECT_FALSE(store_->Find(BlockId::Rdd(7, 0)).has_value());
  ASSERT_EQ(store_->TakeLost().size(), 1u);
}

TEST_F(ChunkFilesTest, ACorruptByteFailsACheckedReadAndReachesACheckingReader) {
  const std::vector<std::byte> bytes = RandomBytes(3 * kChunkBytes, 1);
  const BlockId id = BlockId::Rdd(8, 0);
  ASSERT_TRUE(WriteBlock(*store_, id, bytes).ok());
  ASSERT_TRUE(store_->CorruptStoredByte(id, kChunkBytes + 10).ok());
  // Unit 0 is intact: a checked read of it is served.
  Result<DiskRead> head = store_->Read(id, 0, 100);
  ASSERT_TRUE(head.ok());
  // The checking reader gets the flipped byte with the unit's original digest.
  Result<DiskRead> unchecked = store_->ReadForCheckingReader(id, kChunkBytes, kChunkBytes);
  ASSERT_TRUE(unchecked.ok());
  const std::vector<std::byte> got = Concat(unchecked->chunks);
  EXPECT_EQ(got[10], bytes[kChunkBytes + 10] ^ std::byte{0xFF});
  EXPECT_NE(DigestOf(got), unchecked->unit_digests[0]);
  // A read that checks itself (Read: the scrubber, verifyBlock) finds it and drops the block.
  Result<DiskRead> checked = store_->Read(id, kChunkBytes + 20, 5);
  ASSERT_FALSE(checked.ok());
  EXPECT_EQ(checked.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(checked.status().message(), HasSubstr("does not match its digest"));
  EXPECT_FALSE(store_->Find(id).has_value());
  EXPECT_EQ(store_->corrupt_count(), 1u);
}

TEST_F(ChunkFilesTest, ASpillOfAWholeBlockTakesTheFilePath) {
  const std::vector<std::byte> bytes = RandomBytes(2 * kChunkBytes + 9, 1);
  const BlockDigests digests = [&] {
    BlockDigester digester;
    digester.Update(bytes);
    return digester.Finish();
  }();
  ASSERT_TRUE(store_
                  ->Write(BlockId::Rdd(9, 0), StorageLevel::kMemoryAndDisk,
                          testing::BlockDataOf(bytes), 7, digests.units)
                  .ok());
  EXPECT_EQ(ChunkFileNames().size(), 1u);
  EXPECT_TRUE(ReadAll(*store_, BlockId::Rdd(9, 0)) == bytes);
  EXPECT_EQ(store_->Find(BlockId::Rdd(9, 0))->version, 7u);
}

// A store written before chunk files (every block in RocksDB records) reads back under the
// new layout, and its blocks are replaced and removed in place.
TEST_F(ChunkFilesTest, BlocksWrittenInRocksDBReadBackUnderTheNewLayout) {
  Reopen(/*chunk_file_min_bytes=*/UINT64_MAX);
  const std::vector<std::byte> old_large = RandomBytes(3 * kChunkBytes + 5, 1);
  const std::vector<std::byte> old_kept = RandomBytes(2 * kChunkBytes, 2);
  ASSERT_TRUE(WriteBlock(*store_, BlockId::Rdd(10, 0), old_large).ok());
  ASSERT_TRUE(WriteBlock(*store_, BlockId::Rdd(10, 1), old_kept).ok());
  ASSERT_TRUE(WriteBlock(*store_, BlockId::Rdd(10, 2), RandomBytes(kChunkBytes, 3)).ok());
  EXPECT_TRUE(ChunkFileNames().empty());

  Reopen();
  EXPECT_TRUE(ReadAll(*store_, BlockId::Rdd(10, 0)) == old_large);
  Result<DiskRead> range = store_->ReadForCheckingReader(BlockId::Rdd(10, 0), kChunkBytes - 3, 9);
  ASSERT_TRUE(range.ok());
  EXPECT_TRUE(Concat(range->chunks) == std::vector(old_large.begin() + kChunkBytes - 3,
                                                   old_large.begin() + kChunkBytes + 6));
  // Replaced: the new version goes to a file; removed: gone.
  const std::vector<std::byte> fresh = RandomBytes(kChunkBytes + 1, 4);
  ASSERT_TRUE(WriteBlock(*store_, BlockId::Rdd(10, 0), fresh).ok());
  ASSERT_TRUE(store_->Remove(BlockId::Rdd(10, 2)).ok());
  EXPECT_EQ(ChunkFileNames().size(), 1u);

  Reopen();
  EXPECT_TRUE(ReadAll(*store_, BlockId::Rdd(10, 0)) == fresh);
  EXPECT_TRUE(ReadAll(*store_, BlockId::Rdd(10, 1)) == old_kept);
  EXPECT_FALSE(store_->Find(BlockId::Rdd(10, 2)).has_value());
  EXPECT_TRUE(store_->TakeLost().empty());
  EXPECT_EQ(store_->used(), fresh.size() + old_kept.size());
}

}  // namespace
}  // namespace bm
