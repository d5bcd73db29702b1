#include "client/mapped_blocks.h"

#include <utility>

namespace bm {
namespace {

// A caller's view of a mapped block: its chunk, whose end is the end of one use.
class MappedBlockView final : public Chunk {
 public:
  MappedBlockView(std::shared_ptr<MappedBlocks> owner, std::shared_ptr<MappedBlock> block,
                  std::function<void(const std::shared_ptr<MappedBlock>&)> release)
      : owner_(std::move(owner)), block_(std::move(block)), release_(std::move(release)) {}
  ~MappedBlockView() override { release_(block_); }
  MappedBlockView(const MappedBlockView&) = delete;
  MappedBlockView& operator=(const MappedBlockView&) = delete;

  std::span<const std::byte> bytes() const override { return block_->region->bytes(); }

 private:
  const std::shared_ptr<MappedBlocks> owner_;  // outlives the release below
  const std::shared_ptr<MappedBlock> block_;
  const std::function<void(const std::shared_ptr<MappedBlock>&)> release_;
};

}  // namespace

MappedBlocks::~MappedBlocks() = default;

std::shared_ptr<MappedBlock> MappedBlocks::Reserve(const BlockId& id) {
  MutexLock lock(mutex_);
  auto found = by_id_.find(id);
  if (found == by_id_.end()) return nullptr;
  MappedBlock& block = *found->second;
  if (block.users++ == 0) Unidle(block);
  return found->second;
}

void MappedBlocks::Unreserve(const std::shared_ptr<MappedBlock>& block) { Release(block); }

ChunkPtr MappedBlocks::View(std::shared_ptr<MappedBlock> block) {
  // The view calls back through its own reference to this owner, so a view may outlive the
  // connection and its Client.
  return std::make_shared<MappedBlockView>(
      shared_from_this(), std::move(block),
      [this](const std::shared_ptr<MappedBlock>& used) { Release(used); });
}

void MappedBlocks::Add(const std::shared_ptr<MappedBlock>& block) {
  std::shared_ptr<MappedBlock> replaced;  // declared first: unmapped after the lock is let go
  MutexLock lock(mutex_);
  block->users = 1;
  block->current = !closed_;
  if (closed_) return;
  auto [at, inserted] = by_id_.try_emplace(block->id, block);
  if (inserted) return;
  MappedBlock& old = *at->second;
  old.current = false;
  if (old.users == 0) {
    Unidle(old);
    replaced = std::move(at->second);
  }
  at->second = block;
}

void MappedBlocks::Forget(const std::shared_ptr<MappedBlock>& block) {
  MutexLock lock(mutex_);
  if (!block->current) return;
  block->current = false;
  Unidle(*block);
  auto found = by_id_.find(block->id);
  if (found != by_id_.end() && found->second == block) by_id_.erase(found);
}

void MappedBlocks::ForgetBlocks(const std::function<bool(const BlockId&)>& removed) {
  std::vector<std::shared_ptr<MappedBlock>> dropped;  // unmapped outside the lock
  MutexLock lock(mutex_);
  for (auto it = by_id_.begin(); it != by_id_.end();) {
    it = removed(it->first) ? Drop(it, dropped) : std::next(it);
  }
}

void MappedBlocks::ForgetBlock(const BlockId& id) {
  std::vector<std::shared_ptr<MappedBlock>> dropped;  // unmapped outside the lock
  MutexLock lock(mutex_);
  if (auto found = by_id_.find(id); found != by_id_.end()) Drop(found, dropped);
}

void MappedBlocks::Release(const std::shared_ptr<MappedBlock>& block) {
  std::vector<std::shared_ptr<MappedBlock>> dropped;  // unmapped outside the lock
  std::optional<Clock::time_point> expires;
  {
    MutexLock lock(mutex_);
    if (--block->users > 0) return;
    if (!block->current || limits_.bytes == 0 || closed_) {
      if (block->current) {
        block->current = false;
        auto found = by_id_.find(block->id);
        if (found != by_id_.end() && found->second == block) Drop(found, dropped);
      }
    } else {
      block->idle_since = Clock::now();
      block->idle = true;
      block->idle_at = idle_.insert(idle_.end(), block.get());
      idle_bytes_ += block->region->size();
      expires = block->idle_since + limits_.lifetime;
      // Over the bound: the mappings idle longest go first.
      while (idle_bytes_ > limits_.bytes && !idle_.empty()) DropOldestIdle(dropped);
    }
  }
  dropped.clear();
  if (expires) {
    if (std::shared_ptr<IdleMappingReaper> reaper = reaper_.lock()) reaper->WakeBy(*expires);
  }
}

void MappedBlocks::Unidle(MappedBlock& block) {
  if (!block.idle) return;
  idle_bytes_ -= block.region->size();
  idle_.erase(block.idle_at);
  block.idle = false;
}

MappedBlocks::ById::iterator MappedBlocks::Drop(
    ById::iterator at, std::vector<std::shared_ptr<MappedBlock>>& dropped) {
  at->second->current = false;
  Unidle(*at->second);
  dropped.push_back(std::move(at->second));
  return by_id_.erase(at);
}

void MappedBlocks::DropOldestIdle(std::vector<std::shared_ptr<MappedBlock>>& dropped) {
  Drop(by_id_.find(idle_.front()->id), dropped);
}

std::optional<MappedBlocks::Clock::time_point> MappedBlocks::DropExpired(Clock::time_point now) {
  std::vector<std::shared_ptr<MappedBlock>> dropped;  // unmapped outside the lock
  std::optional<Clock::time_point> next;
  {
    MutexLock lock(mutex_);
    while (!idle_.empty()) {
      MappedBlock& oldest = *idle_.front();
      if (oldest.idle_since + limits_.lifetime > now) {
        next = oldest.idle_since + limits_.lifetime;
        break;
      }
      DropOldestIdle(dropped);
    }
  }
  return next;
}

void MappedBlocks::Close() {
  std::vector<std::shared_ptr<MappedBlock>> dropped;  // declared first: unmapped after the lock
  MutexLock lock(mutex_);
  closed_ = true;
  while (!idle_.empty()) DropOldestIdle(dropped);
  // Mappings in use are dropped when their last caller lets go.
  for (auto& [id, block] : by_id_) block->current = false;
  by_id_.clear();
}

uint64_t MappedBlocks::idle_bytes() const {
  MutexLock lock(mutex_);
  return idle_bytes_;
}

size_t MappedBlocks::idle_count() const {
  MutexLock lock(mutex_);
  return idle_.size();
}

IdleMappingReaper::IdleMappingReaper() : thread_([this] { Run(); }) {}

IdleMappingReaper::~IdleMappingReaper() {
  {
    MutexLock lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void IdleMappingReaper::Watch(std::weak_ptr<MappedBlocks> blocks) {
  MutexLock lock(mutex_);
  std::erase_if(watched_, [](const std::weak_ptr<MappedBlocks>& w) { return w.expired(); });
  watched_.push_back(std::move(blocks));
}

void IdleMappingReaper::WakeBy(MappedBlocks::Clock::time_point at) {
  {
    MutexLock lock(mutex_);
    if (next_ && *next_ <= at) return;
    next_ = at;
  }
  wake_.notify_all();
}

void IdleMappingReaper::Run() {
  MutexLock lock(mutex_);
  while (!stopping_) {
    if (!next_) {
      lock.Wait(wake_);
      continue;
    }
    if (MappedBlocks::Clock::now() < *next_) {
      lock.WaitUntil(wake_, *next_);
      continue;
    }
    next_.reset();
    std::vector<std::weak_ptr<MappedBlocks>> watched = watched_;
    lock.Unlock();
    std::optional<MappedBlocks::Clock::time_point> next;
    const auto now = MappedBlocks::Clock::now();
    for (const std::weak_ptr<MappedBlocks>& weak : watched) {
      if (std::shared_ptr<MappedBlocks> blocks = weak.lock()) {
        if (auto at = blocks->DropExpired(now); at && (!next || *at < *next)) next = at;
      }
    }
    lock.Lock();
    if (next && (!next_ || *next < *next_)) next_ = next;
  }
}

}  // namespace bm
