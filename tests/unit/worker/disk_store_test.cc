#include "worker/disk/disk_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/iterator.h>
#include <rocksdb/options.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <string_view>
#include <vector>

#include "common/core/byte_size.h"
#include "common/core/digest.h"
#include "common/core/protocol.h"
#include "tests/support/files.h"
#include "tests/support/temp_dir.h"
#include "tests/unit/worker/disk_store_helpers.h"

namespace bm {
namespace {

using ::testing::HasSubstr;

std::vector<std::byte> RandomBytes(size_t size, uint64_t seed) {
  return testing::RandomByteVector(size, seed);
}

using testing::Concat;
using testing::ReadAll;
using testing::WriteBlock;

// With every block's bytes in RocksDB records (chunk files off): these tests look at the
// RocksDB layout, which small blocks and stores written before chunk files keep. Chunk files
// are tested in disk_store_chunk_files_test.cc; the space tests below run with them on.
std::unique_ptr<DiskStore> OpenStore(const std::string& dir, uint64_t limit = 0) {
  DiskStoreOptions options;
  options.limit_bytes = limit;
  options.chunk_file_min_bytes = UINT64_MAX;
  return testing::OpenDiskStore(dir, std::move(options));
}

// Keys in a closed store's database that start with `prefix`, read with RocksDB directly.
size_t CountRawKeys(const std::string& dir, const std::string& prefix) {
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::OpenForReadOnly(rocksdb::Options(), dir, &raw);
  EXPECT_TRUE(s.ok()) << s.ToString();
  if (!s.ok()) return 0;
  std::unique_ptr<rocksdb::DB> db(raw);
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
  size_t count = 0;
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) ++count;
  return count;
}

void PutBigEndian(std::string& out, uint64_t value) {
  for (int shift = 56; shift >= 0; shift -= 8) out.push_back(static_cast<char>(value >> shift));
}

// The documented key layout (disk_store.cc): every record of a version under its generation.
std::string VersionKey(uint64_t generation) {
  std::string key = "v";
  PutBigEndian(key, generation);
  return key;
}

// Every key in a closed store's database, in order, read with RocksDB directly.
std::vector<std::string> RawKeys(const std::string& dir) {
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::OpenForReadOnly(rocksdb::Options(), dir, &raw);
  EXPECT_TRUE(s.ok()) << s.ToString();
  if (!s.ok()) return {};
  std::unique_ptr<rocksdb::DB> db(raw);
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
  std::vector<std::string> keys;
  for (it->SeekToFirst(); it->Valid(); it->Next()) keys.push_back(it->key().ToString());
  return keys;
}

class DiskStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = OpenStore(dir_.Sub("db"));
    ASSERT_NE(store_, nullptr);
  }
  void Reopen(uint64_t limit = 0) {
    store_.reset();
    store_ = OpenStore(dir_.Sub("db"), limit);
    ASSERT_NE(store_, nullptr);
  }
  // Closes the store so the test can inspect its database: the number of records (metas and
  // chunks) of all versions.
  size_t RawVersionRecords() {
    store_.reset();
    return CountRawKeys(dir_.Sub("db"), "v");
  }

  testing::TempDir dir_;
  std::unique_ptr<DiskStore> store_;
};

class DiskStoreSizeTest : public DiskStoreTest, public ::testing::WithParamInterface<size_t> {};

TEST_P(DiskStoreSizeTest, RoundTripsBytesWrittenInAnyPieces) {
  const size_t size = GetParam();
  const std::vector<std::byte> bytes = RandomBytes(size, static_cast<uint32_t>(size));
  const std::vector<size_t> pieces = {1 << 30, kChunkBytes, 7777};
  for (size_t i = 0; i < pieces.size(); ++i) {
    const BlockId id = BlockId::Rdd(1, i);
    ASSERT_TRUE(WriteBlock(*store_, id, bytes, pieces[i]).ok());
    std::optional<BlockStatus> status = store_->Find(id);
    ASSERT_TRUE(status.has_value());
    EXPECT_EQ(status->size, size);
    EXPECT_EQ(status->tier, Tier::kDisk);
    EXPECT_EQ(status->level, StorageLevel::kDiskOnly);
    EXPECT_TRUE(ReadAll(*store_, id) == bytes) << "piece " << pieces[i];
  }
  EXPECT_EQ(store_->used(), 3 * size);
}

INSTANTIATE_TEST_SUITE_P(EdgeSizes, DiskStoreSizeTest,
                         ::testing::Values(0, 1, 4 * kKiB, kChunkBytes, kChunkBytes + 1,
                                           5 * kChunkBytes + 12345),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return std::to_string(info.param) + "Bytes";
                         });

TEST_F(DiskStoreTest, ReadsRangesAtUnalignedOffsets) {
  const uint64_t size = 5 * kChunkBytes + 123;
  const std::vector<std::byte> bytes = RandomBytes(size, 42);
  const BlockId id = BlockId::Broadcast(3);
  ASSERT_TRUE(WriteBlock(*store_, id, bytes).ok());

  struct Range {
    uint64_t offset;
    uint64_t length;
  };
  for (Range r :
       {Range{0, 1}, Range{1, kChunkBytes}, Range{kChunkBytes - 1, 2},
        Range{2 * kChunkBytes + 5, 2 * kChunkBytes}, Range{size - 1, 100}, Range{12345, size}}) {
    Result<DiskRead> read = store_->Read(id, r.offset, r.length);
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    EXPECT_EQ(read->total_size, size);
    const uint64_t expected_length = std::min(r.length, size - r.offset);
    std::vector<std::byte> expected(bytes.begin() + r.offset,
                                    bytes.begin() + r.offset + expected_length);
    EXPECT_TRUE(Concat(read->chunks) == expected)
        << "offset " << r.offset << " length " << r.length;
  }
  Result<DiskRead> across = store_->Read(id, kChunkBytes - 1, 2);
  ASSERT_TRUE(across.ok());
  EXPECT_EQ(across->chunks.size(), 2u);
}

TEST_F(DiskStoreTest, ReadAtEndIsEmptyAndPastEndIsInvalid) {
  const BlockId id = BlockId::Broadcast(3);
  ASSERT_TRUE(WriteBlock(*store_, id, RandomBytes(100, 1)).ok());
  Result<DiskRead> at_end = store_->Read(id, 100, 10);
  ASSERT_TRUE(at_end.ok());
  EXPECT_TRUE(at_end->chunks.empty());
  Result<DiskRead> past = store_->Read(id, 101, 10);
  ASSERT_FALSE(past.ok());
  EXPECT_EQ(past.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(DiskStoreTest, MissingBlockIsNotFound) {
  Result<DiskRead> read = store_->Read(BlockId::Rdd(9, 9), 0, 10);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(store_->Find(BlockId::Rdd(9, 9)).has_value());
  EXPECT_EQ(store_->Remove(BlockId::Rdd(9, 9)).code(), StatusCode::kNotFound);
}

TEST_F(DiskStoreTest, ReopenFindsCommittedBlocks) {
  const std::vector<std::byte> big = RandomBytes(3 * kChunkBytes + 7, 5);
  ASSERT_TRUE(WriteBlock(*store_, BlockId::Rdd(1, 1), big).ok());
  ASSERT_TRUE(WriteBlock(*store_, BlockId::Rdd(1, 2), {}).ok());
  const uint64_t generation = store_->Read(BlockId::Rdd(1, 1), 0, 1)->generation;

  Reopen();
  std::vector<BlockStatus> list = store_->List();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].id, BlockId::Rdd(1, 1));
  EXPECT_EQ(list[1].id, BlockId::Rdd(1, 2));
  EXPECT_EQ(list[1].size, 0u);
  EXPECT_EQ(store_->used(), big.size());
  EXPECT_TRUE(ReadAll(*store_, BlockId::Rdd(1, 1)) == big);
  EXPECT_GT(store_->next_generation(), generation);
}

