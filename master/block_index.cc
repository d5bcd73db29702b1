#include "master/block_index.h"

#include <algorithm>
#include <utility>

namespace bm {

// ---- Entry ----

BlockIndex::Entry::Location BlockIndex::Entry::at(size_t i) const {
  BM_CHECK(i < count_);
  if (i == 0) return Location{first_size_, first_worker_, static_cast<Tier>(first_tier_)};
  return extra_[i - 1];
}

std::optional<BlockIndex::Entry::Location> BlockIndex::Entry::Find(Slot worker) const {
  for (size_t i = 0; i < count_; ++i) {
    const Location location = at(i);
    if (location.worker == worker) return location;
  }
  return std::nullopt;
}

bool BlockIndex::Entry::Set(Slot worker, Tier tier, uint64_t size) {
  const Location location{size, worker, tier};
  if (count_ > 0 && first_worker_ == worker) {
    first_size_ = size;
    first_tier_ = static_cast<uint8_t>(tier);
    return false;
  }
  for (size_t i = 0; i + 1 < count_; ++i) {
    if (extra_[i].worker == worker) {
      extra_[i] = location;
      return false;
    }
  }
  if (count_ == 0) {
    first_size_ = size;
    first_worker_ = worker;
    first_tier_ = static_cast<uint8_t>(tier);
    count_ = 1;
    return true;
  }
  if (count_ == kMaxLocations) return false;
  auto grown = std::make_unique<Location[]>(count_);  // count_ - 1 old extras + the new one
  std::copy(extra_.get(), extra_.get() + (count_ - 1), grown.get());
  grown[count_ - 1] = location;
  extra_ = std::move(grown);
  ++count_;
  return true;
}

bool BlockIndex::Entry::Remove(Slot worker) {
  if (count_ == 0) return false;
  size_t index = count_;  // 0 = the inline one, i + 1 = extra_[i]
  if (first_worker_ == worker) {
    index = 0;
  } else {
    for (size_t i = 0; i + 1 < count_; ++i) {
      if (extra_[i].worker == worker) index = i + 1;
    }
  }
  if (index == count_) return false;
  if (count_ == 1) {
    count_ = 0;
    return true;
  }
  // Move the last location into the hole, then shrink the extras by one.
  const Location last = extra_[count_ - 2];
  if (index == 0) {
    first_size_ = last.size;
    first_worker_ = last.worker;
    first_tier_ = static_cast<uint8_t>(last.tier);
  } else {
    extra_[index - 1] = last;
  }
  --count_;
  if (count_ == 1) {
    extra_.reset();
  } else {
    auto shrunk = std::make_unique<Location[]>(count_ - 1);
    std::copy(extra_.get(), extra_.get() + (count_ - 1), shrunk.get());
    extra_ = std::move(shrunk);
  }
  return true;
}

// ---- BlockIndex ----

BlockIndex::BlockIndex() {
  static_assert(sizeof(Entry) <= 40, "keep a block's entry small: the index holds millions");
}

BlockIndex::~BlockIndex() = default;

BlockIndex::Slot BlockIndex::Intern(std::string_view worker_id) {
  auto it = slots_.find(worker_id);
  if (it != slots_.end()) return it->second;
  Slot slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
    slot_names_[slot] = std::string(worker_id);
  } else {
    slot = static_cast<Slot>(slot_names_.size());
    slot_names_.emplace_back(worker_id);
    slot_locations_.push_back(0);
  }
  slots_.emplace(std::string(worker_id), slot);
  return slot;
}

std::optional<BlockIndex::Slot> BlockIndex::SlotOf(std::string_view worker_id) const {
  auto it = slots_.find(worker_id);
  if (it == slots_.end()) return std::nullopt;
  return it->second;
}

void BlockIndex::ReleaseLocation(Slot slot) {
  BM_CHECK(slot_locations_[slot] > 0);
  --slot_locations_[slot];
  FreeSlotIfUnused(slot);
}

void BlockIndex::FreeSlotIfUnused(Slot slot) {
  if (slot_locations_[slot] > 0) return;
  slots_.erase(slot_names_[slot]);
  slot_names_[slot].clear();
  free_slots_.push_back(slot);
}

BlockIndex::Entry* BlockIndex::FindEntry(const BlockId& id) {
  return const_cast<Entry*>(std::as_const(*this).FindEntry(id));
}

