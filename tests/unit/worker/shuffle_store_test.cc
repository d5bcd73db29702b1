#include "worker/shuffle_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <deque>
#include <string>

#include "common/core/digest.h"

namespace bm {
namespace {

using ::testing::HasSubstr;

std::span<const std::byte> Bytes(const std::string& text) {
  return std::as_bytes(std::span(text.data(), text.size()));
}

// A piece borrows its bytes (Push copies them): kept here, past the temporaries the tests
// write pieces from.
ShuffleStore::Piece PieceOf(uint32_t partition, uint32_t sequence, const std::string& text,
                            uint32_t first_sequence = 0) {
  static std::deque<std::string> kept;
  std::span<const std::byte> bytes = Bytes(kept.emplace_back(text));
  return {.partition = partition,
          .sequence = sequence,
          .first_sequence = first_sequence,
          .digest = DigestOf(bytes),
          .bytes = bytes};
}

std::string Text(const ShuffleStore::StoredPiece& piece) {
  return std::string(reinterpret_cast<const char*>(piece.bytes.data()), piece.bytes.size());
}

// The texts of every piece of the partition the committed `attempts` let through.
std::vector<std::string> ReadAll(const ShuffleStore& store, uint32_t partition,
                                 const std::unordered_map<uint32_t, uint32_t>& attempts,
                                 uint64_t page_bytes = 1 << 20) {
  std::vector<std::string> texts;
  uint64_t cursor = 0;
  for (;;) {
    Result<ShuffleStore::Page> page = store.Read(1, partition, attempts, cursor, page_bytes);
    EXPECT_TRUE(page.ok()) << page.status().ToString();
    if (!page.ok()) return texts;
    for (const ShuffleStore::StoredPiece& piece : page->pieces) {
      EXPECT_EQ(DigestOf(piece.bytes), piece.digest);
      texts.push_back(Text(piece));
    }
    cursor = page->next_cursor;
    if (page->end) return texts;
  }
}

class ShuffleStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { store_.Assign(1, /*maps=*/4, {0, 2}, ""); }