TEST_F(DiskStoreTest, DestroyedUncommittedWriterLeavesNothing) {
  {
    Result<std::unique_ptr<DiskWriter>> writer =
        store_->BeginWrite(BlockId::Rdd(2, 0), StorageLevel::kDiskOnly, 4 * kChunkBytes);
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->Append(RandomBytes(3 * kChunkBytes, 1)).ok());
    EXPECT_EQ(store_->used(), 4 * kChunkBytes);
    EXPECT_FALSE(store_->Find(BlockId::Rdd(2, 0)).has_value());
  }
  EXPECT_EQ(store_->used(), 0u);
  EXPECT_FALSE(store_->Find(BlockId::Rdd(2, 0)).has_value());
  EXPECT_EQ(RawVersionRecords(), 0u);
}

// Puts records straight into a closed store's database.
void PutRawRecords(const std::string& dir,
                   const std::vector<std::pair<std::string, std::string>>& records) {
  rocksdb::DB* raw = nullptr;
  ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), dir, &raw).ok());
  std::unique_ptr<rocksdb::DB> db(raw);
  for (const auto& [key, value] : records) {
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), key, value).ok());
  }
}

// Puts chunks of `generation` straight into a closed store's database, as a write cut short by
// a crash leaves them (chunks, no metadata).
void PutRawChunks(const std::string& dir, uint64_t generation, int count) {
  std::vector<std::pair<std::string, std::string>> records;
  for (int i = 0; i < count; ++i) {
    std::string key = VersionKey(generation);
    PutBigEndian(key, static_cast<uint64_t>(i));
    records.emplace_back(key, std::string(1000, 'x'));
  }
  PutRawRecords(dir, records);
}

TEST_F(DiskStoreTest, ReopenDeletesChunksOfWritesCutShortByCrash) {
  const std::vector<std::byte> committed = RandomBytes(2 * kChunkBytes, 3);
  ASSERT_TRUE(WriteBlock(*store_, BlockId::Rdd(1, 0), committed).ok());
  const uint64_t generation = store_->Read(BlockId::Rdd(1, 0), 0, 1)->generation;
  store_.reset();
  // A newer version of the committed block and a brand new block, both unfinished.
  PutRawChunks(dir_.Sub("db"), generation + 5, 3);
  PutRawChunks(dir_.Sub("db"), generation + 6, 2);
  // The committed version: its meta and 2 chunks.
  ASSERT_EQ(CountRawKeys(dir_.Sub("db"), "v"), 3u + 5u);

  Reopen();
  EXPECT_TRUE(ReadAll(*store_, BlockId::Rdd(1, 0)) == committed);
  EXPECT_FALSE(store_->Find(BlockId::Rdd(2, 0)).has_value());
  EXPECT_EQ(store_->used(), committed.size());
  EXPECT_GT(store_->next_generation(), generation + 6);
  EXPECT_EQ(RawVersionRecords(), 3u);
}

TEST_F(DiskStoreTest, LimitRejectsWriteWithOutOfSpaceAndKeepsOtherBlocks) {
  Reopen(3 * kMiB);
  const std::vector<std::byte> kept = RandomBytes(2 * kMiB, 8);
  ASSERT_TRUE(WriteBlock(*store_, BlockId::Rdd(1, 0), kept).ok());

  Result<std::unique_ptr<DiskWriter>> writer =
      store_->BeginWrite(BlockId::Rdd(1, 1), StorageLevel::kDiskOnly, 2 * kMiB);
  ASSERT_FALSE(writer.ok());
  EXPECT_EQ(writer.status().code(), StatusCode::kOutOfSpace);
  EXPECT_THAT(writer.status().message(), HasSubstr(FormatBytes(2 * kMiB)));
  EXPECT_THAT(writer.status().message(), HasSubstr(FormatBytes(3 * kMiB)));
  EXPECT_EQ(store_->used(), 2 * kMiB);
  EXPECT_TRUE(ReadAll(*store_, BlockId::Rdd(1, 0)) == kept);
}

TEST_F(DiskStoreTest, WritesInProgressClaimTheirSpace) {
  Reopen(3 * kMiB);
  auto first = store_->BeginWrite(BlockId::Rdd(1, 0), StorageLevel::kDiskOnly, 2 * kMiB);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(store_->used(), 2 * kMiB);
  auto second = store_->BeginWrite(BlockId::Rdd(1, 1), StorageLevel::kDiskOnly, 2 * kMiB);
  EXPECT_EQ(second.status().code(), StatusCode::kOutOfSpace);
  first->reset();
  EXPECT_EQ(store_->used(), 0u);
  EXPECT_TRUE(store_->BeginWrite(BlockId::Rdd(1, 1), StorageLevel::kDiskOnly, 3 * kMiB).ok());
}

TEST_F(DiskStoreTest, ReplacingBlockReleasesOldBytesAtCommit) {
  Reopen(3 * kMiB);
  ASSERT_TRUE(WriteBlock(*store_, BlockId::Rdd(1, 0), RandomBytes(1 * kMiB, 1)).ok());
  ASSERT_TRUE(WriteBlock(*store_, BlockId::Rdd(1, 0), RandomBytes(2 * kMiB, 2)).ok());
  EXPECT_EQ(store_->used(), 2 * kMiB);
  EXPECT_EQ(store_->List().size(), 1u);
}

TEST_F(DiskStoreTest, ReplaceIsAtomicForReaders) {
  const BlockId id = BlockId::Rdd(4, 0);
  const std::vector<std::byte> v1 = RandomBytes(3 * kChunkBytes, 1);
  const std::vector<std::byte> v2 = RandomBytes(3 * kChunkBytes + 10, 2);
  ASSERT_TRUE(WriteBlock(*store_, id, v1).ok());
  Result<DiskRead> first = store_->Read(id, 0, kChunkBytes);
  ASSERT_TRUE(first.ok());
  const uint64_t old_generation = first->generation;

  auto writer = store_->BeginWrite(id, StorageLevel::kDiskOnly, v2.size());
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->Append(v2).ok());
  // Not committed yet: readers still see the old version.
  EXPECT_TRUE(ReadAll(*store_, id) == v1);
  ASSERT_TRUE(store_->ReadGeneration(id, old_generation, kChunkBytes, kChunkBytes).ok());

  ASSERT_TRUE((*writer)->Commit().ok());
  Result<DiskRead> rest = store_->ReadGeneration(id, old_generation, kChunkBytes, kChunkBytes);
  ASSERT_FALSE(rest.ok());
  EXPECT_EQ(rest.status().code(), StatusCode::kAborted);
  Result<DiskRead> fresh = store_->Read(id, 0, UINT64_MAX);
  ASSERT_TRUE(fresh.ok());
  EXPECT_NE(fresh->generation, old_generation);
  EXPECT_TRUE(Concat(fresh->chunks) == v2);
  // Only the new version's meta and 4 chunks are left.
  const uint64_t new_generation = fresh->generation;
  EXPECT_EQ(RawVersionRecords(), 5u);
  EXPECT_EQ(CountRawKeys(dir_.Sub("db"), VersionKey(new_generation)), 5u);
}

