#include "master/shuffle_service.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <set>

namespace bm {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;
using Kind = ShuffleCommand::Kind;

std::vector<ShuffleCandidate> Workers(
    std::initializer_list<std::pair<const char*, const char*>> id_and_host) {
  std::vector<ShuffleCandidate> workers;
  for (auto [id, host] : id_and_host) workers.push_back({id, host, "", uint64_t{1} << 30});
  return workers;
}

class ShuffleServiceTest : public ::testing::Test {
 protected:
  ShuffleShape Shape(uint64_t id, uint32_t maps, uint32_t partitions,
                     StorageLevel level = StorageLevel::kMemoryAndDisk) {
    return {id, maps, partitions, level};
  }

  FakeClock clock_;
  ShuffleService service_{clock_,
                          ShuffleService::Limits{.max_shuffles = 3, .ttl = std::chrono::hours(1)}};
  ShuffleEffects effects_;
};

TEST_F(ShuffleServiceTest, SpreadsPartitionsEvenlyAndTellsEachWorkerItsOwn) {
  auto workers = Workers({{"a", "h1"}, {"b", "h2"}, {"c", "h3"}});
  auto shuffle = service_.Register(Shape(1, 4, 9), "", workers, effects_);
  ASSERT_TRUE(shuffle.ok()) << shuffle.status().ToString();
  const ShufflePlacement& placement = (*shuffle)->placement;
  ASSERT_EQ(placement.primaries.size(), 9u);
  EXPECT_TRUE(placement.replicas.empty());
  std::map<std::string, int> per_worker;
  for (uint32_t index : placement.primaries) ++per_worker[placement.workers[index]];
  EXPECT_THAT(per_worker, ElementsAre(std::pair<const std::string, int>("a", 3),
                                      std::pair<const std::string, int>("b", 3),
                                      std::pair<const std::string, int>("c", 3)));
  // Journaled, and every worker told exactly its partitions.
  ASSERT_EQ(effects_.recorded.size(), 1u);
  EXPECT_EQ(effects_.recorded[0].placement, placement);
  ASSERT_EQ(effects_.commands.size(), 3u);
  std::set<uint32_t> told;
  for (const ShuffleCommand& command : effects_.commands) {
    EXPECT_EQ(command.kind, Kind::kAssign);
    EXPECT_EQ(command.maps, 4u);
    for (uint32_t partition : command.partitions) {
      EXPECT_EQ(placement.workers[placement.primaries[partition]], command.worker_id);
      told.insert(partition);
    }
  }
  EXPECT_EQ(told.size(), 9u);
}

TEST_F(ShuffleServiceTest, NextShuffleGoesToTheLeastLoadedWorkers) {
  auto workers = Workers({{"a", "h1"}, {"b", "h2"}});
  ASSERT_TRUE(service_.Register(Shape(1, 1, 1), "", workers, effects_).ok());
  auto second = service_.Register(Shape(2, 1, 1), "", workers, effects_);
  ASSERT_TRUE(second.ok());
  const std::string first_worker = service_.shuffles().at(1).placement.workers[0];
  EXPECT_NE((*second)->placement.workers[0], first_worker);
}

TEST_F(ShuffleServiceTest, ReplicaGoesToAnotherHostWhenThereIsOne) {
  auto workers = Workers({{"a", "h1"}, {"a2", "h1"}, {"b", "h2"}});
  auto shuffle =
      service_.Register(Shape(1, 2, 8, StorageLevel::kMemoryAndDisk2), "", workers, effects_);
  ASSERT_TRUE(shuffle.ok());
  const ShufflePlacement& placement = (*shuffle)->placement;
  ASSERT_EQ(placement.replicas.size(), 8u);
  auto host = [&](uint32_t index) { return placement.workers[index] == "b" ? "h2" : "h1"; };
  for (uint32_t p = 0; p < 8; ++p) {
    EXPECT_NE(placement.primaries[p], placement.replicas[p]);
    EXPECT_STRNE(host(placement.primaries[p]), host(placement.replicas[p])) << "partition " << p;
  }
}

TEST_F(ShuffleServiceTest, ReplicaOnTheSameHostWhenThereIsOnlyOne) {
  auto workers = Workers({{"a", "h1"}, {"b", "h1"}});
  auto shuffle = service_.Register(Shape(1, 1, 4, StorageLevel::kDiskOnly2), "", workers, effects_);
  ASSERT_TRUE(shuffle.ok());
  for (uint32_t p = 0; p < 4; ++p) {
    EXPECT_NE((*shuffle)->placement.primaries[p], (*shuffle)->placement.replicas[p]);
  }
}

TEST_F(ShuffleServiceTest, RegisteringAgainIsIdempotentAnotherShapeIsRefused) {
  auto workers = Workers({{"a", "h1"}, {"b", "h2"}});
  auto first = service_.Register(Shape(7, 2, 2), "", workers, effects_);
  ASSERT_TRUE(first.ok());
  ShuffleEffects again;
  auto second = service_.Register(Shape(7, 2, 2), "", workers, again);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(*first, *second);
  EXPECT_TRUE(again.recorded.empty());
  EXPECT_TRUE(again.commands.empty());
  auto other = service_.Register(Shape(7, 3, 2), "", workers, again);
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(other.status().message(), HasSubstr("rm-shuffle 7"));
}

TEST_F(ShuffleServiceTest, RefusesBadShapesAndTooFewWorkers) {
  auto one = Workers({{"a", "h1"}});
  EXPECT_EQ(service_.Register(Shape(1, 0, 4), "", one, effects_).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(service_.Register(Shape(1, 4, 1u << 20), "", one, effects_).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(service_.Register(Shape(1, 1, 1), "", {}, effects_).status().code(),
            StatusCode::kUnavailable);
  auto two_copies =
      service_.Register(Shape(1, 1, 1, StorageLevel::kMemoryOnly2), "", one, effects_);
  EXPECT_EQ(two_copies.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(two_copies.status().message(), HasSubstr("needs 2 live workers"));
  for (uint64_t id = 10; id < 13; ++id) {
    ASSERT_TRUE(service_.Register(Shape(id, 1, 1), "", one, effects_).ok());
  }
  EXPECT_EQ(service_.Register(Shape(13, 1, 1), "", one, effects_).status().code(),
            StatusCode::kOutOfSpace);
  EXPECT_TRUE(effects_.recorded.size() == 3);
}

TEST_F(ShuffleServiceTest, FirstAttemptToCommitWinsLaterOnesAreAborted) {
  auto workers = Workers({{"a", "h1"}});
  ASSERT_TRUE(service_.Register(Shape(1, 2, 2), "", workers, effects_).ok());
  JournaledMapCommit commit{
      .shuffle_id = 1, .map = 0, .attempt = 3, .pieces = {{1, 2, 200}, {0, 1, 100}}};
  ShuffleEffects effects;
  ASSERT_TRUE(service_.Commit(commit, effects).ok());
  ASSERT_EQ(effects.committed.size(), 1u);
  // Journaled sorted by partition.
  EXPECT_EQ(effects.committed[0].pieces[0].partition, 0u);
  EXPECT_EQ(service_.shuffles().at(1).committed_bytes, 300u);

  ShuffleEffects retry;
  EXPECT_TRUE(service_.Commit(commit, retry).ok());  // the same attempt again: a retry
  EXPECT_TRUE(retry.committed.empty());

  JournaledMapCommit speculative = commit;
  speculative.attempt = 4;
  Status lost = service_.Commit(speculative, retry);
  EXPECT_EQ(lost.code(), StatusCode::kAborted);
  EXPECT_THAT(lost.message(), HasSubstr("committed by attempt 3"));
  EXPECT_EQ(service_.shuffles().at(1).commits.at(0).attempt, 3u);

  JournaledMapCommit changed = commit;
  changed.pieces = {{0, 5, 1}};
  EXPECT_EQ(service_.Commit(changed, retry).code(), StatusCode::kInvalidArgument);
}

TEST_F(ShuffleServiceTest, RefusesCommitsOutsideTheShape) {
  auto workers = Workers({{"a", "h1"}});
  ASSERT_TRUE(service_.Register(Shape(1, 2, 2), "", workers, effects_).ok());
  ShuffleEffects effects;
  EXPECT_EQ(service_.Commit({.shuffle_id = 9, .map = 0}, effects).code(), StatusCode::kNotFound);
  EXPECT_EQ(service_.Commit({.shuffle_id = 1, .map = 2}, effects).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(service_.Commit({.shuffle_id = 1, .map = 0, .pieces = {{2, 1, 1}}}, effects).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(service_.Commit({.shuffle_id = 1, .map = 0, .pieces = {{1, 1, 1}, {1, 1, 1}}}, effects)
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(effects.committed.empty());
  EXPECT_TRUE(service_.shuffles().at(1).commits.empty());
}

TEST_F(ShuffleServiceTest, ALossDropsTheCommitsOfTheMapsThatWroteThereSoTheyRunAgain) {
  auto workers = Workers({{"a", "h1"}});
  ASSERT_TRUE(service_.Register(Shape(1, 3, 2), "", workers, effects_).ok());
  ASSERT_TRUE(
      service_.Commit({.shuffle_id = 1, .map = 0, .pieces = {{0, 1, 10}, {1, 1, 5}}}, effects_)
          .ok());
  ASSERT_TRUE(service_.Commit({.shuffle_id = 1, .map = 1, .pieces = {{1, 1, 7}}}, effects_).ok());
  ShuffleEffects effects;
  const std::vector<uint32_t> reported = {0, 1, 2};  // 1 wrote nothing there, 2 never committed
  Result<std::vector<uint32_t>> dropped = service_.ForgetLostMaps(1, 0, reported, effects);
  ASSERT_TRUE(dropped.ok());
  EXPECT_THAT(*dropped, ElementsAre(0u));
  EXPECT_THAT(effects.uncommitted, ElementsAre(std::pair<uint64_t, uint32_t>(1, 0)));
  EXPECT_EQ(service_.shuffles().at(1).committed_bytes, 7u);
  // Map 0 runs again as a new attempt and commits.
  EXPECT_TRUE(
      service_.Commit({.shuffle_id = 1, .map = 0, .attempt = 1, .pieces = {{0, 1, 10}}}, effects)
          .ok());
  EXPECT_EQ(service_.ForgetLostMaps(1, 9, reported, effects).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(service_.ForgetLostMaps(2, 0, reported, effects).status().code(),
            StatusCode::kNotFound);
}

TEST_F(ShuffleServiceTest, ALostWorkersPartitionsMoveToTheOthers) {
  auto workers = Workers({{"a", "h1"}, {"b", "h2"}, {"c", "h3"}});
  ASSERT_TRUE(service_.Register(Shape(1, 1, 6), "", workers, effects_).ok());
  ASSERT_TRUE(
      service_.Register(Shape(2, 1, 6, StorageLevel::kMemoryOnly2), "", workers, effects_).ok());
  ShuffleEffects effects;
  auto live = Workers({{"a", "h1"}, {"c", "h3"}});
  service_.WorkerLost("b", live, effects);
  EXPECT_EQ(effects.recorded.size(), 2u);  // both placements journaled again
  for (uint64_t id : {1, 2}) {
    const ShufflePlacement& placement = service_.shuffles().at(id).placement;
    for (uint32_t p = 0; p < 6; ++p) {
      EXPECT_NE(placement.workers[placement.primaries[p]], "b") << id << "/" << p;
      if (id == 2) {
        EXPECT_NE(placement.workers[placement.replicas[p]], "b");
        EXPECT_NE(placement.primaries[p], placement.replicas[p]);
      }
    }
  }
  for (const ShuffleCommand& command : effects.commands) {
    EXPECT_EQ(command.kind, Kind::kAssign);
    EXPECT_NE(command.worker_id, "b");
  }
  EXPECT_FALSE(effects.commands.empty());
}

// The primary of each _2 stream forwards pushes to its replica: its assignment names them, and
// when a worker is lost every primary whose replica changed (a survivor promoted, or one whose
// replica moved) is told its new replica.
TEST_F(ShuffleServiceTest, PrimariesAreToldTheirReplicasAlsoAfterAWorkerIsLost) {
  auto workers = Workers({{"a", "h1"}, {"b", "h2"}, {"c", "h3"}});
  auto shuffle =
      service_.Register(Shape(1, 1, 6, StorageLevel::kMemoryOnly2), "", workers, effects_);
  ASSERT_TRUE(shuffle.ok());
  // Every command's forwards are exactly the streams it is the primary of, each to its replica.
  auto expect_forwards_match = [&](const std::vector<ShuffleCommand>& commands) {
    const ShufflePlacement& placement = service_.shuffles().at(1).placement;
    for (const ShuffleCommand& command : commands) {
      std::vector<std::pair<uint32_t, std::string>> expected;
      for (uint32_t p = 0; p < 6; ++p) {
        if (placement.workers[placement.primaries[p]] != command.worker_id) continue;
        expected.emplace_back(p, placement.workers[placement.replicas[p]]);
      }
      EXPECT_EQ(command.forwards, expected) << command.worker_id;
    }
  };
  ASSERT_EQ(effects_.commands.size(), 3u);
  expect_forwards_match(effects_.commands);
  size_t forwarded = 0;
  for (const ShuffleCommand& command : effects_.commands) forwarded += command.forwards.size();
  EXPECT_EQ(forwarded, 6u);

  ShuffleEffects effects;
  service_.WorkerLost("b", Workers({{"a", "h1"}, {"c", "h3"}}), effects);
  expect_forwards_match(effects.commands);
  // Both survivors hold partitions whose copy on b moved: both are told.
  std::set<std::string> told;
  for (const ShuffleCommand& command : effects.commands) told.insert(command.worker_id);
  EXPECT_EQ(told, (std::set<std::string>{"a", "c"}));
}

// One copy: nothing to forward.
TEST_F(ShuffleServiceTest, OneCopyShufflesForwardNothing) {
  auto workers = Workers({{"a", "h1"}, {"b", "h2"}});
  ASSERT_TRUE(service_.Register(Shape(1, 1, 4), "", workers, effects_).ok());
  for (const ShuffleCommand& command : effects_.commands) EXPECT_TRUE(command.forwards.empty());
}

TEST_F(ShuffleServiceTest, UnregisterTellsEveryWorkerAndForgets) {
  auto workers = Workers({{"a", "h1"}, {"b", "h2"}});
  ASSERT_TRUE(
      service_.Register(Shape(1, 1, 4, StorageLevel::kMemoryOnly2), "", workers, effects_).ok());
  ShuffleEffects effects;
  EXPECT_TRUE(service_.Unregister(1, effects));
  EXPECT_THAT(effects.forgotten, ElementsAre(1u));
  ASSERT_EQ(effects.commands.size(), 2u);
  for (const ShuffleCommand& command : effects.commands) EXPECT_EQ(command.kind, Kind::kRemove);
  EXPECT_FALSE(service_.Unregister(1, effects));
  EXPECT_EQ(service_.Find(1).status().code(), StatusCode::kNotFound);
}

TEST_F(ShuffleServiceTest, IdleShufflesExpireAfterTheTtlUsedOnesDoNot) {
  auto workers = Workers({{"a", "h1"}});
  ASSERT_TRUE(service_.Register(Shape(1, 1, 1), "", workers, effects_).ok());
  ASSERT_TRUE(service_.Register(Shape(2, 1, 1), "", workers, effects_).ok());
  ASSERT_EQ(service_.NextExpiry(), clock_.Now() + std::chrono::hours(1));
  clock_.Advance(std::chrono::minutes(50));
  ASSERT_TRUE(service_.Find(2).ok());  // read: used
  clock_.Advance(std::chrono::minutes(10));
  ShuffleEffects effects;
  EXPECT_THAT(service_.Expire(effects), ElementsAre(1u));
  EXPECT_THAT(effects.forgotten, ElementsAre(1u));
  EXPECT_EQ(service_.size(), 1u);
}

TEST_F(ShuffleServiceTest, RegisteredWorkerIsToldItsPartitionsAgain) {
  auto workers = Workers({{"a", "h1"}, {"b", "h2"}});
  ASSERT_TRUE(service_.Register(Shape(1, 1, 4), "tenant", workers, effects_).ok());
  ShuffleEffects effects;
  service_.WorkerRegistered("b", {}, effects);
  ASSERT_EQ(effects.commands.size(), 1u);
  EXPECT_EQ(effects.commands[0].worker_id, "b");
  EXPECT_EQ(effects.commands[0].partitions.size(), 2u);
  EXPECT_EQ(effects.commands[0].owner, "tenant");
  ShuffleEffects none;
  service_.WorkerRegistered("c", {}, none);
  EXPECT_TRUE(none.commands.empty());
}

TEST_F(ShuffleServiceTest, ARestartedWorkerDropsTheShufflesItNoLongerHolds) {
  auto workers = Workers({{"a", "h1"}, {"b", "h2"}});
  ASSERT_TRUE(service_.Register(Shape(1, 1, 4), "", workers, effects_).ok());
  ASSERT_TRUE(service_.Register(Shape(2, 1, 1), "", workers, effects_).ok());
  const std::string holder_of_2 = effects_.commands.back().worker_id;
  const std::string other = holder_of_2 == "a" ? "b" : "a";
  // It kept shuffles 1 and 2 on disk and 7, which was unregistered while it was down.
  const uint64_t held[] = {1, 2, 7};
  ShuffleEffects effects;
  service_.WorkerRegistered(other, held, effects);
  std::vector<std::pair<uint64_t, bool>> told;  // (shuffle, removed)
  for (const ShuffleCommand& command : effects.commands) {
    EXPECT_EQ(command.worker_id, other);
    told.emplace_back(command.shuffle_id, command.kind == ShuffleCommand::Kind::kRemove);
  }
  // Its partitions of 1 again; 2 has none on it and 7 is gone: both removed.
  EXPECT_THAT(told, UnorderedElementsAre(std::pair<uint64_t, bool>{1, false},
                                         std::pair<uint64_t, bool>{2, true},
                                         std::pair<uint64_t, bool>{7, true}));
}

TEST_F(ShuffleServiceTest, AFullStreamContinuesInANewStreamOnAnotherWorker) {
  auto workers = Workers({{"a", "h1"}, {"b", "h2"}, {"c", "h3"}});
  auto shuffle = service_.Register(Shape(1, 2, 3), "t", workers, effects_);
  ASSERT_TRUE(shuffle.ok());
  const std::string first_holder =
      (*shuffle)->placement.workers[(*shuffle)->placement.primaries[1]];
  ShuffleEffects effects;
  auto split = service_.Split(1, /*stream=*/1, workers, effects);
  ASSERT_TRUE(split.ok()) << split.status().ToString();
  const ShufflePlacement& placement = (*split)->placement;
  ASSERT_EQ(placement.splits.size(), 1u);
  const ShuffleSplitPlacement& made = placement.splits[0];
  EXPECT_EQ(made.partition, 1u);
  EXPECT_EQ(made.stream, 1u + 3u);  // the partition's id plus the partition count
  EXPECT_NE(placement.workers[made.primary], first_holder);
  EXPECT_THAT(placement.StreamsOf(1), ElementsAre(1u, 4u));
  EXPECT_EQ(placement.PartitionOf(4), 1u);
  EXPECT_FALSE(placement.PartitionOf(5).has_value());
  // Journaled whole, and the new holder told the stream with the partitions it holds.
  ASSERT_EQ(effects.recorded.size(), 1u);
  EXPECT_EQ(effects.recorded[0].placement, placement);
  ASSERT_EQ(effects.commands.size(), 1u);
  EXPECT_EQ(effects.commands[0].worker_id, placement.workers[made.primary]);
  EXPECT_THAT(effects.commands[0].partitions, ::testing::Contains(4u));
  EXPECT_EQ(effects.commands[0].owner, "t");

  // Another writer asking to split the same full stream changes nothing; its next one splits.
  ShuffleEffects again;
  ASSERT_TRUE(service_.Split(1, 1, workers, again).ok());
  EXPECT_TRUE(again.recorded.empty());
  EXPECT_EQ((*split)->placement.splits.size(), 1u);
  ASSERT_TRUE(service_.Split(1, 4, workers, again).ok());
  EXPECT_THAT((*split)->placement.StreamsOf(1), ElementsAre(1u, 4u, 7u));
  EXPECT_EQ(service_.Split(1, 9, workers, again).status().code(), StatusCode::kInvalidArgument);

  // A commit names streams; a loss reported for the partition covers all of its streams.
  ASSERT_TRUE(
      service_.Commit({.shuffle_id = 1, .map = 0, .attempt = 0, .pieces = {{4, 2, 10}}}, effects)
          .ok());
  EXPECT_EQ(
      service_.Commit({.shuffle_id = 1, .map = 1, .attempt = 0, .pieces = {{8, 1, 1}}}, effects)
          .code(),
      StatusCode::kInvalidArgument);
  const uint32_t lost_maps[] = {0};
  Result<std::vector<uint32_t>> dropped = service_.ForgetLostMaps(1, 1, lost_maps, effects);
  ASSERT_TRUE(dropped.ok());
  EXPECT_THAT(*dropped, ElementsAre(0u));
}

TEST_F(ShuffleServiceTest, ALostWorkersSplitStreamsMoveToo) {
  auto workers = Workers({{"a", "h1"}, {"b", "h2"}});
  ASSERT_TRUE(service_.Register(Shape(1, 1, 1), "", workers, effects_).ok());
  auto split = service_.Split(1, 0, workers, effects_);
  ASSERT_TRUE(split.ok());
  const ShufflePlacement& placement = (*split)->placement;
  const std::string lost = placement.workers[placement.splits[0].primary];
  ShuffleEffects effects;
  auto alive = Workers({{lost == "a" ? "b" : "a", lost == "a" ? "h2" : "h1"}});
  service_.WorkerLost(lost, alive, effects);
  EXPECT_NE(placement.workers[placement.splits[0].primary], lost);
  EXPECT_NE(placement.workers[placement.primaries[0]], lost);
}

TEST_F(ShuffleServiceTest, RestoredFromTheJournalAsItWasRecorded) {
  auto workers = Workers({{"a", "h1"}, {"b", "h2"}});
  ASSERT_TRUE(service_.Register(Shape(1, 2, 4), "t", workers, effects_).ok());
  ASSERT_TRUE(
      service_.Commit({.shuffle_id = 1, .map = 1, .attempt = 0, .pieces = {{3, 1, 9}}}, effects_)
          .ok());
  ShuffleService restored(clock_, {});
  for (const JournaledShuffle& shuffle : effects_.recorded) restored.Restore(shuffle);
  for (const JournaledMapCommit& commit : effects_.committed) restored.RestoreCommit(commit);
  const ShuffleService::Shuffle& shuffle = restored.shuffles().at(1);
  EXPECT_EQ(shuffle.placement, service_.shuffles().at(1).placement);
  EXPECT_EQ(shuffle.owner, "t");
  EXPECT_EQ(shuffle.committed_bytes, 9u);
  ShuffleEffects effects;
  EXPECT_EQ(restored.Commit({.shuffle_id = 1, .map = 1, .attempt = 5}, effects).code(),
            StatusCode::kAborted);
}

}  // namespace
}  // namespace bm
