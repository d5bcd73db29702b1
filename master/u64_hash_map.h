#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>

#include "blockmgr/status.h"

namespace bm {

// A hash map from uint64_t keys to V, open addressing with linear probing: a key and its value
// sit side by side in one array, so a lookup of a random key costs about one cache miss (a
// node-based std::unordered_map costs three dependent ones: bucket, previous node, node). The
// block index keeps one per RDD, holding millions of entries in all; see BlockIndex.
//
// Keys are spread by Fibonacci hashing, which also spaces dense keys (partitions 0..n-1)
// evenly. The capacity is any size (not a power of two: an RDD of 1000 partitions then needs
// ~1300 slots, not 2048), grows by half when 7/8 full and shrinks when under 1/4. Erasure
// shifts the rest of the probe run back (no tombstones). UINT64_MAX marks an empty slot; that
// key itself is kept beside the array.
//
// V must be default-constructible and movable. Not thread-safe. Pointers to values are valid
// until the next insertion or erasure.
template <typename V>
class U64HashMap {
 public:
  struct Slot {
    uint64_t first = kEmpty;
    V second{};
  };

  U64HashMap() = default;
  U64HashMap(U64HashMap&&) noexcept = default;
  U64HashMap& operator=(U64HashMap&&) noexcept = default;

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  V* Find(uint64_t key) { return const_cast<V*>(static_cast<const U64HashMap&>(*this).Find(key)); }
  const V* Find(uint64_t key) const {
    if (key == kEmpty) return max_key_ ? &max_key_->second : nullptr;
    if (capacity_ == 0) return nullptr;
    for (size_t i = Home(key);; i = Next(i)) {
      const Slot& slot = slots_[i];
      if (slot.first == key) return &slot.second;
      if (slot.first == kEmpty) return nullptr;
    }
  }

  // Starts loading the key's home slot into the cache, so that a Find() of it soon after does
  // not wait for memory: lookups of many keys overlap their cache misses this way.
  void Prefetch(uint64_t key) const {
    if (capacity_ > 0) __builtin_prefetch(&slots_[Home(key)]);
  }

  // The key's value, default-constructed and inserted if missing; `added` says which.
  V& FindOrAdd(uint64_t key, bool* added) {
    if (key == kEmpty) {
      *added = !max_key_;
      if (*added) {
        max_key_.emplace();
        max_key_->first = key;
        ++size_;
      }
      return max_key_->second;
    }
    if (V* found = Find(key)) {
      *added = false;
      return *found;
    }
    if ((size_ + 1) * 8 > capacity_ * 7) Rehash(std::max<size_t>(8, capacity_ + capacity_ / 2));
    size_t i = Home(key);
    while (slots_[i].first != kEmpty) i = Next(i);
    slots_[i].first = key;
    ++size_;
    *added = true;
    return slots_[i].second;
  }

  // Returns false when the key was not there.
  bool Erase(uint64_t key) {
    if (key == kEmpty) {
      if (!max_key_) return false;
      max_key_.reset();
      --size_;
      return true;
    }
    if (capacity_ == 0) return false;
    for (size_t i = Home(key);; i = Next(i)) {
      if (slots_[i].first == key) {
        EraseAt(i);
        MaybeShrink();
        return true;
      }
      if (slots_[i].first == kEmpty) return false;
    }
  }

  // Calls visit(key, value) for every entry, in no particular order.
  template <typename F>
  void ForEach(F&& visit) const {
    for (size_t i = 0; i < capacity_; ++i) {
      if (slots_[i].first != kEmpty) visit(slots_[i].first, slots_[i].second);
    }
    if (max_key_) visit(max_key_->first, max_key_->second);
  }

  // Calls update(key, value) for every entry while keep_going() holds, erasing the entries it
  // returns true for. An entry may be visited twice (erasure can move one from the array's
  // start to its end), so update must be idempotent.
  template <typename F, typename G>
  void UpdateAndEraseIf(F&& update, G&& keep_going) {
    for (size_t i = 0; i < capacity_ && keep_going();) {
      // Erasure moves a later entry into slot i: look at i again.
      if (slots_[i].first != kEmpty && update(slots_[i].first, slots_[i].second)) {
        EraseAt(i);
      } else {
        ++i;
      }
    }
    if (max_key_ && keep_going() && update(max_key_->first, max_key_->second)) {
      max_key_.reset();
      --size_;
    }
    MaybeShrink();
  }

 private:
  static constexpr uint64_t kEmpty = UINT64_MAX;

  size_t Home(uint64_t key) const {
    const uint64_t mixed = key * 0x9E3779B97F4A7C15ull;
    return static_cast<size_t>((static_cast<unsigned __int128>(mixed) * capacity_) >> 64);
  }
  size_t Next(size_t i) const { return i + 1 == capacity_ ? 0 : i + 1; }

  // Backward-shift deletion: entries after the hole whose home is not between the hole and
  // them move into it, so every probe run stays unbroken.
  void EraseAt(size_t hole) {
    --size_;
    for (size_t j = Next(hole);; j = Next(j)) {
      Slot& slot = slots_[j];
      if (slot.first == kEmpty) break;
      const size_t home = Home(slot.first);
      // Is home cyclically in (hole, j]? Then the entry must stay.
      const bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
      if (stays) continue;
      slots_[hole] = std::move(slot);
      hole = j;
    }
    slots_[hole].first = kEmpty;
    slots_[hole].second = V{};
  }

  void MaybeShrink() {
    if (capacity_ > 8 && size_ * 4 < capacity_) Rehash(std::max<size_t>(8, size_ * 2));
    if (size_ == 0 && capacity_ > 0) {
      slots_.reset();
      capacity_ = 0;
    }
  }

  void Rehash(size_t capacity) {
    std::unique_ptr<Slot[]> old = std::move(slots_);
    const size_t old_capacity = capacity_;
    slots_ = std::make_unique<Slot[]>(capacity);
    capacity_ = capacity;
    for (size_t i = 0; i < old_capacity; ++i) {
      if (old[i].first == kEmpty) continue;
      size_t j = Home(old[i].first);
      while (slots_[j].first != kEmpty) j = Next(j);
      slots_[j] = std::move(old[i]);
    }
  }

  std::unique_ptr<Slot[]> slots_;
  size_t capacity_ = 0;
  size_t size_ = 0;  // including max_key_
  std::optional<Slot> max_key_;
};

}  // namespace bm
