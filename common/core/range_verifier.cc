#include "common/core/range_verifier.h"

#include <algorithm>

#include "common/core/digest.h"

namespace bm {

std::optional<uint64_t> RangeVerifier::Add(uint64_t offset, uint64_t length,
                                           const std::vector<std::span<const std::byte>>& pieces,
                                           std::span<const uint64_t> unit_digests) {
  ready_.clear();
  const uint64_t end = offset + length;
  if (unit_digests.empty()) {
    // No digests: nothing to check, nothing to hold (a block has digests for all or none).
    for (std::span<const std::byte> piece : pieces) {
      if (!piece.empty()) ready_.push_back(piece);
    }
    held_start_ = end;
    return std::nullopt;
  }
  // The bytes from held_start_ to the range's end: those held back, then the range's. Units
  // wholly inside are checked; the held bytes are all in unit offset / kDigestUnitBytes, the
  // first the digests name.
  std::vector<std::span<const std::byte>> all;
  all.reserve(pieces.size() + 1);
  if (!held_.empty()) all.emplace_back(held_);
  all.insert(all.end(), pieces.begin(), pieces.end());
  const uint64_t start = held_start_;
  if (std::optional<uint64_t> bad =
          FirstBadUnit(all, start, end - start, total_size_, unit_digests)) {
    return bad;
  }
  // Everything up to the last unit boundary in the range (or the block's end) is verified;
  // the rest is held back for the next range.
  const uint64_t verified_end =
      end == total_size_ ? end : end / kDigestUnitBytes * kDigestUnitBytes;
  // all[0] may view held_: swapping moves its buffer into released_, where the view stays valid.
  released_.swap(held_);
  held_.clear();
  uint64_t position = start;
  for (std::span<const std::byte> piece : all) {
    const uint64_t piece_end = position + piece.size();
    if (position < verified_end) {
      const size_t n = static_cast<size_t>(std::min(piece_end, verified_end) - position);
      if (n > 0) ready_.push_back(piece.first(n));
    }
    if (piece_end > verified_end) {
      const size_t kept =
          static_cast<size_t>(verified_end > position ? verified_end - position : 0);
      std::span<const std::byte> rest = piece.subspan(kept);
      held_.insert(held_.end(), rest.begin(), rest.end());
    }
    position = piece_end;
  }
  held_start_ = verified_end;
  return std::nullopt;
}

}  // namespace bm
