#include "master/journal.h"

#include <capnp/any.h>
#include <capnp/message.h>
#include <capnp/serialize.h>
#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "tests/support/temp_dir.h"

namespace bm {
namespace {

using testing::TempDir;

BlockChange Stored(BlockId id, Tier tier, StorageLevel level, uint64_t size) {
  BlockChange change{id};
  change.tier = tier;
  change.level = level;
  change.size = size;
  return change;
}

BlockChange Removed(BlockId id) { return BlockChange{id, /*removed=*/true}; }

// A loaded journal, in comparable form: {worker -> {block -> (tier, level, size)}}.
struct Loaded {
  JournalSnapshot snapshot;
  std::map<std::string, std::map<BlockId, std::tuple<Tier, StorageLevel, uint64_t>>> locations;
};

Loaded LoadAll(MasterJournal& journal) {
  Loaded out;
  Result<JournalSnapshot> snapshot =
      journal.Load([&](const std::string& worker, const BlockChange& change) {
        EXPECT_FALSE(change.removed);
        out.locations[worker][change.id] = {change.tier, change.level, change.size};
      });
  EXPECT_TRUE(snapshot.ok()) << snapshot.status().ToString();
  if (snapshot.ok()) out.snapshot = std::move(snapshot).value();
  return out;
}

std::unique_ptr<MasterJournal> OpenOrDie(const std::string& dir) {
  Result<std::unique_ptr<MasterJournal>> journal = MasterJournal::Open(dir);
  EXPECT_TRUE(journal.ok()) << journal.status().ToString();
  return journal.ok() ? std::move(journal).value() : nullptr;
}

class MasterJournalTest : public ::testing::Test {
 protected:
  std::string dir() const { return tmp_.Sub("journal"); }
  TempDir tmp_;
};

TEST_F(MasterJournalTest, AFreshJournalLoadsEmpty) {
  auto journal = OpenOrDie(dir());
  ASSERT_NE(journal, nullptr);
  Loaded loaded = LoadAll(*journal);
  EXPECT_TRUE(loaded.snapshot.workers.empty());
  EXPECT_TRUE(loaded.snapshot.rdds.empty());
  EXPECT_TRUE(loaded.locations.empty());
}

TEST_F(MasterJournalTest, RecordsSurviveReopening) {
  const JournaledWorker w1{"w1", "tcp://127.0.0.1:7701", "host-a", "rack-1"};
  const JournaledWorker w2{"w2", "tcp://127.0.0.1:7702", "", ""};
  {
    auto journal = OpenOrDie(dir());
    ASSERT_NE(journal, nullptr);
    const std::vector<BlockChange> report1 = {
        Stored(BlockId::Rdd(1, 0), Tier::kMemory, StorageLevel::kMemoryOnly, 100),
        Stored(BlockId::Rdd(1, 1), Tier::kDisk, StorageLevel::kMemoryAndDisk2, 5ull << 30)};
    ASSERT_TRUE(journal->RecordRegistration(w1, report1).ok());
    ASSERT_TRUE(journal->RecordRegistration(w2, {}).ok());
    const std::vector<BlockChange> changes = {
        Stored(BlockId::Broadcast(9), Tier::kDisk, StorageLevel::kDiskOnly, 0),
        Stored(BlockId::Shuffle(3, 4, 5), Tier::kMemory, StorageLevel::kMemoryAndDisk, 7),
        Stored(BlockId::Rdd(1, 0), Tier::kDisk, StorageLevel::kMemoryAndDisk, 100),  // moved
        Removed(BlockId::Shuffle(3, 4, 5))};
    ASSERT_TRUE(journal->RecordChanges("w2", changes).ok());
    ASSERT_TRUE(journal->RecordChanges("w1", {{Removed(BlockId::Rdd(1, 1))}}).ok());
    ASSERT_TRUE(journal->RecordRdd({7, "counts", StorageLevel::kMemoryAndDisk, 16}).ok());
    ASSERT_TRUE(journal->RecordRdd({3, "gone", StorageLevel::kDiskOnly, 2}).ok());
    ASSERT_TRUE(journal->RecordRdd({7, "counts v2", StorageLevel::kDiskOnly2, 32}).ok());
    ASSERT_TRUE(journal->RecordRddForgotten(3).ok());
  }
  auto journal = OpenOrDie(dir());
  ASSERT_NE(journal, nullptr);
  Loaded loaded = LoadAll(*journal);
  EXPECT_EQ(loaded.snapshot.workers, (std::vector<JournaledWorker>{w1, w2}));
  EXPECT_EQ(loaded.snapshot.rdds,
            (std::vector<JournaledRdd>{{7, "counts v2", StorageLevel::kDiskOnly2, 32}}));
  EXPECT_EQ(loaded.snapshot.location_count, 3u);
  using L = std::map<BlockId, std::tuple<Tier, StorageLevel, uint64_t>>;
  EXPECT_EQ(loaded.locations["w1"],
            (L{{BlockId::Rdd(1, 0), {Tier::kMemory, StorageLevel::kMemoryOnly, 100}}}));
  EXPECT_EQ(loaded.locations["w2"],
            (L{{BlockId::Rdd(1, 0), {Tier::kDisk, StorageLevel::kMemoryAndDisk, 100}},
               {BlockId::Broadcast(9), {Tier::kDisk, StorageLevel::kDiskOnly, 0}}}));
}

TEST_F(MasterJournalTest, RetiredVersionsSurviveReopeningInOrder) {
  using Retired = std::vector<std::pair<BlockId, uint64_t>>;
  const Retired first = {{BlockId::Rdd(4, 0), 11}, {BlockId::Rdd(4, 1), 12}};
  const Retired second = {{BlockId::Broadcast(2), 0xfedcba9876543210ull}};
  {
    auto journal = OpenOrDie(dir());
    ASSERT_NE(journal, nullptr);
    LoadAll(*journal);
    ASSERT_TRUE(journal->RecordRetired(first).ok());
  }
  {
    auto journal = OpenOrDie(dir());
    ASSERT_NE(journal, nullptr);
    EXPECT_EQ(LoadAll(*journal).snapshot.retired, first);
    // Appended after what was loaded, not over it.
    ASSERT_TRUE(journal->RecordRetired(second).ok());
  }
  auto journal = OpenOrDie(dir());
  ASSERT_NE(journal, nullptr);
  Retired all = first;
  all.insert(all.end(), second.begin(), second.end());
  EXPECT_EQ(LoadAll(*journal).snapshot.retired, all);
}

TEST_F(MasterJournalTest, ReRegistrationReplacesTheWorkersOldLocations) {
  auto journal = OpenOrDie(dir());
  ASSERT_NE(journal, nullptr);
  const JournaledWorker w1{"w1", "tcp://127.0.0.1:7701", "", ""};
  ASSERT_TRUE(
      journal
          ->RecordRegistration(
              w1, {{Stored(BlockId::Rdd(1, 0), Tier::kMemory, StorageLevel::kMemoryOnly, 1),
                    Stored(BlockId::Rdd(1, 1), Tier::kMemory, StorageLevel::kMemoryOnly, 1)}})
          .ok());
  const JournaledWorker moved{"w1", "tcp://127.0.0.1:9999", "h", "r"};
  ASSERT_TRUE(journal
                  ->RecordRegistration(moved, {{Stored(BlockId::Rdd(2, 0), Tier::kDisk,
                                                       StorageLevel::kDiskOnly, 2)}})
                  .ok());
  Loaded loaded = LoadAll(*journal);
  EXPECT_EQ(loaded.snapshot.workers, (std::vector<JournaledWorker>{moved}));
  ASSERT_EQ(loaded.locations["w1"].size(), 1u);
  EXPECT_TRUE(loaded.locations["w1"].contains(BlockId::Rdd(2, 0)));
}

TEST_F(MasterJournalTest, DroppingAWorkerDropsItsLocationsOnly) {
  auto journal = OpenOrDie(dir());
  ASSERT_NE(journal, nullptr);
  // "w1" is a prefix of "w10": the drop of w1 must not touch w10's locations.
  for (const char* id : {"w1", "w10", "w2"}) {
    ASSERT_TRUE(journal
                    ->RecordRegistration(
                        {id, "tcp://127.0.0.1:1", "", ""},
                        {{Stored(BlockId::Rdd(1, 0), Tier::kMemory, StorageLevel::kMemoryOnly, 1),
                          Stored(BlockId::Rdd(1, 1), Tier::kDisk, StorageLevel::kDiskOnly, 1)}})
                    .ok());
  }
  ASSERT_TRUE(journal->RecordWorkerDropped("w1").ok());
  Loaded loaded = LoadAll(*journal);
  ASSERT_EQ(loaded.snapshot.workers.size(), 2u);
  EXPECT_EQ(loaded.snapshot.workers[0].id, "w10");
  EXPECT_EQ(loaded.snapshot.workers[1].id, "w2");
  EXPECT_FALSE(loaded.locations.contains("w1"));
  EXPECT_EQ(loaded.locations["w10"].size(), 2u);
  EXPECT_EQ(loaded.locations["w2"].size(), 2u);
  EXPECT_EQ(loaded.snapshot.location_count, 4u);
}

TEST_F(MasterJournalTest, WorkerKeysSurviveReopening) {
  const std::string key = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7";
  const JournaledWorker secure{"w1", "tcp://127.0.0.1:7701", "", "", key};
  const JournaledWorker insecure{"w2", "tcp://127.0.0.1:7702", "", "", ""};
  {
    auto journal = OpenOrDie(dir());
    ASSERT_NE(journal, nullptr);
    ASSERT_TRUE(journal->RecordRegistration(secure, {}).ok());
    ASSERT_TRUE(journal->RecordRegistration(insecure, {}).ok());
  }
  auto journal = OpenOrDie(dir());
  ASSERT_NE(journal, nullptr);
  EXPECT_EQ(LoadAll(*journal).snapshot.workers, (std::vector<JournaledWorker>{secure, insecure}));
}

// A worker record as journals before keys wrote it: a struct of three text pointers.
TEST_F(MasterJournalTest, WorkerRecordsWithoutAKeyStillLoad) {
  { auto journal = OpenOrDie(dir()); }
  {
    capnp::MallocMessageBuilder message;
    capnp::AnyStruct::Builder record =
        message.getRoot<capnp::AnyPointer>().initAsAnyStruct(/*dataWords=*/0, /*pointers=*/3);
    record.getPointerSection()[0].setAs<capnp::Text>("tcp://127.0.0.1:7701");
    record.getPointerSection()[1].setAs<capnp::Text>("host-a");
    record.getPointerSection()[2].setAs<capnp::Text>("rack-1");
    kj::Array<capnp::word> words = capnp::messageToFlatArray(message);
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), dir(), &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), "ww1",
                        rocksdb::Slice(words.asChars().begin(), words.asChars().size()))
                    .ok());
  }
  auto journal = OpenOrDie(dir());
  ASSERT_NE(journal, nullptr);
  EXPECT_EQ(LoadAll(*journal).snapshot.workers,
            (std::vector<JournaledWorker>{{"w1", "tcp://127.0.0.1:7701", "host-a", "rack-1"}}));
}