  FakeClock clock_;
  ShuffleStore store_{"w1", ShuffleStore::Limits{.memory_bytes = 1 << 20}, clock_};
};

TEST_F(ShuffleStoreTest, ReadsOnlyTheCommittedAttemptsInArrivalOrder) {
  std::vector<ShuffleStore::Piece> first = {PieceOf(0, 0, "a0"), PieceOf(2, 0, "x"),
                                            PieceOf(0, 1, "a1")};
  ASSERT_TRUE(store_.Push(1, /*map=*/0, /*attempt=*/0, first, "").ok());
  std::vector<ShuffleStore::Piece> speculative = {PieceOf(0, 0, "b0")};
  ASSERT_TRUE(store_.Push(1, 0, 1, speculative, "").ok());
  std::vector<ShuffleStore::Piece> other_map = {PieceOf(0, 0, "c0")};
  ASSERT_TRUE(store_.Push(1, 3, 0, other_map, "").ok());

  EXPECT_EQ(ReadAll(store_, 0, {{0, 0}, {3, 0}}), (std::vector<std::string>{"a0", "a1", "c0"}));
  EXPECT_EQ(ReadAll(store_, 0, {{0, 1}}), (std::vector<std::string>{"b0"}));
  EXPECT_TRUE(ReadAll(store_, 0, {}).empty());  // nothing committed yet
  EXPECT_EQ(ReadAll(store_, 2, {{0, 0}}), (std::vector<std::string>{"x"}));
}

TEST_F(ShuffleStoreTest, AdjacentPiecesOfOneChunkGoAsOneSliceUpToTheRunCap) {
  std::vector<ShuffleStore::Piece> pieces = {PieceOf(0, 0, "aaaa"), PieceOf(0, 1, "bbbb"),
                                             PieceOf(0, 2, "cccc")};
  ASSERT_TRUE(store_.Push(1, 0, 0, pieces, "").ok());
  Result<ShuffleStore::Page> page = store_.Read(1, 0, {{0, 0}}, 0, 1 << 20);
  ASSERT_TRUE(page.ok());
  auto text = [](const ShuffleStore::PieceRun& run) {
    return std::string(reinterpret_cast<const char*>(run.bytes->bytes().data()), run.bytes->size());
  };
  std::vector<ShuffleStore::PieceRun> whole = ShuffleStore::RunsOf(page->pieces, 1 << 20);
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_EQ(whole[0].pieces, 3u);
  EXPECT_EQ(text(whole[0]), "aaaabbbbcccc");
  std::vector<ShuffleStore::PieceRun> capped = ShuffleStore::RunsOf(page->pieces, 8);
  ASSERT_EQ(capped.size(), 2u);
  EXPECT_EQ(capped[0].pieces, 2u);
  EXPECT_EQ(text(capped[0]), "aaaabbbb");
  EXPECT_EQ(capped[1].pieces, 1u);
  EXPECT_EQ(text(capped[1]), "cccc");
}

TEST_F(ShuffleStoreTest, AShufflePageForOnePacketHoldsAtMostItsBytesOfPiecesInMemory) {
  std::vector<ShuffleStore::Piece> pieces = {PieceOf(0, 0, "aaaa"), PieceOf(0, 1, "bbbb"),
                                             PieceOf(0, 2, "cccc")};
  ASSERT_TRUE(store_.Push(1, 0, 0, pieces, "").ok());
  Result<ShuffleStore::Page> page = store_.Read(1, 0, {{0, 0}}, 0, 1 << 20, /*max_memory=*/8);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->pieces.size(), 2u);
  EXPECT_EQ(page->next_cursor, 2u);
  EXPECT_FALSE(page->end);
  // A first piece bigger than the bound still comes, alone.
  Result<ShuffleStore::Page> alone = store_.Read(1, 0, {{0, 0}}, 0, 1 << 20, /*max_memory=*/1);
  ASSERT_TRUE(alone.ok());
  EXPECT_EQ(alone->pieces.size(), 1u);
}

TEST_F(ShuffleStoreTest, APieceIsKeptOnceWhenPushedAgain) {
  std::vector<ShuffleStore::Piece> pieces = {PieceOf(0, 0, "a0"), PieceOf(0, 1, "a1")};
  ASSERT_TRUE(store_.Push(1, 0, 0, pieces, "").ok());
  const uint64_t used = store_.memory_used();
  // The whole push again, then again with one more piece: the repeats are acknowledged.
  ASSERT_TRUE(store_.Push(1, 0, 0, pieces, "").ok());
  pieces.push_back(PieceOf(0, 2, "a2"));
  ASSERT_TRUE(store_.Push(1, 0, 0, pieces, "").ok());
  EXPECT_EQ(ReadAll(store_, 0, {{0, 0}}), (std::vector<std::string>{"a0", "a1", "a2"}));
  EXPECT_EQ(store_.memory_used(), used);  // within the first chunk
  EXPECT_EQ(store_.pieces_kept(), 3u);
  EXPECT_EQ(store_.bytes_kept(), 6u);
}

TEST_F(ShuffleStoreTest, APieceWithItsFrameKeepsTheFrameInsteadOfACopy) {
  const ChunkPtr frame = MakeChunk(Bytes(std::string("headerPIECEtrailer")));
  ShuffleStore::Piece piece{.partition = 0,
                            .sequence = 0,
                            .digest = 0,
                            .bytes = frame->bytes().subspan(6, 5),
                            .owner = frame};
  piece.digest = DigestOf(piece.bytes);
  ASSERT_TRUE(store_.Push(1, 0, 0, std::span(&piece, 1), "").ok());
  EXPECT_EQ(store_.memory_used(), 5u);  // counted by its bytes: nothing was allocated
  Result<ShuffleStore::Page> page = store_.Read(1, 0, {{0, 0}}, 0, 1 << 20);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->pieces.size(), 1u);
  EXPECT_EQ(page->pieces[0].bytes.data(), frame->bytes().data() + 6);  // the frame's own bytes
  EXPECT_EQ(page->pieces[0].chunk, frame);
  EXPECT_EQ(Text(page->pieces[0]), "PIECE");
}

