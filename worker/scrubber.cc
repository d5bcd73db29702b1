#include "worker/scrubber.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/core/digest.h"

namespace bm {
namespace {

// Charged for a block with no bytes, so a pass over many empty blocks stays bounded too.
constexpr uint64_t kEmptyBlockCost = 4096;

}  // namespace

Scrubber::Scrubber(BlockStore& store, uint64_t bytes_per_second)
    : store_(store), rate_(bytes_per_second) {}

void Scrubber::Step(TimePoint now) {
  if (rate_ == 0) return;
  const double elapsed =
      last_step_.has_value() ? std::chrono::duration<double>(now - *last_step_).count() : 0.0;
  last_step_ = now;
  // At most one second's worth at once (a loop that was busy does not read a burst), but at
  // least one piece can always be afforded eventually, however low the rate.
  const double cap = std::max<double>(static_cast<double>(rate_), kDigestUnitBytes);
  budget_ = std::min(cap, budget_ + elapsed * static_cast<double>(rate_));
  while (budget_ > 0) {
    std::optional<uint64_t> read = ScrubNextPiece();
    if (!read.has_value()) {
      budget_ = std::min(budget_, 0.0);  // nothing to do: no credit saved up for later
      return;
    }
    budget_ -= static_cast<double>(*read);
  }
}

std::optional<uint64_t> Scrubber::ScrubNextPiece() {
  if (next_block_ >= pass_.size()) {
    if (!pass_.empty()) FinishPass();
    pass_.clear();
    for (const BlockStatus& block : store_.List()) pass_.push_back(block.id);
    next_block_ = 0;
    offset_ = 0;
    generation_.reset();
    if (pass_.empty()) return std::nullopt;
  }
  const BlockId& id = pass_[next_block_];
  Result<DiskRead> read = generation_.has_value()
                              ? store_.ReadGeneration(id, *generation_, offset_, kDigestUnitBytes)
                              : store_.Read(id, offset_, kDigestUnitBytes);
  if (!read.ok()) {
    if (read.status().code() == StatusCode::kDataLoss) {
      ++stats_.corrupt_found;
      spdlog::error("scrubber: block {} failed verification: {}", id.ToString(),
                    read.status().message());
    } else if (read.status().code() != StatusCode::kNotFound &&
               read.status().code() != StatusCode::kAborted) {
      spdlog::warn("scrubber: cannot read block {}: {}", id.ToString(), read.status().ToString());
    }
    NextBlock();
    return kEmptyBlockCost;
  }
  generation_ = read->generation;
  uint64_t bytes = 0;
  std::vector<std::span<const std::byte>> pieces;
  for (const ChunkPtr& chunk : read->chunks) {
    bytes += chunk->size();
    pieces.push_back(chunk->bytes());
  }
  // The store's read checked RocksDB's checksums; this checks the block's own digests, which
  // also cover what RocksDB does not (bytes that went bad before they reached it).
  if (std::optional<uint64_t> bad =
          FirstBadUnit(pieces, offset_, bytes, read->total_size, read->unit_digests)) {
    ++stats_.corrupt_found;
    Status dropped = store_.ReportCorrupt(
        id, read->generation,
        "chunk " + std::to_string(*bad) + " does not match its digest (found by the scrubber)");
    spdlog::error("scrubber: block {} failed verification: {}", id.ToString(), dropped.message());
    NextBlock();
    return std::max(bytes, kEmptyBlockCost);
  }
  offset_ += bytes;
  stats_.bytes_verified += bytes;
  if (offset_ >= read->total_size) {
    ++stats_.blocks_verified;
    NextBlock();
  }
  return std::max(bytes, kEmptyBlockCost);
}

void Scrubber::FinishPass() {
  ++stats_.passes;
  const uint64_t corrupt = stats_.corrupt_found - corrupt_before_pass_;
  corrupt_before_pass_ = stats_.corrupt_found;
  // The first pass says the whole disk has been verified once since the start; later ones only
  // when they found something (a pass at a high rate over few blocks takes milliseconds).
  const spdlog::level::level_enum level =
      stats_.passes == 1 || corrupt > 0 ? spdlog::level::info : spdlog::level::debug;
  spdlog::log(level, "scrubber: pass {} over {} disk blocks done: {} corrupt (dropped, reported)",
              stats_.passes, pass_.size(), corrupt);
}

void Scrubber::NextBlock() {
  ++next_block_;
  offset_ = 0;
  generation_.reset();
}

}  // namespace bm
