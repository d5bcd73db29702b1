#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace bm {

// Checks a block read as consecutive ranges against its stored unit digests (common/core/digest.h),
// so that every unit is checked whole whatever the ranges' boundaries: a range that ends inside
// a unit keeps that unit's bytes back (copied; at most one unit) until the range that completes
// it, and only then are they handed out. Bytes are handed out only once their unit matched.
//
// Ranges must come in order, each starting where the last ended. Not thread-safe.
class RangeVerifier {
 public:
  explicit RangeVerifier(uint64_t total_size) : total_size_(total_size) {}

  // Takes the next range [offset, offset + length) of the block, its bytes in `pieces`, and the
  // digests of the units it overlaps (`unit_digests[0]` is unit offset / kDigestUnitBytes;
  // empty: the block has none, and every byte passes). Returns the first unit that does not
  // match, or nullopt; then ready() holds the bytes now verified, in order.
  std::optional<uint64_t> Add(uint64_t offset, uint64_t length,
                              const std::vector<std::span<const std::byte>>& pieces,
                              std::span<const uint64_t> unit_digests);

  // The verified bytes of the last Add, in order: views of its pieces or of bytes held back
  // from earlier ranges, valid until the next Add.
  const std::vector<std::span<const std::byte>>& ready() const { return ready_; }
  // Where the bytes not yet handed out start (a unit boundary, or the block's end).
  uint64_t verified_end() const { return held_start_; }

 private:
  const uint64_t total_size_;
  // Bytes of the unit at held_start_ received but not yet verified (fewer than a unit).
  uint64_t held_start_ = 0;
  std::vector<std::byte> held_;
  std::vector<std::byte> released_;  // held_ of the previous Add, viewed by ready_
  std::vector<std::span<const std::byte>> ready_;
};

}  // namespace bm
