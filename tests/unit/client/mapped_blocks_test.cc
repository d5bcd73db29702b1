#include "client/mapped_blocks.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <set>

#include "common/net/sealed_region.h"
#include "tests/support/process.h"

namespace bm {
namespace {

using std::chrono::milliseconds;

constexpr uint64_t kMiB = 1 << 20;

// Regions as a worker would hand them out, mapped here, each recording when it is unmapped
// (what tells the worker to release its pin).
class MappedBlocksTest : public ::testing::Test {
 protected:
  std::shared_ptr<MappedBlock> Mapped(const std::string& name, uint64_t pin, uint64_t size) {
    Result<std::shared_ptr<const SealedRegion>> sealed =
        SealedRegion::Create("test " + name, size, [](std::span<std::byte> out) {
          std::memset(out.data(), 7, out.size());
          return Status::Ok();
        });
    EXPECT_TRUE(sealed.ok()) << sealed.status().ToString();
    auto block = std::make_shared<MappedBlock>(BlockId::Parse(name).value());
    block->pin = pin;
    block->generation = pin;
    Result<std::shared_ptr<const MappedRegion>> region =
        MappedRegion::Map(dup((*sealed)->read_only_fd()), size, [this, pin] {
          std::lock_guard lock(mutex_);
          unmapped_.insert(pin);
        });
    EXPECT_TRUE(region.ok()) << region.status().ToString();
    block->region = *region;
    return block;
  }
  bool Unmapped(uint64_t pin) {
    std::lock_guard lock(mutex_);
    return unmapped_.contains(pin);
  }
  // Adds a new mapping and returns its first caller's view.
  ChunkPtr AddAndView(MappedBlocks& blocks, const std::shared_ptr<MappedBlock>& block) {
    blocks.Add(block);
    return blocks.View(block);
  }