TEST_F(MasterJournalTest, AWorkerKeyThatIsNotZ85IsCorrupt) {
  {
    auto journal = OpenOrDie(dir());
    ASSERT_NE(journal, nullptr);
    ASSERT_TRUE(
        journal->RecordRegistration({"w1", "tcp://127.0.0.1:1", "", "", "not a key"}, {}).ok());
  }
  auto journal = OpenOrDie(dir());
  ASSERT_NE(journal, nullptr);
  Result<JournalSnapshot> loaded = journal->Load([](const std::string&, const BlockChange&) {});
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("a bad worker record"), std::string::npos)
      << loaded.status().ToString();
}

TEST_F(MasterJournalTest, BlockDigestsSurviveReopeningAndOldValuesLoadWithout) {
  BlockChange with_both = Stored(BlockId::Rdd(5, 0), Tier::kDisk, StorageLevel::kDiskOnly, 9);
  with_both.version = 77;
  with_both.digest = 0xfeedface12345678;
  BlockChange digest_only = Stored(BlockId::Rdd(5, 1), Tier::kMemory, StorageLevel::kMemoryOnly, 3);
  digest_only.digest = 0x42;
  BlockChange version_only =
      Stored(BlockId::Rdd(5, 2), Tier::kMemory, StorageLevel::kMemoryOnly, 4);
  version_only.version = 78;
  {
    auto journal = OpenOrDie(dir());
    ASSERT_NE(journal, nullptr);
    const std::vector<BlockChange> report = {with_both, digest_only, version_only};
    ASSERT_TRUE(journal->RecordRegistration({"w1", "tcp://127.0.0.1:1", "", ""}, report).ok());
  }
  auto journal = OpenOrDie(dir());
  ASSERT_NE(journal, nullptr);
  std::map<BlockId, std::pair<uint64_t, uint64_t>> loaded;  // id -> (version, digest)
  Result<JournalSnapshot> snapshot =
      journal->Load([&](const std::string&, const BlockChange& change) {
        loaded[change.id] = {change.version, change.digest};
      });
  ASSERT_TRUE(snapshot.ok()) << snapshot.status().ToString();
  EXPECT_EQ(loaded[BlockId::Rdd(5, 0)], std::make_pair(uint64_t{77}, uint64_t{0xfeedface12345678}));
  EXPECT_EQ(loaded[BlockId::Rdd(5, 1)], std::make_pair(uint64_t{0}, uint64_t{0x42}));
  // A value as journals before digests wrote it (version, no digest) loads with none.
  EXPECT_EQ(loaded[BlockId::Rdd(5, 2)], std::make_pair(uint64_t{78}, uint64_t{0}));
}

