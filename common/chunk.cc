#include "common/chunk.h"

#include <cstring>

namespace bm {

ChunkPtr MakeChunk(std::span<const std::byte> bytes) {
  return std::make_shared<VectorChunk>(std::vector<std::byte>(bytes.begin(), bytes.end()));
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
