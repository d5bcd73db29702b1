#include "client/location_cache.h"

#include <algorithm>
#include <iterator>

namespace bm {

const std::vector<BlockLocation>* LocationCache::Find(const BlockId& id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return nullptr;
  recency_.splice(recency_.begin(), recency_, it->second.recency);
  return &it->second.locations;
}

void LocationCache::Remember(const BlockId& id, std::vector<BlockLocation> locations) {
  if (capacity_ == 0) return;
  if (locations.empty()) {
    Forget(id);
    return;
  }
  auto it = entries_.find(id);
  if (it != entries_.end()) {
    it->second.locations = std::move(locations);
    recency_.splice(recency_.begin(), recency_, it->second.recency);
    return;
  }
  if (entries_.size() == capacity_) {
    auto oldest = entries_.find(recency_.back());
    Erase(oldest);
  }
  recency_.push_front(id);
  entries_.emplace(id, Entry{std::move(locations), recency_.begin()});
}

void LocationCache::Forget(const BlockId& id) {
  auto it = entries_.find(id);
  if (it != entries_.end()) Erase(it);
}

void LocationCache::ForgetRdd(uint64_t rdd_id) {
  for (auto it = entries_.begin(); it != entries_.end();) {
    auto next = std::next(it);
    if (it->first.rdd_id() == rdd_id) Erase(it);
    it = next;
  }
}

void LocationCache::ForgetWorker(const std::string& address) {
  for (auto it = entries_.begin(); it != entries_.end();) {
    auto next = std::next(it);
    std::vector<BlockLocation>& locations = it->second.locations;
    std::erase_if(locations, [&](const BlockLocation& l) { return l.address == address; });
    if (locations.empty()) Erase(it);
    it = next;
  }
}

void LocationCache::Erase(std::unordered_map<BlockId, Entry>::iterator it) {
  recency_.erase(it->second.recency);
  entries_.erase(it);
}

}  // namespace bm