TEST_F(MasterJournalTest, ACorruptLocationValueIsAClearError) {
  {
    auto journal = OpenOrDie(dir());
    ASSERT_NE(journal, nullptr);
    ASSERT_TRUE(journal
                    ->RecordRegistration(
                        {"w1", "tcp://127.0.0.1:1", "", ""},
                        {{Stored(BlockId::Rdd(4, 2), Tier::kMemory, StorageLevel::kMemoryOnly, 1)}})
                    .ok());
  }
  {
    // Overwrite the one location value with bytes no encoder writes (reserved bits set).
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), dir(), &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
    it->Seek("l");
    ASSERT_TRUE(it->Valid());
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), it->key(), "\xf0\x01").ok());
  }
  auto journal = OpenOrDie(dir());
  ASSERT_NE(journal, nullptr);
  Result<JournalSnapshot> loaded = journal->Load([](const std::string&, const BlockChange&) {});
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), StatusCode::kInternal);
  EXPECT_NE(loaded.status().message().find("corrupt"), std::string::npos)
      << loaded.status().ToString();
  EXPECT_NE(loaded.status().message().find("rdd_4_2"), std::string::npos)
      << loaded.status().ToString();
}

// Every kind of record Load reads, written with bytes no encoder writes: Load refuses the
// journal, naming what was bad and the key, and reads nothing past it.
TEST_F(MasterJournalTest, AGarbledRecordOfAnyKindIsAClearErrorNamingIt) {
  const std::string eight(8, '\x01');
  const std::vector<std::tuple<std::string, std::string, std::string>> garbled = {
      {"w" + std::string("w9"), "garbage!", "a bad worker record"},
      {"r" + eight, "garbage!", "a bad RDD description"},
      {"r" + std::string("short"), "", "a bad RDD key"},
      {"v" + eight, "short", "a bad retired version"},
      {"p" + std::string("rdd_1_1"), "short", "a bad compute lease"},
      {"o" + std::string("rdd_1"), "garbage!", "a bad dataset record"},
      {"q" + std::string("alice"), "garbage!", "a bad quota record"},
      {"m" + std::string("rdd_1_1"), "garbage!", "a bad lost block"},
      {"u" + eight, "garbage!", "a bad shuffle record"},
      {"u" + eight + eight, "garbage!", "a bad map commit"},
      {"u" + std::string("odd"), "", "a bad shuffle key"},
  };
  for (const auto& [key, value, what] : garbled) {
    SCOPED_TRACE(what);
    std::filesystem::remove_all(dir());
    { ASSERT_NE(OpenOrDie(dir()), nullptr); }  // a journal with its format record
    {
      rocksdb::DB* raw = nullptr;
      ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), dir(), &raw).ok());
      std::unique_ptr<rocksdb::DB> db(raw);
      ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), key, value).ok());
    }
    auto journal = OpenOrDie(dir());
    ASSERT_NE(journal, nullptr);
    Result<JournalSnapshot> loaded = journal->Load([](const std::string&, const BlockChange&) {});
    ASSERT_FALSE(loaded.ok());
    EXPECT_EQ(loaded.status().code(), StatusCode::kInternal);
    EXPECT_NE(loaded.status().message().find("is corrupt: " + what + " at key"), std::string::npos)
        << loaded.status().ToString();
  }
}