TEST_F(ShuffleStoreTest, APushAfterAGapIsRefusedWholeAndNothingOfItIsKept) {
  std::vector<ShuffleStore::Piece> gap = {PieceOf(2, 0, "ok"), PieceOf(0, 1, "late")};
  Status refused = store_.Push(1, 0, 0, gap, "");
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("push in order"));
  EXPECT_TRUE(ReadAll(store_, 2, {{0, 0}}).empty());
}

// A worker that took a partition over from a lost one is sent the map's pieces from the first
// the lost one had not acknowledged: it starts there, under the writer's sequences (which a
// reader matches across copies), and still refuses a gap after it.
TEST_F(ShuffleStoreTest, AWorkerTakingOverAStreamStartsAtTheFirstSequenceItIsSent) {
  std::vector<ShuffleStore::Piece> taken = {PieceOf(0, 5, "p5", 5), PieceOf(0, 6, "p6", 5)};
  ASSERT_TRUE(store_.Push(1, 0, 0, taken, "").ok());
  Result<ShuffleStore::Page> page = store_.Read(1, 0, {{0, 0}}, 0, 1 << 20);
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  ASSERT_EQ(page->pieces.size(), 2u);
  EXPECT_EQ(page->pieces[0].sequence, 5u);
  EXPECT_EQ(page->pieces[1].sequence, 6u);
  // Held now: the first sequence no longer moves where it goes on, and pushes stay in order.
  std::vector<ShuffleStore::Piece> again = {PieceOf(0, 6, "p6", 5), PieceOf(0, 7, "p7", 5)};
  ASSERT_TRUE(store_.Push(1, 0, 0, again, "").ok());
  std::vector<ShuffleStore::Piece> gap = {PieceOf(0, 9, "p9", 5)};
  EXPECT_EQ(store_.Push(1, 0, 0, gap, "").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadAll(store_, 0, {{0, 0}}), (std::vector<std::string>{"p5", "p6", "p7"}));
  // A piece after the first it is told of went missing on the way: refused, not taken as the
  // start.
  std::vector<ShuffleStore::Piece> late = {PieceOf(0, 3, "m3", 2)};
  EXPECT_EQ(store_.Push(1, 1, 0, late, "").code(), StatusCode::kInvalidArgument);
}

