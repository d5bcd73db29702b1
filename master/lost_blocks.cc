#include "master/lost_blocks.h"

#include <algorithm>
#include <utility>

namespace bm {

void LostBlocks::Insert(LostRecord record) {
  if (auto it = by_id_.find(record.id); it != by_id_.end()) Erase(it);
  next_seq_ = std::max(next_seq_, record.order + 1);
  order_.emplace(record.order, record.id);
  const BlockId id = record.id;
  by_id_.emplace(id, Entry{std::move(record)});
}

void LostBlocks::Erase(std::unordered_map<BlockId, Entry>::iterator it) {
  order_.erase(it->second.record.order);
  by_id_.erase(it);
}

LostBlocks::Changes LostBlocks::Trim() {
  Changes changes;
  while (by_id_.size() > capacity_) {
    const BlockId oldest = order_.begin()->second;
    Erase(by_id_.find(oldest));
    changes.forgotten.push_back(oldest);
  }
  return changes;
}

LostBlocks::Changes LostBlocks::Add(std::vector<LostRecord> records) {
  Changes changes;
  // Only the newest `capacity_` of them can be kept: the others are counted, not filed.
  const size_t skipped = records.size() > capacity_ ? records.size() - capacity_ : 0;
  for (size_t i = 0; i < records.size(); ++i) {
    LostRecord& record = records[i];
    ++totals_[static_cast<size_t>(record.cause)];
    if (i < skipped) continue;
    record.order = next_seq_;
    Insert(record);
    changes.recorded.push_back(std::move(record));
  }
  changes.forgotten = Trim().forgotten;
  // A record both written and forgotten in this call is only forgotten.
  if (!changes.forgotten.empty()) {
    std::erase_if(changes.recorded,
                  [this](const LostRecord& record) { return !by_id_.contains(record.id); });
  }
  return changes;
}

LostBlocks::Changes LostBlocks::Refine(const BlockId& id, uint64_t version, LostCause cause,
                                       const std::string& detail) {
  Changes changes;
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return changes;
  LostRecord& record = it->second.record;
  if (version != 0 && record.version != 0 && version != record.version) return changes;
  if (record.cause == cause && record.detail == detail) return changes;
  record.cause = cause;
  record.detail = detail;
  changes.recorded.push_back(record);
  return changes;
}

LostBlocks::Changes LostBlocks::Clear(const BlockId& id) {
  Changes changes;
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return changes;
  Erase(it);
  changes.forgotten.push_back(id);
  return changes;
}

LostBlocks::Changes LostBlocks::ClearRdd(uint64_t rdd_id) {
  Changes changes;
  for (auto it = by_id_.begin(); it != by_id_.end();) {
    if (it->first.rdd_id() == rdd_id) {
      changes.forgotten.push_back(it->first);
      order_.erase(it->second.record.order);
      it = by_id_.erase(it);
    } else {
      ++it;
    }
  }
  return changes;
}

LostBlocks::Changes LostBlocks::Restore(std::vector<LostRecord> records) {
  for (LostRecord& record : records) Insert(std::move(record));
  return Trim();
}

const LostRecord* LostBlocks::Find(const BlockId& id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &it->second.record;
}

std::vector<LostRecord> LostBlocks::Newest(size_t limit) const {
  std::vector<LostRecord> out;
  out.reserve(std::min(limit, order_.size()));
  for (auto it = order_.rbegin(); it != order_.rend() && out.size() < limit; ++it) {
    out.push_back(by_id_.at(it->second).record);
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<LostRecord> LostBlocks::List() const {
  std::vector<LostRecord> out;
  out.reserve(order_.size());
  for (const auto& [seq, id] : order_) out.push_back(by_id_.at(id).record);
  return out;
}

}  // namespace bm
