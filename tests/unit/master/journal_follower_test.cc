// JournalFollower's transitions (master/journal_follower.h) one by one: a standby's journal
// following a fake leader on a loopback socket, which answers each fetchJournal with what the
// test queued (real RocksDB batches, written by a second journal playing the leader's), and
// holds a fetch it has nothing queued for, as the real leader's long poll does. The election
// is played by the test. JournalFollower takes no Clock: its waits are real and short, and the
// test waits on what the fake leader and the election see of the follower, never on time.

#include "master/journal_follower.h"

#include <capnp/message.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "common/core/protocol.h"
#include "common/net/transport.h"
#include "master/journal.h"
#include "master/leadership.h"
#include "tests/support/temp_dir.h"

namespace bm {
namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;
using Position = MasterJournal::FollowPosition;
using Part = MasterJournal::FollowedPart;

constexpr auto kAwait = std::chrono::seconds(10);  // a bound on waits that should succeed

// What the fake leader saw of one fetchJournal.
struct SeenFetch {
  std::string standby_id;
  uint64_t epoch = 0;
  uint64_t from = 0;
  uint32_t wait_ms = 0;
  std::string snapshot_after;
  std::chrono::steady_clock::time_point arrived{};
};

// How the fake leader answers one fetch.
struct Answer {
  enum class Kind { kJournal, kNotLeader, kOk, kError, kNone } kind = Kind::kJournal;
  uint64_t epoch = 0;
  uint64_t first = 0;
  uint64_t head = 0;
  std::vector<std::string> batches;
  // batchBytes, when not the batches' true sizes.
  std::optional<std::vector<uint64_t>> announced{};
  bool snapshot = false;
  std::string snapshot_from{};
  std::string snapshot_next{};
};

Answer Records(uint64_t epoch, uint64_t first, std::vector<std::string> batches, uint64_t head) {
  Answer answer;
  answer.epoch = epoch;
  answer.first = first;
  answer.head = head;
  answer.batches = std::move(batches);
  return answer;
}
Answer NothingNew(uint64_t epoch, uint64_t at, uint64_t head) {
  return Records(epoch, at, {}, head);
}
Answer SnapshotPage(uint64_t epoch, uint64_t first, std::vector<std::string> batches,
                    std::string from, std::string next) {
  Answer answer = Records(epoch, first, std::move(batches), /*head=*/first);
  answer.snapshot = true;
  answer.snapshot_from = std::move(from);
  answer.snapshot_next = std::move(next);
  return answer;
}
Answer OfKind(Answer::Kind kind) {
  Answer answer;
  answer.kind = kind;
  return answer;
}

capnp::Data::Reader Bytes(const std::string& text) {
  return capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(text.data()), text.size());
}

// The leader: records every fetch and answers it with the next answer queued, or holds it
// (a long poll with nothing new) until one is queued. Its socket lives on its own thread.
class FakeLeader {
 public:
  explicit FakeLeader(zmq::context_t& context) : socket_(context, zmq::socket_type::router) {
    ConfigureSocket(socket_);
    socket_.bind("tcp://127.0.0.1:*");
    endpoint_ = socket_.get(zmq::sockopt::last_endpoint);
    thread_ = std::thread([this] { Loop(); });
  }
  ~FakeLeader() {
    stop_ = true;
    thread_.join();
  }

  const std::string& endpoint() const { return endpoint_; }

