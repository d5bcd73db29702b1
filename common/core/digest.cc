#include "common/core/digest.h"

// XXH3 from Debian's libxxhash-dev header, inlined: the SSE2 build here, the AVX2 build in
// digest_avx2.cc, picked once by what the CPU supports.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>

#include "blockmgr/status.h"
#include "common/core/digest_dispatch.h"

namespace bm {
namespace {

bool HasAvx2() {
#if defined(__x86_64__)
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
#else
  return false;
#endif
}

}  // namespace

uint64_t DigestOf(std::span<const std::byte> bytes) {
  if (HasAvx2()) return digest_internal::OneShotAvx2(bytes.data(), bytes.size());
  return XXH3_64bits(bytes.data(), bytes.size());
}

struct StreamingDigest::State {
  State() { XXH3_64bits_reset(&xxh); }
  XXH3_state_t xxh;
};

StreamingDigest::StreamingDigest() : state_(std::make_unique<State>()) {}
StreamingDigest::~StreamingDigest() = default;
StreamingDigest::StreamingDigest(StreamingDigest&&) noexcept = default;
StreamingDigest& StreamingDigest::operator=(StreamingDigest&&) noexcept = default;

void StreamingDigest::Update(std::span<const std::byte> bytes) {
  if (HasAvx2()) {
    digest_internal::UpdateAvx2(&state_->xxh, bytes.data(), bytes.size());
  } else {
    XXH3_64bits_update(&state_->xxh, bytes.data(), bytes.size());
  }
}

uint64_t StreamingDigest::value() const { return XXH3_64bits_digest(&state_->xxh); }

void StreamingDigest::Reset() { XXH3_64bits_reset(&state_->xxh); }

uint64_t BlockDigestOf(std::span<const uint64_t> unit_digests) {
  if (unit_digests.empty()) return 0;
  std::vector<std::byte> bytes(unit_digests.size() * 8);
  for (size_t i = 0; i < unit_digests.size(); ++i) {
    for (size_t b = 0; b < 8; ++b) {
      bytes[i * 8 + b] = static_cast<std::byte>(unit_digests[i] >> (8 * b));
    }
  }
  return DigestOf(bytes);
}

void BlockDigester::Update(std::span<const std::byte> bytes) {
  bytes_ += bytes.size();
  while (!bytes.empty()) {
    const size_t n = std::min<uint64_t>(kDigestUnitBytes - in_unit_, bytes.size());
    const bool adopted = next_adopted_ < adopted_.size();
    if (!adopted) unit_.Update(bytes.first(n));
    in_unit_ += n;
    bytes = bytes.subspan(n);
    if (in_unit_ == kDigestUnitBytes) {
      units_.push_back(adopted ? adopted_[next_adopted_++] : unit_.value());
      if (!adopted) unit_.Reset();
      in_unit_ = 0;
    }
  }
}

void BlockDigester::AdoptUnits(std::span<const uint64_t> digests) {
  BM_CHECK(in_unit_ == 0);
  adopted_.erase(adopted_.begin(), adopted_.begin() + static_cast<ptrdiff_t>(next_adopted_));
  next_adopted_ = 0;
  adopted_.insert(adopted_.end(), digests.begin(), digests.end());
}

std::vector<uint64_t> UnitDigestsOf(const std::vector<std::span<const std::byte>>& pieces) {
  std::vector<uint64_t> units;
  StreamingDigest unit;
  uint64_t in_unit = 0;
  for (std::span<const std::byte> piece : pieces) {
    // A whole unit in one span (the usual case: 1 MiB chunks) is hashed in one shot.
    while (!piece.empty()) {
      if (in_unit == 0 && piece.size() >= kDigestUnitBytes) {
        units.push_back(DigestOf(piece.first(kDigestUnitBytes)));
        piece = piece.subspan(kDigestUnitBytes);
        continue;
      }
      const size_t n = std::min<uint64_t>(kDigestUnitBytes - in_unit, piece.size());
      unit.Update(piece.first(n));
      in_unit += n;
      piece = piece.subspan(n);
      if (in_unit == kDigestUnitBytes) {
        units.push_back(unit.value());
        unit.Reset();
        in_unit = 0;
      }
    }
  }
  if (in_unit > 0) units.push_back(unit.value());
  return units;
}

std::optional<uint64_t> FirstBadUnit(const std::vector<std::span<const std::byte>>& pieces,
                                     uint64_t offset, uint64_t length, uint64_t total_size,
                                     std::span<const uint64_t> unit_digests) {
  if (unit_digests.empty() || length == 0) return std::nullopt;
  const uint64_t first_unit = offset / kDigestUnitBytes;
  const uint64_t end = offset + length;
  StreamingDigest digest;
  uint64_t position = offset;  // of the next byte of `pieces`
  for (std::span<const std::byte> piece : pieces) {
    while (!piece.empty()) {
      const uint64_t unit = position / kDigestUnitBytes;
      const uint64_t unit_start = unit * kDigestUnitBytes;
      const uint64_t unit_end = std::min(unit_start + kDigestUnitBytes, total_size);
      const size_t n = static_cast<size_t>(std::min<uint64_t>(unit_end - position, piece.size()));
      const bool whole = unit_start >= offset && unit_end <= end;
      const bool known = unit - first_unit < unit_digests.size();
      if (whole && known) {
        if (position == unit_start) digest.Reset();
        digest.Update(piece.first(n));
        if (position + n == unit_end && digest.value() != unit_digests[unit - first_unit]) {
          return unit;
        }
      }
      position += n;
      piece = piece.subspan(n);
    }
  }
  return std::nullopt;
}

BlockDigests BlockDigester::Finish() const {
  BlockDigests digests{units_, 0};
  if (in_unit_ > 0) {
    digests.units.push_back(next_adopted_ < adopted_.size() ? adopted_[next_adopted_]
                                                            : unit_.value());
  }
  digests.block = BlockDigestOf(digests.units);
  return digests;
}

std::string DigestHex(uint64_t digest) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i) {
    out[static_cast<size_t>(i)] = kDigits[digest & 0xf];
    digest >>= 4;
  }
  return out;
}

}  // namespace bm
