#include "worker/scrubber.h"

#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "common/core/byte_size.h"
#include "common/core/protocol.h"
#include "tests/support/files.h"
#include "tests/support/temp_dir.h"
#include "worker/disk/disk_store.h"

namespace bm {
namespace {

using namespace std::chrono_literals;

class ScrubberTest : public ::testing::Test {
 protected:
  // `chunk_file_min_bytes` UINT64_MAX: every block's bytes in RocksDB records.
  void Open(uint64_t chunk_file_min_bytes = DiskStoreOptions::kDefaultChunkFileMinBytes) {
    DiskStoreOptions options;
    options.chunk_file_min_bytes = chunk_file_min_bytes;
    Result<std::unique_ptr<DiskStore>> store = DiskStore::Open(dir_.Sub("db"), std::move(options));
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
  }
  void WriteBlocks(int count, size_t size) {
    for (int i = 0; i < count; ++i) {
      BlockData data;
      data.Append(MakeChunk(testing::RandomByteVector(size, i)));
      ASSERT_TRUE(store_->Write(BlockId::Rdd(1, i), StorageLevel::kDiskOnly, data).ok());
    }
  }

  testing::TempDir dir_;
  std::unique_ptr<DiskStore> store_;
  TimePoint now_{};
};

TEST_F(ScrubberTest, ReadsNoFasterThanItsRate) {
  ASSERT_NO_FATAL_FAILURE(Open());
  ASSERT_NO_FATAL_FAILURE(WriteBlocks(8, kChunkBytes));
  Scrubber scrubber(*store_, 2 * kChunkBytes);
  scrubber.Step(now_);
  EXPECT_EQ(scrubber.stats().bytes_verified, 0u);
  for (int second = 1; second <= 3; ++second) {
    now_ += 1s;
    scrubber.Step(now_);
    EXPECT_EQ(scrubber.stats().bytes_verified, second * 2 * kChunkBytes) << second;
  }
  // A loop that was busy for a minute does not read a minute's worth at once.
  now_ += 60s;
  scrubber.Step(now_);
  EXPECT_EQ(scrubber.stats().bytes_verified, 8 * kChunkBytes);
  EXPECT_EQ(scrubber.stats().blocks_verified, 8u);
  EXPECT_EQ(scrubber.stats().corrupt_found, 0u);
  now_ += 1s;
  scrubber.Step(now_);
  EXPECT_EQ(scrubber.stats().passes, 1u) << "a second pass starts over";
  EXPECT_EQ(scrubber.stats().bytes_verified, 10 * kChunkBytes);
}

TEST_F(ScrubberTest, RateZeroIsOff) {
  ASSERT_NO_FATAL_FAILURE(Open());
  ASSERT_NO_FATAL_FAILURE(WriteBlocks(2, 1000));
  Scrubber scrubber(*store_, 0);
  EXPECT_FALSE(scrubber.enabled());
  scrubber.Step(now_);
  now_ += 10s;
  scrubber.Step(now_);
  EXPECT_EQ(scrubber.stats().bytes_verified, 0u);
}

// A block rotting on disk (a table file overwritten in the middle while the store was closed)
// is found by the scrubber, dropped and reported lost; the others verify.
TEST_F(ScrubberTest, FindsAndReportsABlockThatRottedOnDisk) {
  constexpr int kBlocks = 12;
  ASSERT_NO_FATAL_FAILURE(Open(/*chunk_file_min_bytes=*/UINT64_MAX));
  ASSERT_NO_FATAL_FAILURE(WriteBlocks(kBlocks, kChunkBytes + 100));
  store_.reset();
  {  // Flush the write-ahead log into a table file, then damage the file's middle.
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), dir_.Sub("db"), &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    ASSERT_TRUE(db->Flush(rocksdb::FlushOptions()).ok());
  }
  std::string table;
  for (const auto& entry : std::filesystem::directory_iterator(dir_.Sub("db"))) {
    if (entry.path().extension() == ".sst") table = entry.path().string();
  }
  ASSERT_FALSE(table.empty());
  {
    std::fstream file(table, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(static_cast<std::streamoff>(std::filesystem::file_size(table) / 2));
    const std::string garbage(64 * kKiB, 'z');
    file.write(garbage.data(), static_cast<std::streamsize>(garbage.size()));
  }
  ASSERT_NO_FATAL_FAILURE(Open());
  std::set<BlockId> lost_at_open;
  for (const LostBlock& block : store_->TakeLost()) lost_at_open.insert(block.id);

  // Fast enough to pass over every block within a step.
  Scrubber scrubber(*store_, 100 * kMiB);
  scrubber.Step(now_);
  now_ += 1s;
  scrubber.Step(now_);
  ASSERT_GE(scrubber.stats().passes, 1u);
  const uint64_t corrupt = scrubber.stats().corrupt_found;
  EXPECT_GE(corrupt + lost_at_open.size(), 1u) << "64 KiB of the file were overwritten";
  std::vector<LostBlock> lost = store_->TakeLost();
  EXPECT_EQ(lost.size(), corrupt);
  for (const LostBlock& block : lost) EXPECT_FALSE(store_->Find(block.id).has_value());
  EXPECT_EQ(store_->block_count(), kBlocks - corrupt - lost_at_open.size());
  EXPECT_GE(scrubber.stats().blocks_verified, store_->block_count());
  // The next passes find the rest healthy.
  now_ += 1s;
  scrubber.Step(now_);
  EXPECT_EQ(scrubber.stats().corrupt_found, corrupt);
  EXPECT_TRUE(store_->TakeLost().empty());
}

// Bytes that went bad where RocksDB's checksums cannot see it (here a chunk rewritten through
// RocksDB with one byte flipped) fail the block's own digests: found, dropped and reported.
TEST_F(ScrubberTest, FindsAChunkThatNoLongerMatchesItsDigest) {
  ASSERT_NO_FATAL_FAILURE(Open(/*chunk_file_min_bytes=*/UINT64_MAX));
  ASSERT_NO_FATAL_FAILURE(WriteBlocks(3, kChunkBytes + 100));
  const uint64_t generation = store_->Read(BlockId::Rdd(1, 1), 0, 1)->generation;
  store_.reset();
  {
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), dir_.Sub("db"), &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    std::string key = "v";
    for (int shift = 56; shift >= 0; shift -= 8)
      key.push_back(static_cast<char>(generation >> shift));
    key.append(7, '\0');
    key.push_back('\1');  // chunk 1
    std::string value;
    ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), key, &value).ok());
    value[50] ^= 0x01;
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), key, value).ok());
  }
  ASSERT_NO_FATAL_FAILURE(Open());
  ASSERT_TRUE(store_->TakeLost().empty());
  Scrubber scrubber(*store_, 100 * kMiB);
  scrubber.Step(now_);
  now_ += 1s;
  scrubber.Step(now_);
  EXPECT_EQ(scrubber.stats().corrupt_found, 1u);
  std::vector<LostBlock> lost = store_->TakeLost();
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].id, BlockId::Rdd(1, 1));
  EXPECT_NE(lost[0].reason.find("does not match its digest"), std::string::npos) << lost[0].reason;
  EXPECT_FALSE(store_->Find(BlockId::Rdd(1, 1)).has_value());
  EXPECT_EQ(store_->block_count(), 2u);
  EXPECT_EQ(store_->corrupt_count(), 1u);
}

