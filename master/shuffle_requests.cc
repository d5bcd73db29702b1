#include "master/shuffle_requests.h"

#include <capnp/message.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>
#include <utility>

#include "master/request_decoding.h"

namespace bm {
namespace {

using Which = proto::Request::Which;

Result<ShuffleShape> DecodeShape(proto::RegisterShuffle::Reader request) {
  ShuffleShape shape{.id = request.getShuffleId(),
                     .maps = request.getMaps(),
                     .partitions = request.getPartitions(),
                     .level = FromProto(request.getLevel())};
  if (shape.id > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return InvalidArgumentError("shuffle id " + std::to_string(shape.id) + " is over 2^63 - 1");
  }
  return shape;
}

Result<JournaledMapCommit> DecodeCommit(proto::CommitShuffleMap::Reader request) {
  JournaledMapCommit commit{.shuffle_id = request.getShuffleId(),
                            .map = request.getMap(),
                            .attempt = request.getAttempt()};
  capnp::List<proto::PartitionPieces>::Reader pieces = request.getPieces();
  commit.pieces.reserve(pieces.size());
  for (proto::PartitionPieces::Reader entry : pieces) {
    commit.pieces.push_back({entry.getPartition(), entry.getPieces(), entry.getBytes()});
  }
  return commit;
}

// A worker as clients and peers reach it. One dropped since is described without an address:
// readers use the other copy, and a primary has no replica to forward to until it is told one.
void DescribeWorker(const std::string& id, const WorkerRegistry& registry, const WorkerLinks& links,
                    proto::ReplicaTarget::Builder out) {
  out.setWorkerId(id);
  if (const WorkerRecord* worker = registry.Find(id)) out.setAddress(worker->address);
  out.setPublicKey(links.Key(id));
}

void EncodeAssignment(const ShuffleService::Shuffle& shuffle, const ShuffleRequestContext& context,
                      std::optional<uint32_t> commits_of_partition,
                      proto::ShuffleAssignment::Builder out) {
  out.setShuffleId(shuffle.shape.id);
  out.setMaps(shuffle.shape.maps);
  out.setPartitions(shuffle.shape.partitions);
  out.setLevel(ToProto(shuffle.shape.level));
  const ShufflePlacement& placement = shuffle.placement;
  auto workers = out.initWorkers(placement.workers.size());
  for (size_t i = 0; i < placement.workers.size(); ++i) {
    DescribeWorker(placement.workers[i], context.registry, context.links, workers[i]);
  }
  auto primaries = out.initPrimaries(placement.primaries.size());
  for (size_t i = 0; i < placement.primaries.size(); ++i) primaries.set(i, placement.primaries[i]);
  auto replicas = out.initReplicas(placement.replicas.size());
  for (size_t i = 0; i < placement.replicas.size(); ++i) replicas.set(i, placement.replicas[i]);
  EncodeSplits(placement.splits, out.initSplits(placement.splits.size()));
  out.setCommittedMaps(static_cast<uint32_t>(shuffle.commits.size()));
  if (!commits_of_partition) return;
  const std::vector<uint32_t> streams = placement.StreamsOf(*commits_of_partition);
  auto commits = out.initCommits(shuffle.commits.size());
  size_t i = 0;
  for (const auto& [map, commit] : shuffle.commits) {
    commits[i].setMap(map);
    commits[i].setAttempt(commit.attempt);
    // Per stream of the partition, and their sum.
    std::vector<const PiecesInPartition*> found;
    for (uint32_t stream : streams) {
      auto at = std::lower_bound(commit.pieces.begin(), commit.pieces.end(), stream,
                                 [](const PiecesInPartition& pieces, uint32_t wanted) {
                                   return pieces.partition < wanted;
                                 });
      if (at != commit.pieces.end() && at->partition == stream) found.push_back(&*at);
    }
    uint32_t pieces = 0;
    uint64_t bytes = 0;
    auto by_stream = commits[i].initStreams(found.size());
    for (size_t s = 0; s < found.size(); ++s) {
      by_stream[s].setPartition(found[s]->partition);
      by_stream[s].setPieces(found[s]->pieces);
      by_stream[s].setBytes(found[s]->bytes);
      pieces += found[s]->pieces;
      bytes += found[s]->bytes;
    }
    commits[i].setPieces(pieces);
    commits[i].setBytes(bytes);
    ++i;
  }
}

void EncodeList(const ShuffleService& shuffles, const ShuffleRequestContext& context, TimePoint now,
                proto::Reply::Builder reply) {
  std::vector<const ShuffleService::Shuffle*> shown;
  for (const auto& [id, shuffle] : shuffles.shuffles()) {
    if (!context.visible || context.visible("shuffle_" + std::to_string(id))) {
      shown.push_back(&shuffle);
    }
  }
  auto out = reply.initShuffles(shown.size());
  for (size_t i = 0; i < shown.size(); ++i) {
    const ShuffleService::Shuffle& shuffle = *shown[i];
    out[i].setShuffleId(shuffle.shape.id);
    out[i].setMaps(shuffle.shape.maps);
    out[i].setPartitions(shuffle.shape.partitions);
    out[i].setLevel(ToProto(shuffle.shape.level));
    out[i].setCommittedMaps(static_cast<uint32_t>(shuffle.commits.size()));
    out[i].setBytes(shuffle.committed_bytes);
    auto workers = out[i].initWorkers(shuffle.placement.workers.size());
    for (size_t w = 0; w < shuffle.placement.workers.size(); ++w) {
      workers.set(w, shuffle.placement.workers[w]);
    }
    out[i].setIdleMs(ToMillis(now - shuffle.touched));
  }
}

}  // namespace

void EncodeSplits(const std::vector<ShuffleSplitPlacement>& splits,
                  capnp::List<proto::ShuffleSplit>::Builder out) {
  for (size_t i = 0; i < splits.size(); ++i) {
    out[i].setStream(splits[i].stream);
    out[i].setPartition(splits[i].partition);
    out[i].setPrimary(splits[i].primary);
    out[i].setReplica(splits[i].replica);
  }
}

bool IsShuffleRequest(Which which) {
  switch (which) {
    case Which::REGISTER_SHUFFLE:
    case Which::GET_SHUFFLE:
    case Which::COMMIT_SHUFFLE_MAP:
    case Which::UNREGISTER_SHUFFLE:
    case Which::LIST_SHUFFLES:
    case Which::REPORT_SHUFFLE_LOSS:
    case Which::SPLIT_SHUFFLE:
      return true;
    default:
      return false;
  }
}

Status AnswerShuffleRequest(ShuffleService& shuffles, proto::Request::Reader request,
                            const ShuffleRequestContext& context, proto::Reply::Builder reply,
                            ShuffleEffects& effects) {
  switch (request.which()) {
    case Which::REGISTER_SHUFFLE: {
      BM_ASSIGN_OR_RETURN(ShuffleShape shape, DecodeShape(request.getRegisterShuffle()));
      BM_ASSIGN_OR_RETURN(
          const ShuffleService::Shuffle* shuffle,
          shuffles.Register(shape, context.tenant, ShuffleCandidates(context.registry), effects));
      EncodeAssignment(*shuffle, context, std::nullopt, reply.initShuffle());
      return Status::Ok();
    }
    case Which::GET_SHUFFLE: {
      proto::GetShuffle::Reader get = request.getGetShuffle();
      BM_ASSIGN_OR_RETURN(const ShuffleService::Shuffle* shuffle,
                          shuffles.Find(get.getShuffleId()));
      std::optional<uint32_t> partition;
      if (get.getWithCommits()) {
        if (get.getPartition() >= shuffle->shape.partitions) {
          return InvalidArgumentError("shuffle " + std::to_string(shuffle->shape.id) +
                                      " has no partition " + std::to_string(get.getPartition()));
        }
        partition = get.getPartition();
      }
      EncodeAssignment(*shuffle, context, partition, reply.initShuffle());
      return Status::Ok();
    }
    case Which::COMMIT_SHUFFLE_MAP: {
      BM_ASSIGN_OR_RETURN(JournaledMapCommit commit, DecodeCommit(request.getCommitShuffleMap()));
      BM_RETURN_IF_ERROR(shuffles.Commit(std::move(commit), effects));
      reply.setOk();
      return Status::Ok();
    }
    case Which::REPORT_SHUFFLE_LOSS: {
      proto::ReportShuffleLoss::Reader loss = request.getReportShuffleLoss();
      std::vector<uint32_t> maps;
      for (uint32_t map : loss.getMaps()) maps.push_back(map);
      BM_ASSIGN_OR_RETURN(
          std::vector<uint32_t> dropped,
          shuffles.ForgetLostMaps(loss.getShuffleId(), loss.getPartition(), maps, effects));
      if (!dropped.empty()) {
        spdlog::warn(
            "shuffle {} partition {} lost the output of {} maps: their commits are "
            "dropped so they run again",
            loss.getShuffleId(), loss.getPartition(), dropped.size());
      }
      reply.setOk();
      return Status::Ok();
    }
    case Which::SPLIT_SHUFFLE: {
      proto::SplitShuffle::Reader split = request.getSplitShuffle();
      const size_t before =
          shuffles.shuffles().count(split.getShuffleId()) != 0
              ? shuffles.shuffles().at(split.getShuffleId()).placement.splits.size()
              : 0;
      BM_ASSIGN_OR_RETURN(const ShuffleService::Shuffle* shuffle,
                          shuffles.Split(split.getShuffleId(), split.getStream(),
                                         ShuffleCandidates(context.registry), effects));
      if (shuffle->placement.splits.size() > before) {
        const ShuffleSplitPlacement& made = shuffle->placement.splits.back();
        spdlog::info("shuffle {} partition {} continues in stream {} on {}", shuffle->shape.id,
                     made.partition, made.stream, shuffle->placement.workers[made.primary]);
      }
      EncodeAssignment(*shuffle, context, std::nullopt, reply.initShuffle());
      return Status::Ok();
    }
    case Which::UNREGISTER_SHUFFLE:
      shuffles.Unregister(request.getUnregisterShuffle().getShuffleId(), effects);
      reply.setOk();
      return Status::Ok();
    case Which::LIST_SHUFFLES:
      EncodeList(shuffles, context, context.now, reply);
      return Status::Ok();
    default:
      return InvalidArgumentError("not a shuffle request");
  }
}

std::vector<ShuffleCandidate> ShuffleCandidates(const WorkerRegistry& registry) {
  std::vector<ShuffleCandidate> candidates;
  for (const WorkerRecord& worker : registry.List()) {
    if (worker.state != WorkerState::kActive) continue;
    const WorkerStats& stats = worker.stats;
    uint64_t free = stats.memory_capacity - std::min(stats.memory_used, stats.memory_capacity);
    if (!stats.disk_read_only) {
      free += stats.disk_capacity == 0
                  ? uint64_t{1} << 50
                  : stats.disk_capacity - std::min(stats.disk_used, stats.disk_capacity);
    }
    candidates.push_back({worker.id,
                          worker.labels.host.empty() ? worker.address : worker.labels.host,
                          worker.labels.rack, free});
  }
  return candidates;
}

Status SendShuffleCommand(WorkerLinks& links, const WorkerRegistry& registry,
                          const ShuffleCommand& command) {
  capnp::MallocMessageBuilder message;
  proto::Request::Builder request = message.initRoot<proto::Request>();
  switch (command.kind) {
    case ShuffleCommand::Kind::kAssign: {
      proto::ShuffleAssigned::Builder assigned = request.initShuffleAssigned();
      assigned.setShuffleId(command.shuffle_id);
      assigned.setMaps(command.maps);
      auto partitions = assigned.initPartitions(command.partitions.size());
      for (size_t i = 0; i < command.partitions.size(); ++i) {
        partitions.set(i, command.partitions[i]);
      }
      assigned.setOwner(command.owner);
      assigned.setLevel(ToProto(command.level));
      auto forwards = assigned.initForwards(command.forwards.size());
      for (size_t i = 0; i < command.forwards.size(); ++i) {
        const auto& [stream, replica] = command.forwards[i];
        forwards[i].setStream(stream);
        DescribeWorker(replica, registry, links, forwards[i].initReplica());
      }
      break;
    }
    case ShuffleCommand::Kind::kRemove:
      request.initRemoveShuffle().setShuffleId(command.shuffle_id);
      break;
  }
  return links.Send(command.worker_id, message);
}

}  // namespace bm
