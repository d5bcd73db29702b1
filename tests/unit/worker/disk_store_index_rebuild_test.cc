// A disk store whose index (RocksDB's table files) is damaged takes the blocks whose bytes are in
// chunk files back from the files' trailers (worker/disk/chunk_files.h, disk_format.h), and names
// the damaged table file for the blocks it cannot take back.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "common/core/byte_size.h"
#include "common/core/protocol.h"
#include "tests/support/files.h"
#include "tests/support/temp_dir.h"
#include "tests/unit/worker/disk_store_helpers.h"
#include "worker/disk/disk_store.h"

namespace bm {
namespace {

using testing::Concat;
using ::testing::HasSubstr;
using ::testing::Not;

std::vector<std::byte> RandomBytes(size_t size, uint64_t seed) {
  return testing::RandomByteVector(size, seed);
}

// Each block in one append, as these tests' table files expect.
Status WriteBlock(DiskStore& store, const BlockId& id, const std::vector<std::byte>& bytes) {
  return testing::WriteBlock(store, id, bytes, std::max<size_t>(bytes.size(), 1));
}

// Flushes the closed store's write-ahead log into a table file and returns the largest one.
std::string FlushIntoTable(const std::string& dir) {
  {
    rocksdb::Options options;
    options.compression = rocksdb::kNoCompression;  // as the store writes them
    rocksdb::DB* raw = nullptr;
    rocksdb::Status opened = rocksdb::DB::Open(options, dir, &raw);
    EXPECT_TRUE(opened.ok()) << opened.ToString();
    if (!opened.ok()) return "";
    std::unique_ptr<rocksdb::DB> db(raw);
    EXPECT_TRUE(db->Flush(rocksdb::FlushOptions()).ok());
  }
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

void FlipBit(const std::string& path, uint64_t at, int bit) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(file.is_open()) << path;
  file.seekg(static_cast<std::streamoff>(at));
  char byte = 0;
  ASSERT_TRUE(file.get(byte).good());
  byte = static_cast<char>(byte ^ (1 << bit));
  file.seekp(static_cast<std::streamoff>(at));
  ASSERT_TRUE(file.put(byte).good());
}

// How the table file holding the index is damaged.
enum class Damage {
  kBitsFlippedInRecords,   // 3 bits where a block's meta record is: its table block fails its
                           // checksum in the start-up scan
  kBitsFlippedAcrossFile,  // 3 bits at a quarter, half and three quarters of the file
  kCutInHalf,              // RocksDB cannot open it: set aside by a repair
};

void DamageTable(const std::string& table, Damage damage, const std::string& marker) {
  const uint64_t size = std::filesystem::file_size(table);
  switch (damage) {
    case Damage::kBitsFlippedInRecords: {
      const std::string bytes = testing::ReadFile(table);
      const size_t at = bytes.find(marker);
      ASSERT_NE(at, std::string::npos) << marker << " is not in " << table;
      for (int i = 0; i < 3; ++i) ASSERT_NO_FATAL_FAILURE(FlipBit(table, at + i, 2 * i + 1));
      break;
    }
    case Damage::kBitsFlippedAcrossFile:
      for (int i = 1; i <= 3; ++i) ASSERT_NO_FATAL_FAILURE(FlipBit(table, size * i / 4, i));
      break;
    case Damage::kCutInHalf:
      std::filesystem::resize_file(table, size / 2);
      break;
  }
}

std::unique_ptr<DiskStore> OpenStore(const std::string& dir) { return testing::OpenDiskStore(dir); }

class IndexRebuildTest : public ::testing::Test {
 protected:
  void SetUp() override { Reopen(); }
  void Reopen() {
    store_.reset();
    store_ = OpenStore(Db());
    ASSERT_NE(store_, nullptr);
  }
  std::string Db() const { return dir_.Sub("db"); }
  std::string FileOf(const BlockId& id) {
    Result<DiskRead> read = store_->Read(id, 0, 0);
    EXPECT_TRUE(read.ok()) << read.status().ToString();
    char name[17];
    std::snprintf(name, sizeof name, "%016llx",
                  static_cast<unsigned long long>(read.ok() ? read->generation : 0));
    return Db() + "/chunks/" + name;
  }
  void Put(const BlockId& id, size_t size, uint64_t seed) {
    stored_[id] = RandomBytes(size, seed);
    ASSERT_TRUE(WriteBlock(*store_, id, stored_[id]).ok());
  }
  // Closes the store, flushes its records into a table file and damages that file.
  void CloseAndDamageTable(Damage damage, const std::string& marker = "rdd_7_5") {
    store_.reset();
    table_ = FlushIntoTable(Db());
    ASSERT_FALSE(table_.empty());
    ASSERT_NO_FATAL_FAILURE(DamageTable(table_, damage, marker));
  }
  std::string TableName() const { return std::filesystem::path(table_).filename().string(); }
  // The blocks of stored_ served byte-exact; fails the test for any served with other bytes.
  std::set<BlockId> Served() {
    std::set<BlockId> served;
    for (const auto& [id, bytes] : stored_) {
      if (!store_->Find(id).has_value()) continue;
      Result<DiskRead> read = store_->Read(id, 0, UINT64_MAX);
      if (!read.ok()) continue;
      EXPECT_TRUE(Concat(read->chunks) == bytes) << id.ToString() << " served wrong bytes";
      served.insert(id);
    }
    return served;
  }
  std::set<BlockId> All() const {
    std::set<BlockId> all;
    for (const auto& [id, bytes] : stored_) all.insert(id);
    return all;
  }

