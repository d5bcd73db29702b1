#include "worker/read_replies.h"

#include <algorithm>
#include <cstring>

#include "common/core/digest.h"
#include "common/core/protocol.h"
#include "common/net/transport.h"

namespace bm {

std::vector<zmq::message_t> FillGetReply(proto::GetReply::Builder get, uint64_t limit,
                                         const BlockRead& read) {
  uint64_t fits = 0;
  size_t frame_count = 0;
  for (const ChunkPtr& chunk : read.chunks) {
    for (size_t pos = 0; pos < chunk->size() && fits < limit && frame_count < kMaxPayloadFrames;
         ++frame_count) {
      const size_t take =
          static_cast<size_t>(std::min<uint64_t>({chunk->size() - pos, kChunkBytes, limit - fits}));
      pos += take;
      fits += take;
    }
  }
  const uint64_t available = std::min(limit, read.total_size - read.offset);
  if (fits < available) {
    const uint64_t boundary = (read.offset + fits) / kDigestUnitBytes * kDigestUnitBytes;
    if (boundary > read.offset) limit = boundary - read.offset;
  }
  std::vector<zmq::message_t> frames;
  uint64_t length = 0;
  for (const ChunkPtr& chunk : read.chunks) {
    for (size_t pos = 0; pos < chunk->size() && length < limit;) {
      if (frames.size() == kMaxPayloadFrames) break;
      const size_t take = static_cast<size_t>(
          std::min<uint64_t>({chunk->size() - pos, kChunkBytes, limit - length}));
      frames.push_back(MessageFromChunk(SliceChunk(chunk, pos, take)));
      pos += take;
      length += take;
    }
  }

  get.setTotalSize(read.total_size);
  get.setOffset(read.offset);
  get.setLength(length);
  get.setGeneration(read.generation);
  get.setTier(ToProto(read.tier));
  get.setLevel(ToProto(read.level));
  get.setVersion(read.version);
  if (!read.unit_digests.empty() && length > 0) {
    // Those of the units this reply's bytes overlap (it may end before the range read).
    const uint64_t offset = read.offset;
    const size_t units =
        std::min<size_t>(read.unit_digests.size(),
                         (offset + length - 1) / kDigestUnitBytes - offset / kDigestUnitBytes + 1);
    capnp::List<uint64_t>::Builder digests = get.initUnitDigests(static_cast<unsigned>(units));
    for (size_t i = 0; i < units; ++i) digests.set(static_cast<unsigned>(i), read.unit_digests[i]);
  }
  return frames;
}

std::vector<zmq::message_t> FillGetManyReply(
    capnp::List<proto::MultiGetEntry>::Builder entries,
    const std::vector<std::optional<BlockStatus>>& statuses,
    const std::vector<std::optional<BlockRead>>& reads) {
  // Small blocks are copied into shared frames: every frame costs ZeroMQ a send and a receive
  // call of its own (below 8 KiB it copies them into its batch buffer anyway), so 16 blocks of
  // 4 KiB travel as one frame. Bigger blocks go as their stored chunks, without a copy.
  // First which blocks fit and how the frames are cut, then the frames themselves.
  constexpr uint64_t kPackedBlockBytes = 64 << 10;
  struct Part {
    const BlockRead* read;
    bool packed;
  };
  std::vector<Part> parts;
  std::vector<uint64_t> pack_sizes;  // bytes of each pack of small blocks, in order
  uint64_t open_pack = 0;            // bytes of the pack being filled (0: none)
  size_t closed_frames = 0;          // frames before the open pack
  uint64_t bytes = 0;
  for (size_t i = 0; i < statuses.size(); ++i) {
    proto::MultiGetEntry::Builder entry = entries[static_cast<unsigned>(i)];
    const std::optional<BlockStatus>& status = statuses[i];
    if (!status) {
      entry.setState(proto::MultiGetEntry::State::NOT_FOUND);
      continue;
    }
    entry.setTotalSize(status->size);
    entry.setState(proto::MultiGetEntry::State::NOT_INCLUDED);
    if (status->size > kMaxPieceBytes - bytes) continue;
    const std::optional<BlockRead>& read = reads[i];
    if (!read || read->total_size != status->size) continue;
    const bool packed = status->size <= kPackedBlockBytes;
    const bool pack_full = packed && open_pack > 0 && open_pack + status->size > kChunkBytes;
    // Frames the reply would have with this block, counting an open pack as one. A bigger
    // block goes as its stored chunks cut at kChunkBytes, however they were cut when stored.
    size_t frames_after = closed_frames + (pack_full ? 1 : 0) + 1;
    if (!packed) {
      frames_after = closed_frames + (open_pack > 0 ? 1 : 0);
      for (const ChunkPtr& chunk : read->chunks) {
        frames_after += (chunk->size() + kChunkBytes - 1) / kChunkBytes;
      }
    }
    if (frames_after > kMaxPayloadFrames) continue;
    if (packed) {
      if (pack_full) {
        pack_sizes.push_back(open_pack);
        ++closed_frames;
        open_pack = 0;
      }
      open_pack += status->size;
    } else {
      if (open_pack > 0) {
        pack_sizes.push_back(open_pack);
        ++closed_frames;
        open_pack = 0;
      }
      closed_frames = frames_after;
    }
    entry.setState(proto::MultiGetEntry::State::INCLUDED);
    entry.setGeneration(read->generation);
    entry.setTier(ToProto(read->tier));
    if (!read->unit_digests.empty()) {
      capnp::List<uint64_t>::Builder digests =
          entry.initUnitDigests(static_cast<unsigned>(read->unit_digests.size()));
      for (size_t u = 0; u < read->unit_digests.size(); ++u) {
        digests.set(static_cast<unsigned>(u), read->unit_digests[u]);
      }
    }
    bytes += status->size;
    parts.push_back(Part{&*read, packed});
  }
  if (open_pack > 0) pack_sizes.push_back(open_pack);

  std::vector<zmq::message_t> frames;
  size_t next_pack = 0;
  std::optional<zmq::message_t> pack;  // sized exactly, filled in place
  size_t pack_filled = 0;
  auto close_pack = [&] {
    if (pack) frames.push_back(std::move(*pack));
    pack.reset();
  };
  for (const Part& part : parts) {
    if (part.read->total_size == 0) continue;  // no bytes, no frame
    if (part.packed) {
      if (pack && pack_filled + part.read->total_size > pack->size()) close_pack();
      if (!pack) {
        pack.emplace(static_cast<size_t>(pack_sizes[next_pack++]));
        pack_filled = 0;
      }
      for (const ChunkPtr& chunk : part.read->chunks) {
        std::memcpy(static_cast<std::byte*>(pack->data()) + pack_filled, chunk->bytes().data(),
                    chunk->size());
        pack_filled += chunk->size();
      }
      continue;
    }
    close_pack();
    for (const ChunkPtr& chunk : part.read->chunks) {
      for (size_t pos = 0; pos < chunk->size();) {
        const size_t take = std::min<size_t>(chunk->size() - pos, kChunkBytes);
        frames.push_back(MessageFromChunk(SliceChunk(chunk, pos, take)));
        pos += take;
      }
    }
  }
  close_pack();
  return frames;
}

}  // namespace bm
