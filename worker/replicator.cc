#include "worker/replicator.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <utility>

#include "client/block_copier.h"
#include "client/piece_source.h"
#include "client/range_reader.h"
#include "client/worker_channels.h"

namespace bm {

namespace {

// How long a copy waits for each reply, from this worker or a target.
constexpr std::chrono::milliseconds kCopyTimeout{5000};

// Copies block `id` from the worker at `source_address` (this one) to `targets`, range by range
// (never holding it whole): each range's frames, checked against their digests, go on to the
// targets as they are.
Result<uint32_t> CopyFromWorker(WorkerChannels& channels, BlockCopier& copier, const BlockId& id,
                                const std::string& source_address,
                                const std::vector<WorkerInfo>& targets, StorageLevel level) {
  BM_ASSIGN_OR_RETURN(RpcChannel * channel, channels.Channel(source_address));
  RangeReader reader(*channel, "worker at " + source_address, id);
  BM_RETURN_IF_ERROR(reader.NextRange());  // the block's size and version
  std::vector<ChunkPtr> chunks = reader.TakeReadyChunks();
  size_t next = 0;
  PieceSource::NextChunk next_chunk = [&]() -> Result<ChunkPtr> {
    while (next == chunks.size()) {
      if (reader.done()) return ChunkPtr();
      BM_RETURN_IF_ERROR(reader.NextRange());
      chunks = reader.TakeReadyChunks();
      next = 0;
    }
    return std::move(chunks[next++]);
  };
  PieceSource source(std::move(next_chunk), reader.total(), nullptr);
  return copier.CopyToWorkers(id, source, targets, level, reader.version());
}

}  // namespace

Replicator::Replicator(zmq::context_t& context, std::string own_address, CurveKeys keys,
                       std::function<void()> notify)
    : own_address_(std::move(own_address)), keys_(std::move(keys)), notify_(std::move(notify)) {
  thread_ = std::thread([this, &context] { Run(context); });
}

Replicator::~Replicator() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Replicator::Submit(Job job) {
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back(std::move(job));
    ++outstanding_;
  }
  wake_.notify_all();
}

std::vector<Replicator::Finished> Replicator::TakeFinished() {
  std::lock_guard lock(mutex_);
  outstanding_ -= finished_.size();
  return std::exchange(finished_, {});
}

size_t Replicator::outstanding() const {
  std::lock_guard lock(mutex_);
  return outstanding_;
}

void Replicator::Run(zmq::context_t& context) {
  // The copies never talk to the master: the targets carry the keys it vouched for.
  WorkerChannels channels(context, keys_, kCopyTimeout);
  channels.Trust(own_address_, keys_.public_key);
  BlockCopier copier(channels);
  std::unique_lock lock(mutex_);
  while (true) {
    wake_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
    if (stop_) return;
    Job job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    Result<uint32_t> copies =
        CopyFromWorker(channels, copier, job.block, own_address_, job.targets, job.level);
    if (copies.ok()) {
      spdlog::info("copied {} to {} of {} workers", job.block.ToString(), *copies,
                   job.targets.size());
    } else {
      spdlog::warn("could not copy {}: {}", job.block.ToString(), copies.status().ToString());
    }
    lock.lock();
    finished_.push_back(Finished{job.ticket, std::move(copies)});
    lock.unlock();
    notify_();
    lock.lock();
  }
}

}  // namespace bm