  testing::TempDir dir_;
  std::unique_ptr<DiskStore> store_;
  std::map<BlockId, std::vector<std::byte>> stored_;
  std::string table_;
};

class DamagedIndexTest : public IndexRebuildTest, public ::testing::WithParamInterface<Damage> {};

// 3 bits flipped in the one table file holding the records of 24 blocks, whose bytes were whole
// in their chunk files, cost all 24 ("generation N was committed but the store no longer has
// it (RocksDB recovered its write-ahead log ..."): each is taken back from its chunk file.
TEST_P(DamagedIndexTest, EveryBlockWhoseChunkFileIsWholeIsServedAndNoneIsLost) {
  constexpr int kBlocks = 24;
  uint64_t total = 0;
  for (int i = 0; i < kBlocks; ++i) {
    ASSERT_NO_FATAL_FAILURE(Put(BlockId::Rdd(7, i), 128 * kKiB + i * 1000, i));
    total += stored_[BlockId::Rdd(7, i)].size();
  }
  ASSERT_NO_FATAL_FAILURE(CloseAndDamageTable(GetParam()));

  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_EQ(Served(), All());
  EXPECT_THAT(store_->TakeLost(), ::testing::IsEmpty());
  EXPECT_EQ(store_->corrupt_count(), 0u);
  EXPECT_EQ(store_->block_count(), static_cast<size_t>(kBlocks));
  EXPECT_EQ(store_->used(), total);
  EXPECT_FALSE(store_->read_only()) << store_->read_only_reason();

  // Written back into the index: a restart serves them all again, and the store still stores.
  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_EQ(Served(), All());
  EXPECT_THAT(store_->TakeLost(), ::testing::IsEmpty());
  ASSERT_NO_FATAL_FAILURE(Put(BlockId::Rdd(8, 0), 200 * kKiB, 99));
  EXPECT_EQ(Served(), All());
}

INSTANTIATE_TEST_SUITE_P(Damages, DamagedIndexTest,
                         ::testing::Values(Damage::kBitsFlippedInRecords,
                                           Damage::kBitsFlippedAcrossFile, Damage::kCutInHalf));

class SmallBlocksInADamagedTableTest : public IndexRebuildTest,
                                       public ::testing::WithParamInterface<Damage> {};

// Blocks whose bytes were in RocksDB records cannot be taken back: they are reported lost, with
// the damaged table file named (not "RocksDB recovered its write-ahead log ..."); the blocks in
// chunk files beside them are served.
TEST_P(SmallBlocksInADamagedTableTest, AreReportedLostNamingTheTableFile) {
  for (int i = 0; i < 8; ++i) ASSERT_NO_FATAL_FAILURE(Put(BlockId::Rdd(7, i), 4 * kKiB + i, i));
  for (int i = 0; i < 4; ++i) ASSERT_NO_FATAL_FAILURE(Put(BlockId::Rdd(9, i), 100 * kKiB, 10 + i));
  ASSERT_NO_FATAL_FAILURE(CloseAndDamageTable(GetParam()));

  ASSERT_NO_FATAL_FAILURE(Reopen());
  std::set<BlockId> lost_ids;
  for (const LostBlock& lost : store_->TakeLost()) {
    lost_ids.insert(lost.id);
    EXPECT_EQ(lost.cause, LostCause::kLostAtStartUp);
    EXPECT_THAT(lost.reason, HasSubstr("index table " + TableName()));
    EXPECT_THAT(lost.reason, HasSubstr("damaged"));
    EXPECT_THAT(lost.reason, Not(HasSubstr("write-ahead log")));
  }
  EXPECT_TRUE(lost_ids.contains(BlockId::Rdd(7, 5))) << "its records were damaged";
  EXPECT_EQ(store_->corrupt_count(), lost_ids.size());
  const std::set<BlockId> served = Served();
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(served.contains(BlockId::Rdd(9, i))) << i;
  // A small block whose meta the scan read but whose bytes shared the damaged table block is
  // lost on its read, as before.
  for (const LostBlock& lost : store_->TakeLost()) lost_ids.insert(lost.id);
  EXPECT_EQ(lost_ids.size() + served.size(), stored_.size()) << "each block served or lost";
}

INSTANTIATE_TEST_SUITE_P(Damages, SmallBlocksInADamagedTableTest,
                         ::testing::Values(Damage::kBitsFlippedInRecords, Damage::kCutInHalf));

// Chunk files written before trailers hold exactly the block's bytes: they read as before. With
// the index damaged they cannot describe themselves and are lost like small blocks.
TEST_F(IndexRebuildTest, AChunkFileWithoutATrailerStillReads) {
  ASSERT_NO_FATAL_FAILURE(Put(BlockId::Rdd(7, 1), 3 * kChunkBytes + 17, 1));
  ASSERT_NO_FATAL_FAILURE(Put(BlockId::Rdd(7, 2), 100 * kKiB, 2));
  const std::string old_file = FileOf(BlockId::Rdd(7, 1));
  ASSERT_GT(std::filesystem::file_size(old_file), 3 * kChunkBytes + 17) << "has a trailer";
  store_.reset();
  std::filesystem::resize_file(old_file, 3 * kChunkBytes + 17);

  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_EQ(Served(), All());
  EXPECT_THAT(store_->TakeLost(), ::testing::IsEmpty());
  Result<DiskRead> checked = store_->ReadForCheckingReader(BlockId::Rdd(7, 1), 0, UINT64_MAX);
  ASSERT_TRUE(checked.ok()) << checked.status().ToString();
  EXPECT_TRUE(Concat(checked->chunks) == stored_[BlockId::Rdd(7, 1)]);
  EXPECT_EQ(checked->unit_digests.size(), 4u);

  ASSERT_NO_FATAL_FAILURE(CloseAndDamageTable(Damage::kCutInHalf));
  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_EQ(Served(), std::set<BlockId>{BlockId::Rdd(7, 2)});
  std::vector<LostBlock> lost = store_->TakeLost();
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].id, BlockId::Rdd(7, 1));
  EXPECT_THAT(lost[0].reason, HasSubstr("index table " + TableName()));
}

