#pragma once

#include <optional>
#include <vector>
#include <zmq.hpp>

#include "schema/messages.capnp.h"
#include "worker/block_read.h"
#include "worker/block_status.h"

namespace bm {

// How the worker's read replies are cut into frames: pure functions of what was read, so the
// loop's handlers only read and send, and the framing rules can be tested alone.
//
// Frames share the stored chunks' bytes (no copy) except where a getBlocks reply packs small
// blocks into one frame.

// Fills a getBlock reply for `read`, answering at most `limit` bytes of it, and returns its
// payload frames: at most kChunkBytes each, at most kMaxPayloadFrames of them. A range made of
// many tiny chunks is cut short (the client asks again for the rest) at a digest unit's
// boundary where the frames reach one, so each unit tends to travel in one reply.
std::vector<zmq::message_t> FillGetReply(proto::GetReply::Builder get, uint64_t limit,
                                         const BlockRead& read);

// Fills the entries of a getBlocks reply, one per id asked for (`statuses[i]`: nullopt when the
// block is not stored here; `reads[i]`: its whole bytes, nullopt when not read or the read
// failed), and returns the payload frames. Blocks are included in order while the reply stays
// within kMaxPieceBytes and kMaxPayloadFrames; the rest are NOT_INCLUDED (the client reads them
// alone).
std::vector<zmq::message_t> FillGetManyReply(
    capnp::List<proto::MultiGetEntry>::Builder entries,
    const std::vector<std::optional<BlockStatus>>& statuses,
    const std::vector<std::optional<BlockRead>>& reads);

}  // namespace bm
