#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <unordered_set>
#include <utility>

#include "master/master_loop.h"
#include "master/request_decoding.h"
#include "master/shuffle_requests.h"
#include "master/worker_commands.h"

// The master's loop: what workers send (registration, heartbeats, block reports, replies to
// commands), and keeping their copies (drops, re-replication, drains).

namespace bm {
namespace {

// How long the acknowledgement of a report whose fresh put replaced copies on other workers
// waits for those workers to confirm they removed them. Below the worker's wait for the
// acknowledgement (2 s), so that the put returns after the old copies are gone whenever their
// workers answer at all.
constexpr Duration kReplaceWait = std::chrono::milliseconds(1500);
constexpr Duration kMinHeartbeatInterval = std::chrono::milliseconds(50);

}  // namespace

Status MasterServer::Loop::HandleRegister(proto::RegisterWorker::Reader request,
                                          const std::optional<PeerIdentity>& peer,
                                          proto::Reply::Builder reply) {
  BM_ASSIGN_OR_RETURN(std::string id,
                      DecodeName(request.getWorkerId(), "worker id", kMaxWorkerIdBytes));
  BM_ASSIGN_OR_RETURN(std::string address,
                      DecodeName(request.getAddress(), "worker address", kMaxAddressBytes));
  if (!IsSupportedWorkerAddress(address)) {
    return InvalidArgumentError("worker address '" + address + "' is not tcp:// or ipc://");
  }
  BM_ASSIGN_OR_RETURN(std::string host, DecodeLabel(request.getHost(), "host label"));
  BM_ASSIGN_OR_RETURN(std::string rack, DecodeLabel(request.getRack(), "rack label"));
  const WorkerStats stats = FromProto(request.getStats());
  std::unordered_set<BlockId> fresh_ids;
  for (capnp::Text::Reader text : request.getFreshBlocks()) {
    BM_ASSIGN_OR_RETURN(BlockId fresh, ParseWireBlockId(text));
    fresh_ids.insert(fresh);
  }
  std::vector<BlockChange> blocks;
  blocks.reserve(request.getBlocks().size());
  for (proto::BlockStatus::Reader block : request.getBlocks()) {
    BM_ASSIGN_OR_RETURN(BlockChange change, DecodeBlockStatus(block, /*removed=*/false));
    change.fresh = fresh_ids.contains(change.id);
    blocks.push_back(change);
  }
  BM_ASSIGN_OR_RETURN(std::vector<WorkerLoss> losses,
                      DecodeLosses(request.getLostBlocks(), request.getLostCopies()));
  const std::string public_key = peer ? peer->public_key : std::string();
  BM_ASSIGN_OR_RETURN(zmq::socket_t link, links_.Connect(address, public_key));

  const bool known = registry_.Contains(id);
  std::vector<GoneBlock> gone;  // blocks whose only copy was listed on it
  if (known) ForgetWorker(id, &gone);
  registry_.Register(id, address, stats, WorkerLabels{host, rack});
  links_.Add(id, std::move(link), public_key);
  // What it holds is taken under the version rules: copies of versions replaced or removed
  // while it was away are refused and removed from it.
  std::vector<BlockChange> recorded;
  std::vector<RetiredCopy> to_remove;
  std::vector<RetiredCopy> replaced;
  for (const BlockChange& change : blocks) {
    ApplyResult applied = index_.Apply(id, change);
    if (applied.digest_mismatch) {
      DigestMismatch(id, change, applied.expected_digest);
      continue;
    }
    if (!applied.recorded) {
      to_remove.push_back(RetiredCopy{id, change.id, change.version});
      continue;
    }
    recorded.push_back(change);
    replaced.insert(replaced.end(), applied.replaced.begin(), applied.replaced.end());
  }
  // The journal's registration record replaces the old locations in the same batch.
  if (journal_) {
    Journaled(journal_->RecordRegistration(
        JournaledWorker{
            .id = id, .address = address, .host = host, .rack = rack, .public_key = public_key},
        recorded));
  }
  JournalRemovals(replaced);
  if (!to_remove.empty()) {
    spdlog::info(
        "worker {} holds {} blocks in versions replaced or removed while it was away; "
        "removing them",
        id, to_remove.size());
  }
  to_remove.insert(to_remove.end(), replaced.begin(), replaced.end());
  RemoveCopies(to_remove);
  BlocksStored(recorded);
  std::vector<BlockId> recorded_ids;
  recorded_ids.reserve(recorded.size());
  for (const BlockChange& change : recorded) recorded_ids.push_back(change.id);
  TrimExtraCopies(recorded_ids);
  CarryOut(losses_.Stored(recorded));
  CarryOut(losses_.WorkerRegistered(id, std::move(gone), recorded_ids, losses,
                                    request.getStartedNow(), request.getFollowUpBlocks()));
  ShuffleEffects told;
  std::vector<uint64_t> held_shuffles;
  for (uint64_t shuffle : request.getShuffles()) held_shuffles.push_back(shuffle);
  shuffles_.WorkerRegistered(id, held_shuffles, told);
  CarryOut(told);
  ++counters_.workers_registered;
  counters_.RecordWorkerEvent(id, known ? "re-registered" : "registered");
  spdlog::info("worker {} {} at {} holding {} blocks ({} workers, {} blocks known)", id,
               known ? "re-registered" : "registered", address, recorded.size(), registry_.size(),
               index_.block_count());

  const Duration interval = std::max(options_.heartbeat_timeout / 4, kMinHeartbeatInterval);
  proto::RegisterReply::Builder registered = reply.initRegistered();
  registered.setHeartbeatIntervalMs(
      static_cast<uint32_t>(std::min<uint64_t>(ToMillis(interval), UINT32_MAX)));
  registered.setEpoch(standby_.epoch());
  return Status::Ok();
}

Status MasterServer::Loop::HandleHeartbeat(proto::Heartbeat::Reader request,
                                           proto::Reply::Builder reply) {
  capnp::Text::Reader id = request.getWorkerId();
  BM_RETURN_IF_ERROR(
      registry_.Touch(std::string_view(id.cStr(), id.size()), FromProto(request.getStats())));
  reply.setOk();
  return Status::Ok();
}

Result<MasterServer::Loop::Answer> MasterServer::Loop::HandleReportBlocks(
    proto::ReportBlocks::Reader request, const zmq::message_t& client, uint64_t request_id,
    proto::Reply::Builder reply) {
  capnp::Text::Reader id_text = request.getWorkerId();
  const std::string id(id_text.cStr(), id_text.size());
  std::vector<BlockChange> changes;
  changes.reserve(request.getUpdates().size());
  for (proto::BlockUpdate::Reader update : request.getUpdates()) {
    BM_ASSIGN_OR_RETURN(
        BlockChange change,
        DecodeBlockStatus(update.getStatus(), update.getRemoved(), update.getFresh()));
    change.lease = update.getLeaseToken();
    changes.push_back(change);
    // The block's bytes count from this report on (as stored, or not at all if refused).
    if (update.getReservation() != 0) tenants_.EndReservation(update.getReservation(), id);
  }
  BM_ASSIGN_OR_RETURN(std::vector<WorkerLoss> losses,
                      DecodeLosses(request.getLostBlocks(), request.getLostCopies()));
  BM_RETURN_IF_ERROR(registry_.Touch(id, FromProto(request.getStats())));
  auto [recorded, replaced, refused, gone] = ApplyChanges(id, changes);
  BlocksStored(recorded);
  CarryOut(losses_.Stored(recorded));
  CarryOut(losses_.FollowUpsReported(id, changes));
  // Copies landing from re-replication may meet a copy that came back meanwhile.
  std::vector<BlockId> copies;
  for (const BlockChange& change : recorded) {
    if (!change.removed && !change.fresh) copies.push_back(change.id);
  }
  TrimExtraCopies(copies);
  CarryOut(losses_.LossesReported(id, losses, gone));
  if (!refused.empty()) {
    // The worker fails the puts of the refused blocks (their removal is under way). A report
    // cannot both refuse and replace: a refused change replaced nothing, and other changes'
    // replaced copies are removed without waiting, as for a report that was not fresh.
    auto list = reply.initReportRefused(static_cast<unsigned>(refused.size()));
    for (size_t i = 0; i < refused.size(); ++i) {
      list[static_cast<unsigned>(i)].setBlockId(refused[i].id.ToString());
      list[static_cast<unsigned>(i)].setVersion(refused[i].version);
    }
    if (!replaced.empty()) RemoveCopies(replaced);
    return Answer::kNow;
  }
  if (replaced.empty()) {
    reply.setOk();
    return Answer::kNow;
  }
  // A put replaced copies on other workers: the report is acknowledged (and so the put
  // answered) once they confirm the old copies are gone, so that no reader who knows where
  // the old copies were can read one after the put returned (PROTOCOL.md).
  const uint64_t ticket = parked_.Park(client, request_id);
  RemovalCoordinator::Started started = removals_.AwaitRemoval(
      ticket, replaced, std::min<Duration>(kReplaceWait, options_.remove_timeout));
  if (started.reply) AnswerRemoval(*started.reply);
  SendRemovals(started.commands);
  return Answer::kLater;
}

MasterServer::Loop::Applied MasterServer::Loop::ApplyChanges(
    const std::string& worker_id, const std::vector<BlockChange>& changes) {
  Applied applied_changes;
  std::vector<BlockChange>& recorded = applied_changes.recorded;
  recorded.reserve(changes.size());
  std::vector<RetiredCopy> stale;
  std::vector<RetiredCopy>& replaced = applied_changes.replaced;
  // What changed the index: a removal of a copy the index no longer lists (a version replaced
  // since) is not journaled, as its journal record would delete the newer copy's location.
  std::vector<BlockChange> journaled;
  for (const BlockChange& change : changes) {
    if (change.fresh && !change.removed && change.lease != 0 &&
        !leases_.Holds(change.id, change.lease) && index_.VersionOf(change.id) != change.version) {
      spdlog::info(
          "worker {} stored {} under a compute lease that is no longer held; refusing "
          "and removing it",
          worker_id, change.id.ToString());
      stale.push_back(RetiredCopy{worker_id, change.id, change.version});
      applied_changes.refused.push_back(change);
      continue;
    }
    ApplyResult applied = index_.Apply(worker_id, change);
    if (applied.last_copy) applied_changes.gone.push_back(*applied.last_copy);
    if (applied.digest_mismatch) {
      DigestMismatch(worker_id, change, applied.expected_digest);
      continue;
    }
    if (!applied.recorded) {
      spdlog::info("worker {} stored {} in a version that was replaced or removed; removing it",
                   worker_id, change.id.ToString());
      stale.push_back(RetiredCopy{worker_id, change.id, change.version});
      continue;
    }
    recorded.push_back(change);
    if (!applied.removal_ignored) journaled.push_back(change);
    replaced.insert(replaced.end(), applied.replaced.begin(), applied.replaced.end());
  }
  if (journal_ && !journaled.empty()) Journaled(journal_->RecordChanges(worker_id, journaled));
  JournalRemovals(replaced);
  RemoveCopies(stale);
  return applied_changes;
}

void MasterServer::Loop::JournalRemovals(const std::vector<RetiredCopy>& copies) {
  if (!journal_ || copies.empty()) return;
  std::map<std::string, std::vector<BlockChange>> by_worker;
  for (const RetiredCopy& copy : copies) {
    BlockChange removal{copy.id};
    removal.removed = true;
    removal.version = copy.version;
    by_worker[copy.worker_id].push_back(removal);
  }
  for (const auto& [worker_id, removals] : by_worker) {
    Journaled(journal_->RecordChanges(worker_id, removals));
  }
}

void MasterServer::Loop::TrimExtraCopies(const std::vector<BlockId>& ids) {
  std::vector<RetiredCopy> extra;
  for (const BlockId& id : ids) {
    std::optional<BlockInfo> info = index_.Find(id);
    if (!info || info->locations.size() <= 1) continue;
    std::vector<IndexedLocation> copies = replication_.ExtraCopies(*info, registry_);
    if (copies.empty()) continue;
    const uint64_t version = index_.VersionOf(id).value_or(0);
    for (const IndexedLocation& copy : copies) {
      BlockChange removal{id};
      removal.removed = true;
      removal.version = version;
      index_.Apply(copy.worker_id, removal);
      extra.push_back(RetiredCopy{copy.worker_id, id, version});
    }
  }
  if (extra.empty()) return;
  spdlog::info("removing {} copies beyond their blocks' levels", extra.size());
  JournalRemovals(extra);
  RemoveCopies(extra);
}

size_t MasterServer::Loop::DropWorker(const std::string& worker_id, std::vector<GoneBlock>* gone) {
  const size_t locations = ForgetWorker(worker_id, gone);
  // Its shuffle partitions move to the live workers (a re-registering worker keeps its own).
  ShuffleEffects moved;
  shuffles_.WorkerLost(worker_id, ShuffleCandidates(registry_), moved);
  CarryOut(moved);
  if (journal_) Journaled(journal_->RecordWorkerDropped(worker_id));
  return locations;
}

void MasterServer::Loop::Journaled(const Status& written) {
  ++counters_.journal_writes;
  if (written.ok()) return;
  ++counters_.journal_failures;
  spdlog::error("{} ({} journal write failures so far; serving from memory)", written.ToString(),
                counters_.journal_failures);
}

size_t MasterServer::Loop::ForgetWorker(const std::string& worker_id,
                                        std::vector<GoneBlock>* gone) {
  const size_t locations = index_.RemoveWorker(worker_id, gone);
  losses_.WorkerForgotten(worker_id);
  replication_.WorkerGone(worker_id, locations);
  links_.Remove(worker_id);
  registry_.Remove(worker_id);
  AnswerRemovals(removals_.WorkerGone(worker_id));
  return locations;
}

void MasterServer::Loop::HandleWorkerReply(const std::string& worker_id, IncomingMessage& message) {
  registry_.HeardFrom(worker_id);
  uint64_t id = 0;
  bool removed = false;
  std::optional<std::string> verified;  // a verifyBlock's answer, as a sentence
  Status failure;
  Status read = ReadGuarded([&]() -> Status {
    proto::Reply::Reader reply = message.reply();
    id = reply.getId();
    if (reply.isRemoved()) {
      removed = true;
    } else if (reply.isVerified()) {
      proto::VerifyReply::Reader answer = reply.getVerified();
      switch (answer.getState()) {
        case proto::VerifyReply::State::INTACT:
          verified =
              "its bytes match its own digests: its digest metadata differs from the "
              "version's";
          break;
        case proto::VerifyReply::State::CORRUPT: {
          capnp::Text::Reader what = answer.getMessage();
          verified =
              "corrupt, dropped: " + std::string(what.cStr(), std::min<size_t>(what.size(), 512));
          break;
        }
        default:
          verified = "not found";
          break;
      }
    } else if (reply.isError()) {
      failure = StatusFromError(reply.getError());
    } else {
      failure = InvalidArgumentError("unexpected reply to removeBlocks");
    }
    return Status::Ok();
  });
  if (!read.ok()) {
    spdlog::warn("bad reply from worker {}: {}", worker_id, read.ToString());
    return;
  }
  // Commands sent without an id (decommission, datasetAccess) are answered ok: nothing waits.
  if (id == 0 && failure.ok() && !removed && !verified) return;
  if (auto verify = verify_requests_.find(id); verify != verify_requests_.end()) {
    if (verify->second.worker_id == worker_id) {
      spdlog::warn("worker {} verified its copy of {} (reported with a mismatching digest): {}",
                   worker_id, verify->second.block.ToString(),
                   verified ? *verified : failure.ToString());
      verify_requests_.erase(verify);
    }
    return;
  }
  if (replication_.CopyAnswered(id)) return;
  if (!removed && failure.ok()) failure = InvalidArgumentError("unexpected reply to removeBlocks");
  RemovalCoordinator::Answered answered =
      removals_.WorkerAnswered(worker_id, id, removed ? Status::Ok() : failure);
  // A removal of a replaced version can be answered after the worker reported the new
  // version it stores now (the answer and the report travel on different sockets): the index
  // ignores it, and so must the journal, whose record would delete the new copy's location.
  std::vector<BlockChange> journaled;
  for (const BlockChange& removal : answered.removed) {
    if (!index_.Apply(worker_id, removal).removal_ignored) journaled.push_back(removal);
  }
  if (journal_ && !journaled.empty()) Journaled(journal_->RecordChanges(worker_id, journaled));
  if (answered.reply) AnswerRemoval(*answered.reply);
}

void MasterServer::Loop::CheckHeartbeats() {
  const TimePoint now = clock_.Now();
  if (now < next_heartbeat_check_) return;
  next_heartbeat_check_ = now + check_interval_;
  if (!registry_.Expired(options_.heartbeat_timeout).empty()) {
    // Before calling anyone dead: take what is already waiting (heartbeats queued behind other
    // messages, replies on the links), bounded so a flood cannot hold the loop here.
    constexpr int kPasses = 16;
    links_.UnsettleAll();
    requests_.Unsettle();
    for (int pass = 0; pass < kPasses && (links_.unsettled() || requests_.unsettled()); ++pass) {
      links_.DrainUnsettled(handle_reply_);
      requests_.Drain([this](const zmq::message_t& client) { HandleClientMessage(client); });
    }
  }
  for (const std::string& id : registry_.Expired(options_.heartbeat_timeout)) {
    const size_t blocks_before = index_.block_count();
    std::vector<GoneBlock> gone;
    const size_t locations = DropWorker(id, &gone);
    ++counters_.workers_dropped;
    counters_.blocks_lost += blocks_before - index_.block_count();
    counters_.RecordWorkerEvent(id, "dropped (no heartbeat)");
    spdlog::warn("dropped worker {}: no heartbeat for over {} ms; {} block locations lost", id,
                 ToMillis(options_.heartbeat_timeout), locations);
    const std::string detail =
        "no heartbeat for over " + std::to_string(ToMillis(options_.heartbeat_timeout)) + " ms";
    CarryOut(losses_.WorkerDropped(id, std::move(gone), detail));
  }
  MaintainReplication();
}

Status MasterServer::Loop::HandleDecommission(proto::DecommissionWorker::Reader request,
                                              proto::Reply::Builder reply) {
  capnp::Text::Reader id_text = request.getWorkerId();
  const std::string id(id_text.cStr(), id_text.size());
  BM_RETURN_IF_ERROR(registry_.Decommission(id));
  WarnIfUnsent(id, SendDecommission(links_, id));
  spdlog::info("decommissioning worker {}: copying its {} blocks elsewhere", id,
               index_.LocationCount(id));
  replication_.MarkAllForCheck();
  next_heartbeat_check_ = clock_.Now();  // start copying at the next turn of the loop
  reply.setOk();
  return Status::Ok();
}

void MasterServer::Loop::MaintainReplication() {
  for (const ReplicationDriver::Copy& copy : replication_.Plan(index_, registry_)) {
    std::vector<std::string> target_keys;
    target_keys.reserve(copy.command.targets.size());
    for (const WorkerRecord& target : copy.command.targets) {
      target_keys.push_back(links_.Key(target.id));
    }
    ++counters_.copies_started;
    WarnIfUnsent(copy.command.source,
                 SendReplicateBlock(links_, copy.request_id, copy.command, target_keys));
  }
  for (const std::string& id : replication_.DrainedWorkers(index_, registry_)) {
    WarnIfUnsent(id, SendShutdown(links_, id));
    const size_t locations = DropWorker(id);
    counters_.RecordWorkerEvent(id, "decommissioned");
    spdlog::info("decommissioned worker {}: every one of its {} blocks has its copies elsewhere",
                 id, locations);
  }
}

void MasterServer::Loop::DigestMismatch(const std::string& worker_id, const BlockChange& change,
                                        uint64_t expected) {
  ++counters_.digest_mismatch_reports;
  spdlog::warn(
      "worker {} reported {} (version {:016x}) with digest {:016x}, but the version's "
      "digest is {:016x}: not listing that copy; asking the worker to verify it",
      worker_id, change.id.ToString(), change.version, change.digest, expected);
  // Bounded: answers that never come (a worker gone) must not pile up.
  constexpr size_t kMaxVerifiesInFlight = 1024;
  if (verify_requests_.size() >= kMaxVerifiesInFlight) verify_requests_.clear();
  const uint64_t request_id = request_ids_.Next();
  verify_requests_.insert_or_assign(request_id, VerifyRequest{worker_id, change.id});
  WarnIfUnsent(worker_id, SendVerifyBlock(links_, worker_id, request_id, change.id));
  // The index dropped any location the worker had for the block: so does the journal.
  JournalRemovals({RetiredCopy{worker_id, change.id, change.version}});
}

void MasterServer::Loop::WarnIfUnsent(const std::string& worker_id, const Status& sent) {
  if (sent.ok() || sent.code() == StatusCode::kNotFound) return;
  spdlog::warn("cannot send to worker {}: {}", worker_id, sent.ToString());
}

}  // namespace bm