// A trailer that fails its digest describes nothing: that file is not taken back (its block is
// lost with the table), the others are.
TEST_F(IndexRebuildTest, AChunkFileWithADamagedTrailerIsNotTakenBack) {
  for (int i = 0; i < 4; ++i) ASSERT_NO_FATAL_FAILURE(Put(BlockId::Rdd(7, i), 200 * kKiB, i));
  const std::string damaged = FileOf(BlockId::Rdd(7, 2));
  const uint64_t size = std::filesystem::file_size(damaged);
  ASSERT_NO_FATAL_FAILURE(CloseAndDamageTable(Damage::kCutInHalf));
  // A bit of the block id in the trailer's record, just before its footer.
  ASSERT_NO_FATAL_FAILURE(FlipBit(damaged, size - 24 - 2, 0));

  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_EQ(Served(),
            (std::set<BlockId>{BlockId::Rdd(7, 0), BlockId::Rdd(7, 1), BlockId::Rdd(7, 3)}));
  std::vector<LostBlock> lost = store_->TakeLost();
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].id, BlockId::Rdd(7, 2));
  EXPECT_THAT(lost[0].reason, HasSubstr("index table " + TableName()));
}

// The journal says which generation of a block is current: the file of a version replaced since,
// or of a block removed since, left behind by a crash before its deletion, is not taken back.
TEST_F(IndexRebuildTest, AReplacedOrRemovedVersionsFileIsNotTakenBack) {
  ASSERT_NO_FATAL_FAILURE(Put(BlockId::Rdd(7, 1), 200 * kKiB, 1));
  ASSERT_NO_FATAL_FAILURE(Put(BlockId::Rdd(7, 2), 200 * kKiB, 2));
  const std::string replaced = FileOf(BlockId::Rdd(7, 1));
  const std::string removed = FileOf(BlockId::Rdd(7, 2));
  const std::string replaced_bytes = testing::ReadFile(replaced);
  const std::string removed_bytes = testing::ReadFile(removed);
  ASSERT_NO_FATAL_FAILURE(Put(BlockId::Rdd(7, 1), 300 * kKiB, 3));
  ASSERT_TRUE(store_->Remove(BlockId::Rdd(7, 2)).ok());
  stored_.erase(BlockId::Rdd(7, 2));
  store_->WaitForDeletions();
  ASSERT_FALSE(std::filesystem::exists(replaced));
  ASSERT_NO_FATAL_FAILURE(CloseAndDamageTable(Damage::kCutInHalf));
  testing::WriteFile(replaced, replaced_bytes);
  testing::WriteFile(removed, removed_bytes);

  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_EQ(Served(), All()) << "the replacing version";
  EXPECT_FALSE(store_->Find(BlockId::Rdd(7, 2)).has_value());
  EXPECT_THAT(store_->TakeLost(), ::testing::IsEmpty());
  store_->WaitForDeletions();
  EXPECT_FALSE(std::filesystem::exists(replaced)) << "swept as a file no block owns";
  EXPECT_FALSE(std::filesystem::exists(removed)) << "swept as a file no block owns";
}

}  // namespace
}  // namespace bm
