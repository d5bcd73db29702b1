#pragma once

#include <capnp/list.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "blockmgr/block_id.h"
#include "blockmgr/status.h"
#include "common/core/clock.h"
#include "common/core/protocol.h"
#include "master/block_index.h"
#include "master/master_status.h"
#include "master/worker_registry.h"

namespace bm {

// Reading the master's requests: every field of a request is read and checked before any state
// changes, and every field sent by a peer is bounded.

inline constexpr size_t kMaxWorkerIdBytes = 256;
inline constexpr size_t kMaxAddressBytes = 1024;
inline constexpr size_t kMaxHolderBytes = 256;
inline constexpr size_t kMaxLabelBytes = 256;

// The text, checked to be non-empty and at most `max_bytes` long (`what` names it in errors).
Result<std::string> DecodeName(capnp::Text::Reader text, const char* what, size_t max_bytes);

// A placement label (host, rack): empty or at most kMaxLabelBytes.
Result<std::string> DecodeLabel(capnp::Text::Reader text, const char* what);

// A block's status as a worker reported it; `fresh` only counts for a copy that is not removed.
Result<BlockChange> DecodeBlockStatus(proto::BlockStatus::Reader status, bool removed,
                                      bool fresh = false);

Result<std::vector<BlockId>> DecodeBlockIds(capnp::List<capnp::Text>::Reader ids);

// Whether the master can link to a worker at this address.
bool IsSupportedWorkerAddress(std::string_view address);

proto::WorkerState ToProto(WorkerState state);

// The request kind as the master's metrics count it.
MasterOp OpOf(proto::Request::Which which);

// Whole milliseconds, 0 for negative durations.
uint64_t ToMillis(Duration d);

}  // namespace bm