  // Answers the fetch held now, or else the next one.
  void Queue(Answer answer) {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(answer));
  }
  // While set, a fetch with nothing queued is answered "nothing new" (at the position asked,
  // the last head queued) at once instead of held, so that a follower being stopped is not
  // kept waiting.
  void AnswerAtOnce(bool at_once) {
    std::lock_guard lock(mutex_);
    at_once_ = at_once;
  }

  // Waits until `count` fetches arrived; false after kAwait.
  bool WaitForFetches(size_t count) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, kAwait, [&] { return seen_.size() >= count; });
  }
  std::vector<SeenFetch> fetches() const {
    std::lock_guard lock(mutex_);
    return seen_;
  }
  size_t count() const { return fetches().size(); }

 private:
  struct Held {
    zmq::message_t peer;
    uint64_t id = 0;
    SeenFetch asked;
  };

  void Loop() {
    while (!stop_) {
      zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, milliseconds(5));
      if (item.revents & ZMQ_POLLIN) Receive();
      if (!held_) continue;
      std::optional<Answer> answer;
      {
        std::lock_guard lock(mutex_);
        if (!queue_.empty()) {
          answer = std::move(queue_.front());
          queue_.pop_front();
          if (answer->kind == Answer::Kind::kJournal) head_ = answer->head;
        } else if (at_once_) {
          answer =
              NothingNew(held_->asked.epoch, held_->asked.from, std::max(held_->asked.from, head_));
        }
      }
      if (!answer) continue;
      if (answer->kind != Answer::Kind::kNone) Send(*answer);
      held_.reset();
    }
  }

  void Receive() {
    Result<IncomingMessage> received = ReceiveMessage(socket_, /*has_routing_id=*/true);
    if (!received.ok()) return;
    proto::Request::Reader request = received->request();
    SeenFetch seen;
    seen.arrived = std::chrono::steady_clock::now();
    if (request.isFetchJournal()) {
      proto::FetchJournal::Reader fetch = request.getFetchJournal();
      seen.standby_id = fetch.getStandbyId();
      seen.epoch = fetch.getEpoch();
      seen.from = fetch.getFromSequence();
      seen.wait_ms = fetch.getWaitMs();
      seen.snapshot_after.assign(reinterpret_cast<const char*>(fetch.getSnapshotAfter().begin()),
                                 fetch.getSnapshotAfter().size());
    }
    // A follower has one fetch in flight: one held before this was given up on.
    const zmq::message_t& peer = *received->routing_id();
    held_.emplace(Held{zmq::message_t(peer.data(), peer.size()), request.getId(), seen});
    std::lock_guard lock(mutex_);
    seen_.push_back(std::move(seen));
    changed_.notify_all();
  }

  void Send(const Answer& answer) {
    capnp::MallocMessageBuilder message;
    proto::Reply::Builder reply = message.initRoot<proto::Reply>();
    reply.setId(held_->id);
    std::vector<zmq::message_t> payload;
    switch (answer.kind) {
      case Answer::Kind::kNotLeader:
        reply.initNotLeader().setLeaderAddress("tcp://127.0.0.1:9");
        break;
      case Answer::Kind::kOk:
        reply.setOk();
        break;
      case Answer::Kind::kError:
        SetError(reply.initError(), InternalError("the journal could not be read"));
        break;
      case Answer::Kind::kJournal: {
        proto::JournalBatches::Builder journal = reply.initJournal();
        journal.setEpoch(answer.epoch);
        journal.setFirstSequence(answer.first);
        journal.setHeadSequence(answer.head);
        journal.setSnapshot(answer.snapshot);
        journal.setSnapshotFrom(Bytes(answer.snapshot_from));
        journal.setSnapshotNext(Bytes(answer.snapshot_next));
        std::vector<uint64_t> sizes;
        std::string joined;
        for (const std::string& batch : answer.batches) {
          sizes.push_back(batch.size());
          joined += batch;
        }
        if (answer.announced) sizes = *answer.announced;
        auto list = journal.initBatchBytes(sizes.size());
        for (size_t i = 0; i < sizes.size(); ++i) list.set(i, sizes[i]);
        // Cut into three frames across the batches' bounds, as a batch may span frames.
        const size_t piece = joined.size() / 3 + 1;
        for (size_t at = 0; at < joined.size(); at += piece) {
          const size_t n = std::min(piece, joined.size() - at);
          payload.emplace_back(joined.data() + at, n);
        }
        break;
      }
      case Answer::Kind::kNone:
        return;
    }
    (void)SendMessage(socket_, &held_->peer, message, std::move(payload));
  }

  zmq::socket_t socket_;  // used by thread_ only after construction
  std::string endpoint_;
  std::atomic<bool> stop_{false};
  std::optional<Held> held_;  // thread_'s
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Answer> queue_;     // guarded by mutex_
  bool at_once_ = false;         // guarded by mutex_
  uint64_t head_ = 0;            // guarded by mutex_: the last head queued
  std::vector<SeenFetch> seen_;  // guarded by mutex_
  std::thread thread_;
};

