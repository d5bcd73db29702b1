#pragma once

// Limits of the wire protocol and conversions between wire enums and common types.

#include <cstddef>
#include <cstdint>

#include "blockmgr/block_id.h"
#include "blockmgr/status.h"
#include "blockmgr/storage_level.h"
#include "blockmgr/tier.h"
#include "common/core/lost_cause.h"
#include "common/core/worker_stats.h"
#include "schema/messages.capnp.h"

namespace bm {

// Block bytes are sent in frames of this size (the last frame of a block may be shorter).
constexpr size_t kChunkBytes = 1 << 20;
// A receiver rejects a payload frame above this size.
constexpr size_t kMaxPayloadFrameBytes = 4 << 20;
// A receiver rejects a header (Cap'n Proto) frame above this size.
constexpr size_t kMaxHeaderBytes = 16 << 20;
// ZMQ_MAXMSGSIZE on every socket: a peer sending a bigger frame is disconnected by ZeroMQ.
constexpr int64_t kMaxFrameBytes = kMaxHeaderBytes;
// A receiver rejects a message with more payload frames than this.
constexpr size_t kMaxPayloadFrames = 64;
// Ids one getBlocks request may name. Small blocks share frames, so this is not bounded by
// kMaxPayloadFrames; a reply still carries at most kMaxPayloadFrames frames and kMaxPieceBytes.
constexpr size_t kMaxGetBlocksIds = 1024;
// Bytes of block data in one PutBlock piece or one GetReply.
constexpr uint64_t kMaxPieceBytes = 16 << 20;
// Cap'n Proto traversal limit for one header, in 8-byte words.
constexpr uint64_t kTraversalLimitWords = kMaxHeaderBytes / 8 * 2;

proto::StorageLevel ToProto(StorageLevel level);
StorageLevel FromProto(proto::StorageLevel level);
proto::Tier ToProto(Tier tier);
Tier FromProto(proto::Tier tier);
proto::LostCause ToProto(LostCause cause);
// A cause this build does not know (a newer peer's) reads as kStorageError.
LostCause FromProto(proto::LostCause cause);

void ToProto(const WorkerStats& stats, proto::WorkerStats::Builder out);
WorkerStats FromProto(proto::WorkerStats::Reader stats);

// Fills an Error struct from a failed status.
void SetError(proto::Error::Builder error, const Status& status);
// The status an Error reply stands for.
Status StatusFromError(proto::Error::Reader error);

// Parses a block id received from the network.
Result<BlockId> ParseWireBlockId(capnp::Text::Reader text);

}  // namespace bm
