#include "worker/upload_table.h"

#include <algorithm>

namespace bm {

UploadTable::Entry* UploadTable::Find(const Key& key) {
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : &it->second;
}

void UploadTable::Insert(Key key, Entry entry) {
  ++per_owner_[entry.owner];
  bool inserted = entries_.emplace(std::move(key), std::move(entry)).second;
  BM_CHECK(inserted);
}

std::optional<UploadTable::Entry> UploadTable::Erase(const Key& key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  Entry entry = std::move(it->second);
  entries_.erase(it);
  Forget(entry);
  return entry;
}

std::vector<UploadTable::Entry> UploadTable::TakeIdleSince(TimePoint cutoff) {
  std::vector<Entry> idle;
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->second.last_activity <= cutoff) {
      Forget(it->second);
      idle.push_back(std::move(it->second));
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
  return idle;
}

std::vector<UploadTable::Entry> UploadTable::TakeFromConnection(int connection) {
  std::vector<Entry> taken;
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->second.connection == connection) {
      Forget(it->second);
      taken.push_back(std::move(it->second));
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
  return taken;
}

std::vector<UploadTable::Entry> UploadTable::TakeAll() {
  std::vector<Entry> all;
  all.reserve(entries_.size());
  for (auto& [key, entry] : entries_) all.push_back(std::move(entry));
  entries_.clear();
  per_owner_.clear();
  return all;
}

size_t UploadTable::CountOwnedBy(const std::string& owner) const {
  auto it = per_owner_.find(owner);
  return it == per_owner_.end() ? 0 : it->second;
}

void UploadTable::Forget(const Entry& entry) {
  auto it = per_owner_.find(entry.owner);
  BM_CHECK(it != per_owner_.end() && it->second > 0);
  if (--it->second == 0) per_owner_.erase(it);
}

std::optional<TimePoint> UploadTable::OldestActivity() const {
  std::optional<TimePoint> oldest;
  for (const auto& [key, entry] : entries_) {
    if (!oldest || entry.last_activity < *oldest) oldest = entry.last_activity;
  }
  return oldest;
}

}  // namespace bm