TEST_F(ShuffleStoreTest, RefusesWhatIsNotItsToHold) {
  std::vector<ShuffleStore::Piece> elsewhere = {PieceOf(1, 0, "p")};
  EXPECT_EQ(store_.Push(1, 0, 0, elsewhere, "").code(), StatusCode::kInvalidArgument);
  std::vector<ShuffleStore::Piece> fine = {PieceOf(0, 0, "p")};
  EXPECT_EQ(store_.Push(1, 4, 0, fine, "").code(), StatusCode::kInvalidArgument);  // map 4 of 4
  EXPECT_EQ(store_.Push(9, 0, 0, fine, "").code(), StatusCode::kUnavailable);      // not assigned
  ShuffleStore::Piece damaged = PieceOf(0, 0, "p");
  damaged.digest ^= 1;
  EXPECT_EQ(store_.Push(1, 0, 0, std::span(&damaged, 1), "").code(), StatusCode::kDataLoss);
  EXPECT_EQ(store_.Read(1, 1, {}, 0, 1 << 20).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_.Read(9, 0, {}, 0, 1 << 20).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(ReadAll(store_, 0, {{0, 0}}).empty());
}

TEST_F(ShuffleStoreTest, OnlyTheOwnerTenantPushes) {
  store_.Assign(5, 1, {0}, "alice");
  std::vector<ShuffleStore::Piece> pieces = {PieceOf(0, 0, "p")};
  EXPECT_EQ(store_.Push(5, 0, 0, pieces, "bob").code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(store_.Push(5, 0, 0, pieces, "alice").ok());
  EXPECT_TRUE(store_.Push(5, 0, 1, pieces, "").ok());  // an unrestricted key (admin)
}

TEST_F(ShuffleStoreTest, MemoryIsBoundedAndComesBackWhenTheShuffleGoes) {
  const std::string big(300 << 10, 'z');
  uint32_t sequence = 0;
  Status pushed;
  for (int i = 0; i < 10 && pushed.ok(); ++i) {
    std::vector<ShuffleStore::Piece> pieces = {PieceOf(0, sequence, big)};
    pushed = store_.Push(1, 0, 0, pieces, "");
    if (pushed.ok()) ++sequence;
  }
  EXPECT_EQ(pushed.code(), StatusCode::kUnavailable);
  EXPECT_THAT(pushed.message(), HasSubstr("push again later"));
  EXPECT_LE(store_.memory_used(), uint64_t{1} << 20);
  EXPECT_GE(sequence, 2u);
  EXPECT_EQ(ReadAll(store_, 0, {{0, 0}}, 64 << 10).size(), sequence);  // a page per piece
  store_.Remove(1);
  EXPECT_EQ(store_.memory_used(), 0u);
  EXPECT_EQ(store_.shuffle_count(), 0u);
}

TEST_F(ShuffleStoreTest, ReassignmentKeepsThePartitionsStillHeldAndDropsTheRest) {
  std::vector<ShuffleStore::Piece> pieces = {PieceOf(0, 0, "keep"), PieceOf(2, 0, "drop")};
  ASSERT_TRUE(store_.Push(1, 0, 0, pieces, "").ok());
  store_.Assign(1, 4, {0, 3}, "");
  EXPECT_EQ(ReadAll(store_, 0, {{0, 0}}), (std::vector<std::string>{"keep"}));
  EXPECT_EQ(store_.Read(1, 2, {}, 0, 1 << 20).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(ReadAll(store_, 3, {{0, 0}}).empty());
}

TEST(ShuffleStoreSplitTest, AStreamPastItsSplitSizeRefusesNewPiecesAndTheRestOfThePushIsTaken) {
  FakeClock clock;
  ShuffleStore store("w1", ShuffleStore::Limits{.memory_bytes = 1 << 20, .split_bytes = 8}, clock);
  store.Assign(1, 2, {0, 1}, "");
  std::vector<ShuffleStore::Piece> first = {PieceOf(0, 0, "12345"), PieceOf(0, 1, "6789")};
  std::vector<uint32_t> full;
  ASSERT_TRUE(store.Push(1, 0, 0, first, "", &full).ok());
  EXPECT_TRUE(full.empty());  // 9 bytes now: past the split size, so nothing more
  std::vector<ShuffleStore::Piece> next = {PieceOf(0, 1, "6789"), PieceOf(0, 2, "x"),
                                           PieceOf(1, 0, "y")};
  ASSERT_TRUE(store.Push(1, 0, 0, next, "", &full).ok());
  EXPECT_THAT(full, ::testing::ElementsAre(0u));
  // The repeated piece was acknowledged, the new one of stream 0 not taken, stream 1's taken.
  EXPECT_EQ(ReadAll(store, 0, {{0, 0}}), (std::vector<std::string>{"12345", "6789"}));
  EXPECT_EQ(ReadAll(store, 1, {{0, 0}}), (std::vector<std::string>{"y"}));
}

// With a disk: pieces are handed out in batches to write, and once written are read from
// the file and no longer held in memory.
class ShuffleStoreOnDiskTest : public ::testing::Test {
 protected:
  void SetUp() override { store_.Assign(1, /*maps=*/4, {0, 2}, "t"); }

  FakeClock clock_;
  ShuffleStore store_{"w1",
                      ShuffleStore::Limits{.memory_bytes = 1 << 20,
                                           .disks = 2,
                                           .flush_bytes = 64 << 10,
                                           .flush_delay = std::chrono::milliseconds(100),
                                           .retry_delay = std::chrono::seconds(1)},
                      clock_};
};

TEST_F(ShuffleStoreOnDiskTest, APartitionIsWrittenOnceEnoughWaitsOrItsPiecesAreOld) {
  std::vector<ShuffleStore::Piece> small = {PieceOf(0, 0, "a"), PieceOf(2, 0, "b")};
  ASSERT_TRUE(store_.Push(1, 0, 0, small, "").ok());
  EXPECT_TRUE(store_.TakeFlushes().empty());  // neither big nor old enough
  ASSERT_TRUE(store_.NextFlush().has_value());
  const std::string big(64 << 10, 'x');
  std::vector<ShuffleStore::Piece> more = {PieceOf(0, 1, big)};
  ASSERT_TRUE(store_.Push(1, 0, 0, more, "").ok());
  std::vector<ShuffleStore::Flush> due = store_.TakeFlushes();
  ASSERT_EQ(due.size(), 1u);  // partition 0 has flush_bytes waiting
  EXPECT_EQ(due[0].partition, 0u);
  EXPECT_EQ(due[0].owner, "t");
  EXPECT_EQ(due[0].offset, 0u);
  ASSERT_EQ(due[0].records.size(), 2u);
  EXPECT_EQ(due[0].records[1].bytes.size(), big.size());
  clock_.Advance(std::chrono::milliseconds(100));
  std::vector<ShuffleStore::Flush> old = store_.TakeFlushes();
  ASSERT_EQ(old.size(), 1u);  // partition 2's piece is old now; 0 is being written
  EXPECT_EQ(old[0].partition, 2u);
  EXPECT_TRUE(store_.TakeFlushes(/*all=*/true).empty());
}

TEST_F(ShuffleStoreOnDiskTest, WrittenPiecesAreReadFromMemoryUntilTheirRoomIsNeeded) {
  std::vector<ShuffleStore::Piece> first = {PieceOf(0, 0, "one"), PieceOf(0, 1, "two")};
  ASSERT_TRUE(store_.Push(1, 0, 0, first, "").ok());
  const uint64_t in_memory = store_.memory_used();
  ASSERT_GT(in_memory, 0u);
  std::vector<ShuffleStore::Flush> due = store_.TakeFlushes(/*all=*/true);
  ASSERT_EQ(due.size(), 1u);
  // Pushed while the write is in flight: not written.
  std::vector<ShuffleStore::Piece> later = {PieceOf(0, 0, "three")};
  ASSERT_TRUE(store_.Push(1, 1, 0, later, "").ok());
  const uint64_t before = store_.memory_used();
  store_.Flushed(due[0], Status::Ok());
  EXPECT_EQ(store_.memory_used(), before);  // kept: nothing needs the room yet
  EXPECT_EQ(store_.memory_written(), in_memory);
  EXPECT_EQ(store_.bytes_flushed(), 2 * ShuffleFiles::kRecordHeaderBytes + 6);
  Result<ShuffleStore::Page> cached = store_.Read(1, 0, {{0, 0}, {1, 0}}, 0, 1 << 20);
  ASSERT_TRUE(cached.ok());
  EXPECT_FALSE(cached->file.has_value());
  ASSERT_EQ(cached->pieces.size(), 3u);
  EXPECT_EQ(Text(cached->pieces[1]), "two");

  // A push that needs the room lets the written chunk go; its pieces come from the file.
  const std::string big((1 << 20) - before + 1, 'b');
  std::vector<ShuffleStore::Piece> large = {PieceOf(2, 0, big)};
  ASSERT_TRUE(store_.Push(1, 0, 0, large, "").ok());
  EXPECT_EQ(store_.memory_written(), 0u);
  EXPECT_LE(store_.memory_used(), uint64_t{1} << 20);
  Result<ShuffleStore::Page> page = store_.Read(1, 0, {{0, 0}, {1, 0}}, 0, 1 << 20);
  ASSERT_TRUE(page.ok());
  ASSERT_TRUE(page->file.has_value());
  ASSERT_EQ(page->pieces.size(), 2u);
  EXPECT_TRUE(page->pieces[0].bytes.empty());
  EXPECT_EQ(page->file->offset, ShuffleFiles::kRecordHeaderBytes);
  EXPECT_EQ(page->pieces[1].file_offset, 2 * ShuffleFiles::kRecordHeaderBytes + 3);
  EXPECT_EQ(page->file->length, ShuffleFiles::kRecordHeaderBytes + 6);
  EXPECT_FALSE(page->end);
  // Then the rest, from memory.
  Result<ShuffleStore::Page> rest = store_.Read(1, 0, {{0, 0}, {1, 0}}, page->next_cursor, 1 << 20);
  ASSERT_TRUE(rest.ok());
  EXPECT_FALSE(rest->file.has_value());
  ASSERT_EQ(rest->pieces.size(), 1u);
  EXPECT_EQ(Text(rest->pieces[0]), "three");
  EXPECT_TRUE(rest->end);
  // The next batch goes after the first in the file.
  std::vector<ShuffleStore::Flush> next = store_.TakeFlushes(/*all=*/true);
  ASSERT_EQ(next.size(), 2u);  // partitions 0 and 2
  const ShuffleStore::Flush& zero = next[0].partition == 0 ? next[0] : next[1];
  EXPECT_EQ(zero.offset, 2 * ShuffleFiles::kRecordHeaderBytes + 6);
  for (const ShuffleStore::Flush& flush : next) store_.Flushed(flush, Status::Ok());
  EXPECT_EQ(store_.memory_written(), store_.memory_used());
  Result<ShuffleStore::PartitionStats> stats = store_.Stats(1, 0);
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->pieces, 3u);
  EXPECT_EQ(stats->bytes_on_disk, 3 * ShuffleFiles::kRecordHeaderBytes + 11);
}

TEST_F(ShuffleStoreOnDiskTest, AMemoryOnlyShuffleIsWrittenOnlyWhenRoomIsNeeded) {
  store_.Assign(2, 1, {0}, "", /*write_soon=*/false);
  const std::string big(128 << 10, 'm');
  std::vector<ShuffleStore::Piece> pieces = {PieceOf(0, 0, big)};
  ASSERT_TRUE(store_.Push(2, 0, 0, pieces, "").ok());
  clock_.Advance(std::chrono::seconds(5));
  EXPECT_TRUE(store_.TakeFlushes().empty());              // big and old, but memory only
  EXPECT_TRUE(store_.TakeFlushes(/*all=*/true).empty());  // not even when stopping
  EXPECT_FALSE(store_.NextFlush().has_value());
  // Half the memory unwritten: written after all, so its room can be had.
  const std::string more(400 << 10, 'n');
  std::vector<ShuffleStore::Piece> next = {PieceOf(0, 1, more)};
  ASSERT_TRUE(store_.Push(2, 0, 0, next, "").ok());
  EXPECT_EQ(store_.TakeFlushes().size(), 1u);
}

TEST_F(ShuffleStoreOnDiskTest, AFailedWriteRefusesPushesUntilARetrySucceeds) {
  std::vector<ShuffleStore::Piece> first = {PieceOf(0, 0, "kept")};
  ASSERT_TRUE(store_.Push(1, 0, 0, first, "").ok());
  std::vector<ShuffleStore::Flush> due = store_.TakeFlushes(/*all=*/true);
  ASSERT_EQ(due.size(), 1u);
  store_.Flushed(due[0], OutOfSpaceError("cannot write /d/0.data: No space left on device"));
  std::vector<ShuffleStore::Piece> next = {PieceOf(0, 1, "refused")};
  Status refused = store_.Push(1, 0, 0, next, "");
  EXPECT_EQ(refused.code(), StatusCode::kOutOfSpace);
  EXPECT_THAT(refused.message(), HasSubstr("No space left"));
  // Nothing acknowledged is lost: still read from memory.
  EXPECT_EQ(ReadAll(store_, 0, {{0, 0}}), (std::vector<std::string>{"kept"}));
  EXPECT_TRUE(store_.TakeFlushes(/*all=*/true).empty());  // not before the retry delay
  clock_.Advance(std::chrono::seconds(1));
  std::vector<ShuffleStore::Flush> retry = store_.TakeFlushes();
  ASSERT_EQ(retry.size(), 1u);
  EXPECT_EQ(retry[0].offset, 0u);  // over what the failed write may have left
  store_.Flushed(retry[0], Status::Ok());
  EXPECT_TRUE(store_.Push(1, 0, 0, next, "").ok());
}

TEST_F(ShuffleStoreOnDiskTest, AWriteThatFinishesAfterItsPartitionWentIsIgnored) {
  std::vector<ShuffleStore::Piece> first = {PieceOf(0, 0, "gone")};
  ASSERT_TRUE(store_.Push(1, 0, 0, first, "").ok());
  std::vector<ShuffleStore::Flush> due = store_.TakeFlushes(/*all=*/true);
  ASSERT_EQ(due.size(), 1u);
  store_.Remove(1);
  store_.Assign(1, 4, {0}, "t");  // registered again: a new partition 0
  store_.Flushed(due[0], Status::Ok());
  EXPECT_TRUE(ReadAll(store_, 0, {{0, 0}}).empty());
  EXPECT_EQ(store_.memory_used(), 0u);
}

TEST_F(ShuffleStoreOnDiskTest, RestoredPartitionsAreReadFromTheirFilesAndPushesContinue) {
  LoadedShuffle kept{.id = 9, .maps = 2, .owner = "t"};
  kept.partitions.push_back(LoadedShufflePartition{
      .disk = 1,
      .partition = 3,
      .records = {{.map = 0, .attempt = 0, .sequence = 0, .length = 5, .digest = 7, .offset = 32},
                  {.map = 0, .attempt = 0, .sequence = 1, .length = 5, .digest = 8, .offset = 69}},
      .file_bytes = 74});
  store_.Restore(kept);
  EXPECT_THAT(store_.ShuffleIds(), ::testing::ElementsAre(1u, 9u));
  Result<ShuffleStore::Page> page = store_.Read(9, 3, {{0, 0}}, 0, 1 << 20);
  ASSERT_TRUE(page.ok());
  ASSERT_TRUE(page->file.has_value());
  EXPECT_EQ(page->file->disk, 1u);
  EXPECT_EQ(page->pieces.size(), 2u);
  // A retried push of what the file holds is recognised; the next piece goes after it.
  std::vector<ShuffleStore::Piece> again = {PieceOf(3, 1, "again"), PieceOf(3, 2, "new")};
  ASSERT_TRUE(store_.Push(9, 0, 0, again, "t").ok());
  std::vector<ShuffleStore::Flush> due = store_.TakeFlushes(/*all=*/true);
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].disk, 1u);
  EXPECT_EQ(due[0].offset, 74u);
  ASSERT_EQ(due[0].records.size(), 1u);
  EXPECT_EQ(due[0].records[0].sequence, 2u);
}

}  // namespace
}  // namespace bm