TEST_F(DiskStoreTest, RemoveDeletesBlockAndItsBytes) {
  const BlockId id = BlockId::Shuffle(1, 2, 3);
  ASSERT_TRUE(WriteBlock(*store_, id, RandomBytes(2 * kChunkBytes, 1)).ok());
  const uint64_t generation = store_->Read(id, 0, 1)->generation;
  ASSERT_TRUE(store_->Remove(id).ok());
  EXPECT_FALSE(store_->Find(id).has_value());
  EXPECT_EQ(store_->used(), 0u);
  EXPECT_EQ(store_->Read(id, 0, 1).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->ReadGeneration(id, generation, 0, 1).status().code(), StatusCode::kAborted);
  EXPECT_EQ(RawVersionRecords(), 0u);
}

TEST_F(DiskStoreTest, AppendPastDeclaredSizeAbandonsWrite) {
  auto writer = store_->BeginWrite(BlockId::Rdd(1, 0), StorageLevel::kDiskOnly, 10);
  ASSERT_TRUE(writer.ok());
  Status s = (*writer)->Append(RandomBytes(11, 1));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->used(), 0u);
  EXPECT_FALSE((*writer)->Commit().ok());
  EXPECT_FALSE(store_->Find(BlockId::Rdd(1, 0)).has_value());
}

TEST_F(DiskStoreTest, CommitWithMissingBytesFails) {
  auto writer = store_->BeginWrite(BlockId::Rdd(1, 0), StorageLevel::kDiskOnly, 2 * kChunkBytes);
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->Append(RandomBytes(kChunkBytes + 5, 1)).ok());
  Status s = (*writer)->Commit();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("bytes were written"));
  EXPECT_FALSE(store_->Find(BlockId::Rdd(1, 0)).has_value());
  EXPECT_EQ(store_->used(), 0u);
  EXPECT_EQ(RawVersionRecords(), 0u);
}

TEST_F(DiskStoreTest, WriteStoresBlockDataOfUnevenChunks) {
  const std::vector<std::byte> bytes = RandomBytes(2 * kChunkBytes + 999, 6);
  BlockData data;
  data.Append(MakeChunk(std::span(bytes).first(10)));
  data.Append(MakeChunk(std::span(bytes).subspan(10, kChunkBytes + 3)));
  data.Append(MakeChunk(std::span(bytes).subspan(kChunkBytes + 13)));
  ASSERT_TRUE(store_->Write(BlockId::Rdd(7, 7), StorageLevel::kMemoryAndDisk, data).ok());
  EXPECT_EQ(store_->Find(BlockId::Rdd(7, 7))->level, StorageLevel::kMemoryAndDisk);
  EXPECT_TRUE(ReadAll(*store_, BlockId::Rdd(7, 7)) == bytes);
}

TEST_F(DiskStoreTest, GenerationsNeverRepeat) {
  ASSERT_TRUE(WriteBlock(*store_, BlockId::Rdd(1, 0), RandomBytes(10, 1)).ok());
  const uint64_t g1 = store_->Read(BlockId::Rdd(1, 0), 0, 1)->generation;
  store_->AdvanceGenerationTo(g1 + 100);
  ASSERT_TRUE(WriteBlock(*store_, BlockId::Rdd(1, 0), RandomBytes(10, 2)).ok());
  const uint64_t g2 = store_->Read(BlockId::Rdd(1, 0), 0, 1)->generation;
  EXPECT_GE(g2, g1 + 100);
  Reopen();
  EXPECT_GT(store_->next_generation(), g2);
}

// Regression: keys led by the block id made every flushed table file overlap every other, so
// RocksDB compaction rewrote each stored byte again. Keys must follow the order of writes.
TEST_F(DiskStoreTest, RecordsAreKeyedInWriteOrderNotIdOrder) {
  // "rdd_1_10" sorts before "rdd_1_9" as text.
  for (uint64_t i : {9, 10, 2}) {
    ASSERT_TRUE(WriteBlock(*store_, BlockId::Rdd(1, i), RandomBytes(kChunkBytes + 1, i)).ok());
  }
  std::vector<uint64_t> generations;
  for (uint64_t i : {9, 10, 2}) {
    generations.push_back(store_->Read(BlockId::Rdd(1, i), 0, 1)->generation);
  }
  store_.reset();
  std::vector<std::string> expected;
  for (uint64_t generation : generations) {
    expected.push_back(VersionKey(generation));  // the meta, then the chunks
    for (uint64_t chunk : {0, 1}) {
      expected.push_back(VersionKey(generation));
      PutBigEndian(expected.back(), chunk);
    }
  }
  EXPECT_EQ(RawKeys(dir_.Sub("db")), expected);
}

// A store written before versions were keyed by generation: metas under "m:" + id, chunks
// under "c:" + id + ":" + generation + index (meta format 1).
TEST_F(DiskStoreTest, LegacyLayoutBlocksStayReadableReplaceableAndRemovable) {
  store_.reset();
  const std::vector<std::byte> bytes = RandomBytes(kChunkBytes + 7, 9);
  std::vector<std::pair<std::string, std::string>> records;
  for (uint64_t i : {0, 1}) {
    const BlockId id = BlockId::Rdd(3, i);
    const uint64_t generation = 40 + i;
    std::string meta(1, '\x01');
    for (uint64_t n : {uint64_t{bytes.size()}, generation, uint64_t{2}, uint64_t{kChunkBytes}}) {
      PutBigEndian(meta, n);
    }
    meta += "DISK_ONLY";
    records.emplace_back("m:" + id.ToString(), meta);
    for (uint64_t chunk : {0, 1}) {
      std::string key = "c:" + id.ToString() + ":";
      PutBigEndian(key, generation);
      PutBigEndian(key, chunk);
      const size_t from = chunk * kChunkBytes;
      const size_t to = std::min(bytes.size(), from + kChunkBytes);
      records.emplace_back(
          key, std::string(reinterpret_cast<const char*>(bytes.data()) + from, to - from));
    }
  }
  // An unfinished legacy write: chunks of a generation no meta names.
  std::string orphan = "c:rdd_3_0:";
  PutBigEndian(orphan, 45);
  PutBigEndian(orphan, 0);
  records.emplace_back(orphan, "x");
  PutRawRecords(dir_.Sub("db"), records);

  Reopen();
  EXPECT_EQ(store_->used(), 2 * bytes.size());
  EXPECT_TRUE(ReadAll(*store_, BlockId::Rdd(3, 0)) == bytes);
  EXPECT_TRUE(ReadAll(*store_, BlockId::Rdd(3, 1)) == bytes);
  EXPECT_GT(store_->next_generation(), 45u);

  const std::vector<std::byte> replacement = RandomBytes(10, 10);
  ASSERT_TRUE(WriteBlock(*store_, BlockId::Rdd(3, 0), replacement).ok());
  ASSERT_TRUE(store_->Remove(BlockId::Rdd(3, 1)).ok());
  Reopen();
  EXPECT_TRUE(ReadAll(*store_, BlockId::Rdd(3, 0)) == replacement);
  EXPECT_FALSE(store_->Find(BlockId::Rdd(3, 1)).has_value());
  EXPECT_EQ(store_->used(), replacement.size());
  store_.reset();
  EXPECT_EQ(CountRawKeys(dir_.Sub("db"), "m:"), 0u);
  EXPECT_EQ(CountRawKeys(dir_.Sub("db"), "c:"), 0u);
}

TEST(DiskStoreOpenTest, SecondOpenOfSameDirectoryFailsClearly) {
  testing::TempDir dir;
  std::unique_ptr<DiskStore> first = OpenStore(dir.Sub("db"));
  ASSERT_NE(first, nullptr);
  Result<std::unique_ptr<DiskStore>> second = DiskStore::Open(dir.Sub("db"), 0);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr("in use"));
}

