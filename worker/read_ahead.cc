#include "worker/read_ahead.h"

#include <utility>

namespace bm {

ReadAheadTable::Entries::iterator ReadAheadTable::Find(const BlockId& id, uint64_t offset,
                                                       uint64_t length) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->wanted && it->id == id && it->offset == offset && it->length == length) return it;
  }
  return entries_.end();
}

void ReadAheadTable::Erase(Entries::iterator entry) {
  bytes_ -= entry->bytes;
  by_ticket_.erase(entry->ticket);
  entries_.erase(entry);
}

bool ReadAheadTable::Take(const BlockId& id, uint64_t offset, uint64_t length, Done& done) {
  auto entry = Find(id, offset, length);
  if (entry == entries_.end()) return false;
  ++hits_;
  if (!entry->result.has_value()) {
    entry->waiter = std::move(done);
    entry->wanted = false;  // one request per range: a second one reads it afresh
    return true;
  }
  Result<BlockRead> result = std::move(*entry->result);
  Erase(entry);
  done(std::move(result));
  return true;
}

std::optional<uint64_t> ReadAheadTable::Start(const BlockId& id, uint64_t offset, uint64_t length,
                                              uint64_t bytes) {
  if (bytes == 0 || bytes > max_bytes_) return std::nullopt;
  for (const Entry& entry : entries_) {
    if (entry.id == id && entry.offset == offset) return std::nullopt;  // already coming
  }
  // Room: ready entries go, oldest first; pending ones hold their room until they finish.
  for (auto it = entries_.begin(); it != entries_.end() && bytes_ + bytes > max_bytes_;) {
    auto next = std::next(it);
    if (it->result.has_value()) Erase(it);
    it = next;
  }
  if (bytes_ + bytes > max_bytes_) return std::nullopt;
  const uint64_t ticket = next_ticket_++;
  entries_.push_back(Entry{ticket, id, offset, length, bytes});
  by_ticket_.emplace(ticket, std::prev(entries_.end()));
  bytes_ += bytes;
  return ticket;
}

void ReadAheadTable::Complete(uint64_t ticket, Result<BlockRead> result) {
  auto found = by_ticket_.find(ticket);
  if (found == by_ticket_.end()) return;
  Entries::iterator entry = found->second;
  if (entry->waiter) {
    Done waiter = std::move(entry->waiter);
    Erase(entry);
    waiter(std::move(result));
    return;
  }
  if (!entry->wanted || !result.ok()) {
    Erase(entry);  // forgotten, or failed: a request reads afresh and gets the error itself
    return;
  }
  entry->result = std::move(result);
  entry->ready_pass = pass_;
}

void ReadAheadTable::Forget(const BlockId& id) {
  for (auto it = entries_.begin(); it != entries_.end();) {
    auto next = std::next(it);
    if (it->id == id) {
      if (it->result.has_value()) {
        Erase(it);
      } else {
        it->wanted = false;  // its read is queued: Complete() serves its waiter, then drops it
      }
    }
    it = next;
  }
}

void ReadAheadTable::Age() {
  for (auto it = entries_.begin(); it != entries_.end();) {
    auto next = std::next(it);
    if (it->result.has_value() && it->ready_pass < pass_) Erase(it);
    it = next;
  }
  ++pass_;
}

}  // namespace bm