const BlockIndex::Entry* BlockIndex::FindEntry(const BlockId& id) const {
  if (id.is_rdd()) {
    const PartitionMap* partitions = rdds_.Find(*id.rdd_id());
    return partitions == nullptr ? nullptr : partitions->Find(id.partition());
  }
  auto it = others_.find(id);
  return it == others_.end() ? nullptr : &it->second;
}

BlockIndex::Entry& BlockIndex::FindOrAddEntry(const BlockId& id) {
  if (id.is_rdd()) {
    bool new_rdd = false;
    bool added = false;
    Entry& entry = rdds_.FindOrAdd(*id.rdd_id(), &new_rdd).FindOrAdd(id.partition(), &added);
    if (added) ++block_count_;
    return entry;
  }
  auto [it, added] = others_.try_emplace(id);
  if (added) ++block_count_;
  return it->second;
}

void BlockIndex::EraseEntry(const BlockId& id) {
  if (id.is_rdd()) {
    PartitionMap* partitions = rdds_.Find(*id.rdd_id());
    BM_CHECK(partitions != nullptr);
    BM_CHECK(partitions->Erase(id.partition()));
    if (partitions->empty()) rdds_.Erase(*id.rdd_id());
  } else {
    BM_CHECK(others_.erase(id) == 1);
  }
  --block_count_;
}

bool BlockIndex::SetLocation(const BlockId& id, Entry& entry, Slot worker, Tier tier,
                             uint64_t size) {
  const std::optional<Entry::Location> was = id.is_rdd() ? entry.Find(worker) : std::nullopt;
  const bool added = entry.Set(worker, tier, size);
  if (id.is_rdd()) CountRddBytes(id, was, entry.Find(worker));
  return added;
}

bool BlockIndex::RemoveLocation(const BlockId& id, Entry& entry, Slot worker) {
  const std::optional<Entry::Location> was = id.is_rdd() ? entry.Find(worker) : std::nullopt;
  if (!entry.Remove(worker)) return false;
  if (id.is_rdd()) CountRddBytes(id, was, std::nullopt);
  return true;
}

void BlockIndex::CountRddBytes(const BlockId& id, std::optional<Entry::Location> was,
                               std::optional<Entry::Location> now) {
  if (!was && !now) return;
  bool added = false;
  TierBytes& bytes = rdd_bytes_.FindOrAdd(*id.rdd_id(), &added);
  if (was) {
    BM_CHECK(bytes.on(was->tier) >= was->size);
    bytes.on(was->tier) -= was->size;
  }
  if (now) bytes.on(now->tier) += now->size;
  if (bytes == TierBytes{}) rdd_bytes_.Erase(*id.rdd_id());
}

TierBytes BlockIndex::RddBytes(uint64_t rdd_id) const {
  const TierBytes* bytes = rdd_bytes_.Find(rdd_id);
  return bytes == nullptr ? TierBytes{} : *bytes;
}

