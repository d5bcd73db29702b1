#include "worker/eviction_policy.h"

#include <algorithm>
#include <string>

namespace bm {

Result<EvictionMode> ParseEvictionMode(std::string_view text) {
  if (text == "lru") return EvictionMode::kLru;
  if (text == "cost") return EvictionMode::kCost;
  return InvalidArgumentError("unknown eviction policy '" + std::string(text) +
                              "': expected lru or cost");
}

std::unique_ptr<EvictionPolicy> MakeEvictionPolicy(EvictionMode mode, GdsfOptions options) {
  if (mode == EvictionMode::kCost) return std::make_unique<GdsfEvictionPolicy>(options);
  return std::make_unique<LruEvictionPolicy>();
}

// ---- LRU

EvictionPolicy::Handle LruEvictionPolicy::Add(const BlockId& id, const EvictionCost&) {
  Handle handle;
  if (!free_.empty()) {
    handle = free_.back();
    free_.pop_back();
    nodes_[handle] = Node{id};
  } else {
    handle = static_cast<Handle>(nodes_.size());
    nodes_.push_back(Node{id});
  }
  PushBack(handle);
  return handle;
}

void LruEvictionPolicy::Touch(Handle handle) {
  if (tail_ == handle) return;
  Unlink(handle);
  PushBack(handle);
}

void LruEvictionPolicy::Remove(Handle handle) {
  Unlink(handle);
  free_.push_back(handle);
}

void LruEvictionPolicy::VisitInEvictionOrder(
    const std::function<bool(const BlockId&)>& visit) const {
  for (Handle at = head_; at != kNone; at = nodes_[at].next) {
    if (!visit(nodes_[at].id)) return;
  }
}

void LruEvictionPolicy::Unlink(Handle handle) {
  Node& node = nodes_[handle];
  (node.prev == kNone ? head_ : nodes_[node.prev].next) = node.next;
  (node.next == kNone ? tail_ : nodes_[node.next].prev) = node.prev;
  node.prev = node.next = kNone;
}

void LruEvictionPolicy::PushBack(Handle handle) {
  Node& node = nodes_[handle];
  node.prev = tail_;
  node.next = kNone;
  (tail_ == kNone ? head_ : nodes_[tail_].next) = handle;
  tail_ = handle;
}

// ---- GDSF

void GdsfEvictionPolicy::RunningMedian::Insert(double value) {
  if (lower_.empty() || value <= *lower_.rbegin()) {
    lower_.insert(value);
  } else {
    upper_.insert(value);
  }
  Balance();
}

void GdsfEvictionPolicy::RunningMedian::Erase(double value) {
  if (auto in_lower = lower_.find(value); in_lower != lower_.end()) {
    lower_.erase(in_lower);
  } else if (auto in_upper = upper_.find(value); in_upper != upper_.end()) {
    upper_.erase(in_upper);
  }
  Balance();
}

// lower_ holds as many values as upper_, or one more.
void GdsfEvictionPolicy::RunningMedian::Balance() {
  if (lower_.size() > upper_.size() + 1) {
    upper_.insert(*lower_.rbegin());
    lower_.erase(std::prev(lower_.end()));
  } else if (upper_.size() > lower_.size()) {
    lower_.insert(*upper_.begin());
    upper_.erase(upper_.begin());
  }
}

std::optional<double> GdsfEvictionPolicy::RunningMedian::Median() const {
  if (lower_.empty()) return std::nullopt;
  if (lower_.size() > upper_.size()) return *lower_.rbegin();
  return (*lower_.rbegin() + *upper_.begin()) / 2;
}

double GdsfEvictionPolicy::LossCost(const EvictionCost& cost) const {
  double compute = options_.cost_when_none_stated;
  if (cost.compute_seconds.has_value()) {
    compute = *cost.compute_seconds;
  } else if (std::optional<double> median = stated_costs_.Median()) {
    compute = *median;
  }
  if (!cost.spilled_on_eviction) return compute;
  const double read_back = options_.disk_read_seconds +
                           static_cast<double>(cost.size) / options_.disk_read_bytes_per_second;
  return std::min(compute, read_back);
}

EvictionPolicy::Handle GdsfEvictionPolicy::Add(const BlockId& id, const EvictionCost& cost) {
  Handle handle;
  if (!free_.empty()) {
    handle = free_.back();
    free_.pop_back();
  } else {
    handle = static_cast<Handle>(nodes_.size());
    nodes_.emplace_back();
  }
  // Negative or non-finite costs from a put are treated as not stated.
  std::optional<double> stated = cost.compute_seconds;
  if (stated && !(*stated >= 0 && *stated < 1e12)) stated.reset();
  EvictionCost weighed = cost;
  weighed.compute_seconds = stated;
  Node& node = nodes_[handle];
  node = Node{.id = id,
              .live = true,
              .size = std::max<uint64_t>(cost.size, 1),
              .cost = LossCost(weighed),
              .stated = stated,
              .frequency = 1};
  if (stated) stated_costs_.Insert(*stated);
  node.priority = clock_ + node.cost / static_cast<double>(node.size);
  node.last_use = ++uses_;
  order_.emplace(node.priority, node.last_use, handle);
  return handle;
}

void GdsfEvictionPolicy::Touch(Handle handle) {
  Node& node = nodes_[handle];
  auto found = order_.extract(Key{node.priority, node.last_use, handle});
  ++node.frequency;
  node.priority =
      clock_ + static_cast<double>(node.frequency) * node.cost / static_cast<double>(node.size);
  node.last_use = ++uses_;
  found.value() = Key{node.priority, node.last_use, handle};
  order_.insert(std::move(found));
}

void GdsfEvictionPolicy::Remove(Handle handle) { Forget(handle); }

void GdsfEvictionPolicy::Evicted(Handle handle) {
  // The clock never goes back: a block whose priority was set under an older clock and that
  // was skipped (pinned) until now must not undo the aging since.
  clock_ = std::max(clock_, nodes_[handle].priority);
  Forget(handle);
}

void GdsfEvictionPolicy::Forget(Handle handle) {
  Node& node = nodes_[handle];
  BM_CHECK(node.live);
  order_.erase(Key{node.priority, node.last_use, handle});
  if (node.stated) stated_costs_.Erase(*node.stated);
  node.live = false;
  free_.push_back(handle);
}

void GdsfEvictionPolicy::VisitInEvictionOrder(
    const std::function<bool(const BlockId&)>& visit) const {
  for (const Key& key : order_) {
    if (!visit(nodes_[std::get<2>(key)].id)) return;
  }
}

}  // namespace bm
