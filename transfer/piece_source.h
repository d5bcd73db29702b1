#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "blockmgr/chunk.h"
#include "blockmgr/status.h"
#include "common/core/digest.h"
#include "common/core/protocol.h"

namespace bm {

// An upload's pieces: whole digest units (common/core/digest.h) of at most this many bytes.
constexpr uint64_t kPutPieceBytes = 4 << 20;
static_assert(kPutPieceBytes % kDigestUnitBytes == 0 && kPutPieceBytes <= kMaxPieceBytes);

// The bytes of an upload (transfer/block_upload.h), handed out piece by piece. The first piece
// is kept so the upload can start over on another worker after the first one refused it; a
// rewindable source (a span, a seekable stream, chunks) can start over at any point.
//
// Not thread-safe: the thread running the upload owns it. The callbacks it was made with run
// on that thread, inside NextPiece() and Restart().
class PieceSource {
 public:
  // Fills `out` with the next bytes and returns how many (0 < n <= out.size()); 0 before the
  // announced size was delivered fails the upload. (Client's ByteSource.)
  using ReadBytes = std::function<Result<size_t>(std::span<std::byte> out)>;
  // The next chunk of the bytes, sent as it is (no copy); null at the end. (Client's
  // ChunkSource.)
  using NextChunk = std::function<Result<ChunkPtr>()>;

  // Bytes copied from `read` into the frames sent. `rewind` may be empty: the source cannot be
  // read again.
  PieceSource(ReadBytes read, uint64_t size, std::function<void()> rewind);
  // Chunks from `next` sent as they are, without a copy (sliced to frames of at most
  // kChunkBytes). `rewind` as above.
  PieceSource(NextChunk next, uint64_t size, std::function<void()> rewind);
  PieceSource(const PieceSource&) = delete;
  PieceSource& operator=(const PieceSource&) = delete;

  uint64_t size() const { return size_; }
  // Bytes handed out in the current attempt.
  uint64_t offset() const { return offset_; }
  // True once reading the source itself failed (not a worker's fault: do not fail over).
  bool failed() const { return failed_; }

  // The next bytes, at most kPutPieceBytes of them in at most kMaxPayloadFrames chunks of at
  // most kChunkBytes each.
  Result<std::vector<ChunkPtr>> NextPiece();

  // Starts the next attempt at byte 0. False when the bytes read so far cannot be had again.
  bool Restart();

 private:
  Status DataEnded(uint64_t at) const;
  // `limit` bytes read into frame-sized buffers the source fills directly; they are sent as
  // they are (and, unlike a std::vector, not zero-filled first). Returns the piece's size.
  Result<uint64_t> FillFrames(uint64_t limit, std::vector<ChunkPtr>& chunks);
  // Up to `limit` bytes of the source's chunks, sliced (not copied) to frames of at most
  // kChunkBytes, and no more frames than a message may carry. Returns the piece's size.
  Result<uint64_t> TakeChunks(uint64_t limit, std::vector<ChunkPtr>& chunks);

  ReadBytes read_;
  NextChunk next_chunk_;
  ChunkPtr pending_;           // the source's chunk being handed out
  size_t pending_offset_ = 0;  // how much of it was
  const uint64_t size_;
  std::function<void()> rewind_;
  uint64_t offset_ = 0;    // next byte of the current attempt
  uint64_t read_end_ = 0;  // bytes pulled from the source since the last rewind
  std::optional<std::vector<ChunkPtr>> first_piece_;
  uint64_t first_piece_bytes_ = 0;
  bool failed_ = false;
};

}  // namespace bm
