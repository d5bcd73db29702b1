#pragma once

#include <compare>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "blockmgr/status.h"

namespace bm {

// A block's name, as in Spark: rdd_<rddId>_<partition>, broadcast_<id>,
// shuffle_<shuffleId>_<mapId>_<reduceId>. Numbers are non-negative decimals without leading
// zeros, so Parse(ToString()) and ToString(Parse()) round-trip exactly. A value type: 32 bytes,
// hashable, ordered.
class BlockId {
 public:
  enum class Kind : uint8_t { kRdd, kBroadcast, kShuffle };

  static BlockId Rdd(uint64_t rdd_id, uint64_t partition) {
    return BlockId(Kind::kRdd, rdd_id, partition, 0);
  }
  static BlockId Broadcast(uint64_t id) { return BlockId(Kind::kBroadcast, id, 0, 0); }
  static BlockId Shuffle(uint64_t shuffle_id, uint64_t map_id, uint64_t reduce_id) {
    return BlockId(Kind::kShuffle, shuffle_id, map_id, reduce_id);
  }

  // Fails with kInvalidArgument naming the bad id.
  static Result<BlockId> Parse(std::string_view text);

  std::string ToString() const;

  Kind kind() const { return kind_; }
  bool is_rdd() const { return kind_ == Kind::kRdd; }
  // The RDD this block caches a partition of, if it is an RDD block.
  std::optional<uint64_t> rdd_id() const {
    return is_rdd() ? std::optional<uint64_t>(a_) : std::nullopt;
  }
  uint64_t partition() const { return is_rdd() ? b_ : 0; }
  // The shuffle this block is a piece of, if it is a shuffle block.
  std::optional<uint64_t> shuffle_id() const {
    return kind_ == Kind::kShuffle ? std::optional<uint64_t>(a_) : std::nullopt;
  }

  auto operator<=>(const BlockId&) const = default;
  size_t Hash() const;

 private:
  BlockId(Kind kind, uint64_t a, uint64_t b, uint64_t c) : kind_(kind), a_(a), b_(b), c_(c) {}

  Kind kind_;
  uint64_t a_;
  uint64_t b_;
  uint64_t c_;
};

}  // namespace bm

template <>
struct std::hash<bm::BlockId> {
  size_t operator()(const bm::BlockId& id) const { return id.Hash(); }
};