// "D/" (or a symlink to D) is another name to RocksDB's in-process LOCK bookkeeping, and its
// fcntl lock does not conflict within one process: two stores would share the chunk files.
TEST(DiskStoreOpenTest, SecondOpenOfTheSameDirectoryByAnotherNameFailsClearly) {
  testing::TempDir dir;
  std::unique_ptr<DiskStore> first = OpenStore(dir.Sub("db"));
  ASSERT_NE(first, nullptr);
  std::filesystem::create_directory_symlink(dir.Sub("db"), dir.Sub("link"));
  for (const std::string& other : {dir.Sub("db") + "/", dir.Sub("link")}) {
    Result<std::unique_ptr<DiskStore>> second = DiskStore::Open(other, 0);
    ASSERT_FALSE(second.ok()) << other;
    EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
    EXPECT_THAT(second.status().message(), HasSubstr("in use by another disk store"));
  }
  first.reset();
  EXPECT_NE(OpenStore(dir.Sub("db") + "/"), nullptr);
}

TEST(DiskStoreOpenTest, PathThatIsAFileFailsClearly) {
  testing::TempDir dir;
  std::ofstream(dir.Sub("file")) << "x";
  Result<std::unique_ptr<DiskStore>> store = DiskStore::Open(dir.Sub("file"), 0);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(store.status().message(), HasSubstr(dir.Sub("file")));
}

// ---- space accounting, storage errors, lost blocks ----

// A filesystem whose size and free space the test sets.
class FakeSpaceProbe final : public SpaceProbe {
 public:
  explicit FakeSpaceProbe(std::shared_ptr<FilesystemSpace> space) : space_(std::move(space)) {}
  Result<FilesystemSpace> Measure() const override { return *space_; }

 private:
  std::shared_ptr<FilesystemSpace> space_;
};

// RocksDB files whose writes fail with "no space" while `full` is set: a disk filling up
// under the store.
class FillingFileSystem final : public rocksdb::FileSystemWrapper {
 public:
  explicit FillingFileSystem(std::shared_ptr<rocksdb::FileSystem> base)
      : FileSystemWrapper(std::move(base)) {}
  const char* Name() const override { return "FillingFileSystem"; }

  rocksdb::IOStatus NewWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext* dbg) override {
    if (full) return rocksdb::IOStatus::NoSpace("injected: no space for " + name);
    rocksdb::IOStatus s = target()->NewWritableFile(name, options, result, dbg);
    if (s.ok()) *result = std::make_unique<File>(std::move(*result), &full);
    return s;
  }

  std::atomic<bool> full{false};

 private:
  class File final : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    File(std::unique_ptr<rocksdb::FSWritableFile> file, const std::atomic<bool>* full)
        : FSWritableFileOwnerWrapper(std::move(file)), full_(full) {}
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                             rocksdb::IODebugContext* dbg) override {
      if (*full_) return rocksdb::IOStatus::NoSpace("injected: disk full");
      return FSWritableFileOwnerWrapper::Append(data, options, dbg);
    }
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                             const rocksdb::DataVerificationInfo& info,
                             rocksdb::IODebugContext* dbg) override {
      if (*full_) return rocksdb::IOStatus::NoSpace("injected: disk full");
      return FSWritableFileOwnerWrapper::Append(data, options, info, dbg);
    }

   private:
    const std::atomic<bool>* full_;
  };
};

class DiskStoreSpaceTest : public ::testing::Test {
 protected:
  DiskStoreSpaceTest()
      : space_(std::make_shared<FilesystemSpace>(FilesystemSpace{kGiB, kGiB})),
        fs_(std::make_shared<FillingFileSystem>(rocksdb::FileSystem::Default())),
        env_(rocksdb::NewCompositeEnv(fs_)) {}

  std::unique_ptr<DiskStore> Open(uint64_t limit = 0) {
    DiskStoreOptions options;
    options.limit_bytes = limit;
    options.space_probe = std::make_unique<FakeSpaceProbe>(space_);
    options.env = env_.get();
    Result<std::unique_ptr<DiskStore>> store = DiskStore::Open(dir_.Sub("db"), std::move(options));
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(store).value() : nullptr;
  }

  testing::TempDir dir_;
  std::shared_ptr<FilesystemSpace> space_;
  std::shared_ptr<FillingFileSystem> fs_;
  std::unique_ptr<rocksdb::Env> env_;
};

TEST_F(DiskStoreSpaceTest, WithoutALimitWritesMustFitTheFilesystemLessTheHeadroom) {
  std::unique_ptr<DiskStore> store = Open();
  ASSERT_NE(store, nullptr);
  const uint64_t headroom = store->headroom();
  EXPECT_GE(headroom, 64 * kMiB) << "room for RocksDB's memtables, flushes and compactions";
  EXPECT_LT(headroom, kGiB / 2);
  space_->available_bytes = headroom + 10 * kMiB;

  Result<std::unique_ptr<DiskWriter>> too_big =
      store->BeginWrite(BlockId::Rdd(1, 0), StorageLevel::kDiskOnly, 11 * kMiB);
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().code(), StatusCode::kOutOfSpace);
  EXPECT_THAT(too_big.status().message(), HasSubstr("does not fit on disk"));

  Result<std::unique_ptr<DiskWriter>> first =
      store->BeginWrite(BlockId::Rdd(1, 1), StorageLevel::kDiskOnly, 6 * kMiB);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  // The first write's claim counts although none of its bytes is on disk yet.
  Result<std::unique_ptr<DiskWriter>> second =
      store->BeginWrite(BlockId::Rdd(1, 2), StorageLevel::kDiskOnly, 6 * kMiB);
  EXPECT_EQ(second.status().code(), StatusCode::kOutOfSpace);
  Result<std::unique_ptr<DiskWriter>> third =
      store->BeginWrite(BlockId::Rdd(1, 3), StorageLevel::kDiskOnly, 4 * kMiB);
  ASSERT_TRUE(third.ok()) << third.status().ToString();
  EXPECT_EQ(store->used(), 10 * kMiB);
  EXPECT_EQ(store->capacity(), 10 * kMiB) << "nothing more fits";
  first->reset();
  EXPECT_EQ(store->used(), 4 * kMiB);
  EXPECT_EQ(store->capacity(), 10 * kMiB);
}

TEST_F(DiskStoreSpaceTest, HugeClaimsAreRefusedAndNeverWrapACounter) {
  std::unique_ptr<DiskStore> store = Open();
  ASSERT_NE(store, nullptr);
  const uint64_t huge = uint64_t{1} << 63;
  for (int i = 0; i < 2; ++i) {
    Result<std::unique_ptr<DiskWriter>> claim =
        store->BeginWrite(BlockId::Rdd(2, i), StorageLevel::kDiskOnly, huge);
    EXPECT_EQ(claim.status().code(), StatusCode::kOutOfSpace);
  }
  EXPECT_EQ(store->used(), 0u);

  // A filesystem claiming the whole 64-bit range: one such claim fits, a second never wraps.
  *space_ = FilesystemSpace{UINT64_MAX, UINT64_MAX};
  Result<std::unique_ptr<DiskWriter>> first =
      store->BeginWrite(BlockId::Rdd(2, 2), StorageLevel::kDiskOnly, huge);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  Result<std::unique_ptr<DiskWriter>> second =
      store->BeginWrite(BlockId::Rdd(2, 3), StorageLevel::kDiskOnly, huge);
  EXPECT_EQ(second.status().code(), StatusCode::kOutOfSpace);
  EXPECT_EQ(store->used(), huge);
}