ApplyResult BlockIndex::Apply(std::string_view worker_id, const BlockChange& change) {
  ApplyResult result;
  if (change.removed) {
    result.removal_ignored = true;  // until it removes a location
    std::optional<Slot> slot = SlotOf(worker_id);
    if (!slot) return result;
    Entry* entry = FindEntry(change.id);
    // A removal of another version than the current one (a stale copy) changes nothing.
    if (entry == nullptr ||
        (change.version != 0 && entry->version() != 0 && change.version != entry->version())) {
      return result;
    }
    const uint64_t last_size = entry->count() == 1 ? entry->at(0).size : 0;
    if (!RemoveLocation(change.id, *entry, *slot)) return result;
    result.removal_ignored = false;
    ReleaseLocation(*slot);
    if (entry->count() == 0) {
      result.last_copy = GoneBlock{change.id, entry->version(), last_size, entry->level()};
      history_.Lost(change.id, entry->version());
      EraseEntry(change.id);
    }
    return result;
  }
  Entry* current = FindEntry(change.id);
  if (history_.IsStale(change.id, change.version, change.fresh, current != nullptr)) {
    result.recorded = false;
    return result;
  }
  bool new_version = current == nullptr;
  if (current != nullptr && current->version() != change.version && current->version() != 0) {
    new_version = true;
    if (!change.fresh) {
      result.recorded = false;  // a copy of a version other than the current one
      return result;
    }
    // A new put replaces the current version: its copies elsewhere go.
    const std::optional<Slot> own = SlotOf(worker_id);
    for (size_t i = current->count(); i-- > 0;) {
      const Entry::Location location = current->at(i);
      if (own && location.worker == *own) continue;
      result.replaced.push_back(
          RetiredCopy{slot_names_[location.worker], change.id, current->version()});
    }
    history_.Retire(change.id, current->version());
    for (const RetiredCopy& copy : result.replaced) {
      const Slot slot = *SlotOf(copy.worker_id);
      BM_CHECK(RemoveLocation(change.id, *current, slot));
      ReleaseLocation(slot);
    }
  }
  if (!new_version && current->digest() != 0 && change.digest != 0 &&
      change.digest != current->digest()) {
    // Not the version's bytes: not listed, nor left listed from an earlier report.
    result.recorded = false;
    result.digest_mismatch = true;
    result.expected_digest = current->digest();
    const std::optional<Slot> own = SlotOf(worker_id);
    if (own && RemoveLocation(change.id, *current, *own)) {
      ReleaseLocation(*own);
      if (current->count() == 0) {
        result.last_copy = GoneBlock{change.id, current->version(), change.size, current->level()};
        history_.Lost(change.id, current->version());
        EraseEntry(change.id);
      }
    }
    return result;
  }
  const Slot slot = Intern(worker_id);
  Entry& entry = FindOrAddEntry(change.id);
  entry.set_level(change.level);
  entry.set_version(change.version);
  // A new version brings its digest (or none); the current one learns it from the first copy
  // reported with one.
  if (new_version || entry.digest() == 0) entry.set_digest(change.digest);
  if (SetLocation(change.id, entry, slot, change.tier, change.size)) {
    ++slot_locations_[slot];
  } else {
    FreeSlotIfUnused(slot);  // not recorded (the block is at kMaxLocations): no new location
  }
  return result;
}

void BlockIndex::RetireVersion(const BlockId& id, uint64_t version) {
  if (version != 0) history_.Retire(id, version);
}

void BlockIndex::RetireVersions(std::span<const BlockId> ids) {
  for (const BlockId& id : ids) {
    if (const Entry* entry = FindEntry(id)) history_.Retire(id, entry->version());
  }
}

std::optional<uint64_t> BlockIndex::VersionOf(const BlockId& id) const {
  const Entry* entry = FindEntry(id);
  if (entry == nullptr) return std::nullopt;
  return entry->version();
}

size_t BlockIndex::RemoveWorker(std::string_view worker_id, std::vector<GoneBlock>* last_copies) {
  std::optional<Slot> slot = SlotOf(worker_id);
  if (!slot) return 0;
  const size_t held = slot_locations_[*slot];
  size_t removed = 0;
  // TODO(perf): a full scan (stopping once all the worker's locations are found). Drops are
  // rare, and a per-worker list of blocks would cost more memory per block than the index.
  // Idempotent (U64HashMap may show an entry twice): true when the entry is to go.
  // A block whose last copy goes is remembered with its version (VersionHistory::Lost).
  auto drop = [&](const BlockId& id, Entry& entry) {
    uint64_t size = 0;
    if (last_copies != nullptr && entry.count() == 1) size = entry.at(0).size;
    if (!RemoveLocation(id, entry, *slot)) return false;
    ++removed;
    if (entry.count() > 0) return false;
    if (last_copies != nullptr) {
      last_copies->push_back(GoneBlock{id, entry.version(), size, entry.level()});
    }
    history_.Lost(id, entry.version());
    --block_count_;
    return true;
  };
  auto more = [&] { return removed < held; };
  rdds_.UpdateAndEraseIf(
      [&](uint64_t rdd_id, PartitionMap& partitions) {
        partitions.UpdateAndEraseIf(
            [&](uint64_t partition, Entry& entry) {
              return drop(BlockId::Rdd(rdd_id, partition), entry);
            },
            more);
        return partitions.empty();
      },
      more);
  for (auto it = others_.begin(); it != others_.end() && removed < held;) {
    it = drop(it->first, it->second) ? others_.erase(it) : std::next(it);
  }
  BM_CHECK(removed == held);
  slot_locations_[*slot] = 0;
  FreeSlotIfUnused(*slot);
  return removed;
}

