#include "transfer/piece_source.h"

#include <algorithm>
#include <string>
#include <utility>
#include <zmq.hpp>

#include "common/net/transport.h"

namespace bm {

PieceSource::PieceSource(ReadBytes read, uint64_t size, std::function<void()> rewind)
    : read_(std::move(read)), size_(size), rewind_(std::move(rewind)) {}

PieceSource::PieceSource(NextChunk next, uint64_t size, std::function<void()> rewind)
    : next_chunk_(std::move(next)), size_(size), rewind_(std::move(rewind)) {}

Result<std::vector<ChunkPtr>> PieceSource::NextPiece() {
  if (offset_ == 0 && first_piece_) {
    offset_ = first_piece_bytes_;
    return *first_piece_;
  }
  const uint64_t limit = std::min<uint64_t>(kPutPieceBytes, size_ - offset_);
  std::vector<ChunkPtr> chunks;
  Result<uint64_t> piece = next_chunk_ ? TakeChunks(limit, chunks) : FillFrames(limit, chunks);
  if (!piece.ok()) {
    failed_ = true;
    return piece.status();
  }
  if (offset_ == 0) {
    first_piece_ = chunks;
    first_piece_bytes_ = *piece;
  }
  offset_ += *piece;
  read_end_ = std::max(read_end_, offset_);
  return chunks;
}

bool PieceSource::Restart() {
  if (read_end_ <= first_piece_bytes_) {
    offset_ = 0;
    return true;
  }
  if (!rewind_) return false;
  rewind_();
  pending_.reset();
  pending_offset_ = 0;
  offset_ = 0;
  read_end_ = 0;
  first_piece_.reset();
  first_piece_bytes_ = 0;
  return true;
}

Status PieceSource::DataEnded(uint64_t at) const {
  return InvalidArgumentError("the data ended after " + std::to_string(at) + " of " +
                              std::to_string(size_) + " bytes");
}

Result<uint64_t> PieceSource::FillFrames(uint64_t limit, std::vector<ChunkPtr>& chunks) {
  for (uint64_t done = 0; done < limit;) {
    zmq::message_t frame(std::min<uint64_t>(kChunkBytes, limit - done));
    std::span<std::byte> buffer(static_cast<std::byte*>(frame.data()), frame.size());
    size_t filled = 0;
    while (filled < buffer.size()) {
      BM_ASSIGN_OR_RETURN(size_t got, read_(buffer.subspan(filled)));
      if (got == 0 || got > buffer.size() - filled) return DataEnded(offset_ + done + filled);
      filled += got;
    }
    done += buffer.size();
    chunks.push_back(ChunkFromMessage(std::move(frame)));
  }
  return limit;
}

Result<uint64_t> PieceSource::TakeChunks(uint64_t limit, std::vector<ChunkPtr>& chunks) {
  uint64_t piece = 0;
  while (piece < limit && chunks.size() < kMaxPayloadFrames) {
    if (!pending_) {
      BM_ASSIGN_OR_RETURN(pending_, next_chunk_());
      pending_offset_ = 0;
      if (!pending_) return DataEnded(offset_ + piece);
      if (pending_->size() == 0) {
        pending_.reset();
        continue;
      }
    }
    const size_t take = static_cast<size_t>(
        std::min<uint64_t>({pending_->size() - pending_offset_, kChunkBytes, limit - piece}));
    chunks.push_back(take == pending_->size() ? pending_
                                              : SliceChunk(pending_, pending_offset_, take));
    pending_offset_ += take;
    piece += take;
    if (pending_offset_ == pending_->size()) pending_.reset();
  }
  return piece;
}

}  // namespace bm