TEST_F(DiskStoreSpaceTest, AFailedWriteMakesTheStoreReadOnlyUntilItReopens) {
  std::unique_ptr<DiskStore> store = Open();
  ASSERT_NE(store, nullptr);
  const std::vector<std::byte> kept = RandomBytes(3 * kMiB, 1);
  const std::vector<std::byte> removed = RandomBytes(1000, 2);
  ASSERT_TRUE(WriteBlock(*store, BlockId::Rdd(3, 0), kept).ok());
  ASSERT_TRUE(WriteBlock(*store, BlockId::Rdd(3, 1), removed).ok());

  fs_->full = true;
  Status failed = WriteBlock(*store, BlockId::Rdd(3, 2), RandomBytes(2 * kMiB, 3));
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.code(), StatusCode::kOutOfSpace) << failed.ToString();
  EXPECT_TRUE(store->read_only());
  EXPECT_FALSE(store->Find(BlockId::Rdd(3, 2)).has_value());
  // Reads go on; writes are refused up front, never reaching RocksDB again.
  EXPECT_TRUE(ReadAll(*store, BlockId::Rdd(3, 0)) == kept);
  Result<std::unique_ptr<DiskWriter>> refused =
      store->BeginWrite(BlockId::Rdd(3, 3), StorageLevel::kDiskOnly, 10);
  EXPECT_EQ(refused.status().code(), StatusCode::kOutOfSpace);
  EXPECT_THAT(refused.status().message(), HasSubstr("read-only"));
  // Removals are taken (hidden now, deleted later).
  ASSERT_TRUE(store->Remove(BlockId::Rdd(3, 1)).ok());
  EXPECT_FALSE(store->Find(BlockId::Rdd(3, 1)).has_value());

  store->Maintain();  // the disk is still full: it stays read-only
  EXPECT_TRUE(store->read_only());
  fs_->full = false;
  store->Maintain();
  EXPECT_FALSE(store->read_only()) << store->read_only_reason();
  EXPECT_TRUE(store->TakeLost().empty());
  EXPECT_TRUE(ReadAll(*store, BlockId::Rdd(3, 0)) == kept);
  EXPECT_FALSE(store->Find(BlockId::Rdd(3, 1)).has_value());
  EXPECT_FALSE(store->Find(BlockId::Rdd(3, 2)).has_value());
  ASSERT_TRUE(WriteBlock(*store, BlockId::Rdd(3, 4), removed).ok());

  store.reset();
  store = Open();
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(store->TakeLost().empty());
  EXPECT_TRUE(ReadAll(*store, BlockId::Rdd(3, 0)) == kept);
  EXPECT_TRUE(ReadAll(*store, BlockId::Rdd(3, 4)) == removed);
  EXPECT_FALSE(store->Find(BlockId::Rdd(3, 1)).has_value());
}

// The disk went bad while the store was read-only: the reopen fails. The store stays read-only,
// with the reason, and its blocks are reported lost; it never takes the process down.
TEST_F(DiskStoreSpaceTest, AReopenThatFailsLeavesTheStoreReadOnlyAndItsBlocksLost) {
  std::unique_ptr<DiskStore> store = Open();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(WriteBlock(*store, BlockId::Rdd(9, 0), RandomBytes(3 * kMiB, 1)).ok());
  ASSERT_TRUE(WriteBlock(*store, BlockId::Rdd(9, 1), RandomBytes(1000, 2)).ok());
  fs_->full = true;
  ASSERT_FALSE(WriteBlock(*store, BlockId::Rdd(9, 2), RandomBytes(1000, 3)).ok());
  ASSERT_TRUE(store->read_only());
  // What a damaged disk gives the next open: a MANIFEST that cannot be read.
  std::ofstream(dir_.Sub("db/CURRENT"), std::ios::trunc) << "MANIFEST-999999\n";
  fs_->full = false;

  store->Maintain();
  EXPECT_TRUE(store->read_only());
  EXPECT_THAT(store->read_only_reason(),
              HasSubstr("reopening the database in " + dir_.Sub("db") + " failed"));
  std::vector<LostBlock> lost = store->TakeLost();
  ASSERT_EQ(lost.size(), 2u);
  for (const LostBlock& block : lost) EXPECT_EQ(block.cause, LostCause::kStorageError);
  EXPECT_FALSE(store->Find(BlockId::Rdd(9, 0)).has_value());
  EXPECT_EQ(store->BeginWrite(BlockId::Rdd(9, 3), StorageLevel::kDiskOnly, 10).status().code(),
            StatusCode::kOutOfSpace);
  store->Maintain();  // never tried again in this run
  EXPECT_TRUE(store->TakeLost().empty());
}

// An unmounted disk leaves its bare mount point, an empty directory, with room to spare: the
// read-only store must not reopen (and create a new database) there.
TEST_F(DiskStoreSpaceTest, AStoreWhoseDirectoryWasReplacedIsNotReopened) {
  std::unique_ptr<DiskStore> store = Open();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(WriteBlock(*store, BlockId::Rdd(9, 0), RandomBytes(1000, 1)).ok());
  fs_->full = true;
  ASSERT_FALSE(WriteBlock(*store, BlockId::Rdd(9, 1), RandomBytes(1000, 2)).ok());
  ASSERT_TRUE(store->read_only());
  std::filesystem::rename(dir_.Sub("db"), dir_.Sub("moved-away"));
  std::filesystem::create_directories(dir_.Sub("db"));
  fs_->full = false;

  store->Maintain();
  EXPECT_TRUE(store->read_only());
  EXPECT_THAT(store->read_only_reason(), HasSubstr("no longer the one opened"));
  // What was written into the replaced directory, should anything be (once seen under load).
  std::string written;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir_.Sub("db"))) {
    written += " " + entry.path().lexically_relative(dir_.Sub("db")).string();
  }
  EXPECT_EQ(written, "");
  EXPECT_TRUE(store->TakeLost().empty()) << "the disk's failure reports them, not the store";
  // Back in its place, so the store closes its database as usual (a store whose directory is
  // gone leaves it open, which a leak checker would report).
  std::filesystem::remove_all(dir_.Sub("db"));
  std::filesystem::rename(dir_.Sub("moved-away"), dir_.Sub("db"));
}

TEST_F(DiskStoreSpaceTest, AWriteInProgressAcrossAReopenFailsInsteadOfLosingChunks) {
  std::unique_ptr<DiskStore> store = Open();
  ASSERT_NE(store, nullptr);
  const std::vector<std::byte> bytes = RandomBytes(3 * kMiB, 1);
  Result<std::unique_ptr<DiskWriter>> writer =
      store->BeginWrite(BlockId::Rdd(7, 0), StorageLevel::kDiskOnly, bytes.size());
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->Append(std::span(bytes).first(2 * kMiB)).ok());
  fs_->full = true;
  ASSERT_FALSE(WriteBlock(*store, BlockId::Rdd(7, 1), RandomBytes(10, 2)).ok());
  fs_->full = false;
  store->Maintain();
  ASSERT_FALSE(store->read_only());
  Status rest = (*writer)->Append(std::span(bytes).subspan(2 * kMiB));
  if (rest.ok()) rest = (*writer)->Commit();
  EXPECT_EQ(rest.code(), StatusCode::kAborted) << rest.ToString();
  EXPECT_FALSE(store->Find(BlockId::Rdd(7, 0)).has_value());
  EXPECT_TRUE(WriteBlock(*store, BlockId::Rdd(7, 0), bytes).ok());
  EXPECT_TRUE(ReadAll(*store, BlockId::Rdd(7, 0)) == bytes);
}