size_t BlockIndex::LocationCount(std::string_view worker_id) const {
  std::optional<Slot> slot = SlotOf(worker_id);
  return slot ? slot_locations_[*slot] : 0;
}

void BlockIndex::SortedLocations(const Entry& entry, std::vector<LocationRef>* out) const {
  out->clear();
  for (size_t i = 0; i < entry.count(); ++i) {
    Entry::Location location = entry.at(i);
    out->push_back({&slot_names_[location.worker], location.tier, location.size});
  }
  // The order of MakeInfo(). Almost every block has one copy: nothing to sort.
  if (out->size() < 2) return;
  std::sort(out->begin(), out->end(), [](const LocationRef& a, const LocationRef& b) {
    if (a.tier != b.tier) return a.tier == Tier::kMemory;
    return *a.worker_id < *b.worker_id;
  });
}

BlockInfo BlockIndex::MakeInfo(const BlockId& id, const Entry& entry) const {
  BlockInfo info{id, entry.level(), {}, entry.digest()};
  info.locations.reserve(entry.count());
  for (size_t i = 0; i < entry.count(); ++i) {
    Entry::Location location = entry.at(i);
    info.locations.push_back({slot_names_[location.worker], location.tier, location.size});
  }
  std::sort(info.locations.begin(), info.locations.end(),
            [](const IndexedLocation& a, const IndexedLocation& b) {
              if (a.tier != b.tier) return a.tier == Tier::kMemory;
              return a.worker_id < b.worker_id;
            });
  return info;
}

std::optional<BlockInfo> BlockIndex::Find(const BlockId& id) const {
  const Entry* entry = FindEntry(id);
  if (entry == nullptr) return std::nullopt;
  return MakeInfo(id, *entry);
}

void BlockIndex::Prefetch(const BlockId& id) const {
  if (!id.is_rdd()) return;
  if (const PartitionMap* partitions = rdds_.Find(*id.rdd_id())) {
    partitions->Prefetch(id.partition());
  }
}

std::optional<StorageLevel> BlockIndex::FindLocations(const BlockId& id,
                                                      std::vector<LocationRef>* out,
                                                      uint64_t* digest) const {
  const Entry* entry = FindEntry(id);
  if (digest != nullptr) *digest = entry == nullptr ? 0 : entry->digest();
  if (entry == nullptr) {
    out->clear();
    return std::nullopt;
  }
  SortedLocations(*entry, out);
  return entry->level();
}

std::vector<BlockInfo> BlockIndex::List() const {
  std::vector<BlockInfo> out;
  out.reserve(block_count_);
  rdds_.ForEach([&](uint64_t rdd_id, const PartitionMap& partitions) {
    partitions.ForEach([&](uint64_t partition, const Entry& entry) {
      out.push_back(MakeInfo(BlockId::Rdd(rdd_id, partition), entry));
    });
  });
  for (const auto& [id, entry] : others_) out.push_back(MakeInfo(id, entry));
  std::sort(out.begin(), out.end(),
            [](const BlockInfo& a, const BlockInfo& b) { return a.id < b.id; });
  return out;
}

std::vector<BlockInfo> BlockIndex::ListPage(std::optional<uint64_t> rdd_id,
                                            const std::optional<BlockId>& after,
                                            size_t limit) const {
  // A max-heap of the smallest `limit` ids seen after `after`.
  std::vector<BlockId> page;
  if (limit == 0) return {};
  page.reserve(limit);
  auto consider = [&](const BlockId& id) {
    if (after && !(*after < id)) return;
    if (page.size() < limit) {
      page.push_back(id);
      std::push_heap(page.begin(), page.end());
    } else if (id < page.front()) {
      std::pop_heap(page.begin(), page.end());
      page.back() = id;
      std::push_heap(page.begin(), page.end());
    }
  };
  auto scan_rdd = [&](uint64_t rdd, const PartitionMap& partitions) {
    partitions.ForEach(
        [&](uint64_t partition, const Entry&) { consider(BlockId::Rdd(rdd, partition)); });
  };
  if (rdd_id) {
    if (const PartitionMap* partitions = rdds_.Find(*rdd_id)) scan_rdd(*rdd_id, *partitions);
  } else {
    rdds_.ForEach(scan_rdd);
    for (const auto& [id, entry] : others_) consider(id);
  }
  std::sort_heap(page.begin(), page.end());
  std::vector<BlockInfo> out;
  out.reserve(page.size());
  for (const BlockId& id : page) {
    if (const Entry* entry = FindEntry(id)) out.push_back(MakeInfo(id, *entry));
  }
  return out;
}

