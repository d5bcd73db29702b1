#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string_view>
#include <tuple>
#include <vector>

#include "blockmgr/block_id.h"
#include "blockmgr/status.h"

namespace bm {

// What the memory tier loses when it lets a block go, as the policy weighs it.
struct EvictionCost {
  uint64_t size = 0;
  // The wall time the block took to compute, as its put stated it (get-or-compute measures
  // it); nullopt when the put stated none.
  std::optional<double> compute_seconds{};
  // Eviction spills it to disk (MEMORY_AND_DISK) instead of dropping it: losing the memory
  // copy costs a disk read back, not a recomputation.
  bool spilled_on_eviction = false;
};

// Which memory blocks go first when room is needed. The memory store tells its policy about
// every block it holds (Add), every read of one (Touch) and every block that leaves (Remove,
// Evicted); the policy orders them and the store walks that order (VisitInEvictionOrder),
// skipping blocks it may not evict now (pinned, of the RDD being inserted).
//
// Add, Touch, Remove and Evicted are O(log n) or better, the walk O(1) per block visited; a
// handle is the policy's slot for one block, valid from Add until Remove or Evicted.
// Not thread-safe: owned by the memory store (the worker's loop).
class EvictionPolicy {
 public:
  using Handle = uint32_t;

  virtual ~EvictionPolicy() = default;

  virtual Handle Add(const BlockId& id, const EvictionCost& cost) = 0;
  // A read of the block.
  virtual void Touch(Handle handle) = 0;
  // The block left for another reason than eviction (removed, replaced).
  virtual void Remove(Handle handle) = 0;
  // The block was evicted to make room (GDSF ages its clock by it).
  virtual void Evicted(Handle handle) = 0;
  // Calls `visit` with each block, first to evict first, until it returns false.
  virtual void VisitInEvictionOrder(const std::function<bool(const BlockId&)>& visit) const = 0;
  virtual std::string_view name() const = 0;
};

enum class EvictionMode { kLru, kCost };

// "lru" or "cost"; kInvalidArgument otherwise.
Result<EvictionMode> ParseEvictionMode(std::string_view text);

// Least recently used first (reads and inserts make a block most recent). O(1) per call.
class LruEvictionPolicy final : public EvictionPolicy {
 public:
  Handle Add(const BlockId& id, const EvictionCost& cost) override;
  void Touch(Handle handle) override;
  void Remove(Handle handle) override;
  void Evicted(Handle handle) override { Remove(handle); }
  void VisitInEvictionOrder(const std::function<bool(const BlockId&)>& visit) const override;
  std::string_view name() const override { return "lru"; }

 private:
  static constexpr Handle kNone = UINT32_MAX;
  // A doubly linked list threaded through the slots: head_ = least recently used.
  struct Node {
    BlockId id = BlockId::Broadcast(0);
    Handle prev = kNone;
    Handle next = kNone;
  };
  void Unlink(Handle handle);
  void PushBack(Handle handle);

  std::vector<Node> nodes_;
  std::vector<Handle> free_;
  Handle head_ = kNone;
  Handle tail_ = kNone;
};

// Tuning of GreedyDual-Size-Frequency; the defaults are what bm-worker uses.
struct GdsfOptions {
  // Reading a spilled block back: latency plus size / rate (a local SSD's figures, rounded
  // down, so a spill is never thought cheaper than it is by much).
  double disk_read_seconds = 0.001;
  double disk_read_bytes_per_second = 500e6;
  // The compute cost of blocks whose put stated none while no held block stated one either.
  double cost_when_none_stated = 1.0;
};

// GreedyDual-Size-Frequency (Cherkasova 1998): each block has a priority
//   H = L + frequency * cost / size
// and the lowest H goes first; L, the clock, becomes the H of each evicted block, so a block
// not read for a long time falls behind the ones inserted or read since (aging), however
// expensive it was. frequency counts the block's reads since it was inserted (1 at insert;
// each read request is one, so a block read in several ranges counts once per range).
// cost is what losing the memory copy costs, in seconds:
//   - a block spilled on eviction: reading it back from disk (disk_read_seconds + size / rate),
//     or its compute cost if that is lower;
//   - any other block: its stated compute cost, or, when its put stated none, the median of the
//     stated costs of the blocks held when it was stored (cost_when_none_stated when none
//     stated one): a block of unknown cost is weighed as a typical one.
// Ties go least recently used first. O(log n) per call (an ordered set keyed by priority).
class GdsfEvictionPolicy final : public EvictionPolicy {
 public:
  explicit GdsfEvictionPolicy(GdsfOptions options = {}) : options_(options) {}

  Handle Add(const BlockId& id, const EvictionCost& cost) override;
  void Touch(Handle handle) override;
  void Remove(Handle handle) override;
  void Evicted(Handle handle) override;
  void VisitInEvictionOrder(const std::function<bool(const BlockId&)>& visit) const override;
  std::string_view name() const override { return "cost"; }

  // For tests: the clock L and a block's priority H.
  double clock() const { return clock_; }
  double priority(Handle handle) const { return nodes_[handle].priority; }

 private:
  // (priority, last use, slot): the order of eviction.
  using Key = std::tuple<double, uint64_t, Handle>;
  struct Node {
    BlockId id = BlockId::Broadcast(0);
    bool live = false;
    uint64_t size = 1;
    double cost = 0;                 // seconds, as weighed (see the class comment)
    std::optional<double> stated{};  // counted in the median while held
    uint64_t frequency = 0;
    double priority = 0;
    uint64_t last_use = 0;
  };
  // The median of the stated compute costs of the blocks held (two halves: lower's largest and
  // upper's smallest meet in the middle).
  class RunningMedian {
   public:
    void Insert(double value);
    void Erase(double value);
    std::optional<double> Median() const;

   private:
    void Balance();
    std::multiset<double> lower_;
    std::multiset<double> upper_;
  };

  double LossCost(const EvictionCost& cost) const;
  void Forget(Handle handle);

  const GdsfOptions options_;
  std::vector<Node> nodes_;
  std::vector<Handle> free_;
  std::set<Key> order_;
  RunningMedian stated_costs_;
  double clock_ = 0;
  uint64_t uses_ = 0;
};

std::unique_ptr<EvictionPolicy> MakeEvictionPolicy(EvictionMode mode, GdsfOptions options = {});

}  // namespace bm