TEST_F(MasterJournalTest, AnUncreatableDirectoryIsAClearError) {
  // Tests may run as root, who may write anywhere: a path under a regular file cannot be a
  // directory for anyone.
  const std::string file = tmp_.Sub("a-file");
  std::ofstream(file) << "x";
  Result<std::unique_ptr<MasterJournal>> journal = MasterJournal::Open(file + "/journal");
  ASSERT_FALSE(journal.ok());
  EXPECT_EQ(journal.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(journal.status().message().find("cannot create the master journal directory"),
            std::string::npos)
      << journal.status().ToString();
}

TEST_F(MasterJournalTest, ASecondOpenOfTheSameDirectoryIsUnavailable) {
  auto first = OpenOrDie(dir());
  ASSERT_NE(first, nullptr);
  Result<std::unique_ptr<MasterJournal>> second = MasterJournal::Open(dir());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find("another bm-master"), std::string::npos)
      << second.status().ToString();
}

TEST_F(MasterJournalTest, ADirectoryOfAnotherRocksDbIsRefused) {
  {
    rocksdb::Options options;
    options.create_if_missing = true;
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(options, dir(), &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), "m:rdd_1_0", "x").ok());
  }
  Result<std::unique_ptr<MasterJournal>> journal = MasterJournal::Open(dir());
  ASSERT_FALSE(journal.ok());
  EXPECT_NE(journal.status().message().find("not a blockmgr master journal"), std::string::npos)
      << journal.status().ToString();
}

}  // namespace
}  // namespace bm

