#include "worker/disk/disk_index.h"

#include "common/core/digest.h"

namespace bm::disk {
namespace {

BlockStatus StatusFrom(const BlockId& id, const Meta& meta) {
  return BlockStatus{id,        meta.level,   Tier::kDisk,
                     meta.size, meta.version, BlockDigestOf(meta.unit_digests)};
}

}  // namespace

const Meta* DiskIndex::Find(const BlockId& id) const {
  auto found = versions_.find(id);
  return found == versions_.end() ? nullptr : &found->second;
}

std::optional<Meta> DiskIndex::Put(const BlockId& id, Meta meta) {
  std::optional<Meta> old;
  auto found = versions_.find(id);
  if (found != versions_.end()) {
    old = std::move(found->second);
    committed_bytes_ -= old->size;
  }
  committed_bytes_ = SaturatingAdd(committed_bytes_, meta.size);
  versions_.insert_or_assign(id, std::move(meta));
  return old;
}

std::optional<Meta> DiskIndex::Erase(const BlockId& id) {
  auto found = versions_.find(id);
  if (found == versions_.end()) return std::nullopt;
  std::optional<Meta> meta = std::move(found->second);
  versions_.erase(found);
  committed_bytes_ -= meta->size;
  return meta;
}

void DiskIndex::Clear() {
  versions_.clear();
  committed_bytes_ = 0;
}

std::optional<BlockStatus> DiskIndex::StatusOf(const BlockId& id) const {
  const Meta* meta = Find(id);
  if (meta == nullptr) return std::nullopt;
  return StatusFrom(id, *meta);
}

std::vector<BlockStatus> DiskIndex::List() const {
  std::vector<BlockStatus> blocks;
  blocks.reserve(versions_.size());
  for (const auto& [id, meta] : versions_) blocks.push_back(StatusFrom(id, meta));
  return blocks;
}

std::map<BlockId, uint64_t> DiskIndex::Generations() const {
  std::map<BlockId, uint64_t> generations;
  for (const auto& [id, meta] : versions_) {
    generations.emplace_hint(generations.end(), id, meta.generation);
  }
  return generations;
}

}  // namespace bm::disk