// The election as the test plays it; counts how often the follower read it.
class FakeLeadership final : public Leadership {
 public:
  LeadershipView Current() const override {
    std::lock_guard lock(mutex_);
    ++reads_;
    read_.notify_all();
    return view_;
  }
  void Set(LeadershipView view) {
    std::lock_guard lock(mutex_);
    view_ = std::move(view);
  }
  // Waits until the view was read `count` more times: the follower acted on the view it read
  // before each later read. False after kAwait.
  bool WaitForReads(size_t count) {
    std::unique_lock lock(mutex_);
    const size_t target = reads_ + count;
    return read_.wait_for(lock, kAwait, [&] { return reads_ >= target; });
  }

 private:
  mutable std::mutex mutex_;
  mutable std::condition_variable read_;
  LeadershipView view_;       // guarded by mutex_
  mutable size_t reads_ = 0;  // guarded by mutex_
};

LeadershipView FollowingAt(const std::string& address, uint64_t epoch = 3) {
  LeadershipView view;
  view.epoch = epoch;
  view.leader_id = "m1";
  view.leader_address = address;
  return view;
}

std::unique_ptr<MasterJournal> OpenJournal(const std::string& dir) {
  Result<std::unique_ptr<MasterJournal>> journal = MasterJournal::Open(dir);
  EXPECT_TRUE(journal.ok()) << journal.status().ToString();
  return journal.ok() ? std::move(journal).value() : nullptr;
}

// The RDD names a journal holds, by id.
std::vector<std::string> RddNames(MasterJournal& journal) {
  Result<JournalSnapshot> loaded = journal.Load([](const std::string&, const BlockChange&) {});
  EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
  std::vector<std::string> names;
  if (loaded.ok()) {
    for (const JournaledRdd& rdd : loaded->rdds) names.push_back(rdd.name);
  }
  return names;
}

class JournalFollowerTest : public ::testing::Test {
 protected:
  JournalFollowerTest() {
    standby_ = OpenJournal(tmp_.Sub("standby"));
    leader_journal_ = OpenJournal(tmp_.Sub("leader"));
    leader_journal_->set_write_observer(
        [this](std::string_view batch) { written_.emplace_back(batch); });
  }
  ~JournalFollowerTest() override { StopFollower(); }

  // The leader's journal records an RDD per name; returns the batches it wrote, in order.
  std::vector<std::string> WriteRdds(const std::vector<std::string>& names) {
    written_.clear();
    for (const std::string& name : names) {
      EXPECT_TRUE(
          leader_journal_->RecordRdd({next_rdd_++, name, StorageLevel::kMemoryOnly, 1}).ok());
    }
    return written_;
  }

  // The standby's journal as if it had followed a leader up to `position`.
  void PlaceAt(Position position) {
    ASSERT_TRUE(standby_->ApplyFollowed({}, Part::kRecords, position).ok());
  }