namespace bm {
namespace {

// Writes a journal's worth of records of every kind into `journal`.
void WriteEveryKindOfRecord(MasterJournal& journal, int round) {
  const JournaledWorker w1{"w1", "tcp://127.0.0.1:7701", "host-a", "rack-1"};
  const JournaledWorker w2{"w2", "tcp://127.0.0.1:7702", "", ""};
  ASSERT_TRUE(journal
                  .RecordRegistration(w1, {{Stored(BlockId::Rdd(1, round), Tier::kMemory,
                                                   StorageLevel::kMemoryOnly, 100)}})
                  .ok());
  ASSERT_TRUE(journal.RecordRegistration(w2, {}).ok());
  ASSERT_TRUE(journal
                  .RecordChanges("w2", {{Stored(BlockId::Broadcast(9), Tier::kDisk,
                                                StorageLevel::kDiskOnly, 7),
                                         Removed(BlockId::Rdd(1, 0))}})
                  .ok());
  ASSERT_TRUE(journal.RecordRdd({7, "counts", StorageLevel::kMemoryAndDisk, 16}).ok());
  ASSERT_TRUE(journal.RecordRdd({3, "gone", StorageLevel::kDiskOnly, 2}).ok());
  ASSERT_TRUE(journal.RecordRddForgotten(3).ok());
  ASSERT_TRUE(journal.RecordRetired({{{BlockId::Rdd(2, round), 11}}}).ok());
  ASSERT_TRUE(journal.RecordWorkerDropped(round % 2 == 0 ? "w2" : "nobody").ok());
}

void ExpectSameContents(MasterJournal& a, MasterJournal& b) {
  Loaded left = LoadAll(a), right = LoadAll(b);
  EXPECT_EQ(left.snapshot.workers, right.snapshot.workers);
  EXPECT_EQ(left.snapshot.rdds, right.snapshot.rdds);
  EXPECT_EQ(left.snapshot.retired, right.snapshot.retired);
  EXPECT_EQ(left.locations, right.locations);
}

TEST_F(MasterJournalTest, AStandbyApplyingTheLeadersBatchesLoadsWhatTheLeaderLoads) {
  auto leader = OpenOrDie(dir());
  auto standby = OpenOrDie(tmp_.Sub("standby"));
  ASSERT_TRUE(leader && standby);
  std::vector<std::string> batches;
  leader->set_write_observer([&](std::string_view batch) { batches.emplace_back(batch); });
  WriteEveryKindOfRecord(*leader, 1);
  WriteEveryKindOfRecord(*leader, 2);
  ASSERT_EQ(batches.size(), 16u);  // one per record call
  // Applied in two fetches, as a standby would.
  std::vector<std::string_view> first(batches.begin(), batches.begin() + 5);
  std::vector<std::string_view> rest(batches.begin() + 5, batches.end());
  ASSERT_TRUE(standby->ApplyFollowed(first, MasterJournal::FollowedPart::kRecords, {4, 5}).ok());
  EXPECT_EQ(*standby->ReadFollowPosition(), (MasterJournal::FollowPosition{4, 5}));
  ASSERT_TRUE(standby->ApplyFollowed(rest, MasterJournal::FollowedPart::kRecords, {4, 16}).ok());
  EXPECT_EQ(*standby->ReadFollowPosition(), (MasterJournal::FollowPosition{4, 16}));
  ExpectSameContents(*leader, *standby);
  EXPECT_EQ(LoadAll(*standby).snapshot.retired.size(), 2u);
}

TEST_F(MasterJournalTest, ASnapshotReplacesEverythingTheStandbyHeld) {
  auto leader = OpenOrDie(dir());
  auto standby = OpenOrDie(tmp_.Sub("standby"));
  ASSERT_TRUE(leader && standby);
  WriteEveryKindOfRecord(*leader, 2);
  // The standby holds records the leader never had (an old epoch's).
  ASSERT_TRUE(standby
                  ->RecordRegistration(
                      {"w9", "tcp://127.0.0.1:7709", "", ""},
                      {{Stored(BlockId::Rdd(5, 5), Tier::kDisk, StorageLevel::kDiskOnly, 1)}})
                  .ok());
  ASSERT_TRUE(standby->RecordRdd({5, "old", StorageLevel::kDiskOnly, 1}).ok());
  Result<std::vector<std::string>> snapshot = leader->SnapshotBatches(64);  // several batches
  ASSERT_TRUE(snapshot.ok()) << snapshot.status().ToString();
  EXPECT_GT(snapshot->size(), 1u);
  std::vector<std::string_view> views(snapshot->begin(), snapshot->end());
  ASSERT_TRUE(
      standby->ApplyFollowed(views, MasterJournal::FollowedPart::kSnapshotStart, {6, 40}).ok());
  EXPECT_EQ(*standby->ReadFollowPosition(), (MasterJournal::FollowPosition{6, 40}));
  ExpectSameContents(*leader, *standby);
}

// Pages read while the leader goes on writing (a fuzzy snapshot), then the records written
// since the snapshot's position replayed over them: the standby holds what the leader holds.
TEST_F(MasterJournalTest, ASnapshotInPagesReadBetweenWritesAndTheRecordsSinceRebuildTheJournal) {
  auto leader = OpenOrDie(dir());
  auto standby = OpenOrDie(tmp_.Sub("standby"));
  ASSERT_TRUE(leader && standby);
  for (int round = 1; round <= 4; ++round) WriteEveryKindOfRecord(*leader, round);
  std::vector<std::string> since;  // the records from the snapshot's position on
  leader->set_write_observer([&](std::string_view batch) { since.emplace_back(batch); });
  std::string after;
  size_t pages = 0;
  for (int round = 5; pages == 0 || !after.empty(); ++round) {
    Result<MasterJournal::SnapshotPage> page =
        leader->ReadSnapshotPage(after, /*batch_bytes=*/64, /*max_batches=*/1);
    ASSERT_TRUE(page.ok()) << page.status().ToString();
    ASSERT_EQ(page->batches.size(), 1u);
    std::vector<std::string_view> views(page->batches.begin(), page->batches.end());
    const bool last = page->next.empty();
    ASSERT_TRUE(standby
                    ->ApplyFollowed(views,
                                    pages == 0 ? MasterJournal::FollowedPart::kSnapshotStart
                                               : MasterJournal::FollowedPart::kSnapshotMore,
                                    last ? MasterJournal::FollowPosition{2, 0}
                                         : MasterJournal::FollowPosition{})
                    .ok());
    if (!last) {
      // Midway, the position says "start over".
      EXPECT_EQ(*standby->ReadFollowPosition(), (MasterJournal::FollowPosition{}));
    }
    ++pages;
    after = page->next;
    WriteEveryKindOfRecord(*leader, round);  // overwrites, removals, drops between pages
  }
  EXPECT_GT(pages, 3u);
  std::vector<std::string_view> views(since.begin(), since.end());
  ASSERT_TRUE(standby
                  ->ApplyFollowed(views, MasterJournal::FollowedPart::kRecords,
                                  {2, static_cast<uint64_t>(since.size())})
                  .ok());
  ExpectSameContents(*leader, *standby);
}

TEST_F(MasterJournalTest, AMalformedOrForeignBatchIsRefusedWholeAndChangesNothing) {
  auto leader = OpenOrDie(dir());
  auto standby = OpenOrDie(tmp_.Sub("standby"));
  ASSERT_TRUE(leader && standby);
  std::vector<std::string> batches;
  leader->set_write_observer([&](std::string_view batch) { batches.emplace_back(batch); });
  WriteEveryKindOfRecord(*leader, 1);
  ASSERT_TRUE(standby->ApplyFollowed({}, MasterJournal::FollowedPart::kRecords, {1, 0}).ok());
  std::string truncated = batches[0].substr(0, batches[0].size() - 3);
  rocksdb::WriteBatch foreign;
  foreign.Put("f", "x");  // the format key: not a record a leader sends
  for (std::string_view bad : {std::string_view("garbage"), std::string_view(truncated),
                               std::string_view(foreign.Data())}) {
    std::vector<std::string_view> views = {batches[1], bad};
    Status applied = standby->ApplyFollowed(views, MasterJournal::FollowedPart::kRecords, {1, 2});
    EXPECT_EQ(applied.code(), StatusCode::kInvalidArgument) << applied.ToString();
  }
  EXPECT_EQ(*standby->ReadFollowPosition(), (MasterJournal::FollowPosition{1, 0}));
  EXPECT_TRUE(LoadAll(*standby).snapshot.workers.empty());
}

}  // namespace
}  // namespace bm

