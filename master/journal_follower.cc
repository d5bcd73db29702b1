#include "master/journal_follower.h"

#include <capnp/message.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <string_view>
#include <vector>
#include <zmq.hpp>

#include "common/net/transport.h"

namespace bm {
namespace {

// Between tries while there is no leader to follow, or after a failed fetch: short, so that a
// standby catches up soon after a leader appears, and it stops soon after Stop().
constexpr std::chrono::milliseconds kRetryPause{20};

// Splits the reply's payload (the batches' bytes cut into frames) back into batches.
Result<std::vector<std::string_view>> SplitBatches(IncomingMessage& message,
                                                   capnp::List<uint64_t>::Reader sizes,
                                                   std::string& joined) {
  joined.clear();
  for (const zmq::message_t& frame : message.payload()) {
    joined.append(static_cast<const char*>(frame.data()), frame.size());
  }
  std::vector<std::string_view> batches;
  size_t offset = 0;
  for (uint64_t size : sizes) {
    if (size > joined.size() - offset) {
      return InvalidArgumentError("the leader's journal batches are shorter than announced");
    }
    batches.emplace_back(joined.data() + offset, size);
    offset += size;
  }
  if (offset != joined.size()) {
    return InvalidArgumentError("the leader's journal batches are longer than announced");
  }
  return batches;
}

}  // namespace

std::unique_ptr<JournalFollower> JournalFollower::Start(zmq::context_t& context, Options options,
                                                        MasterJournal& journal,
                                                        const Leadership& leadership) {
  std::unique_ptr<JournalFollower> follower(
      new JournalFollower(context, std::move(options), journal, leadership));
  follower->thread_ = std::thread([raw = follower.get()] { raw->Run(); });
  return follower;
}

JournalFollower::JournalFollower(zmq::context_t& context, Options options, MasterJournal& journal,
                                 const Leadership& leadership)
    : context_(context), options_(std::move(options)), journal_(journal), leadership_(leadership) {}

JournalFollower::~JournalFollower() { Stop(); }

void JournalFollower::Stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

void JournalFollower::Run() {
  Result<MasterJournal::FollowPosition> read = journal_.ReadFollowPosition();
  if (!read.ok()) spdlog::error("standby: {}; following from scratch", read.status().ToString());
  MasterJournal::FollowPosition position = read.ok() ? *read : MasterJournal::FollowPosition{};
  epoch_.store(position.epoch);
  sequence_.store(position.sequence);
  std::unique_ptr<RpcChannel> channel;
  std::string joined;  // reused: the batches of one reply
  // While a snapshot comes in pages: the key the next page follows, and the snapshot's
  // position (where following goes on after its last page).
  std::string snapshot_after;
  MasterJournal::FollowPosition snapshot_at;
  std::string last_problem;
  const auto problem = [&](const std::string& text) {
    if (text != last_problem) spdlog::warn("standby: {}", text);
    last_problem = text;
    caught_up_.store(false);
    std::this_thread::sleep_for(kRetryPause);
  };
  while (!stop_.load()) {
    const LeadershipView view = leadership_.Current();
    if (view.leader || view.leader_address.empty()) {
      std::this_thread::sleep_for(kRetryPause);
      continue;
    }
    if (!channel || channel->address() != view.leader_address) {
      try {
        channel =
            std::make_unique<RpcChannel>(context_, view.leader_address,
                                         options_.wait + options_.answer_slack, options_.security);
      } catch (const zmq::error_t& e) {
        problem("cannot reach the leader at " + view.leader_address + ": " + e.what());
        continue;
      }
    }
    capnp::MallocMessageBuilder request;
    proto::FetchJournal::Builder fetch = request.initRoot<proto::Request>().initFetchJournal();
    fetch.setStandbyId(options_.standby_id);
    const MasterJournal::FollowPosition asked = snapshot_after.empty() ? position : snapshot_at;
    fetch.setEpoch(asked.epoch);
    fetch.setFromSequence(asked.sequence);
    fetch.setWaitMs(static_cast<uint32_t>(options_.wait.count()));
    fetch.setSnapshotAfter(capnp::Data::Reader(
        reinterpret_cast<const capnp::byte*>(snapshot_after.data()), snapshot_after.size()));
    Result<IncomingMessage> reply = channel->Call(request);
    if (!reply.ok()) {
      problem("fetching the journal of the leader " + view.leader_address + ": " +
              reply.status().ToString());
      continue;
    }
    proto::Reply::Reader answer = reply->reply();
    if (answer.isNotLeader()) {  // it lost the lead since the view was read
      std::this_thread::sleep_for(kRetryPause);
      continue;
    }
    if (!answer.isJournal()) {
      problem("the leader " + view.leader_address + " answered fetchJournal with something else");
      continue;
    }
    proto::JournalBatches::Reader got = answer.getJournal();
    Result<std::vector<std::string_view>> batches =
        SplitBatches(*reply, got.getBatchBytes(), joined);
    if (!batches.ok()) {
      problem(batches.status().ToString());
      continue;
    }
    const bool snapshot = got.getSnapshot();
    if (!snapshot &&
        (got.getEpoch() != position.epoch || got.getFirstSequence() != position.sequence)) {
      problem("the leader answered a fetch from another position; fetching again");
      continue;
    }
    if (batches->empty() && !snapshot) {
      caught_up_.store(got.getHeadSequence() == position.sequence);
      last_problem.clear();
      continue;
    }
    MasterJournal::FollowedPart part = MasterJournal::FollowedPart::kRecords;
    std::string next_page_after;
    if (snapshot) {
      const capnp::Data::Reader from = got.getSnapshotFrom();
      const capnp::Data::Reader after = got.getSnapshotNext();
      const std::string_view page_from(reinterpret_cast<const char*>(from.begin()), from.size());
      if (!page_from.empty() && page_from != snapshot_after) {
        problem("the leader sent a snapshot page other than the next; starting over");
        snapshot_after.clear();
        continue;
      }
      part = page_from.empty() ? MasterJournal::FollowedPart::kSnapshotStart
                               : MasterJournal::FollowedPart::kSnapshotMore;
      next_page_after.assign(reinterpret_cast<const char*>(after.begin()), after.size());
      snapshot_at = MasterJournal::FollowPosition{got.getEpoch(), got.getFirstSequence()};
    }
    // A snapshot page before the last leaves the position unset: a standby stopped midway
    // starts the snapshot over.
    const MasterJournal::FollowPosition next =
        !snapshot                 ? MasterJournal::FollowPosition{got.getEpoch(),
                                                  got.getFirstSequence() + batches->size()}
        : next_page_after.empty() ? snapshot_at
                                  : MasterJournal::FollowPosition{};
    if (Status applied = journal_.ApplyFollowed(*batches, part, next); !applied.ok()) {
      snapshot_after.clear();
      problem(applied.ToString());
      continue;
    }
    if (snapshot) {
      snapshot_after = std::move(next_page_after);
      if (!snapshot_after.empty()) {
        caught_up_.store(false);
        continue;  // the next page at once
      }
      snapshots_.fetch_add(1);
      spdlog::info("standby: rebuilt the journal from the leader's snapshot (epoch {}, record {})",
                   next.epoch, next.sequence);
    }
    position = next;
    epoch_.store(position.epoch);
    sequence_.store(position.sequence);
    caught_up_.store(position.sequence >= got.getHeadSequence());
    last_problem.clear();
  }
}

}  // namespace bm
