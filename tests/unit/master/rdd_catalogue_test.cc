#include "master/rdd_catalogue.h"

#include <capnp/message.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace bm {
namespace {

class RddCatalogueTest : public ::testing::Test {
 protected:
  Result<std::optional<JournaledRdd>> Register(
      uint64_t rdd_id, const std::string& name, uint64_t partitions = 4,
      proto::StorageLevel level = proto::StorageLevel::MEMORY_ONLY) {
    capnp::MallocMessageBuilder message;
    proto::RegisterRdd::Builder request = message.initRoot<proto::RegisterRdd>();
    request.setRddId(rdd_id);
    request.setName(name);
    request.setTotalPartitions(partitions);
    request.setLevel(level);
    return catalogue_.Register(request.asReader());
  }

  RddCatalogue catalogue_;
};

TEST_F(RddCatalogueTest, NewDescriptionIsReturnedToJournal) {
  Result<std::optional<JournaledRdd>> added = Register(3, "words");
  ASSERT_TRUE(added.ok());
  ASSERT_TRUE(added->has_value());
  EXPECT_EQ(**added, (JournaledRdd{.rdd_id = 3,
                                   .name = "words",
                                   .level = StorageLevel::kMemoryOnly,
                                   .total_partitions = 4}));
  EXPECT_EQ(catalogue_.descriptions().at(3).name, "words");
}

TEST_F(RddCatalogueTest, SameDescriptionAgainIsNotJournaledAgain) {
  ASSERT_TRUE(Register(3, "words").ok());
  Result<std::optional<JournaledRdd>> again = Register(3, "words");
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->has_value());
  EXPECT_EQ(catalogue_.size(), 1u);
}

TEST_F(RddCatalogueTest, AnotherDatasetUnderAKnownIdIsRefused) {
  ASSERT_TRUE(Register(3, "words").ok());
  EXPECT_EQ(Register(3, "counts").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Register(3, "words", 8).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Register(3, "words", 4, proto::StorageLevel::DISK_ONLY).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(catalogue_.descriptions().at(3).total_partitions, 4u);
}

TEST_F(RddCatalogueTest, OverlongNameIsRefused) {
  EXPECT_EQ(Register(3, std::string(RddCatalogue::kMaxNameBytes + 1, 'x')).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(catalogue_.size(), 0u);
}

TEST_F(RddCatalogueTest, ForgetSaysWhetherTheRddWasDescribed) {
  ASSERT_TRUE(Register(3, "words").ok());
  EXPECT_TRUE(catalogue_.Forget(3));
  EXPECT_FALSE(catalogue_.Forget(3));
  // Forgotten: it may be persisted as another dataset now.
  EXPECT_TRUE(Register(3, "counts").ok());
}

TEST_F(RddCatalogueTest, RestoreLoadsTheJournaledDescriptions) {
  catalogue_.Restore({JournaledRdd{
      .rdd_id = 5, .name = "restored", .level = StorageLevel::kDiskOnly, .total_partitions = 2}});
  EXPECT_EQ(catalogue_.descriptions().at(5).level, StorageLevel::kDiskOnly);
  EXPECT_EQ(Register(5, "other").status().code(), StatusCode::kInvalidArgument);
}

TEST_F(RddCatalogueTest, FullCatalogueRefusesNewIdsButNotKnownOnes) {
  std::vector<JournaledRdd> full;
  for (uint64_t id = 0; id < RddCatalogue::kMaxRdds; ++id) {
    full.push_back(JournaledRdd{.rdd_id = id, .name = "r", .total_partitions = 4});
  }
  catalogue_.Restore(std::move(full));
  EXPECT_EQ(Register(RddCatalogue::kMaxRdds, "r").status().code(), StatusCode::kOutOfSpace);
  EXPECT_TRUE(Register(0, "r").ok());
}

}  // namespace
}  // namespace bm
