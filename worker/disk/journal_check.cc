#include "worker/disk/journal_check.h"

#include <algorithm>
#include <set>
#include <string>

namespace bm::disk {

JournalVerdict CheckJournal(const std::map<BlockId, uint64_t>& committed,
                            const std::map<BlockId, uint64_t>& removed, const DiskIndex& index,
                            const std::vector<UnreadableGenerations>& unreadable_generations,
                            const std::string& set_aside_tables) {
  JournalVerdict verdict;
  std::set<BlockId> deleted;
  for (const auto& [id, generation] : removed) {
    const Meta* found = index.Find(id);
    if (found != nullptr && found->generation <= generation) {
      verdict.removed_earlier.push_back(id);
      deleted.insert(id);
    }
  }
  for (const auto& [id, generation] : committed) {
    const Meta* found = deleted.contains(id) ? nullptr : index.Find(id);
    auto unreadable = std::find_if(unreadable_generations.begin(), unreadable_generations.end(),
                                   [generation = generation](const UnreadableGenerations& range) {
                                     return generation >= range.first && generation < range.end;
                                   });
    const std::string what = "generation " + std::to_string(generation);
    if (found == nullptr && unreadable != unreadable_generations.end()) {
      verdict.lost.push_back(
          {id, what + " is corrupt on disk: " +
                   (unreadable->damage.empty() ? "" : unreadable->damage + "; ") +
                   "its records failed RocksDB's checksum in the start-up scan"});
      ++verdict.corrupt;
    } else if (found == nullptr && !set_aside_tables.empty()) {
      verdict.lost.push_back(
          {id, what + " is corrupt on disk: its records were lost with the " + set_aside_tables});
      ++verdict.corrupt;
    } else if (found == nullptr) {
      verdict.lost.push_back({id, what + " was committed but the store no longer has it (RocksDB "
                                         "recovered its write-ahead log only up to a damaged or "
                                         "missing record)"});
    } else if (found->generation < generation) {
      verdict.lost.push_back(
          {id, "generation " + std::to_string(generation) +
                   " was committed but the store recovered only the older generation " +
                   std::to_string(found->generation) + ", which is removed rather than served"});
      verdict.stale.push_back(id);
    }
  }
  return verdict;
}

}  // namespace bm::disk
