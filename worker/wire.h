#pragma once

// Filling the wire structs the worker sends from the worker's own types.

#include <memory>
#include <zmq.hpp>

#include "schema/messages.capnp.h"
#include "worker/block_manager.h"
#include "worker/block_status.h"

namespace bm {

void FillBlockStatus(const BlockStatus& status, proto::BlockStatus::Builder out);

// Whether the Cap'n Proto enum value as sent is one this build knows, so that others are
// rejected.
bool IsKnownLevel(proto::StorageLevel level);

// A client's routing id, kept by a reply that waits for the storage thread (callbacks are
// copyable, ZeroMQ frames are not).
std::shared_ptr<const zmq::message_t> SharePeer(const zmq::message_t& frame);

}  // namespace bm