TEST_F(DiskStoreSpaceTest, ARemovalTakenWhileReadOnlySurvivesARestart) {
  std::unique_ptr<DiskStore> store = Open();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(WriteBlock(*store, BlockId::Rdd(4, 0), RandomBytes(1000, 1)).ok());
  ASSERT_TRUE(WriteBlock(*store, BlockId::Rdd(4, 1), RandomBytes(1000, 2)).ok());
  fs_->full = true;
  ASSERT_FALSE(WriteBlock(*store, BlockId::Rdd(4, 2), RandomBytes(1000, 3)).ok());
  ASSERT_TRUE(store->Remove(BlockId::Rdd(4, 0)).ok());
  store.reset();
  fs_->full = false;
  store = Open();
  ASSERT_NE(store, nullptr);
  EXPECT_FALSE(store->Find(BlockId::Rdd(4, 0)).has_value());
  EXPECT_TRUE(store->Find(BlockId::Rdd(4, 1)).has_value());
  EXPECT_TRUE(store->TakeLost().empty());
}

TEST_F(DiskStoreSpaceTest, OpensReadOnlyOnAFullFilesystemAndRecoversWhenSpaceIsFreed) {
  const std::vector<std::byte> bytes = RandomBytes(2 * kMiB + 5, 1);
  {
    std::unique_ptr<DiskStore> store = Open();
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(WriteBlock(*store, BlockId::Rdd(5, 0), bytes).ok());
  }
  space_->available_bytes = 0;
  std::unique_ptr<DiskStore> store = Open();
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(store->read_only());
  EXPECT_TRUE(ReadAll(*store, BlockId::Rdd(5, 0)) == bytes);
  EXPECT_EQ(store->BeginWrite(BlockId::Rdd(5, 1), StorageLevel::kDiskOnly, 1).status().code(),
            StatusCode::kOutOfSpace);
  EXPECT_EQ(store->capacity(), store->used());

  space_->available_bytes = kGiB;
  store->Maintain();
  EXPECT_FALSE(store->read_only()) << store->read_only_reason();
  EXPECT_TRUE(ReadAll(*store, BlockId::Rdd(5, 0)) == bytes);
  EXPECT_TRUE(WriteBlock(*store, BlockId::Rdd(5, 1), bytes).ok());
}

// What RocksDB's recovery dropped (here: a version's records deleted behind the store's back,
// as a damaged write-ahead log would lose them) is named, once.
TEST_F(DiskStoreSpaceTest, TheJournalNamesBlocksTheDatabaseLost) {
  {
    std::unique_ptr<DiskStore> store = Open();
    ASSERT_NE(store, nullptr);
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(WriteBlock(*store, BlockId::Rdd(6, i), RandomBytes(1000, i)).ok());
    }
    EXPECT_TRUE(store->TakeLost().empty());
  }
  {
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), dir_.Sub("db"), &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
    std::string doomed;
    for (it->Seek("v"); it->Valid() && it->key().starts_with("v"); it->Next()) {
      if (it->key().size() == 9 && it->value().ToString().ends_with("rdd_6_1")) {
        doomed = it->key().ToString();
      }
    }
    ASSERT_FALSE(doomed.empty());
    std::string end = doomed;
    end.back() = static_cast<char>(end.back() + 1);
    ASSERT_TRUE(
        db->DeleteRange(rocksdb::WriteOptions(), db->DefaultColumnFamily(), doomed, end).ok());
  }
  std::unique_ptr<DiskStore> store = Open();
  ASSERT_NE(store, nullptr);
  std::vector<LostBlock> lost = store->TakeLost();
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].id, BlockId::Rdd(6, 1));
  EXPECT_THAT(lost[0].reason, HasSubstr("committed"));
  EXPECT_EQ(store->lost_count(), 1u);
  EXPECT_TRUE(store->Find(BlockId::Rdd(6, 0)).has_value());
  EXPECT_TRUE(store->Find(BlockId::Rdd(6, 2)).has_value());
  store.reset();
  store = Open();
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(store->TakeLost().empty()) << "reported once";
}

TEST_F(DiskStoreTest, StoresADigestPerChunkAndReturnsThoseOfTheRangeRead) {
  const std::vector<std::byte> bytes = RandomBytes(2 * kChunkBytes + 10, 9);
  const std::span<const std::byte> all(bytes);
  ASSERT_TRUE(WriteBlock(*store_, BlockId::Rdd(3, 0), bytes).ok());
  const std::vector<uint64_t> expected = {DigestOf(all.subspan(kChunkBytes, kChunkBytes)),
                                          DigestOf(all.subspan(2 * kChunkBytes))};
  Result<DiskRead> read = store_->Read(BlockId::Rdd(3, 0), kChunkBytes + 5, kChunkBytes);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->unit_digests, expected);
  Reopen();
  read = store_->Read(BlockId::Rdd(3, 0), kChunkBytes + 5, kChunkBytes);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->unit_digests, expected) << "kept across a restart";
}

// Fault injection: one byte flipped in the stored chunk, through RocksDB (whose checksums still
// pass), with the digests and the generation left alone; a chunk read out before keeps its bytes.
TEST_F(DiskStoreTest, CorruptStoredByteFlipsOneByteAndKeepsTheDigests) {
  const BlockId id = BlockId::Rdd(3, 2);
  const std::vector<std::byte> bytes = RandomBytes(2 * kChunkBytes + 10, 12);
  ASSERT_TRUE(WriteBlock(*store_, id, bytes).ok());
  Result<DiskRead> before = store_->Read(id, 0, UINT64_MAX);
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  const uint64_t at = kChunkBytes + 77;

  ASSERT_TRUE(store_->CorruptStoredByte(id, at).ok());
  Result<DiskRead> after = store_->Read(id, 0, UINT64_MAX);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  std::vector<std::byte> expected = bytes;
  expected[at] ^= std::byte{0xFF};
  EXPECT_TRUE(Concat(after->chunks) == expected);
  EXPECT_EQ(after->unit_digests, before->unit_digests);
  EXPECT_EQ(after->generation, before->generation);
  EXPECT_NE(DigestOf(std::span(expected).subspan(kChunkBytes, kChunkBytes)),
            after->unit_digests[1]);
  EXPECT_TRUE(Concat(before->chunks) == bytes) << "a chunk already read out changed";
  Reopen();
  EXPECT_TRUE(ReadAll(*store_, id) == expected) << "the flipped byte is on disk";

  EXPECT_EQ(store_->CorruptStoredByte(id, bytes.size()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->CorruptStoredByte(BlockId::Rdd(3, 9), 0).code(), StatusCode::kNotFound);
}

// A block written before digests were kept (meta format 3) reads back, with no digests.
TEST_F(DiskStoreTest, BlocksStoredWithoutDigestsStillReadBack) {
  const std::vector<std::byte> bytes = RandomBytes(kChunkBytes + 10, 10);
  ASSERT_TRUE(WriteBlock(*store_, BlockId::Rdd(3, 1), bytes).ok());
  const uint64_t generation = store_->Read(BlockId::Rdd(3, 1), 0, 1)->generation;
  store_.reset();
  std::string meta(1, '\x03');
  for (uint64_t field :
       {uint64_t{bytes.size()}, generation, uint64_t{2}, uint64_t{kChunkBytes}, uint64_t{77}}) {
    PutBigEndian(meta, field);
  }
  const std::string_view level = StorageLevelName(StorageLevel::kDiskOnly);
  meta.push_back(static_cast<char>(level.size()));
  meta += level;
  meta += "rdd_3_1";
  ASSERT_NO_FATAL_FAILURE(PutRawRecords(dir_.Sub("db"), {{VersionKey(generation), meta}}));

  Reopen();
  Result<DiskRead> read = store_->Read(BlockId::Rdd(3, 1), 0, UINT64_MAX);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_TRUE(Concat(read->chunks) == bytes);
  EXPECT_TRUE(read->unit_digests.empty());
  EXPECT_EQ(store_->Find(BlockId::Rdd(3, 1))->version, 77u);
}

TEST_F(DiskStoreTest, ASpillWhoseMemoryBytesNoLongerMatchTheirDigestsIsRefused) {
  std::vector<std::byte> bytes = RandomBytes(kChunkBytes + 10, 11);
  BlockDigester digester;
  digester.Update(bytes);
  const std::vector<uint64_t> digests = digester.Finish().units;
  bytes[kChunkBytes + 3] ^= std::byte{0x40};  // rots in memory before the spill
  BlockData data;
  data.Append(MakeChunk(bytes));
  Status written =
      store_->Write(BlockId::Rdd(3, 2), StorageLevel::kMemoryAndDisk, data, 0, digests);
  EXPECT_EQ(written.code(), StatusCode::kDataLoss) << written.ToString();
  EXPECT_THAT(written.message(), HasSubstr("corrupt in memory"));
  EXPECT_FALSE(store_->Find(BlockId::Rdd(3, 2)).has_value());
  EXPECT_EQ(store_->used(), 0u);
}

// The largest table file of a closed store's database.
std::string LargestTableFile(const std::string& dir) {
  std::string largest;
  uint64_t largest_size = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() == ".sst" && entry.file_size() > largest_size) {
      largest = entry.path().string();
      largest_size = entry.file_size();
    }
  }
  return largest;
}

