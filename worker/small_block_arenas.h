#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "blockmgr/block_id.h"
#include "common/net/block_arena.h"
#include "worker/block_read.h"

namespace bm {

struct SmallBlockArenaOptions {
  // Ring bytes of each arena; 0: no arenas (every same-host get asks the worker).
  uint64_t bytes = 64ull << 20;
  // Blocks up to this size are copied in: the size up to which a get's bytes travel inline,
  // where a round trip costs more than the copy.
  uint64_t max_block_bytes = 64 << 10;
  // Arenas at most (one per reader scope); a scope past them reads through the socket.
  size_t max_arenas = 16;
};

// The worker's small-block arenas (common/net/block_arena.h), one per reader scope: every
// reader whose key is restricted to a tenant shares that tenant's arena, and every reader that
// may read any block (keys off, or a key of no tenant restriction) shares one arena. Only
// blocks a scope may read go into its arena, so a reader, which sees all of its arena, sees
// nothing it could not get.
//
// Blocks are copied in as readers get them (Offer) and taken out of every arena as soon as
// they change (Forget, from BlockManager's block_changed listener). Each arena's memory lies
// outside the block budget: `bytes` per scope that has readers, touched as blocks are copied
// in. Not thread-safe: the worker's loop's.
class SmallBlockArenas {
 public:
  explicit SmallBlockArenas(SmallBlockArenaOptions options) : options_(options) {}

  bool enabled() const { return options_.bytes > 0; }
  // The arena of `scope`, made on first use; null when arenas are off or at their limit, or
  // one cannot be made (logged).
  const BlockArenaWriter* For(const std::string& scope);
  // A whole block a reader of `scope` just got: copied into the scope's arena when it is a
  // memory block of at most max_block_bytes with one unit digest.
  void Offer(const std::string& scope, const BlockId& id, const BlockRead& read);
  // Whether the arena of `scope` holds `id`.
  bool Holds(const std::string& scope, const BlockId& id) const;
  // `id` changed: out of every arena.
  void Forget(const BlockId& id);
  // Called on every pass of the loop: tells readers, every quarter second, that the arenas
  // may be read for 3 s more (BlockArenaWriter::KeepAlive). A loop that stops (a worker
  // stopped, stuck or dead) stops them reading within 3 s.
  void KeepAlive();

  size_t arenas() const { return by_scope_.size(); }
  // Blocks held across the arenas.
  size_t blocks() const;

 private:
  const SmallBlockArenaOptions options_;
  std::map<std::string, std::unique_ptr<BlockArenaWriter>> by_scope_;
  bool warned_full_ = false;
  std::chrono::steady_clock::time_point last_kept_alive_{};
};

}  // namespace bm
