#include "client/location_cache.h"

#include <algorithm>
#include <iterator>

namespace bm {

const std::vector<BlockLocation>* LocationCache::Find(const BlockId& id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return nullptr;
  it->second.last_used = ++clock_;
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
    it->second.last_used = ++clock_;
    return;
  }
  if (entries_.size() >= capacity_) DropLeastRecentlyUsed();
  entries_.emplace(id, Entry{std::move(locations), ++clock_});
}

void LocationCache::DropLeastRecentlyUsed() {
  std::vector<uint64_t> stamps;
  stamps.reserve(entries_.size());
  for (const auto& [id, entry] : entries_) stamps.push_back(entry.last_used);
  const size_t drop = std::max<size_t>(1, stamps.size() / 8);
  // Stamps are unique, so exactly `drop` entries are at or below the cut.
  std::nth_element(stamps.begin(), stamps.begin() + static_cast<ptrdiff_t>(drop - 1), stamps.end());
  const uint64_t cut = stamps[drop - 1];
  std::erase_if(entries_, [cut](const auto& entry) { return entry.second.last_used <= cut; });
}

void LocationCache::Forget(const BlockId& id) { entries_.erase(id); }

void LocationCache::ForgetRdd(uint64_t rdd_id) {
  std::erase_if(entries_, [rdd_id](const auto& entry) { return entry.first.rdd_id() == rdd_id; });
}

void LocationCache::ForgetWorker(const std::string& address) {
  for (auto it = entries_.begin(); it != entries_.end();) {
    std::vector<BlockLocation>& locations = it->second.locations;
    std::erase_if(locations, [&](const BlockLocation& l) { return l.address == address; });
    it = locations.empty() ? entries_.erase(it) : std::next(it);
  }
}

}  // namespace bm
