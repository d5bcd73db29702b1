#include "worker/shuffle_files.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/core/digest.h"
#include "tests/support/temp_dir.h"

namespace bm {
namespace {

using ::testing::HasSubstr;

std::span<const std::byte> Bytes(const std::string& text) {
  return std::as_bytes(std::span(text.data(), text.size()));
}

ShuffleRecord RecordOf(uint32_t map, uint32_t sequence, const std::string& text) {
  return {.map = map,
          .attempt = 1,
          .sequence = sequence,
          .digest = DigestOf(Bytes(text)),
          .bytes = Bytes(text)};
}

std::string TextAt(const ShuffleFiles& files, uint32_t disk, uint32_t partition,
                   const ShuffleFileRecord& record) {
  Result<ChunkPtr> read = files.Read(disk, 7, partition, record.offset, record.length);
  EXPECT_TRUE(read.ok()) << read.status().ToString();
  if (!read.ok()) return "";
  return std::string(reinterpret_cast<const char*>((*read)->bytes().data()), (*read)->size());
}

class ShuffleFilesTest : public ::testing::Test {
 protected:
  testing::TempDir dir_;
  ShuffleFiles files_{{dir_.Sub("d0"), dir_.Sub("d1")}};
};

TEST_F(ShuffleFilesTest, WhatIsAppendedLoadsBackRecordByRecord) {
  const std::string a = "alpha", b = "bravo-bravo", c = "c";
  const ShuffleRecord first[] = {RecordOf(0, 0, a), RecordOf(1, 0, b)};
  ASSERT_TRUE(files_.Append(1, 7, 3, /*maps=*/2, "tenant x", 0, first).ok());
  const uint64_t end = 2 * ShuffleFiles::kRecordHeaderBytes + a.size() + b.size();
  const ShuffleRecord second[] = {RecordOf(0, 1, c)};
  ASSERT_TRUE(files_.Append(1, 7, 3, 2, "tenant x", end, second).ok());

  std::vector<LoadedShuffle> loaded = files_.Load();
  ASSERT_EQ(loaded.size(), 1u);
  EXPECT_EQ(loaded[0].id, 7u);
  EXPECT_EQ(loaded[0].maps, 2u);
  EXPECT_EQ(loaded[0].owner, "tenant x");
  ASSERT_EQ(loaded[0].partitions.size(), 1u);
  const LoadedShufflePartition& partition = loaded[0].partitions[0];
  EXPECT_EQ(partition.disk, 1u);
  EXPECT_EQ(partition.partition, 3u);
  EXPECT_EQ(partition.file_bytes, end + ShuffleFiles::kRecordHeaderBytes + c.size());
  ASSERT_EQ(partition.records.size(), 3u);
  EXPECT_EQ(partition.records[1].map, 1u);
  EXPECT_EQ(partition.records[1].attempt, 1u);
  EXPECT_EQ(partition.records[2].sequence, 1u);
  EXPECT_EQ(TextAt(files_, 1, 3, partition.records[0]), a);
  EXPECT_EQ(TextAt(files_, 1, 3, partition.records[1]), b);
  EXPECT_EQ(TextAt(files_, 1, 3, partition.records[2]), c);
}

TEST_F(ShuffleFilesTest, ATornLastRecordIsCutAwayAndTheRestKept) {
  const std::string a = "whole", b = "torn-record-bytes";
  const ShuffleRecord records[] = {RecordOf(0, 0, a), RecordOf(0, 1, b)};
  ASSERT_TRUE(files_.Append(0, 7, 0, 1, "", 0, records).ok());
  const std::string path = files_.PartitionPath(0, 7, 0);
  const uint64_t whole = ShuffleFiles::kRecordHeaderBytes + a.size();
  std::filesystem::resize_file(path, whole + ShuffleFiles::kRecordHeaderBytes + 4);  // a crash

  std::vector<LoadedShuffle> loaded = files_.Load();
  ASSERT_EQ(loaded.size(), 1u);
  ASSERT_EQ(loaded[0].partitions.size(), 1u);
  EXPECT_EQ(loaded[0].partitions[0].records.size(), 1u);
  EXPECT_EQ(loaded[0].partitions[0].file_bytes, whole);
  EXPECT_EQ(std::filesystem::file_size(path), whole);
}

TEST_F(ShuffleFilesTest, ARecordThatFailsItsDigestEndsTheFile) {
  const std::string a = "first", b = "second";
  const ShuffleRecord records[] = {RecordOf(0, 0, a), RecordOf(0, 1, b)};
  ASSERT_TRUE(files_.Append(0, 7, 0, 1, "", 0, records).ok());
  const std::string path = files_.PartitionPath(0, 7, 0);
  {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(static_cast<std::streamoff>(2 * ShuffleFiles::kRecordHeaderBytes + a.size()));
    file.put('X');
  }
  std::vector<LoadedShuffle> loaded = files_.Load();
  ASSERT_EQ(loaded.size(), 1u);
  EXPECT_EQ(loaded[0].partitions[0].records.size(), 1u);
}

TEST_F(ShuffleFilesTest, AShuffleDirectoryWithoutMetaIsRemoved) {
  const std::filesystem::path stray = std::filesystem::path(dir_.Sub("d0")) / "shuffle" / "12";
  std::filesystem::create_directories(stray);
  std::ofstream(stray / "0.data") << "junk";
  EXPECT_TRUE(files_.Load().empty());
  EXPECT_FALSE(std::filesystem::exists(stray));
}

TEST_F(ShuffleFilesTest, RemovedShufflesAndPartitionsLeaveNothingBehind) {
  const std::string a = "bytes";
  const ShuffleRecord records[] = {RecordOf(0, 0, a)};
  ASSERT_TRUE(files_.Append(0, 7, 0, 1, "", 0, records).ok());
  ASSERT_TRUE(files_.Append(1, 7, 1, 1, "", 0, records).ok());
  files_.RemovePartition(0, 7, 0);
  EXPECT_FALSE(std::filesystem::exists(files_.PartitionPath(0, 7, 0)));
  files_.RemoveShuffle(7);
  EXPECT_TRUE(files_.Load().empty());
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(dir_.Sub("d1")) / "shuffle" / "7"));
  // Reading what is gone is a clear kNotFound.
  Result<ChunkPtr> gone = files_.Read(1, 7, 1, 32, 5);
  EXPECT_EQ(gone.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(gone.status().message(), HasSubstr("is gone"));
}

TEST_F(ShuffleFilesTest, AnUnwritableDiskIsAClearError) {
  const std::string blocker = dir_.Sub("file");
  std::ofstream(blocker) << "not a directory";
  ShuffleFiles files({blocker});
  const std::string a = "bytes";
  const ShuffleRecord records[] = {RecordOf(0, 0, a)};
  Status written = files.Append(0, 7, 0, 1, "", 0, records);
  EXPECT_EQ(written.code(), StatusCode::kInternal);
  EXPECT_THAT(written.message(), HasSubstr(blocker));
}

}  // namespace
}  // namespace bm
