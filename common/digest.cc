#include "common/digest.h"

#include <xxhash.h>

#include <algorithm>

#include "common/status.h"

namespace bm {

uint64_t DigestOf(std::span<const std::byte> bytes) {
  return XXH3_64bits(bytes.data(), bytes.size());
}

struct StreamingDigest::State {
  State() : xxh(XXH3_createState()) {
    BM_CHECK(xxh != nullptr);
    XXH3_64bits_reset(xxh);
  }
  ~State() { XXH3_freeState(xxh); }
  State(const State&) = delete;
  State& operator=(const State&) = delete;

  XXH3_state_t* const xxh;
};

StreamingDigest::StreamingDigest() : state_(std::make_unique<State>()) {}
StreamingDigest::~StreamingDigest() = default;
StreamingDigest::StreamingDigest(StreamingDigest&&) noexcept = default;
StreamingDigest& StreamingDigest::operator=(StreamingDigest&&) noexcept = default;

void StreamingDigest::Update(std::span<const std::byte> bytes) {
  XXH3_64bits_update(state_->xxh, bytes.data(), bytes.size());
}

uint64_t StreamingDigest::value() const { return XXH3_64bits_digest(state_->xxh); }

void StreamingDigest::Reset() { XXH3_64bits_reset(state_->xxh); }

void BlockDigester::Update(std::span<const std::byte> bytes) {
  block_.Update(bytes);
  bytes_ += bytes.size();
  while (!bytes.empty()) {
    const size_t n = std::min<uint64_t>(kDigestUnitBytes - in_unit_, bytes.size());
    unit_.Update(bytes.first(n));
    in_unit_ += n;
    bytes = bytes.subspan(n);
    if (in_unit_ == kDigestUnitBytes) {
      units_.push_back(unit_.value());
      unit_.Reset();
      in_unit_ = 0;
    }
  }
}

BlockDigests BlockDigester::Finish() const {
  BlockDigests digests{units_, block_.value()};
  if (in_unit_ > 0) digests.units.push_back(unit_.value());
  return digests;
}

}  // namespace bm
