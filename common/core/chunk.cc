#include "blockmgr/chunk.h"

#include <cstring>

namespace bm {

ChunkPtr MakeChunk(std::span<const std::byte> bytes) {
  return std::make_shared<VectorChunk>(std::vector<std::byte>(bytes.begin(), bytes.end()));
}

namespace {

class SliceOfChunk final : public Chunk {
 public:
  SliceOfChunk(ChunkPtr parent, size_t offset, size_t length)
      : parent_(std::move(parent)), offset_(offset), length_(length) {}
  std::span<const std::byte> bytes() const override {
    return parent_->bytes().subspan(offset_, length_);
  }

 private:
  ChunkPtr parent_;
  size_t offset_;
  size_t length_;
};

}  // namespace

ChunkPtr SliceChunk(ChunkPtr chunk, size_t offset, size_t length) {
  if (offset == 0 && length == chunk->size()) return chunk;
  return std::make_shared<SliceOfChunk>(std::move(chunk), offset, length);
}

std::vector<std::byte> BlockData::Flatten() const {
  std::vector<std::byte> out(size);
  size_t pos = 0;
  for (const ChunkPtr& chunk : chunks) {
    if (chunk->size() == 0) continue;
    std::memcpy(out.data() + pos, chunk->bytes().data(), chunk->size());
    pos += chunk->size();
  }
  return out;
}

}  // namespace bm