// Overwrites `length` bytes at `at` of `path` with a pattern, as a failing disk might.
void Overwrite(const std::string& path, uint64_t at, size_t length) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(file.is_open()) << path;
  const std::string garbage(length, '\x5a');
  file.seekp(static_cast<std::streamoff>(at));
  file.write(garbage.data(), static_cast<std::streamsize>(garbage.size()));
  ASSERT_TRUE(file.good());
}

class DiskStoreCorruptionTest : public DiskStoreTest {
 protected:
  static constexpr int kBlocks = 16;

  // Writes kBlocks blocks of a little over `size` (by default one chunk) into a table file,
  // store closed.
  void WriteBlocksAndClose(size_t size = kChunkBytes + 1000) {
    for (int i = 0; i < kBlocks; ++i) {
      blocks_.push_back(RandomBytes(size + i, i));
      ASSERT_TRUE(WriteBlock(*store_, BlockId::Rdd(7, i), blocks_.back()).ok());
    }
    store_.reset();
    {  // The blocks are in the write-ahead log: flush them into a table file.
      rocksdb::DB* raw = nullptr;
      ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), dir_.Sub("db"), &raw).ok());
      std::unique_ptr<rocksdb::DB> db(raw);
      ASSERT_TRUE(db->Flush(rocksdb::FlushOptions()).ok());
    }
    table_file_ = LargestTableFile(dir_.Sub("db"));
    ASSERT_FALSE(table_file_.empty());
    ASSERT_GT(std::filesystem::file_size(table_file_), kBlocks * size);
  }

  // Reads every block: each comes back whole and right, or fails with kDataLoss; returns the
  // ids that failed.
  std::set<BlockId> ReadEveryBlock() {
    std::set<BlockId> bad;
    for (int i = 0; i < kBlocks; ++i) {
      const BlockId id = BlockId::Rdd(7, i);
      if (!store_->Find(id).has_value()) {
        bad.insert(id);
        continue;
      }
      Result<DiskRead> read = store_->Read(id, 0, UINT64_MAX);
      if (read.ok()) {
        EXPECT_TRUE(Concat(read->chunks) == blocks_[i]) << id.ToString() << " served wrong bytes";
      } else {
        EXPECT_EQ(read.status().code(), StatusCode::kDataLoss) << read.status().ToString();
        EXPECT_THAT(read.status().message(), HasSubstr("corrupt"));
        bad.insert(id);
      }
    }
    return bad;
  }

  std::vector<std::vector<std::byte>> blocks_;
  std::string table_file_;
};

// 64 KiB overwritten in the middle of a table file made the store refuse to open at all
// ("scanning disk store versions: Corruption: block checksum mismatch"), losing every block.
TEST_F(DiskStoreCorruptionTest, ACorruptTableFileCostsTheBlocksInItNotTheStore) {
  ASSERT_NO_FATAL_FAILURE(WriteBlocksAndClose());
  const uint64_t size = std::filesystem::file_size(table_file_);
  ASSERT_NO_FATAL_FAILURE(Overwrite(table_file_, size / 2, 64 * kKiB));

  Result<std::unique_ptr<DiskStore>> opened = DiskStore::Open(dir_.Sub("db"), 0);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  store_ = std::move(opened).value();
  const std::set<BlockId> bad = ReadEveryBlock();
  EXPECT_GE(bad.size(), 1u) << "64 KiB of a 1 MiB chunk were overwritten";
  EXPECT_LE(bad.size(), 2u) << "64 KiB span at most two chunks";
  // Every bad block is reported lost (once) and never served again.
  std::set<BlockId> reported;
  for (const LostBlock& lost : store_->TakeLost()) reported.insert(lost.id);
  EXPECT_EQ(reported, bad);
  for (const BlockId& id : bad) {
    EXPECT_FALSE(store_->Find(id).has_value()) << id.ToString();
    EXPECT_NE(store_->Read(id, 0, 1).status().code(), StatusCode::kOk);
  }
  EXPECT_TRUE(store_->TakeLost().empty());
  EXPECT_EQ(ReadEveryBlock(), bad) << "the healthy blocks stay readable";
  // The store still stores.
  EXPECT_TRUE(WriteBlock(*store_, BlockId::Rdd(8, 0), blocks_[0]).ok());
  EXPECT_TRUE(ReadAll(*store_, BlockId::Rdd(8, 0)) == blocks_[0]);
  EXPECT_FALSE(store_->read_only()) << store_->read_only_reason();
}

// Overwrites `length` bytes of the table file where `bytes` (stored once) are.
void OverwriteStored(const std::string& table, std::span<const std::byte> bytes, size_t length) {
  const std::string content = testing::ReadFile(table);
  const std::string_view needle(reinterpret_cast<const char*>(bytes.data()), 64);
  const size_t at = content.find(needle);
  ASSERT_NE(at, std::string::npos) << "the bytes are not in " << table;
  ASSERT_EQ(content.find(needle, at + 1), std::string::npos);
  ASSERT_NO_FATAL_FAILURE(Overwrite(table, at, length));
}

// A get's read (ReadForCheckingReader) leaves the check of large chunks to the reader's
// digests: the damaged chunk comes back as it is on disk, the digests that come with it name
// it, and once reported (as a client's report has BlockManager do) the block is dropped and
// lost like one RocksDB's checksum caught; the other blocks are unaffected.
TEST_F(DiskStoreCorruptionTest, AReadForACheckingReaderLeavesLargeChunksToTheDigests) {
  // Two full chunks and a tail: chunk 1 has a table block of its own, which the start-up scan
  // (one seek per version, to its meta) never reads.
  ASSERT_NO_FATAL_FAILURE(WriteBlocksAndClose(2 * kChunkBytes + 1000));
  const int damaged = 5;
  ASSERT_NO_FATAL_FAILURE(OverwriteStored(
      table_file_, std::span(blocks_[damaged]).subspan(kChunkBytes + 300 * kKiB), 4 * kKiB));

  Result<std::unique_ptr<DiskStore>> opened = DiskStore::Open(dir_.Sub("db"), 0);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  store_ = std::move(opened).value();
  ASSERT_TRUE(store_->TakeLost().empty()) << "the damage is past what Open() reads";
  for (int i = 0; i < kBlocks; ++i) {
    const BlockId id = BlockId::Rdd(7, i);
    Result<DiskRead> read = store_->ReadForCheckingReader(id, 0, UINT64_MAX);
    ASSERT_TRUE(read.ok()) << id.ToString() << ": " << read.status().ToString();
    ASSERT_EQ(read->unit_digests.size(), 3u);
    std::vector<std::span<const std::byte>> pieces;
    for (const ChunkPtr& chunk : read->chunks) pieces.push_back(chunk->bytes());
    const std::optional<uint64_t> bad =
        FirstBadUnit(pieces, 0, read->total_size, read->total_size, read->unit_digests);
    if (i != damaged) {
      EXPECT_TRUE(Concat(read->chunks) == blocks_[i]) << id.ToString();
      EXPECT_FALSE(bad.has_value()) << id.ToString();
      continue;
    }
    EXPECT_FALSE(Concat(read->chunks) == blocks_[i]) << "served as stored, unchecked";
    EXPECT_EQ(bad, std::optional<uint64_t>(1)) << "the digests name the damaged chunk";
    EXPECT_EQ(store_->ReportCorrupt(id, read->generation, "a reader's digests").code(),
              StatusCode::kDataLoss);
  }
  const std::vector<LostBlock> lost = store_->TakeLost();
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].id, BlockId::Rdd(7, damaged));
  EXPECT_EQ(ReadEveryBlock(), std::set<BlockId>{BlockId::Rdd(7, damaged)});
}

