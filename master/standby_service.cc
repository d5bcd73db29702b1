#include "master/standby_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "master/request_decoding.h"

namespace bm {
namespace {

// The most a fetch's answer carries, unless a single batch is larger: well under the
// protocol's bound on a message's payload (kMaxPayloadFrames frames of
// kMaxPayloadFrameBytes).
constexpr size_t kFetchBytes = 32 << 20;
// The longest a standby may ask the leader to hold a fetch.
constexpr std::chrono::milliseconds kMaxFetchWait{1000};

// The batches' bytes, concatenated and cut into frames of at most kMaxPayloadFrameBytes.
template <typename Batches, typename BytesOf>
std::vector<zmq::message_t> BatchFrames(const Batches& batches, BytesOf bytes_of,
                                        capnp::List<uint64_t>::Builder sizes) {
  std::string joined;
  unsigned i = 0;
  for (const auto& batch : batches) {
    const std::string_view bytes = bytes_of(batch);
    sizes.set(i++, bytes.size());
    joined.append(bytes);
  }
  std::vector<zmq::message_t> frames;
  for (size_t at = 0; at < joined.size(); at += kMaxPayloadFrameBytes) {
    frames.emplace_back(joined.data() + at, std::min(kMaxPayloadFrameBytes, joined.size() - at));
  }
  return frames;
}

// A reply to `client` with a fresh message (its root a Reply with `request_id`).
StandbyReply NewReply(const zmq::message_t& client, uint64_t request_id) {
  StandbyReply reply{zmq::message_t(client.data(), client.size()),
                     std::make_unique<capnp::MallocMessageBuilder>(),
                     {}};
  reply.message->initRoot<proto::Reply>().setId(request_id);
  return reply;
}

StandbyReply ErrorReply(const zmq::message_t& client, uint64_t request_id, const Status& status) {
  StandbyReply reply = NewReply(client, request_id);
  SetError(reply.message->getRoot<proto::Reply>().initError(), status);
  return reply;
}

}  // namespace

StandbyService::StandbyService(const Clock& clock, zmq::context_t& context,
                               const MasterOptions& options, MasterJournal* journal)
    : clock_(clock),
      context_(context),
      options_(options),
      journal_(journal),
      role_(options.leadership != nullptr ? Role::kStandby : Role::kLeader) {}

std::optional<uint64_t> StandbyService::Follow() {
  if (options_.leadership == nullptr) return std::nullopt;
  const LeadershipView view = options_.leadership->Current();
  if (role_ == Role::kLeader) {
    if (!view.leader || view.epoch != epoch_) {
      spdlog::error(
          "lost the lead of epoch {} ({}): stopping at once; this master starts over as a "
          "standby",
          epoch_,
          view.leader                   ? "a newer epoch " + std::to_string(view.epoch)
          : view.leader_address.empty() ? std::string("no ZooKeeper session")
                                        : "the leader is now " + view.leader_address);
      demoted_ = true;
    }
    return std::nullopt;
  }
  if (view.leader) return view.epoch;
  if (!follower_ && journal_) {
    follower_ = JournalFollower::Start(
        context_,
        JournalFollower::Options{.standby_id = options_.master_id,
                                 .security = {options_.keys, options_.keys.public_key}},
        *journal_, *options_.leadership);
  }
  return std::nullopt;
}

void StandbyService::StopFollowing(uint64_t epoch) {
  if (follower_) {
    follower_->Stop();  // hands the journal back to this thread
    spdlog::info("elected leader of epoch {}: the journal holds the leader's records up to {}:{}",
                 epoch, follower_->epoch(), follower_->sequence());
    follower_.reset();
  }
}

void StandbyService::Lead(uint64_t epoch) {
  role_ = Role::kLeader;
  epoch_ = epoch;
  ++elections_won_;
  // The standbys are fed what the journal writes (a master in an election keeps one).
  if (journal_ == nullptr) return;
  feed_ = std::make_unique<JournalFeed>(
      clock_, epoch, JournalFeed::Options{.standby_timeout = options_.standby_timeout});
  journal_->set_write_observer(
      [feed = feed_.get()](std::string_view batch) { feed->Append(batch); });
}

MasterRole StandbyService::StatusRole(const std::string& advertised) const {
  MasterRole role;
  if (options_.leadership == nullptr) return role;
  role.elected = true;
  role.leader = role_ == Role::kLeader;
  role.elections_won = elections_won_;
  if (role.leader) {
    role.epoch = epoch_;
    role.leader_address = advertised;
    role.standbys_in_sync = feed_ ? feed_->in_sync_count() : 0;
  } else {
    const LeadershipView view = options_.leadership->Current();
    role.epoch = view.epoch;
    role.leader_address = view.leader_address;
  }
  return role;
}

void StandbyService::AnswerNotLeader(proto::Reply::Builder reply) const {
  const LeadershipView view = options_.leadership->Current();
  proto::NotLeader::Builder not_leader = reply.initNotLeader();
  not_leader.setLeaderAddress(view.leader ? std::string() : view.leader_address);
  not_leader.setLeaderId(view.leader ? std::string() : view.leader_id);
  not_leader.setEpoch(view.epoch);
}

void StandbyService::AnswerMasterInfo(const std::string& advertised,
                                      proto::Reply::Builder reply) const {
  proto::MasterInfo::Builder info = reply.initMaster();
  info.setId(options_.master_id);
  info.setAddress(advertised);
  info.setLeader(role_ == Role::kLeader);
  if (role_ == Role::kLeader) {
    info.setEpoch(epoch_);
    info.setLeaderAddress(advertised);
    info.setJournalSequence(feed_ ? feed_->next_sequence() : 0);
    info.setInSync(true);
    return;
  }
  const LeadershipView view = options_.leadership->Current();
  info.setEpoch(view.epoch);
  info.setLeaderAddress(view.leader_address);
  if (follower_) {
    info.setJournalSequence(follower_->sequence());
    info.setInSync(follower_->caught_up() && follower_->epoch() == view.epoch);
  }
}

Status StandbyService::FetchJournal(proto::FetchJournal::Reader request,
                                    const zmq::message_t& client, uint64_t request_id,
                                    std::vector<StandbyReply>& replies) {
  if (!feed_) return UnavailableError("this master leads without a journal to feed standbys");
  const std::string standby = request.getStandbyId();
  if (standby.empty()) return InvalidArgumentError("fetchJournal without a standby id");
  const capnp::Data::Reader snapshot_after = request.getSnapshotAfter();
  if (snapshot_after.size() > 0) {  // the next page of a snapshot: at once, never parked
    replies.push_back(
        *AnswerFetch(client, request_id, standby, request.getEpoch(), request.getFromSequence(),
                     /*even_if_empty=*/true,
                     std::string_view(reinterpret_cast<const char*>(snapshot_after.begin()),
                                      snapshot_after.size())));
    return Status::Ok();
  }
  if (std::optional<StandbyReply> answer =
          AnswerFetch(client, request_id, standby, request.getEpoch(), request.getFromSequence(),
                      /*even_if_empty=*/request.getWaitMs() == 0)) {
    replies.push_back(std::move(*answer));  // with its payload
    return Status::Ok();
  }
  const auto wait = std::min<std::chrono::milliseconds>(
      std::chrono::milliseconds(request.getWaitMs()), kMaxFetchWait);
  parked_fetches_.push_back(ParkedFetch{zmq::message_t(client.data(), client.size()), request_id,
                                        standby, request.getEpoch(), request.getFromSequence(),
                                        clock_.Now() + wait});
  return Status::Ok();
}

std::optional<StandbyReply> StandbyService::AnswerFetch(const zmq::message_t& client,
                                                        uint64_t request_id,
                                                        const std::string& standby, uint64_t epoch,
                                                        uint64_t from, bool even_if_empty,
                                                        std::string_view snapshot_after) {
  JournalFeed::Fetched fetched;
  std::string_view page_after;  // where a snapshot page starts: empty for its first
  if (!snapshot_after.empty() && feed_->ContinueSnapshot(standby, epoch, from)) {
    fetched.snapshot = true;
    fetched.first = from;
    page_after = snapshot_after;
  } else {
    // A position, or a snapshot that cannot go on (its records since were dropped, or
    // another epoch's): Fetch says whether a snapshot starts over.
    fetched = feed_->Fetch(standby, epoch, from, kFetchBytes);
  }
  if (!fetched.snapshot && fetched.batches.empty() && !even_if_empty) return std::nullopt;
  StandbyReply reply = NewReply(client, request_id);
  proto::JournalBatches::Builder answer = reply.message->getRoot<proto::Reply>().initJournal();
  answer.setEpoch(feed_->epoch());
  answer.setFirstSequence(fetched.first);
  answer.setSnapshot(fetched.snapshot);
  answer.setHeadSequence(feed_->next_sequence());
  std::vector<zmq::message_t> frames;
  if (fetched.snapshot) {
    Result<MasterJournal::SnapshotPage> page = journal_->ReadSnapshotPage(
        page_after, options_.snapshot_batch_bytes, options_.snapshot_page_batches);
    if (!page.ok()) return ErrorReply(client, request_id, page.status());
    if (page_after.empty()) {
      spdlog::info(
          "standby {} is not in this epoch's recent records: sending it the journal as of "
          "record {}, in pages",
          standby, fetched.first);
    }
    answer.setSnapshotFrom(capnp::Data::Reader(
        reinterpret_cast<const capnp::byte*>(page_after.data()), page_after.size()));
    answer.setSnapshotNext(capnp::Data::Reader(
        reinterpret_cast<const capnp::byte*>(page->next.data()), page->next.size()));
    frames = BatchFrames(
        page->batches, [](const std::string& batch) { return std::string_view(batch); },
        answer.initBatchBytes(page->batches.size()));
  } else {
    frames = BatchFrames(
        fetched.batches,
        [](const std::shared_ptr<const std::string>& batch) { return std::string_view(*batch); },
        answer.initBatchBytes(fetched.batches.size()));
  }
  if (frames.size() > kMaxPayloadFrames) {
    return ErrorReply(client, request_id,
                      UnavailableError("the journal is too large to send a standby in one "
                                       "message (" +
                                       std::to_string(frames.size()) + " frames)"));
  }
  reply.frames = std::move(frames);
  return reply;
}

std::vector<StandbyReply> StandbyService::Serve() {
  std::vector<StandbyReply> replies;
  if (!feed_) return replies;
  const TimePoint now = clock_.Now();
  for (auto it = parked_fetches_.begin(); it != parked_fetches_.end();) {
    const bool due = now >= it->deadline;
    if (feed_->HasRecordsFrom(it->from) || due) {
      replies.push_back(*AnswerFetch(it->client, it->request_id, it->standby, it->epoch, it->from,
                                     /*even_if_empty=*/true));
      it = parked_fetches_.erase(it);
    } else {
      ++it;
    }
  }
  for (const std::string& dropped : feed_->ExpireSilent()) {
    spdlog::warn(
        "standby {} fetched nothing for {} ms: no longer in sync; acknowledgements stop "
        "waiting for it (it cannot take over until it catches up)",
        dropped, ToMillis(options_.standby_timeout));
  }
  const uint64_t confirmed = ConfirmedJournalSequence();
  while (!held_replies_.empty() && held_replies_.front().depends_on <= confirmed) {
    replies.push_back(std::move(held_replies_.front().reply));
    held_replies_.pop_front();
  }
  return replies;
}

uint64_t StandbyService::ConfirmedJournalSequence() {
  const LeadershipView view = options_.leadership->Current();
  if (!view.in_sync_published) return feed_->ConfirmedSequence();
  // ZooKeeper's list follows the feed's: a standby joins it once in sync, and leaves it (after
  // which nothing waits for it) once silent.
  std::vector<std::string> in_sync = feed_->InSyncIds();
  if (in_sync != *view.in_sync_published && in_sync != requested_in_sync_) {
    requested_in_sync_ = in_sync;
    options_.leadership->PublishInSync(std::move(in_sync));
  }
  return feed_->ConfirmedSequence(&*view.in_sync_published);
}

bool StandbyService::Hold(const zmq::message_t& client, capnp::MallocMessageBuilder& message,
                          uint64_t depends_on) {
  if (!feed_ || (held_replies_.empty() && ConfirmedJournalSequence() >= depends_on)) {
    return false;
  }
  // Copied out of the builder (which may live in the loop's scratch segment), in order behind
  // the ones held already.
  auto owned = std::make_unique<capnp::MallocMessageBuilder>();
  owned->setRoot(message.getRoot<proto::Reply>().asReader());
  held_replies_.push_back(
      HeldReply{depends_on,
                StandbyReply{zmq::message_t(client.data(), client.size()), std::move(owned), {}}});
  return true;
}

std::optional<TimePoint> StandbyService::NextWake() const {
  std::optional<TimePoint> wake;
  auto earliest = [&](TimePoint at) { wake = wake ? std::min(*wake, at) : at; };
  for (const ParkedFetch& fetch : parked_fetches_) earliest(fetch.deadline);
  if (feed_) {
    if (std::optional<TimePoint> expiry = feed_->NextExpiry()) earliest(*expiry);
  }
  return wake;
}

void StandbyService::Stop() {
  held_replies_.clear();
  if (follower_) follower_->Stop();
}

}  // namespace bm
