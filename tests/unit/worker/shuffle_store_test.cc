#include "worker/shuffle_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <deque>
#include <string>

#include "common/digest.h"

namespace bm {
namespace {

using ::testing::HasSubstr;

std::span<const std::byte> Bytes(const std::string& text) {
  return std::as_bytes(std::span(text.data(), text.size()));
}

// A piece borrows its bytes (Push copies them): kept here, past the temporaries the tests
// write pieces from.
ShuffleStore::Piece PieceOf(uint32_t partition, uint32_t sequence, const std::string& text) {
  static std::deque<std::string> kept;
  std::span<const std::byte> bytes = Bytes(kept.emplace_back(text));
  return {partition, sequence, DigestOf(bytes), bytes};
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

  ShuffleStore store_{"w1", ShuffleStore::Limits{.memory_bytes = 1 << 20}};
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

}  // namespace
}  // namespace bm
