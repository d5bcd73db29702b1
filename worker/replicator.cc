#include "worker/replicator.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <utility>

#include "transfer/block_copier.h"
#include "transfer/piece_source.h"
#include "transfer/worker_channels.h"
#include "worker/own_block_reader.h"

namespace bm {
namespace {

// How long a copy waits for each reply from a target.
constexpr std::chrono::milliseconds kCopyTimeout{5000};

// Copies block `id` from this worker's stores to `targets`, range by range (never holding it
// whole): each range's chunks, checked against their digests, go on to the targets as stored.
Result<uint32_t> CopyFromStore(OwnBlockReads& reads, BlockCopier& copier, const BlockId& id,
                               const std::vector<WorkerInfo>& targets, StorageLevel level) {
  OwnBlockReader reader(reads, id);
  BM_RETURN_IF_ERROR(reader.Start());  // the block's size and version
  PieceSource source([&reader] { return reader.NextChunk(); }, reader.total(), nullptr);
  return copier.CopyToWorkers(id, source, targets, level, reader.version());
}

}  // namespace

Replicator::Replicator(zmq::context_t& context, CurveKeys keys, OwnBlockReads& reads,
                       std::function<void()> notify)
    : keys_(std::move(keys)), reads_(reads), notify_(std::move(notify)) {
  thread_ = std::thread([this, &context] { Run(context); });
}

Replicator::~Replicator() {
  {
    MutexLock lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Replicator::Submit(Job job) {
  {
    MutexLock lock(mutex_);
    jobs_.push_back(std::move(job));
    ++outstanding_;
  }
  wake_.notify_all();
}

std::vector<Replicator::Finished> Replicator::TakeFinished() {
  MutexLock lock(mutex_);
  outstanding_ -= finished_.size();
  return std::exchange(finished_, {});
}

size_t Replicator::outstanding() const {
  MutexLock lock(mutex_);
  return outstanding_;
}

void Replicator::Run(zmq::context_t& context) {
  // The copies never talk to the master: the targets carry the keys it vouched for.
  WorkerChannels channels(context, keys_, kCopyTimeout);
  BlockCopier copier(channels);
  MutexLock lock(mutex_);
  while (true) {
    while (!stop_ && jobs_.empty()) lock.Wait(wake_);
    if (stop_) return;
    Job job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.Unlock();
    Result<uint32_t> copies = CopyFromStore(reads_, copier, job.block, job.targets, job.level);
    if (copies.ok()) {
      spdlog::info("copied {} to {} of {} workers", job.block.ToString(), *copies,
                   job.targets.size());
    } else {
      spdlog::warn("could not copy {}: {}", job.block.ToString(), copies.status().ToString());
    }
    lock.Lock();
    finished_.push_back(Finished{job.ticket, std::move(copies)});
    lock.Unlock();
    notify_();
    lock.Lock();
  }
}

}  // namespace bm
