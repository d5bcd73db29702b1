#pragma once

// Filling the wire structs the worker sends from the worker's own types.

#include "schema/messages.capnp.h"
#include "worker/block_manager.h"
#include "worker/block_status.h"

namespace bm {

void FillBlockStatus(const BlockStatus& status, proto::BlockStatus::Builder out);

}  // namespace bm
