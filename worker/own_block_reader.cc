#include "worker/own_block_reader.h"

#include <algorithm>
#include <span>
#include <string>

#include "common/core/digest.h"
#include "common/core/protocol.h"

namespace bm {

OwnBlockReader::OwnBlockReader(OwnBlockReads& reads, const BlockId& id) : reads_(reads), id_(id) {}

Status OwnBlockReader::Start() { return ReadRange(); }

Result<ChunkPtr> OwnBlockReader::NextChunk() {
  while (next_ == chunks_.size()) {
    if (offset_ >= total_) return ChunkPtr();
    BM_RETURN_IF_ERROR(ReadRange());
  }
  return std::move(chunks_[next_++]);
}

Status OwnBlockReader::ReadRange() {
  // Ranges start on digest unit boundaries (kMaxPieceBytes is a whole number of units), so
  // each holds its units whole and is checked alone.
  static_assert(kMaxPieceBytes % kDigestUnitBytes == 0);
  BM_ASSIGN_OR_RETURN(BlockRead read, reads_.Read(id_, offset_, kMaxPieceBytes));
  if (generation_ && read.generation != *generation_) {
    return AbortedError(id_.ToString() + " was replaced on this worker while being copied");
  }
  if (generation_ && read.total_size != total_) {
    return InternalError("the size of " + id_.ToString() + " changed within one generation");
  }
  uint64_t length = 0;
  std::vector<std::span<const std::byte>> spans;
  spans.reserve(read.chunks.size());
  for (const ChunkPtr& chunk : read.chunks) {
    spans.push_back(chunk->bytes());
    length += chunk->size();
  }
  const uint64_t expected = std::min<uint64_t>(kMaxPieceBytes, read.total_size - offset_);
  if (read.offset != offset_ || length != expected) {
    return InternalError("a read of " + id_.ToString() + " at offset " + std::to_string(offset_) +
                         " answered " + std::to_string(length) + " bytes at offset " +
                         std::to_string(read.offset));
  }
  if (std::optional<uint64_t> bad =
          FirstBadUnit(spans, offset_, length, read.total_size, read.unit_digests)) {
    return DataLossError(
        "block " + id_.ToString() + " on this worker: bytes " +
        std::to_string(*bad * kDigestUnitBytes) + " to " +
        std::to_string(std::min<uint64_t>((*bad + 1) * kDigestUnitBytes, read.total_size)) +
        " do not match their digest (a corrupt copy)");
  }
  if (!generation_) {
    generation_ = read.generation;
    total_ = read.total_size;
    version_ = read.version;
  }
  offset_ += length;
  chunks_ = std::move(read.chunks);
  std::erase_if(chunks_, [](const ChunkPtr& chunk) { return chunk->size() == 0; });
  next_ = 0;
  return Status::Ok();
}

}  // namespace bm