// Chunks under DiskStore::kUncheckedChunkMinBytes may share their table blocks with other
// records: a get's read of them keeps RocksDB's checksum, so damage there is never served.
TEST_F(DiskStoreCorruptionTest, AReadForACheckingReaderStillChecksSmallChunks) {
  // A full chunk and an 8 KiB tail, which has a table block of its own (see above).
  ASSERT_NO_FATAL_FAILURE(WriteBlocksAndClose(kChunkBytes + 8 * kKiB));
  const int damaged = 5;
  ASSERT_NO_FATAL_FAILURE(OverwriteStored(
      table_file_, std::span(blocks_[damaged]).subspan(kChunkBytes + 2 * kKiB), kKiB));

  Result<std::unique_ptr<DiskStore>> opened = DiskStore::Open(dir_.Sub("db"), 0);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  store_ = std::move(opened).value();
  ASSERT_TRUE(store_->TakeLost().empty()) << "the damage is past what Open() reads";
  Result<DiskRead> read = store_->ReadForCheckingReader(BlockId::Rdd(7, damaged), 0, UINT64_MAX);
  ASSERT_FALSE(read.ok()) << "damaged bytes were served";
  EXPECT_EQ(read.status().code(), StatusCode::kDataLoss) << read.status().ToString();
  EXPECT_THAT(read.status().message(), HasSubstr("RocksDB's checksum"));
  EXPECT_EQ(ReadEveryBlock(), std::set<BlockId>{BlockId::Rdd(7, damaged)});
}

// Where the start-up scan meets the damage (a version's metadata record overwritten, here found
// by the block id it holds): the store opens, names that block lost and serves the others. The
// table block holding the metadata may hold the tail of the version before it, which is then
// lost too, found on its read.
TEST_F(DiskStoreCorruptionTest, CorruptMetadataInTheStartUpScanCostsOnlyItsTableBlock) {
  ASSERT_NO_FATAL_FAILURE(WriteBlocksAndClose());
  const std::string bytes = testing::ReadFile(table_file_);
  const size_t at = bytes.find("rdd_7_5");
  ASSERT_NE(at, std::string::npos);
  ASSERT_EQ(bytes.find("rdd_7_5", at + 1), std::string::npos);
  ASSERT_NO_FATAL_FAILURE(Overwrite(table_file_, at - 8, 16));

  Result<std::unique_ptr<DiskStore>> opened = DiskStore::Open(dir_.Sub("db"), 0);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  store_ = std::move(opened).value();
  std::vector<LostBlock> lost = store_->TakeLost();
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].id, BlockId::Rdd(7, 5));
  EXPECT_THAT(lost[0].reason, HasSubstr("corrupt"));
  const std::set<BlockId> bad = ReadEveryBlock();
  EXPECT_TRUE(bad.contains(BlockId::Rdd(7, 5)));
  EXPECT_LE(bad.size(), 2u);
  for (const LostBlock& block : store_->TakeLost()) EXPECT_TRUE(bad.contains(block.id));
  EXPECT_EQ(store_->corrupt_count(), bad.size());

  // A restart reports nothing again and serves the same blocks.
  store_.reset();
  opened = DiskStore::Open(dir_.Sub("db"), 0);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  store_ = std::move(opened).value();
  EXPECT_TRUE(store_->TakeLost().empty());
  EXPECT_EQ(ReadEveryBlock(), bad);
  EXPECT_TRUE(store_->TakeLost().empty());
}

// Flushes the closed store's write-ahead log into a table file of its own and returns its path.
std::string FlushIntoNewTable(const std::string& dir) {
  std::set<std::string> before;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() == ".sst") before.insert(entry.path().string());
  }
  rocksdb::DB* raw = nullptr;
  EXPECT_TRUE(rocksdb::DB::Open(rocksdb::Options(), dir, &raw).ok());
  std::unique_ptr<rocksdb::DB> db(raw);
  EXPECT_TRUE(db->Flush(rocksdb::FlushOptions()).ok());
  db.reset();
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() == ".sst" && !before.contains(entry.path().string())) {
      return entry.path().string();
    }
  }
  return "";
}

// A table file cut in half (or otherwise unusable to RocksDB when it opens) kept the worker
// from starting at all ("Sst file size mismatch"): now it costs the blocks whose records were
// in it, reported lost at start-up naming the file, and the store serves and stores the rest.
TEST_F(DiskStoreCorruptionTest, ATruncatedTableFileCostsOnlyItsBlocksLostAtStartUp) {
  const std::string db = dir_.Sub("db");
  for (int i = 0; i < kBlocks; ++i) {
    blocks_.push_back(RandomBytes(kChunkBytes / 4 + i, i));
    ASSERT_TRUE(WriteBlock(*store_, BlockId::Rdd(7, i), blocks_.back()).ok());
    if (i == kBlocks / 2 - 1) {  // the first half in one table, the second in another
      store_.reset();
      ASSERT_FALSE(FlushIntoNewTable(db).empty());
      Reopen();
    }
  }
  store_.reset();
  const std::string second = FlushIntoNewTable(db);
  ASSERT_FALSE(second.empty());
  std::filesystem::resize_file(second, std::filesystem::file_size(second) / 2);

  Result<std::unique_ptr<DiskStore>> opened = DiskStore::Open(db, 0);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  store_ = std::move(opened).value();
  const std::string name = std::filesystem::path(second).filename().string();
  std::set<BlockId> lost_ids;
  for (const LostBlock& block : store_->TakeLost()) {
    lost_ids.insert(block.id);
    EXPECT_EQ(block.cause, LostCause::kLostAtStartUp);
    EXPECT_THAT(block.reason, HasSubstr(name)) << "names the table file";
  }
  std::set<BlockId> expected;
  for (int i = kBlocks / 2; i < kBlocks; ++i) expected.insert(BlockId::Rdd(7, i));
  EXPECT_EQ(lost_ids, expected);
  EXPECT_EQ(ReadEveryBlock(), expected) << "the other table's blocks are served";
  EXPECT_TRUE(std::filesystem::exists(db + "/lost/" + name)) << "set aside, not deleted";
  EXPECT_FALSE(store_->read_only()) << store_->read_only_reason();
  EXPECT_TRUE(WriteBlock(*store_, BlockId::Rdd(8, 0), blocks_[0]).ok());
  EXPECT_TRUE(ReadAll(*store_, BlockId::Rdd(8, 0)) == blocks_[0]);

  // A restart reports nothing again.
  Reopen();
  EXPECT_TRUE(store_->TakeLost().empty());
  EXPECT_EQ(ReadEveryBlock(), expected);
}

}  // namespace
}  // namespace bm