void BlockIndex::ForEach(const std::function<void(const BlockInfo&)>& visit) const {
  rdds_.ForEach([&](uint64_t rdd_id, const PartitionMap& partitions) {
    partitions.ForEach([&](uint64_t partition, const Entry& entry) {
      visit(MakeInfo(BlockId::Rdd(rdd_id, partition), entry));
    });
  });
  for (const auto& [id, entry] : others_) visit(MakeInfo(id, entry));
}

std::vector<BlockInfo> BlockIndex::ListRdd(uint64_t rdd_id) const {
  std::vector<BlockInfo> out;
  const PartitionMap* partitions = rdds_.Find(rdd_id);
  if (partitions == nullptr) return out;
  out.reserve(partitions->size());
  partitions->ForEach([&](uint64_t partition, const Entry& entry) {
    out.push_back(MakeInfo(BlockId::Rdd(rdd_id, partition), entry));
  });
  std::sort(out.begin(), out.end(),
            [](const BlockInfo& a, const BlockInfo& b) { return a.id < b.id; });
  return out;
}

std::vector<BlockId> BlockIndex::RddBlockIds(uint64_t rdd_id) const {
  std::vector<BlockId> out;
  const PartitionMap* partitions = rdds_.Find(rdd_id);
  if (partitions == nullptr) return out;
  out.reserve(partitions->size());
  partitions->ForEach(
      [&](uint64_t partition, const Entry&) { out.push_back(BlockId::Rdd(rdd_id, partition)); });
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<uint64_t> BlockIndex::RddIds() const {
  std::vector<uint64_t> out;
  out.reserve(rdds_.size());
  rdds_.ForEach([&](uint64_t rdd_id, const PartitionMap&) { out.push_back(rdd_id); });
  return out;
}

void BlockIndex::ForEachNonRdd(const std::function<void(const BlockInfo&)>& visit) const {
  for (const auto& [id, entry] : others_) visit(MakeInfo(id, entry));
}

std::vector<RddSummary> BlockIndex::RddSummaries() const {
  // TODO(perf): computed by a scan of every RDD block; keep running totals if this gets hot.
  std::vector<RddSummary> out;
  out.reserve(rdds_.size());
  rdds_.ForEach([&](uint64_t rdd_id, const PartitionMap& partitions) {
    RddSummary summary;
    summary.rdd_id = rdd_id;
    summary.cached_partitions = partitions.size();
    std::vector<bool> holds(slot_names_.size(), false);
    uint64_t lowest_partition = UINT64_MAX;
    partitions.ForEach([&](uint64_t partition, const Entry& entry) {
      if (partition < lowest_partition) {
        lowest_partition = partition;
        summary.level = entry.level();
      }
      for (size_t i = 0; i < entry.count(); ++i) {
        Entry::Location location = entry.at(i);
        (location.tier == Tier::kMemory ? summary.memory_bytes : summary.disk_bytes) +=
            location.size;
        holds[location.worker] = true;
      }
    });
    for (Slot slot = 0; slot < holds.size(); ++slot) {
      if (holds[slot]) summary.workers.push_back(slot_names_[slot]);
    }
    std::sort(summary.workers.begin(), summary.workers.end());
    out.push_back(std::move(summary));
  });
  std::sort(out.begin(), out.end(),
            [](const RddSummary& a, const RddSummary& b) { return a.rdd_id < b.rdd_id; });
  return out;
}

std::map<std::string, std::vector<BlockId>> BlockIndex::Holders(
    std::span<const BlockId> ids) const {
  std::map<std::string, std::vector<BlockId>> out;
  for (const BlockId& id : ids) {
    const Entry* entry = FindEntry(id);
    if (entry == nullptr) continue;
    for (size_t i = 0; i < entry->count(); ++i) {
      out[slot_names_[entry->at(i).worker]].push_back(id);
    }
  }
  return out;
}

}  // namespace bm
