#include "master/journal_feed.h"

#include <algorithm>

namespace bm {

JournalFeed::JournalFeed(const Clock& clock, uint64_t epoch, Options options)
    : clock_(clock), epoch_(epoch), options_(options) {}

void JournalFeed::Append(std::string_view batch) {
  kept_.push_back({next_sequence_++, std::make_shared<const std::string>(batch)});
  kept_bytes_ += batch.size();
  // The newest batch stays even when it alone is over the bound.
  while (kept_.size() > 1 && kept_bytes_ > options_.max_kept_bytes) {
    kept_bytes_ -= kept_.front().batch->size();
    kept_.pop_front();
  }
}

JournalFeed::Fetched JournalFeed::Fetch(const std::string& standby, uint64_t epoch, uint64_t from,
                                        size_t max_bytes) {
  Standby& state = standbys_[standby];
  state.last_fetch = clock_.Now();
  Fetched fetched;
  const uint64_t oldest_kept = kept_.empty() ? next_sequence_ : kept_.front().sequence;
  if (epoch != epoch_ || from < oldest_kept || from > next_sequence_) {
    // Its position means nothing here: it rebuilds from a snapshot as of next_sequence_, and
    // its next fetch (from there) confirms it.
    state.in_sync = false;
    fetched.snapshot = true;
    fetched.first = next_sequence_;
    return fetched;
  }
  state.confirmed = from;
  if (from == next_sequence_) state.in_sync = true;
  fetched.first = from;
  size_t bytes = 0;
  for (auto it = kept_.begin() + static_cast<std::ptrdiff_t>(from - oldest_kept);
       it != kept_.end() && (fetched.batches.empty() || bytes < max_bytes); ++it) {
    bytes += it->batch->size();
    fetched.batches.push_back(it->batch);
  }
  return fetched;
}

bool JournalFeed::ContinueSnapshot(const std::string& standby, uint64_t epoch, uint64_t from) {
  Standby& state = standbys_[standby];
  state.last_fetch = clock_.Now();
  state.in_sync = false;
  const uint64_t oldest_kept = kept_.empty() ? next_sequence_ : kept_.front().sequence;
  return epoch == epoch_ && from >= oldest_kept && from <= next_sequence_;
}

uint64_t JournalFeed::ConfirmedSequence(const std::vector<std::string>* published) const {
  uint64_t confirmed = next_sequence_;
  for (const auto& [id, standby] : standbys_) {
    const bool waited_for =
        standby.in_sync || (published != nullptr && std::find(published->begin(), published->end(),
                                                              id) != published->end());
    if (waited_for) confirmed = std::min(confirmed, standby.confirmed);
  }
  return confirmed;
}

std::vector<std::string> JournalFeed::InSyncIds() const {
  std::vector<std::string> ids;
  for (const auto& [id, standby] : standbys_) {
    if (standby.in_sync) ids.push_back(id);  // a std::map: sorted
  }
  return ids;
}

std::vector<std::string> JournalFeed::ExpireSilent() {
  std::vector<std::string> dropped;
  const TimePoint now = clock_.Now();
  for (auto& [id, standby] : standbys_) {
    // Kept (with its position) while ZooKeeper may still list it as in sync.
    if (standby.in_sync && now - standby.last_fetch >= options_.standby_timeout) {
      standby.in_sync = false;
      dropped.push_back(id);
    }
  }
  return dropped;
}

std::optional<TimePoint> JournalFeed::NextExpiry() const {
  std::optional<TimePoint> next;
  for (const auto& [id, standby] : standbys_) {
    if (!standby.in_sync) continue;
    const TimePoint expiry = standby.last_fetch + options_.standby_timeout;
    if (!next || expiry < *next) next = expiry;
  }
  return next;
}

std::vector<JournalFeed::StandbyStatus> JournalFeed::Standbys() const {
  std::vector<StandbyStatus> out;
  for (const auto& [id, standby] : standbys_) {
    out.push_back({id, standby.confirmed, standby.in_sync, standby.last_fetch});
  }
  return out;
}

size_t JournalFeed::in_sync_count() const {
  return static_cast<size_t>(std::count_if(standbys_.begin(), standbys_.end(),
                                           [](const auto& entry) { return entry.second.in_sync; }));
}

}  // namespace bm
