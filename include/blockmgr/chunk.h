#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace bm {

// An immutable run of a block's bytes, about kChunkBytes long. Blocks are kept and moved as
// lists of chunks so that a block of any size streams through fixed-size buffers and a stored
// chunk can be handed to the network without copying.
class Chunk {
 public:
  virtual ~Chunk() = default;
  virtual std::span<const std::byte> bytes() const = 0;
  size_t size() const { return bytes().size(); }
};

// Shared because a stored block's chunks are held both by the store and by every in-flight
// send of them; the bytes stay valid until the last holder lets go, even if the block is
// removed meanwhile.
using ChunkPtr = std::shared_ptr<const Chunk>;

// A chunk that owns a plain byte vector.
class VectorChunk final : public Chunk {
 public:
  explicit VectorChunk(std::vector<std::byte> data) : data_(std::move(data)) {}
  std::span<const std::byte> bytes() const override { return data_; }

 private:
  std::vector<std::byte> data_;
};

// A chunk holding a copy of `bytes`.
ChunkPtr MakeChunk(std::span<const std::byte> bytes);
// A view of [offset, offset + length) of `chunk` that keeps `chunk` alive; no copy.
ChunkPtr SliceChunk(ChunkPtr chunk, size_t offset, size_t length);

// A whole block's bytes as a list of chunks.
struct BlockData {
  std::vector<ChunkPtr> chunks;
  uint64_t size = 0;

  void Append(ChunkPtr chunk) {
    size += chunk->size();
    chunks.push_back(std::move(chunk));
  }
  // Copies the bytes out into one contiguous vector (for small blocks and tests).
  std::vector<std::byte> Flatten() const;
};

}  // namespace bm
