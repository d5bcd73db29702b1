#include "worker/shuffle_forwarder.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "client/worker_channels.h"
#include "common/protocol.h"
#include "common/transport.h"
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

Status Send(WorkerChannels& channels, const ShuffleReplica& replica,
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
  return channel->Call(message, FramesOf(forward.payload)).status();
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
  std::unique_ptr<Lane>& lane = lanes_[replica.address];
  if (lane == nullptr) lane = std::make_unique<Lane>(context_, keys_, timeout_, wake_fd_);
  auto shared = std::make_shared<ShuffleForward>(std::move(forward));
  lane->thread->Submit([channels = &lane->channels, replica, shared, stopping = stopping_,
                        done = std::move(done)]() mutable -> JobThread::Completion {
    if (stopping->load()) return nullptr;
    Status held = Send(*channels, replica, *shared);
    shared.reset();  // the push's frames are released here, off the loop
    return [done = std::move(done), held = std::move(held)] { done(held); };
  });
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
