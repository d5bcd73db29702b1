#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace bm {

// Checksums of block bytes, end to end: XXH3-64 (Debian's libxxhash), fast enough to be free
// next to a copy of the same bytes.
//
// A block is digested per unit of kDigestUnitBytes aligned to block offsets (unit i covers
// [i * kDigestUnitBytes, (i + 1) * kDigestUnitBytes), the last one shorter), whatever pieces the
// bytes travel or are stored in, plus once whole. The unit is the disk store's chunk size, so a
// stored chunk is one unit.
constexpr size_t kDigestUnitBytes = size_t{1} << 20;

// XXH3-64 of `bytes`.
uint64_t DigestOf(std::span<const std::byte> bytes);

// XXH3-64 of bytes fed in any number of pieces (equal to DigestOf of their concatenation).
// Not thread-safe.
class StreamingDigest {
 public:
  StreamingDigest();
  ~StreamingDigest();
  StreamingDigest(StreamingDigest&&) noexcept;
  StreamingDigest& operator=(StreamingDigest&&) noexcept;

  void Update(std::span<const std::byte> bytes);
  uint64_t value() const;
  void Reset();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The digest of a whole block: XXH3-64 of its unit digests (each as 8 little-endian bytes), so
// it costs no second pass over the bytes and anyone holding the unit digests (a worker, the
// master) can compute it. 0 for an empty block.
uint64_t BlockDigestOf(std::span<const uint64_t> unit_digests);

// A digest as 16 lowercase hex digits, as logs and tools show it.
std::string DigestHex(uint64_t digest);

// The digests of a block: one per unit and one of the whole block (BlockDigestOf the units).
struct BlockDigests {
  std::vector<uint64_t> units;
  uint64_t block = 0;

  friend bool operator==(const BlockDigests&, const BlockDigests&) = default;
};

// Digests a block as its bytes arrive in pieces of any size, in order.
class BlockDigester {
 public:
  void Update(std::span<const std::byte> bytes);
  // Takes the digests of the next units, computed and checked by the caller as the bytes
  // arrived (a put piece's unit digests): their bytes, fed to Update next, are counted but not
  // hashed again. Called at a unit boundary; the last adopted unit may be the block's partial
  // final one.
  void AdoptUnits(std::span<const uint64_t> digests);
  // The digests of everything fed so far (the last unit may be partial).
  BlockDigests Finish() const;
  uint64_t bytes() const { return bytes_; }

 private:
  StreamingDigest unit_;
  std::vector<uint64_t> units_;
  std::vector<uint64_t> adopted_;  // digests of the units after units_, not hashed here
  size_t next_adopted_ = 0;
  uint64_t bytes_ = 0;
  uint64_t in_unit_ = 0;  // bytes of the current unit fed so far
};

// Checks a range [offset, offset + length) of a block of `total_size` bytes, its bytes given in
// `pieces` in order, against the stored digests of the units the range overlaps
// (`unit_digests[0]` is unit offset / kDigestUnitBytes). Units not wholly inside the range are
// skipped (their bytes are checked with the range that holds them whole), as are units past the
// digests given. Returns the first unit whose bytes do not match, or nullopt.
std::optional<uint64_t> FirstBadUnit(const std::vector<std::span<const std::byte>>& pieces,
                                     uint64_t offset, uint64_t length, uint64_t total_size,
                                     std::span<const uint64_t> unit_digests);

// The digests of the consecutive units of `pieces`' bytes taken in order as one run that starts
// on a unit boundary (the last unit may be shorter): what a put piece carries and a worker
// checks.
std::vector<uint64_t> UnitDigestsOf(const std::vector<std::span<const std::byte>>& pieces);

// How many units a block of `size` bytes has.
constexpr uint64_t DigestUnitCount(uint64_t size) {
  return size / kDigestUnitBytes + (size % kDigestUnitBytes != 0 ? 1 : 0);
}

}  // namespace bm
