#include "worker/small_block_arenas.h"

#include <spdlog/spdlog.h>

namespace bm {

const BlockArenaWriter* SmallBlockArenas::For(const std::string& scope) {
  if (!enabled()) return nullptr;
  if (auto found = by_scope_.find(scope); found != by_scope_.end()) return found->second.get();
  if (by_scope_.size() >= options_.max_arenas) {
    if (!warned_full_) {
      spdlog::warn(
          "same-host reads: {} small-block arenas made, the most allowed; readers of "
          "further tenants ask for every block",
          by_scope_.size());
      warned_full_ = true;
    }
    return nullptr;
  }
  Result<std::unique_ptr<BlockArenaWriter>> made =
      BlockArenaWriter::Create("blockmgr-arena", options_.bytes, options_.max_block_bytes);
  if (!made.ok()) {
    spdlog::warn("same-host reads: no small-block arena: {}", made.status().ToString());
    return nullptr;
  }
  return by_scope_.emplace(scope, std::move(made).value()).first->second.get();
}

void SmallBlockArenas::Offer(const std::string& scope, const BlockId& id, const BlockRead& read) {
  // The whole block in memory, with the digest readers check their copies against.
  if (read.tier != Tier::kMemory || read.offset != 0 || read.unit_digests.size() != 1 ||
      read.total_size > options_.max_block_bytes || read.total_size == 0) {
    return;
  }
  const auto arena = by_scope_.find(scope);
  if (arena == by_scope_.end()) return;
  arena->second->Put(id,
                     {.version = read.version,
                      .generation = read.generation,
                      .tier = read.tier,
                      .level = read.level,
                      .digest = read.unit_digests[0]},
                     read.chunks, read.total_size);
}

bool SmallBlockArenas::Holds(const std::string& scope, const BlockId& id) const {
  const auto arena = by_scope_.find(scope);
  return arena != by_scope_.end() && arena->second->Contains(id);
}

void SmallBlockArenas::Forget(const BlockId& id) {
  for (auto& [scope, arena] : by_scope_) arena->Erase(id);
}

void SmallBlockArenas::KeepAlive() {
  constexpr auto kEvery = std::chrono::milliseconds(250);
  constexpr auto kFor = std::chrono::seconds(3);
  if (by_scope_.empty()) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_kept_alive_ < kEvery) return;
  last_kept_alive_ = now;
  for (auto& [scope, arena] : by_scope_) arena->KeepAlive(now + kFor);
}

size_t SmallBlockArenas::blocks() const {
  size_t count = 0;
  for (const auto& [scope, arena] : by_scope_) count += arena->blocks();
  return count;
}

}  // namespace bm