  void StartFollower(milliseconds wait = 50ms, milliseconds answer_slack = 5000ms) {
    follower_ = JournalFollower::Start(
        context_,
        JournalFollower::Options{
            .standby_id = "s1", .security = {}, .wait = wait, .answer_slack = answer_slack},
        *standby_, election_);
  }
  // Stops the follower (the journal is the test's again); the leader answers at once meanwhile.
  void StopFollower() {
    if (!follower_) return;
    leader_.AnswerAtOnce(true);
    follower_->Stop();
    follower_.reset();
    leader_.AnswerAtOnce(false);
  }

  // Waits for the follower's `n`th fetch (1 = its first) and returns it.
  SeenFetch Fetch(size_t n) {
    EXPECT_TRUE(leader_.WaitForFetches(n)) << "fetch " << n << " never came";
    std::vector<SeenFetch> seen = leader_.fetches();
    return seen.size() >= n ? seen[n - 1] : SeenFetch{};
  }

  Position StoredPosition() {
    Result<Position> position = standby_->ReadFollowPosition();
    EXPECT_TRUE(position.ok()) << position.status().ToString();
    return position.ok() ? *position : Position{};
  }

  zmq::context_t context_{1};
  testing::TempDir tmp_;
  std::unique_ptr<MasterJournal> standby_;
  std::unique_ptr<MasterJournal> leader_journal_;
  std::vector<std::string> written_;
  uint64_t next_rdd_ = 1;
  FakeLeadership election_;
  FakeLeader leader_{context_};
  std::unique_ptr<JournalFollower> follower_;
};

// ---- Where it starts ----

TEST_F(JournalFollowerTest, ItAsksFromThePositionItsJournalStoredSayingWhoItIsAndHowLongToWait) {
  PlaceAt({3, 5});
  election_.Set(FollowingAt(leader_.endpoint()));
  StartFollower(/*wait=*/50ms);
  const SeenFetch first = Fetch(1);
  EXPECT_EQ(first.standby_id, "s1");
  EXPECT_EQ(first.epoch, 3u);
  EXPECT_EQ(first.from, 5u);
  EXPECT_EQ(first.wait_ms, 50u);
  EXPECT_EQ(first.snapshot_after, "");
  EXPECT_EQ(follower_->epoch(), 3u);
  EXPECT_EQ(follower_->sequence(), 5u);
  EXPECT_FALSE(follower_->caught_up());  // nothing answered yet
}

TEST_F(JournalFollowerTest, AJournalNoLeaderWasFollowedIntoAsksFromScratch) {
  election_.Set(FollowingAt(leader_.endpoint()));
  StartFollower();
  const SeenFetch first = Fetch(1);
  EXPECT_EQ(first.epoch, 0u);
  EXPECT_EQ(first.from, 0u);
}

// ---- Records ----

