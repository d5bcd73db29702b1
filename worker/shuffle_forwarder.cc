#include "worker/shuffle_forwarder.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "common/core/protocol.h"
#include "common/net/transport.h"
#include "transfer/worker_channels.h"
#include "worker/job_thread.h"

namespace bm {

namespace {

// The forward's bytes as frames: its chunks, or (past the frames a message may carry) one
// chunk they are gathered into.
std::vector<zmq::message_t> FramesOf(const std::vector<ChunkPtr>& payload) {
  std::vector<zmq::message_t> frames;
  if (payload.size() <= kMaxPayloadFrames) {
    for (const ChunkPtr& chunk : payload) frames.push_back(MessageFromChunk(chunk));
    return frames;
  }
  size_t total = 0;
  for (const ChunkPtr& chunk : payload) total += chunk->size();
  std::vector<std::byte> gathered(total);
  size_t at = 0;
  for (const ChunkPtr& chunk : payload) {
    std::memcpy(gathered.data() + at, chunk->bytes().data(), chunk->size());
    at += chunk->size();
  }
  for (size_t offset = 0; offset < total; offset += kMaxPayloadFrameBytes) {
    frames.push_back(
        zmq::message_t(gathered.data() + offset, std::min(kMaxPayloadFrameBytes, total - offset)));
  }
  return frames;
}

// Sends one forward; its answer is awaited by id.
Result<uint64_t> Send(WorkerChannels& channels, const ShuffleReplica& replica,
                      const ShuffleForward& forward) {
  channels.Trust(replica.address, replica.public_key);
  BM_ASSIGN_OR_RETURN(RpcChannel * channel, channels.Channel(replica.address));
  capnp::MallocMessageBuilder message;
  proto::PushShuffle::Builder push = message.initRoot<proto::Request>().initPushShuffle();
  push.setShuffleId(forward.shuffle_id);
  push.setMap(forward.map);
  push.setAttempt(forward.attempt);
  push.setForwarded(true);
  auto pieces = push.initPieces(static_cast<unsigned>(forward.pieces.size()));
  for (size_t i = 0; i < forward.pieces.size(); ++i) {
    const ShuffleForward::Piece& piece = forward.pieces[i];
    pieces[i].setPartition(piece.stream);
    pieces[i].setSequence(piece.sequence);
    pieces[i].setFirstSequence(piece.first_sequence);
    pieces[i].setLength(piece.length);
    pieces[i].setDigest(piece.digest);
  }
  return channel->Send(message, FramesOf(forward.payload));
}

}  // namespace

// One replica's forwards, sent in order by a thread of their own. The channels are used only by
// the lane's jobs, which run one at a time on its thread.
struct ShuffleForwarder::Lane {
  Lane(zmq::context_t& context, const CurveKeys& keys, std::chrono::milliseconds timeout,
       int notify_fd)
      : channels(context, keys, timeout), thread(std::make_unique<JobThread>(notify_fd)) {}

  WorkerChannels channels;
  std::unique_ptr<JobThread> thread;  // last: joined before the channels go
};

ShuffleForwarder::ShuffleForwarder(zmq::context_t& context, CurveKeys keys,
                                   std::chrono::milliseconds timeout)
    : context_(context),
      keys_(std::move(keys)),
      timeout_(timeout),
      wake_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
      stopping_(std::make_shared<std::atomic<bool>>(false)) {
  BM_CHECK(wake_fd_ >= 0);
}

ShuffleForwarder::~ShuffleForwarder() {
  stopping_->store(true);
  lanes_.clear();  // each joins its thread, which skips what is queued
  close(wake_fd_);
}

void ShuffleForwarder::Submit(const ShuffleReplica& replica, ShuffleForward forward, Done done) {
  queued_[replica.address].push_back({replica, std::move(forward), std::move(done)});
}

void ShuffleForwarder::SendQueued() {
  for (auto& [address, queued] : queued_) {
    if (queued.empty()) continue;
    std::unique_ptr<Lane>& lane = lanes_[address];
    if (lane == nullptr) lane = std::make_unique<Lane>(context_, keys_, timeout_, wake_fd_);
    auto batch = std::make_shared<std::vector<Queued>>(std::move(queued));
    queued.clear();
    lane->thread->Submit([channels = &lane->channels, batch,
                          stopping = stopping_]() mutable -> JobThread::Completion {
      if (stopping->load()) return nullptr;
      // All sent, then all awaited: the replica takes one while the next travels.
      std::vector<Result<uint64_t>> sent;
      sent.reserve(batch->size());
      for (const Queued& one : *batch) sent.push_back(Send(*channels, one.replica, one.forward));
      std::vector<Status> held;
      held.reserve(batch->size());
      for (size_t i = 0; i < batch->size(); ++i) {
        if (!sent[i].ok()) {
          held.push_back(sent[i].status());
          continue;
        }
        Result<RpcChannel*> channel = channels->Channel((*batch)[i].replica.address);
        held.push_back(channel.ok() ? (*channel)->Await(*sent[i]).status() : channel.status());
      }
      std::vector<Done> dones;
      dones.reserve(batch->size());
      for (Queued& one : *batch) dones.push_back(std::move(one.done));
      batch.reset();  // the pushes' frames are released here, off the loop
      return [dones = std::move(dones), held = std::move(held)] {
        for (size_t i = 0; i < dones.size(); ++i) dones[i](held[i]);
      };
    });
  }
}

size_t ShuffleForwarder::RunCompletions() {
  uint64_t count;
  ssize_t got = read(wake_fd_, &count, sizeof(count));
  (void)got;  // EAGAIN: nothing signalled; the lanes are asked anyway
  size_t ran = 0;
  for (auto& [address, lane] : lanes_) ran += lane->thread->RunCompletions();
  return ran;
}

}  // namespace bm