namespace bm {
namespace {

LostRecord LostOf(BlockId id, LostCause cause, uint64_t order) {
  return LostRecord{.id = id,
                    .version = 0xabcdef0123456789ull,
                    .size = 3u << 20,
                    .level = StorageLevel::kDiskOnly,
                    .lost_at_ms = 1764842400123ull,
                    .cause = cause,
                    .detail = "table file 000012.sst is truncated",
                    .worker_id = "w3",
                    .order = order};
}

TEST_F(MasterJournalTest, LostBlocksSurviveReopeningAndForgottenOnesStayGone) {
  const LostRecord a = LostOf(BlockId::Rdd(8, 0), LostCause::kCopyCorrupt, 4);
  const LostRecord b = LostOf(BlockId::Broadcast(3), LostCause::kWorkerDropped, 5);
  const LostRecord c = LostOf(BlockId::Shuffle(1, 2, 3), LostCause::kLostAtStartUp, 6);
  {
    auto journal = OpenOrDie(dir());
    ASSERT_NE(journal, nullptr);
    ASSERT_TRUE(journal->RecordLost({{a, b, c}, {}}).ok());
    ASSERT_TRUE(journal->RecordLost({{}, {BlockId::Broadcast(3)}}).ok());  // put again
  }
  auto journal = OpenOrDie(dir());
  ASSERT_NE(journal, nullptr);
  std::vector<LostRecord> loaded = LoadAll(*journal).snapshot.lost;
  std::sort(loaded.begin(), loaded.end(),
            [](const LostRecord& x, const LostRecord& y) { return x.order < y.order; });
  EXPECT_EQ(loaded, (std::vector<LostRecord>{a, c}));
}

// Standbys follow the leader's journal batch by batch: a lost block's record is among them.
TEST_F(MasterJournalTest, ALostBlockRecordReachesAStandbysJournal) {
  std::vector<std::string> batches;
  auto leader = OpenOrDie(dir());
  ASSERT_NE(leader, nullptr);
  leader->set_write_observer([&](std::string_view batch) { batches.emplace_back(batch); });
  const LostRecord lost = LostOf(BlockId::Rdd(9, 1), LostCause::kDiskFailed, 0);
  ASSERT_TRUE(leader->RecordLost({{lost}, {}}).ok());
  ASSERT_EQ(batches.size(), 1u);

  auto standby = OpenOrDie(tmp_.Sub("standby"));
  ASSERT_NE(standby, nullptr);
  const std::vector<std::string_view> views(batches.begin(), batches.end());
  ASSERT_TRUE(standby
                  ->ApplyFollowed(views, MasterJournal::FollowedPart::kRecords,
                                  MasterJournal::FollowPosition{1, 1})
                  .ok());
  EXPECT_EQ(LoadAll(*standby).snapshot.lost, std::vector<LostRecord>{lost});
}

}  // namespace
}  // namespace bm

