#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "blockmgr/storage_level.h"
#include "blockmgr/tier.h"
#include "blockmgr/types.h"

namespace bm {

// Chooses where a new block of `size` bytes at `level` should go, as an ordered list of
// candidates: the client tries the first and moves on to the next when a worker is unavailable
// or turns out to be full (the stats the master reports lag behind the workers a little).
//
//   1. Levels using memory: the workers whose free memory (capacity - used) holds the block,
//      most free memory first.
//   2. Then, for levels using disk (and for DISK_ONLY, only these): the remaining workers with
//      room on disk (disk capacity 0 = unlimited), least disk used first.
//   3. MEMORY_ONLY blocks never go to disk: the remaining workers whose whole memory could hold
//      the block (they would evict least recently used blocks to make room), most free memory
//      first.
//
// Workers that cannot hold the block at all are left out, so the list may be empty, and so are
// unconfirmed workers (see AwaitsUnconfirmedWorkers): their room is not known. Ties are
// broken round-robin: among equal workers the one at position `round_robin % n` of `workers`
// (and those after it, wrapping around) comes first, so a caller incrementing `round_robin`
// for every put spreads consecutive puts over identical workers. Pure; `workers` is usually
// the master's list, sorted by id.
//
// With `is_local` (workers on the caller's own host), those come first within each of the
// groups above: a local worker with room in free memory takes a memory block before any other
// worker, but one that could only take it on disk or by evicting does not go ahead of a worker
// with free memory. So a computation's blocks land where it runs while its host has room, as
// Spark's executors cache into their own BlockManager, and go elsewhere once it is full.
std::vector<WorkerInfo> ChooseWorkers(const std::vector<WorkerInfo>& workers, uint64_t size,
                                      StorageLevel level, uint64_t round_robin,
                                      const std::function<bool(const WorkerInfo&)>& is_local = {});

// Whether a put of `copies` copies should wait for the unconfirmed workers in `workers` before
// it places. A master that has just taken over (or restarted) lists the workers it knows from
// its journal as WorkerState::kUnconfirmed, with no stats, until each registers with it again
// a moment later: their room is unknown, not none. So while fewer than `copies` confirmed
// workers could take the block and some are unconfirmed, the put asks again for the list
// (as Kafka's producer refreshes its metadata with a backoff after the controller moves)
// instead of storing fewer copies, or failing "out of space" for want of workers that have
// room. Pure.
bool AwaitsUnconfirmedWorkers(const std::vector<WorkerInfo>& workers, uint64_t size,
                              StorageLevel level, uint32_t copies);

}  // namespace bm

namespace bm {

// Where a computation over a block should run, as Spark's getPreferredLocations: the host of
// each copy's worker address (HostOfAddress in client/local_hosts.h, e.g. "10.0.0.5"), memory
// copies first, each host once. Empty when `copies` is. Pure.
std::vector<std::string> PreferredHostsOf(const std::vector<BlockLocation>& copies);

// The master's list of live workers as puts last fetched it, kept for `ttl` so that puts in a
// row place without asking the master each time (ClientOptions::worker_list_ttl). The copies
// this client stores are counted into it, so the next placements see them.
// Not thread-safe: owned by one Client.
class KeptWorkerList {
 public:
  using Clock = std::chrono::steady_clock;

  explicit KeptWorkerList(std::chrono::milliseconds ttl) : ttl_(ttl) {}

  // The list, when one was kept less than `ttl` before `now`; else null.
  const std::vector<WorkerInfo>* Find(Clock::time_point now) const;
  void Keep(std::vector<WorkerInfo> workers, Clock::time_point now);
  // Forgets the list (it was wrong about a worker): the next put asks the master.
  void Clear() { workers_.clear(); }
  // Counts a stored copy into the list.
  void CountPlacedCopy(const std::string& worker_id, Tier tier, uint64_t size);

 private:
  const std::chrono::milliseconds ttl_;
  std::vector<WorkerInfo> workers_;  // empty: none kept
  Clock::time_point kept_at_{};
};

}  // namespace bm