TEST_F(JournalFollowerTest, TheLeadersRecordsAreAppliedAndTheNextFetchAsksForWhatFollowsThem) {
  const std::vector<std::string> batches = WriteRdds({"a", "b", "c"});
  PlaceAt({3, 0});
  election_.Set(FollowingAt(leader_.endpoint()));
  leader_.Queue(Records(3, 0, {batches[0], batches[1]}, /*head=*/3));
  StartFollower();
  const SeenFetch second = Fetch(2);
  EXPECT_EQ(second.epoch, 3u);
  EXPECT_EQ(second.from, 2u);
  EXPECT_EQ(follower_->sequence(), 2u);
  leader_.Queue(Records(3, 2, {batches[2]}, /*head=*/3));
  EXPECT_EQ(Fetch(3).from, 3u);
  EXPECT_EQ(follower_->sequence(), 3u);
  StopFollower();
  EXPECT_EQ(RddNames(*standby_), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(StoredPosition(), (Position{3, 3}));
}

TEST_F(JournalFollowerTest, ItIsCaughtUpOnlyWhileItsPositionReachesTheLeadersHead) {
  const std::vector<std::string> batches = WriteRdds({"a", "b"});
  PlaceAt({3, 0});
  election_.Set(FollowingAt(leader_.endpoint()));
  leader_.Queue(Records(3, 0, {batches[0]}, /*head=*/2));
  StartFollower();
  Fetch(2);
  EXPECT_FALSE(follower_->caught_up());  // at 1 of 2
  leader_.Queue(Records(3, 1, {batches[1]}, /*head=*/2));
  Fetch(3);
  EXPECT_TRUE(follower_->caught_up());
  // The leader wrote one more since, and sent none of it (yet).
  leader_.Queue(NothingNew(3, 2, /*head=*/3));
  Fetch(4);
  EXPECT_FALSE(follower_->caught_up());
  EXPECT_EQ(follower_->sequence(), 2u);
}

TEST_F(JournalFollowerTest, RecordsFromAnotherPositionAreNotAppliedAndAskedForAgain) {
  const std::vector<std::string> batches = WriteRdds({"a"});
  PlaceAt({3, 2});
  election_.Set(FollowingAt(leader_.endpoint()));
  leader_.Queue(Records(3, 0, {batches[0]}, /*head=*/3));  // another sequence
  leader_.Queue(Records(4, 2, {batches[0]}, /*head=*/3));  // another epoch
  StartFollower();
  for (size_t n : {2u, 3u}) {
    const SeenFetch again = Fetch(n);
    EXPECT_EQ(again.epoch, 3u) << n;
    EXPECT_EQ(again.from, 2u) << n;
  }
  EXPECT_EQ(follower_->sequence(), 2u);
  EXPECT_FALSE(follower_->caught_up());
  StopFollower();
  EXPECT_TRUE(RddNames(*standby_).empty());
  EXPECT_EQ(StoredPosition(), (Position{3, 2}));
}

TEST_F(JournalFollowerTest, BatchesShorterOrLongerThanAnnouncedAreNotAppliedAndAskedForAgain) {
  const std::vector<std::string> batches = WriteRdds({"a"});
  const uint64_t size = batches[0].size();
  PlaceAt({3, 0});
  election_.Set(FollowingAt(leader_.endpoint()));
  Answer shorter = Records(3, 0, {batches[0]}, 1);
  shorter.announced = std::vector<uint64_t>{size + 1};
  Answer longer = Records(3, 0, {batches[0]}, 1);
  longer.announced = std::vector<uint64_t>{size - 1};
  leader_.Queue(shorter);
  leader_.Queue(longer);
  StartFollower();
  EXPECT_EQ(Fetch(2).from, 0u);
  EXPECT_EQ(Fetch(3).from, 0u);
  EXPECT_EQ(follower_->sequence(), 0u);
  StopFollower();
  EXPECT_TRUE(RddNames(*standby_).empty());
  EXPECT_EQ(StoredPosition(), (Position{3, 0}));
}

TEST_F(JournalFollowerTest, AnAnswerTheJournalCannotApplyIsNotAppliedAtAllAndAskedForAgain) {
  const std::vector<std::string> batches = WriteRdds({"a", "b"});
  PlaceAt({3, 0});
  election_.Set(FollowingAt(leader_.endpoint()));
  leader_.Queue(Records(3, 0, {batches[0], "not a write batch"}, /*head=*/2));
  StartFollower();
  EXPECT_EQ(Fetch(2).from, 0u);
  EXPECT_EQ(follower_->sequence(), 0u);
  EXPECT_FALSE(follower_->caught_up());
  // The leader's records as they are: applied.
  leader_.Queue(Records(3, 0, batches, /*head=*/2));
  EXPECT_EQ(Fetch(3).from, 2u);
  EXPECT_TRUE(follower_->caught_up());
  StopFollower();
  EXPECT_EQ(RddNames(*standby_), (std::vector<std::string>{"a", "b"}));
}

// ---- Snapshots ----

TEST_F(JournalFollowerTest, ASnapshotReplacesWhatTheJournalHeldAndFollowingGoesOnFromItsPosition) {
  WriteRdds({"a", "b"});
  Result<std::vector<std::string>> snapshot = leader_journal_->SnapshotBatches(1 << 20);
  ASSERT_TRUE(snapshot.ok()) << snapshot.status().ToString();
  // The standby holds an older epoch's record the leader does not.
  ASSERT_TRUE(standby_->RecordRdd({99, "old", StorageLevel::kDiskOnly, 1}).ok());
  PlaceAt({1, 4});
  election_.Set(FollowingAt(leader_.endpoint(), 2));
  leader_.Queue(SnapshotPage(2, 7, *snapshot, "", ""));
  StartFollower();
  EXPECT_EQ(Fetch(1).epoch, 1u);
  const SeenFetch after = Fetch(2);
  EXPECT_EQ(after.epoch, 2u);
  EXPECT_EQ(after.from, 7u);
  EXPECT_EQ(after.snapshot_after, "");
  EXPECT_EQ(follower_->snapshots(), 1u);
  EXPECT_EQ(follower_->epoch(), 2u);
  EXPECT_EQ(follower_->sequence(), 7u);
  EXPECT_TRUE(follower_->caught_up());
  StopFollower();
  EXPECT_EQ(RddNames(*standby_), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(StoredPosition(), (Position{2, 7}));
}

// The leader's journal as snapshot pages of one small batch each: at least three of them.
std::vector<MasterJournal::SnapshotPage> Pages(MasterJournal& journal) {
  std::vector<MasterJournal::SnapshotPage> pages;
  std::string after;
  do {
    Result<MasterJournal::SnapshotPage> page = journal.ReadSnapshotPage(after, 16, 1);
    EXPECT_TRUE(page.ok()) << page.status().ToString();
    if (!page.ok()) break;
    after = page->next;
    pages.push_back(std::move(page).value());
  } while (!after.empty());
  EXPECT_GE(pages.size(), 3u);
  return pages;
}

TEST_F(JournalFollowerTest, SnapshotPagesAreAskedForOneAfterAnotherAndCountOnlyOnceWhole) {
  WriteRdds({"a", "b", "c"});
  const std::vector<MasterJournal::SnapshotPage> pages = Pages(*leader_journal_);
  ASSERT_GE(pages.size(), 3u);
  PlaceAt({1, 4});
  election_.Set(FollowingAt(leader_.endpoint(), 2));
  leader_.Queue(SnapshotPage(2, 7, pages[0].batches, "", pages[0].next));
  StartFollower();
  // Midway: the next page after the last one's key, of the snapshot as of (2, 7).
  const SeenFetch second = Fetch(2);
  EXPECT_EQ(second.epoch, 2u);
  EXPECT_EQ(second.from, 7u);
  EXPECT_EQ(second.snapshot_after, pages[0].next);
  EXPECT_EQ(follower_->snapshots(), 0u);
  EXPECT_EQ(follower_->sequence(), 4u);  // its position stays until the snapshot is whole
  EXPECT_FALSE(follower_->caught_up());
  for (size_t i = 1; i < pages.size(); ++i) {
    leader_.Queue(SnapshotPage(2, 7, pages[i].batches, pages[i - 1].next, pages[i].next));
    const SeenFetch next = Fetch(i + 2);
    EXPECT_EQ(next.snapshot_after, pages[i].next) << i;
  }
  EXPECT_EQ(follower_->snapshots(), 1u);
  EXPECT_EQ(follower_->epoch(), 2u);
  EXPECT_EQ(follower_->sequence(), 7u);
  StopFollower();
  EXPECT_EQ(RddNames(*standby_), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(StoredPosition(), (Position{2, 7}));
}

TEST_F(JournalFollowerTest, ASnapshotPageOtherThanTheNextStartsTheSnapshotOver) {
  WriteRdds({"a", "b", "c"});
  const std::vector<MasterJournal::SnapshotPage> pages = Pages(*leader_journal_);
  ASSERT_GE(pages.size(), 3u);
  PlaceAt({1, 4});
  election_.Set(FollowingAt(leader_.endpoint(), 2));
  leader_.Queue(SnapshotPage(2, 7, pages[0].batches, "", pages[0].next));
  leader_.Queue(SnapshotPage(2, 7, pages[2].batches, pages[1].next, pages[2].next));  // skips one
  StartFollower();
  EXPECT_EQ(Fetch(2).snapshot_after, pages[0].next);
  // Over from its own position, with no page named.
  const SeenFetch over = Fetch(3);
  EXPECT_EQ(over.epoch, 1u);
  EXPECT_EQ(over.from, 4u);
  EXPECT_EQ(over.snapshot_after, "");
  EXPECT_EQ(follower_->snapshots(), 0u);
}

TEST_F(JournalFollowerTest, AFollowerStoppedMidSnapshotIsStartedAgainFromScratch) {
  WriteRdds({"a", "b", "c"});
  const std::vector<MasterJournal::SnapshotPage> pages = Pages(*leader_journal_);
  ASSERT_GE(pages.size(), 3u);
  PlaceAt({1, 4});
  election_.Set(FollowingAt(leader_.endpoint(), 2));
  leader_.Queue(SnapshotPage(2, 7, pages[0].batches, "", pages[0].next));
  StartFollower();
  EXPECT_EQ(Fetch(2).snapshot_after, pages[0].next);
  StopFollower();
  EXPECT_EQ(StoredPosition(), (Position{}));  // a part of a snapshot is no position
  const size_t before = leader_.count();
  StartFollower();
  const SeenFetch first = Fetch(before + 1);
  EXPECT_EQ(first.epoch, 0u);
  EXPECT_EQ(first.from, 0u);
  EXPECT_EQ(first.snapshot_after, "");
}

// ---- Answers that are no journal ----

TEST_F(JournalFollowerTest, ANotLeaderAnswerIsAskedAgainAndLeavesCaughtUpAsItWas) {
  PlaceAt({3, 0});
  election_.Set(FollowingAt(leader_.endpoint()));
  leader_.Queue(NothingNew(3, 0, /*head=*/0));
  leader_.Queue(OfKind(Answer::Kind::kNotLeader));
  StartFollower();
  Fetch(2);
  const SeenFetch again = Fetch(3);
  EXPECT_EQ(again.epoch, 3u);
  EXPECT_EQ(again.from, 0u);
  EXPECT_TRUE(follower_->caught_up());
}

// An answer of another kind (`ok`) and an error alike: the follower is no longer caught up
// and asks again from where it stands.
class JournalFollowerOddAnswerTest : public JournalFollowerTest,
                                     public ::testing::WithParamInterface<Answer::Kind> {};

TEST_P(JournalFollowerOddAnswerTest, ClearsCaughtUpAndIsAskedAgain) {
  PlaceAt({3, 0});
  election_.Set(FollowingAt(leader_.endpoint()));
  leader_.Queue(NothingNew(3, 0, /*head=*/0));
  StartFollower();
  Fetch(2);
  ASSERT_TRUE(follower_->caught_up());
  leader_.Queue(OfKind(GetParam()));
  EXPECT_EQ(Fetch(3).from, 0u);
  EXPECT_FALSE(follower_->caught_up());
}

INSTANTIATE_TEST_SUITE_P(OkAndError, JournalFollowerOddAnswerTest,
                         ::testing::Values(Answer::Kind::kOk, Answer::Kind::kError),
                         [](const ::testing::TestParamInfo<Answer::Kind>& info) {
                           return info.param == Answer::Kind::kOk ? std::string("AnOkAnswer")
                                                                  : std::string("AnErrorAnswer");
                         });

TEST_F(JournalFollowerTest, ALeaderThatDoesNotAnswerIsGivenUpAfterWaitAndSlackThenAskedAgain) {
  PlaceAt({3, 0});
  election_.Set(FollowingAt(leader_.endpoint()));
  leader_.Queue(NothingNew(3, 0, /*head=*/0));
  leader_.Queue(OfKind(Answer::Kind::kNone));
  StartFollower(/*wait=*/50ms, /*answer_slack=*/200ms);
  Fetch(2);
  const SeenFetch again = Fetch(3);
  EXPECT_EQ(again.from, 0u);
  EXPECT_GE(again.arrived - Fetch(2).arrived, 250ms);  // wait + slack
  EXPECT_FALSE(follower_->caught_up());
}

// ---- The election ----

TEST_F(JournalFollowerTest, ItFetchesNothingWhileThisMasterLeads) {
  LeadershipView leading = FollowingAt(leader_.endpoint());
  leading.leader = true;
  election_.Set(leading);
  StartFollower();
  ASSERT_TRUE(election_.WaitForReads(3));
  EXPECT_EQ(leader_.count(), 0u);
  election_.Set(FollowingAt(leader_.endpoint()));  // it lost the lead
  EXPECT_TRUE(leader_.WaitForFetches(1));
}

TEST_F(JournalFollowerTest, ItWaitsForTheElectionToNameALeaderBeforeFetching) {
  election_.Set(LeadershipView());  // no leader known
  StartFollower();
  ASSERT_TRUE(election_.WaitForReads(3));
  EXPECT_EQ(leader_.count(), 0u);
  election_.Set(FollowingAt(leader_.endpoint()));
  EXPECT_TRUE(leader_.WaitForFetches(1));
}

TEST_F(JournalFollowerTest, WhenTheElectionNamesAnotherLeaderItFetchesFromThatOneWhereItStands) {
  FakeLeader next(context_);
  const std::vector<std::string> batches = WriteRdds({"a"});
  PlaceAt({3, 0});
  election_.Set(FollowingAt(leader_.endpoint()));
  leader_.Queue(Records(3, 0, batches, /*head=*/1));
  StartFollower();
  Fetch(2);  // held by the old leader
  election_.Set(FollowingAt(next.endpoint(), 4));
  leader_.Queue(OfKind(Answer::Kind::kNotLeader));
  ASSERT_TRUE(next.WaitForFetches(1));
  const SeenFetch first = next.fetches()[0];
  EXPECT_EQ(first.epoch, 3u);
  EXPECT_EQ(first.from, 1u);
  EXPECT_EQ(leader_.count(), 2u);
  next.AnswerAtOnce(true);
  StopFollower();
}

TEST_F(JournalFollowerTest,
       ALeaderAddressItCannotConnectToIsTriedAgainUntilTheElectionNamesAnother) {
  election_.Set(FollowingAt("nonsense://x"));
  StartFollower();
  ASSERT_TRUE(election_.WaitForReads(3));  // kept going
  election_.Set(FollowingAt(leader_.endpoint()));
  EXPECT_TRUE(leader_.WaitForFetches(1));
}

// ---- Stop ----

TEST_F(JournalFollowerTest, StopReturnsWithinAFetchsWaitAndSlackWhileTheLeaderHoldsTheFetch) {
  PlaceAt({3, 0});
  election_.Set(FollowingAt(leader_.endpoint()));
  leader_.Queue(OfKind(Answer::Kind::kNone));
  StartFollower(/*wait=*/50ms, /*answer_slack=*/200ms);
  Fetch(1);
  const auto start = std::chrono::steady_clock::now();
  follower_->Stop();  // the leader never answers: no AnswerAtOnce
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1000ms);
  // The journal is the caller's again.
  EXPECT_TRUE(standby_->RecordRdd({5, "mine", StorageLevel::kMemoryOnly, 1}).ok());
  EXPECT_EQ(RddNames(*standby_), std::vector<std::string>{"mine"});
}

}  // namespace
}  // namespace bm