namespace bm {
namespace {

TEST_F(MasterJournalTest, ShufflesAndTheirCommitsSurviveReopeningUntilForgotten) {
  const JournaledShuffle kept{
      {.id = 3, .maps = 2, .partitions = 2, .level = StorageLevel::kDiskOnly2},
      {{"w1", "w2", "w3"},
       {0, 1},
       {1, 0},
       {{.stream = 3, .partition = 1, .primary = 2, .replica = 0}}},  // partition 1 split once
      "alice"};
  const JournaledShuffle forgotten{{.id = 4, .maps = 1, .partitions = 1}, {{"w1"}, {0}, {}}, ""};
  {
    auto journal = OpenOrDie(dir());
    ASSERT_NE(journal, nullptr);
    ShuffleEffects registered;
    registered.recorded = {kept, forgotten};
    ASSERT_TRUE(journal->RecordShuffles(registered).ok());
    ShuffleEffects committed;
    committed.committed = {{.shuffle_id = 3, .map = 1, .attempt = 7, .pieces = {{0, 2, 100}}},
                           {.shuffle_id = 4, .map = 0, .attempt = 0, .pieces = {}}};
    ASSERT_TRUE(journal->RecordShuffles(committed).ok());
    ShuffleEffects gone;
    gone.forgotten = {4};
    ASSERT_TRUE(journal->RecordShuffles(gone).ok());
  }
  auto journal = OpenOrDie(dir());
  ASSERT_NE(journal, nullptr);
  Loaded loaded = LoadAll(*journal);
  ASSERT_EQ(loaded.snapshot.shuffles.size(), 1u);
  EXPECT_EQ(loaded.snapshot.shuffles[0], kept);
  ASSERT_EQ(loaded.snapshot.map_commits.size(), 1u);
  EXPECT_EQ(loaded.snapshot.map_commits[0],
            (JournaledMapCommit{.shuffle_id = 3, .map = 1, .attempt = 7, .pieces = {{0, 2, 100}}}));
}

}  // namespace
}  // namespace bm
