#include "master/version_history.h"

#include <algorithm>

namespace bm {

VersionHistory::Record& VersionHistory::RecordOf(const BlockId& id) {
  auto [it, added] = records_.try_emplace(id);
  if (added) {
    order_.push_back(id);
    while (records_.size() > capacity_ && !order_.empty()) {
      const BlockId oldest = order_.front();
      order_.pop_front();
      if (oldest == id) {
        order_.push_back(id);  // keep the one just added
        continue;
      }
      records_.erase(oldest);
    }
    it = records_.find(id);
  }
  return it->second;
}

void VersionHistory::Retire(const BlockId& id, uint64_t version) {
  if (version == 0 || capacity_ == 0) return;
  Record& record = RecordOf(id);
  if (std::find(record.retired.begin(), record.retired.end(), version) != record.retired.end()) {
    return;
  }
  record.retired[record.next_retired] = version;
  record.next_retired = static_cast<uint8_t>((record.next_retired + 1) % kRetiredPerId);
  if (record.lost_current == version) record.lost_current = 0;
}

void VersionHistory::Lost(const BlockId& id, uint64_t version) {
  if (version == 0 || capacity_ == 0) return;
  RecordOf(id).lost_current = version;
}

bool VersionHistory::IsStale(const BlockId& id, uint64_t version, bool fresh, bool tracked) const {
  auto it = records_.find(id);
  if (it == records_.end()) return false;
  const Record& record = it->second;
  if (version != 0 &&
      std::find(record.retired.begin(), record.retired.end(), version) != record.retired.end()) {
    return true;
  }
  return !fresh && !tracked && record.lost_current != 0 && version != record.lost_current;
}

}  // namespace bm