// A chunk file (blocks of 64 KiB or more) has no checksum of its own: a byte flipped in it on
// disk fails the block's digests when the scrubber reads it.
TEST_F(ScrubberTest, FindsAByteThatRottedInAChunkFile) {
  ASSERT_NO_FATAL_FAILURE(Open());
  ASSERT_NO_FATAL_FAILURE(WriteBlocks(3, 2 * kChunkBytes + 100));
  const uint64_t generation = store_->Read(BlockId::Rdd(1, 2), 0, 1)->generation;
  store_.reset();
  char name[17];
  std::snprintf(name, sizeof name, "%016llx", static_cast<unsigned long long>(generation));
  const std::string path = dir_.Sub("db") + "/chunks/" + name;
  ASSERT_TRUE(std::filesystem::exists(path));
  {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(static_cast<std::streamoff>(kChunkBytes + 7));
    const char byte = static_cast<char>(file.get());
    file.seekp(static_cast<std::streamoff>(kChunkBytes + 7));
    file.put(static_cast<char>(byte ^ 0x01));
    ASSERT_TRUE(file.good());
  }
  ASSERT_NO_FATAL_FAILURE(Open());
  ASSERT_TRUE(store_->TakeLost().empty()) << "the file is whole: only its bytes are wrong";
  Scrubber scrubber(*store_, 100 * kMiB);
  scrubber.Step(now_);
  now_ += 1s;
  scrubber.Step(now_);
  EXPECT_EQ(scrubber.stats().corrupt_found, 1u);
  std::vector<LostBlock> lost = store_->TakeLost();
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].id, BlockId::Rdd(1, 2));
  EXPECT_FALSE(store_->Find(BlockId::Rdd(1, 2)).has_value());
  EXPECT_EQ(store_->block_count(), 2u);
}

}  // namespace
}  // namespace bm