  std::mutex mutex_;
  std::set<uint64_t> unmapped_;
};

TEST_F(MappedBlocksTest, AMappingOutlivesItsLastCallerAndIsOfferedToTheNextGet) {
  auto blocks = std::make_shared<MappedBlocks>(IdleMappingLimits{64 * kMiB, milliseconds(60'000)},
                                               std::weak_ptr<IdleMappingReaper>());
  ChunkPtr view = AddAndView(*blocks, Mapped("rdd_1_0", 1, kMiB));
  const std::byte* address = view->bytes().data();
  view.reset();
  EXPECT_FALSE(Unmapped(1)) << "an idle mapping is kept";
  EXPECT_EQ(blocks->idle_bytes(), kMiB);
  EXPECT_EQ(blocks->idle_count(), 1u);

  MappingOffer offer(blocks, blocks->Reserve(BlockId::Rdd(1, 0)));
  ASSERT_NE(offer.get(), nullptr);
  EXPECT_EQ(offer.pin(), 1u);
  EXPECT_EQ(blocks->idle_count(), 0u) << "an offered mapping is in use";
  ChunkPtr again = offer.Take();
  EXPECT_EQ(again->bytes().data(), address) << "the same mapping, not a new one";
  EXPECT_EQ(blocks->Reserve(BlockId::Rdd(2, 0)), nullptr);
}

TEST_F(MappedBlocksTest, BlocksTheClientRemovedAreUnmappedAtOnceOrWhenTheirLastCallerLetsGo) {
  auto blocks = std::make_shared<MappedBlocks>(IdleMappingLimits{64 * kMiB, milliseconds(60'000)},
                                               std::weak_ptr<IdleMappingReaper>());
  AddAndView(*blocks, Mapped("rdd_1_0", 1, kMiB)).reset();  // idle
  ChunkPtr held = AddAndView(*blocks, Mapped("rdd_1_1", 2, kMiB));
  AddAndView(*blocks, Mapped("rdd_2_0", 3, kMiB)).reset();  // idle, another RDD
  blocks->ForgetBlocks([](const BlockId& id) { return id.rdd_id() == 1u; });
  EXPECT_TRUE(Unmapped(1)) << "an idle mapping of a removed block is unmapped at once";
  EXPECT_FALSE(Unmapped(2)) << "a caller still reads it";
  EXPECT_FALSE(Unmapped(3));
  EXPECT_EQ(blocks->Reserve(BlockId::Rdd(1, 0)), nullptr);
  EXPECT_EQ(blocks->Reserve(BlockId::Rdd(1, 1)), nullptr) << "never offered again";
  EXPECT_EQ(blocks->idle_count(), 1u);
  EXPECT_EQ(static_cast<int>(held->bytes()[0]), 7) << "the caller's bytes are intact";
  held.reset();
  EXPECT_TRUE(Unmapped(2));
  EXPECT_FALSE(Unmapped(3));
}

TEST_F(MappedBlocksTest, IdleMappingsPastTheByteBoundAreUnmappedOldestFirst) {
  auto blocks = std::make_shared<MappedBlocks>(IdleMappingLimits{3 * kMiB, milliseconds(60'000)},
                                               std::weak_ptr<IdleMappingReaper>());
  for (uint64_t i = 1; i <= 4; ++i) {
    AddAndView(*blocks, Mapped("rdd_1_" + std::to_string(i), i, kMiB)).reset();
  }
  EXPECT_TRUE(Unmapped(1));
  EXPECT_FALSE(Unmapped(2));
  EXPECT_FALSE(Unmapped(4));
  EXPECT_EQ(blocks->idle_bytes(), 3 * kMiB);
  EXPECT_EQ(blocks->Reserve(BlockId::Rdd(1, 1)), nullptr);
}

TEST_F(MappedBlocksTest, WithNoIdleBytesAMappingIsUnmappedWithItsLastCaller) {
  auto blocks = std::make_shared<MappedBlocks>(IdleMappingLimits{0, milliseconds(60'000)},
                                               std::weak_ptr<IdleMappingReaper>());
  ChunkPtr first = AddAndView(*blocks, Mapped("rdd_1_0", 1, kMiB));
  MappingOffer offer(blocks, blocks->Reserve(BlockId::Rdd(1, 0)));
  ChunkPtr second = offer.Take();
  first.reset();
  EXPECT_FALSE(Unmapped(1)) << "still held by the second caller";
  second.reset();
  EXPECT_TRUE(Unmapped(1));
  EXPECT_EQ(blocks->Reserve(BlockId::Rdd(1, 0)), nullptr);
}

TEST_F(MappedBlocksTest, AReplacedOrForgottenVersionIsUnmappedOnceItsCallersLetGo) {
  auto blocks = std::make_shared<MappedBlocks>(IdleMappingLimits{64 * kMiB, milliseconds(60'000)},
                                               std::weak_ptr<IdleMappingReaper>());
  ChunkPtr old_version = AddAndView(*blocks, Mapped("rdd_1_0", 1, kMiB));
  ChunkPtr new_version = AddAndView(*blocks, Mapped("rdd_1_0", 2, kMiB));
  EXPECT_FALSE(Unmapped(1)) << "its caller still reads it";
  old_version.reset();
  EXPECT_TRUE(Unmapped(1)) << "a replaced version is not kept idle";
  new_version.reset();
  EXPECT_FALSE(Unmapped(2));

  // A get offered version 2 and the worker answered otherwise (removed, say).
  MappingOffer offer(blocks, blocks->Reserve(BlockId::Rdd(1, 0)));
  ASSERT_EQ(offer.pin(), 2u);
  offer.Forget();
  EXPECT_TRUE(Unmapped(2));
  EXPECT_EQ(blocks->Reserve(BlockId::Rdd(1, 0)), nullptr);
  EXPECT_EQ(blocks->idle_bytes(), 0u);
}

TEST_F(MappedBlocksTest, AnOfferNotTakenLeavesTheMappingIdleAgain) {
  auto blocks = std::make_shared<MappedBlocks>(IdleMappingLimits{64 * kMiB, milliseconds(60'000)},
                                               std::weak_ptr<IdleMappingReaper>());
  AddAndView(*blocks, Mapped("rdd_1_0", 1, kMiB)).reset();
  { MappingOffer offer(blocks, blocks->Reserve(BlockId::Rdd(1, 0))); }  // no reply came
  EXPECT_FALSE(Unmapped(1));
  EXPECT_EQ(blocks->idle_count(), 1u);
}

TEST_F(MappedBlocksTest, ExpiredAndClosedIdleMappingsAreUnmapped) {
  auto blocks = std::make_shared<MappedBlocks>(IdleMappingLimits{64 * kMiB, milliseconds(1000)},
                                               std::weak_ptr<IdleMappingReaper>());
  AddAndView(*blocks, Mapped("rdd_1_0", 1, kMiB)).reset();
  const auto now = MappedBlocks::Clock::now();
  std::optional<MappedBlocks::Clock::time_point> next = blocks->DropExpired(now);
  ASSERT_TRUE(next.has_value());
  EXPECT_GT(*next, now);
  EXPECT_FALSE(Unmapped(1));
  EXPECT_FALSE(blocks->DropExpired(*next).has_value());
  EXPECT_TRUE(Unmapped(1));

  AddAndView(*blocks, Mapped("rdd_1_1", 2, kMiB)).reset();
  ChunkPtr held = AddAndView(*blocks, Mapped("rdd_1_2", 3, kMiB));
  blocks->Close();
  EXPECT_TRUE(Unmapped(2));
  EXPECT_FALSE(Unmapped(3)) << "a mapping in use stays until its caller lets go";
  held.reset();
  EXPECT_TRUE(Unmapped(3));
}

TEST_F(MappedBlocksTest, TheReaperUnmapsIdleMappingsWhenTheirLifetimeEnds) {
  auto reaper = std::make_shared<IdleMappingReaper>();
  auto blocks =
      std::make_shared<MappedBlocks>(IdleMappingLimits{64 * kMiB, milliseconds(50)}, reaper);
  reaper->Watch(blocks);
  AddAndView(*blocks, Mapped("rdd_1_0", 1, kMiB)).reset();
  EXPECT_TRUE(testing::WaitFor([&] { return Unmapped(1); }, milliseconds(10'000)))
      << "the reaper did not drop an expired idle mapping";
  EXPECT_EQ(blocks->idle_count(), 0u);
}

}  // namespace
}  // namespace bm
