#include "common/net/block_arena.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "common/core/digest.h"

namespace bm {
namespace {

// The bytes of `id`'s version `version`: every byte depends on both, so a copy mixing two
// versions (a torn read) or two blocks never passes for either.
std::vector<std::byte> BytesOf(uint64_t partition, uint64_t version, size_t size) {
  std::vector<std::byte> bytes(size);
  for (size_t i = 0; i < size; ++i) {
    bytes[i] = static_cast<std::byte>((i * 131 + partition * 7 + version * 13) & 0xff);
  }
  return bytes;
}

ArenaBlockFacts FactsOf(const std::vector<std::byte>& bytes, uint64_t version) {
  return {.version = version,
          .generation = version + 100,
          .tier = Tier::kMemory,
          .level = StorageLevel::kMemoryAndDisk,
          .digest = DigestOf(bytes)};
}

bool Put(BlockArenaWriter& arena, uint64_t partition, uint64_t version, size_t size) {
  const std::vector<std::byte> bytes = BytesOf(partition, version, size);
  // Two chunks, split off the word boundaries, as a store's chunks may be.
  const size_t half = size / 2 + (size > 2 ? 1 : 0);
  const std::vector<ChunkPtr> chunks = {MakeChunk(std::span(bytes).first(half)),
                                        MakeChunk(std::span(bytes).subspan(half))};
  return arena.Put(BlockId::Rdd(1, partition), FactsOf(bytes, version), chunks, size);
}

std::unique_ptr<BlockArenaReader> ReaderOf(const BlockArenaWriter& writer) {
  Result<std::unique_ptr<BlockArenaReader>> reader =
      BlockArenaReader::Map(OwnedFd(dup(writer.read_only_fd())), writer.file_bytes());
  EXPECT_TRUE(reader.ok()) << reader.status().ToString();
  return reader.ok() ? std::move(reader).value() : nullptr;
}

std::unique_ptr<BlockArenaWriter> NewArena(uint64_t data_bytes, uint64_t max_block = 64 << 10) {
  Result<std::unique_ptr<BlockArenaWriter>> arena =
      BlockArenaWriter::Create("test-arena", data_bytes, max_block);
  EXPECT_TRUE(arena.ok()) << arena.status().ToString();
  return arena.ok() ? std::move(arena).value() : nullptr;
}

TEST(BlockArenaTest, ReaderFindsWhatTheWriterPut) {
  auto writer = NewArena(1 << 20);
  auto reader = ReaderOf(*writer);
  ASSERT_TRUE(reader);
  EXPECT_FALSE(reader->Find(BlockId::Rdd(1, 7)).has_value());
  for (size_t size : {0, 1, 7, 8, 9, 4096, 4099, 65536}) {
    ASSERT_TRUE(Put(*writer, size, 3, size)) << size;
    std::optional<ArenaBlock> found = reader->Find(BlockId::Rdd(1, size));
    ASSERT_TRUE(found.has_value()) << size;
    const std::vector<std::byte> expected = BytesOf(size, 3, size);
    ASSERT_EQ(found->bytes->size(), size);
    EXPECT_TRUE(std::equal(expected.begin(), expected.end(), found->bytes->bytes().begin()));
    EXPECT_EQ(found->facts.version, 3u);
    EXPECT_EQ(found->facts.generation, 103u);
    EXPECT_EQ(found->facts.level, StorageLevel::kMemoryAndDisk);
    EXPECT_EQ(found->facts.digest, DigestOf(expected));
  }
  EXPECT_FALSE(reader->Find(BlockId::Rdd(2, 7)).has_value());
  EXPECT_FALSE(reader->Find(BlockId::Broadcast(7)).has_value());
}

TEST(BlockArenaTest, ANewVersionReplacesTheOldAndEraseTakesItOut) {
  auto writer = NewArena(1 << 20);
  auto reader = ReaderOf(*writer);
  ASSERT_TRUE(reader);
  ASSERT_TRUE(Put(*writer, 5, 1, 4096));
  ASSERT_TRUE(Put(*writer, 5, 2, 100));
  std::optional<ArenaBlock> found = reader->Find(BlockId::Rdd(1, 5));
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->facts.version, 2u);
  EXPECT_EQ(found->bytes->size(), 100u);
  EXPECT_EQ(writer->blocks(), 1u);
  writer->Erase(BlockId::Rdd(1, 5));
  EXPECT_FALSE(reader->Find(BlockId::Rdd(1, 5)).has_value());
  EXPECT_EQ(writer->blocks(), 0u);
  writer->Erase(BlockId::Rdd(1, 5));  // absent: nothing happens
}

TEST(BlockArenaTest, ReadersStopUsingAnArenaItsWriterNoLongerKeepsAlive) {
  auto writer = NewArena(1 << 20);
  auto reader = ReaderOf(*writer);
  ASSERT_TRUE(reader);
  ASSERT_TRUE(Put(*writer, 1, 1, 4096));
  EXPECT_TRUE(reader->Find(BlockId::Rdd(1, 1)).has_value());  // alive for 3 s from Create
  writer->KeepAlive(std::chrono::steady_clock::now() - std::chrono::milliseconds(1));
  EXPECT_FALSE(reader->Find(BlockId::Rdd(1, 1)).has_value());
  writer->KeepAlive(std::chrono::steady_clock::now() + std::chrono::seconds(10));
  EXPECT_TRUE(reader->Find(BlockId::Rdd(1, 1)).has_value());
}

TEST(BlockArenaTest, RefusesBlocksPastItsLimit) {
  auto writer = NewArena(1 << 20, /*max_block=*/4096);
  EXPECT_FALSE(Put(*writer, 1, 1, 4097));
  EXPECT_TRUE(Put(*writer, 1, 1, 4096));
}

TEST(BlockArenaTest, TheRingOverwritesTheOldestCopiesOnly) {
  constexpr uint64_t kRing = 64 << 10;
  auto writer = NewArena(kRing);
  auto reader = ReaderOf(*writer);
  ASSERT_TRUE(reader);
  constexpr uint64_t kBlocks = 100;  // 4 KiB each: about six laps of the ring
  for (uint64_t i = 0; i < kBlocks; ++i) ASSERT_TRUE(Put(*writer, i, 1, 4000));
  size_t found_count = 0;
  for (uint64_t i = 0; i < kBlocks; ++i) {
    std::optional<ArenaBlock> found = reader->Find(BlockId::Rdd(1, i));
    EXPECT_EQ(found.has_value(), writer->Contains(BlockId::Rdd(1, i))) << i;
    if (!found) continue;
    ++found_count;
    const std::vector<std::byte> expected = BytesOf(i, 1, 4000);
    EXPECT_TRUE(std::equal(expected.begin(), expected.end(), found->bytes->bytes().begin())) << i;
  }
  // The last blocks written fill most of the ring; the first are long overwritten.
  EXPECT_GE(found_count, 10u);
  EXPECT_LE(found_count, kRing / 4000);
  EXPECT_TRUE(reader->Find(BlockId::Rdd(1, kBlocks - 1)).has_value());
  EXPECT_FALSE(reader->Find(BlockId::Rdd(1, 0)).has_value());
}

TEST(BlockArenaTest, AReaderCannotWriteOrResizeTheArena) {
  auto writer = NewArena(1 << 20);
  const int fd = writer->read_only_fd();
  EXPECT_EQ(mmap(nullptr, writer->file_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0),
            MAP_FAILED);
  // Reopened for writing, as a process of the same user could: the seals still refuse.
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  const OwnedFd reopened(open(path.c_str(), O_RDWR | O_CLOEXEC));
  ASSERT_GE(reopened.get(), 0);
  EXPECT_EQ(
      mmap(nullptr, writer->file_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, reopened.get(), 0),
      MAP_FAILED);
  const char byte = 'x';
  EXPECT_LT(pwrite(reopened.get(), &byte, 1, 0), 0);
  EXPECT_NE(ftruncate(reopened.get(), 0), 0);
}

TEST(BlockArenaTest, RefusesAFileThatIsNotASealedArena) {
  const int plain = memfd_create("plain", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_GE(plain, 0);
  ASSERT_EQ(ftruncate(plain, 1 << 20), 0);
  Result<std::unique_ptr<BlockArenaReader>> unsealed =
      BlockArenaReader::Map(OwnedFd(plain), 1 << 20);
  EXPECT_EQ(unsealed.status().code(), StatusCode::kDataLoss);

  // Sealed, but zeros rather than an arena's header.
  const int zeros = memfd_create("zeros", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_GE(zeros, 0);
  ASSERT_EQ(ftruncate(zeros, 1 << 20), 0);
  ASSERT_EQ(fcntl(zeros, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE), 0);
  Result<std::unique_ptr<BlockArenaReader>> not_arena =
      BlockArenaReader::Map(OwnedFd(zeros), 1 << 20);
  EXPECT_EQ(not_arena.status().code(), StatusCode::kDataLoss);

  auto writer = NewArena(1 << 20);
  Result<std::unique_ptr<BlockArenaReader>> wrong_size =
      BlockArenaReader::Map(OwnedFd(dup(writer->read_only_fd())), writer->file_bytes() - 4096);
  EXPECT_EQ(wrong_size.status().code(), StatusCode::kDataLoss);
}

// The writer rewrites a few blocks with new versions (and lets the ring overwrite them) as fast
// as it can while readers copy them out: every copy a reader returns is exactly one version of
// its block, never a mix.
TEST(BlockArenaTest, ReadersNeverReturnATornCopy) {
  auto writer = NewArena(256 << 10);
  auto reader = ReaderOf(*writer);
  ASSERT_TRUE(reader);
  constexpr uint64_t kIds = 8;
  constexpr size_t kSize = 3000;
  for (uint64_t id = 0; id < kIds; ++id) ASSERT_TRUE(Put(*writer, id, 0, kSize));
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> found{0};
  std::atomic<uint64_t> wrong{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&, r] {
      for (uint64_t i = r; !stop.load(std::memory_order_relaxed); ++i) {
        const uint64_t id = i % kIds;
        std::optional<ArenaBlock> block = reader->Find(BlockId::Rdd(1, id));
        if (!block) continue;
        found.fetch_add(1, std::memory_order_relaxed);
        const std::vector<std::byte> expected = BytesOf(id, block->facts.version, kSize);
        if (block->bytes->size() != kSize ||
            !std::equal(expected.begin(), expected.end(), block->bytes->bytes().begin())) {
          wrong.fetch_add(1, std::memory_order_relaxed);
        }
      }
    });
  }
  for (uint64_t version = 1; version < 20000 || (found.load() < 1000 && version < 5000000);
       ++version) {
    ASSERT_TRUE(Put(*writer, version % kIds, version, kSize));
    if (version % 7 == 0) writer->Erase(BlockId::Rdd(1, (version / 7) % kIds));
  }
  stop = true;
  for (std::thread& thread : readers) thread.join();
  EXPECT_GE(found.load(), 1000u);
  EXPECT_EQ(wrong.load(), 0u);
}

}  // namespace
}  // namespace bm
